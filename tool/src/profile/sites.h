// Allocation sites over time: each sampled stack folded to the first frame
// outside the allocator, the C/C++/Rust runtime and libc (the code that
// asked for the memory), its bytes in use summed per snapshot; then the
// answers: the largest sites now, the sites that grew, and which of those
// look like leaks.
#pragma once

#include <string>
#include <vector>

#include "profile/heap_profile.h"
#include "profile/symbolizer.h"

namespace memprofile {

struct Site {
  Frame frame;                  // where the memory was asked for
  std::vector<Frame> stack;     // its heaviest stack, innermost first, allocator frames dropped, kMaxSiteStack at most
  std::vector<double> bytes;    // in use, per snapshot
  std::vector<double> objects;  // in use, per snapshot
  double growth() const { return bytes.empty() ? 0 : bytes.back() - bytes.front(); }
  // Rose from the first snapshot to the last and never fell in between (a
  // flat interval does not clear it: dumps can come at uneven times; nor
  // does a fall of less than 1/16, a reallocation caught mid-way), rising
  // in two intervals at least when there are two (one step at the end is
  // a temporary block's shape too), and in a third at least of the
  // intervals since its first rise (a bounded cache fills once and stays;
  // an allocator's large block charged to whichever call needed it, such
  // as pymalloc's 1 MiB arena under memray, is a rare step).
  bool leak_suspect() const;
  // The intervals in which the bytes rose, and those from the first of
  // them to the last snapshot.
  struct Rises {
    size_t rose = 0, since_first = 0;
  };
  Rises rises() const;
};

struct SiteTable {
  std::vector<std::string> snapshots;  // the files, oldest first
  std::vector<double> totals;          // bytes in use per snapshot
  std::vector<Site> sites;             // unordered
  std::vector<std::string> warnings;   // the symbolizer's
};

// Bytes as people read them: "512 B", "24.8 MiB".
std::string human_bytes(double bytes);

// True for a frame of the allocator, the language runtime or libc: skipped
// when a stack is folded to its site.
bool is_allocator_frame(const Frame& f);
// True for a frame of the profiler's own preload library.
bool is_profiler_frame(const Frame& f);

// The mapping holding `pc` among `sorted` (by start), or nullptr.
const Mapping* find_mapping(const std::vector<const Mapping*>& sorted, uint64_t pc);

// The snapshot's mappings sorted by start, for find_mapping.
std::vector<const Mapping*> sorted_maps(const HeapSnapshot& snap);

// A sample's frames, symbolised, innermost first (inlined frames included;
// "?" for an address in no mapping, counted in `outside`).
std::vector<Frame> stack_frames(const HeapSnapshot& snap, const std::vector<const Mapping*>& sorted,
                                const StackSample& sample, Symbolizer& symbolizer, size_t& outside);

// Which of a stack's frames is its site: the first outside the allocator,
// the runtimes and libc.
size_t site_frame(const std::vector<Frame>& frames);

// Runs the symbolizer's build check over every return address of the
// snapshots (fold_sites does it first).
void check_builds(const std::vector<HeapSnapshot>& snapshots, Symbolizer& symbolizer);

// What sites are folded by: the function and line, or where nothing
// resolved the module and offset.
std::string site_key(const Frame& at);

// Folds the snapshots (oldest first, all of one process) into sites.
SiteTable fold_sites(const std::vector<HeapSnapshot>& snapshots, Symbolizer& symbolizer);

}  // namespace memprofile
