#include "profile/span_ledger.h"

#include <algorithm>
#include <memory>

namespace memprofile {

SpanLedger::SpanLedger(std::vector<uint64_t> ends) : ends_(std::move(ends)) {
  std::sort(ends_.begin(), ends_.end());
  ends_.erase(std::unique(ends_.begin(), ends_.end()), ends_.end());
  if (ends_.size() >= kMaxSpans) ends_.resize(kMaxSpans - 1);  // the caller thins them; this only keeps the bound
}

size_t SpanLedger::span_of(uint64_t at) {
  end_ = std::max(end_, at);
  size_t i;
  if (!ends_.empty()) {
    i = static_cast<size_t>(std::lower_bound(ends_.begin(), ends_.end(), at) - ends_.begin());  // a mark ends its span
  } else {
    while (at / span_ >= kMaxSpans) widen();
    i = static_cast<size_t>(at / span_);
  }
  last_ = std::max(last_, i);
  return i;
}

void SpanLedger::reach(uint64_t at) {
  if (!ends_.empty()) span_of(at);
}

void SpanLedger::account(uint32_t site, uint64_t at, int64_t bytes, int64_t objects) {
  size_t i = span_of(at);
  saturating_add(bytes_[site][i], bytes);
  saturating_add(objects_[site][i], objects);
}

uint64_t SpanLedger::span_end(size_t i) const {
  if (i >= last_) return end_;
  if (!ends_.empty()) return ends_[i];
  uint64_t e = (i + 1 > UINT64_MAX / span_) ? UINT64_MAX : (i + 1) * span_;
  return std::min(end_, e);
}

void SpanLedger::widen() {
  for (auto* table : {&bytes_, &objects_})
    for (auto& spans : *table) {
      for (size_t i = 0; i < kMaxSpans / 2; ++i) {
        int64_t v = spans[2 * i];
        saturating_add(v, spans[2 * i + 1]);
        spans[i] = v;
      }
      for (size_t i = kMaxSpans / 2; i < kMaxSpans; ++i) spans[i] = 0;
    }
  last_ /= 2;
  span_ = span_ > UINT64_MAX / 2 ? UINT64_MAX : span_ * 2;
}

std::vector<HeapSnapshot> SpanLedger::snapshots(const HeapSnapshot& proto,
                                                const std::vector<const std::vector<uint64_t>*>& stacks,
                                                uint64_t per_ms) const {
  std::vector<std::shared_ptr<const std::vector<uint64_t>>> shared(stacks.size());
  std::vector<HeapSnapshot> out;
  walk([&](size_t i, const std::vector<int64_t>& held_bytes, const std::vector<int64_t>& held_objects) {
    HeapSnapshot s = proto;
    s.sequence = i;
    s.time_ms = span_end(i) / per_ms;
    for (size_t site = 0; site < stacks.size(); ++site) {
      if (held_bytes[site] <= 0) continue;
      if (!shared[site]) shared[site] = std::make_shared<const std::vector<uint64_t>>(*stacks[site]);
      StackSample sample;
      sample.shared_pcs = shared[site];
      sample.bytes = static_cast<double>(held_bytes[site]);
      sample.objects = static_cast<double>(std::max<int64_t>(held_objects[site], 0));
      s.total_bytes += sample.bytes;
      s.total_objects += sample.objects;
      s.stacks.push_back(std::move(sample));
    }
    out.push_back(std::move(s));
  });
  return out;
}

}  // namespace memprofile
