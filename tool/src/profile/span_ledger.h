// What each call path allocated and freed over a whole-run profile
// (bytehound's .dat, memray's capture), kept as a change per span of the
// run: kMaxSpans spans, the first `initial` wide, merged in pairs (their
// width doubled) whenever a time falls past the last. Any run then costs
// kMaxSpans changes per call path, and the bytes held at the end of each
// span do not depend on the order the events came in (bytehound writes an
// allocation it culls late). Or, when the run was marked (memray's
// captures: memprofile snapshot, --snapshot-every), the spans end at the
// marks given, at most kMaxSpans - 1 of them, and the last at the end.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "profile/heap_profile.h"

namespace memprofile {

class SpanLedger {
 public:
  static constexpr size_t kMaxSpans = 24;

  explicit SpanLedger(uint64_t initial) : span_(initial ? initial : 1) {}
  // Spans that end at `ends` (ascending, fewer than kMaxSpans), then one
  // that ends where the records do.
  explicit SpanLedger(std::vector<uint64_t> ends);

  // A new call path; its index is the number of call paths before it.
  void add_site() {
    bytes_.emplace_back();
    objects_.emplace_back();
  }
  size_t sites() const { return bytes_.size(); }

  // What `site` gained (negative: gave back) at time `at` since the start.
  void account(uint32_t site, uint64_t at, int64_t bytes, int64_t objects);
  // The records reach time `at` with nothing allocated or freed: with
  // marks, the spans up to it exist even when nothing changed in them.
  void reach(uint64_t at);
  // Whether span i ends at the i-th mark (the records went on to it).
  bool marked(size_t i) const { return i < ends_.size() && (i < last_ || ends_[i] == end_); }

  // The spans that hold anything, and where each ends (the last: the
  // latest time accounted).
  size_t spans() const { return last_ + 1; }
  uint64_t span_end(size_t i) const;

  // Calls f(span, held_bytes, held_objects) for each span, oldest first,
  // with what each call path holds at its end.
  template <class F>
  void walk(F f) const {
    std::vector<int64_t> held_bytes(sites(), 0), held_objects(sites(), 0);
    for (size_t i = 0; i <= last_; ++i) {
      for (size_t s = 0; s < sites(); ++s) {
        saturating_add(held_bytes[s], bytes_[s][i]);
        saturating_add(held_objects[s], objects_[s][i]);
      }
      f(i, held_bytes, held_objects);
    }
  }

  // One snapshot per span, each a copy of `proto` (file, backend, pid,
  // maps) with the call paths that hold bytes at the span's end; stacks[i]
  // is call path i's, shared by the snapshots. time_ms is the span's end
  // divided by `per_ms` (the ledger's time unit).
  std::vector<HeapSnapshot> snapshots(const HeapSnapshot& proto, const std::vector<const std::vector<uint64_t>*>& stacks,
                                      uint64_t per_ms) const;

  static void saturating_add(int64_t& into, int64_t v) {
    if (__builtin_add_overflow(into, v, &into)) into = v > 0 ? INT64_MAX : INT64_MIN;
  }

 private:
  void widen();
  size_t span_of(uint64_t at);

  std::vector<uint64_t> ends_;  // the marks, when given
  uint64_t span_ = 1, end_ = 0;
  size_t last_ = 0;
  std::vector<std::array<int64_t, kMaxSpans>> bytes_, objects_;  // per site, per span: the change
};

}  // namespace memprofile
