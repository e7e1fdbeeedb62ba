// Heap profiles as the profilers write them, read into one model: snapshots
// of sampled stacks (program counters) with the objects and bytes they hold,
// and the process's memory map at the time, which says which file each
// address belongs to. Reading is bounded by the file's size; nothing here
// symbolises (symbolizer.h) or ranks (sites.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

namespace memprofile {

// One line of /proc/PID/maps with a file behind it.
struct Mapping {
  uint64_t start = 0, end = 0, offset = 0;
  bool executable = false;
  // heaptrack lists a module's PT_LOAD segments, not the maps: `offset` is
  // then the segment's p_vaddr and [start, end) its p_memsz at load.
  bool offset_is_vaddr = false;
  std::string path;
};

// A frame the profiler resolved itself (memray's Python frames: function,
// file and line). A stack refers to one by kResolvedFrame | its index in
// HeapSnapshot::resolved, after the stack's native frames (innermost first
// in both); kHiddenFrame marks one above where tracking began (memray drops
// those, and the native frames outside them).
struct ResolvedFrame {
  std::string function, file;
  int line = 0;
  bool entry = true;  // CPython >= 3.11: false for a frame evaluated in its caller's C call
};
constexpr uint64_t kResolvedFrame = 1ull << 63;
constexpr uint64_t kHiddenFrame = 1ull << 62;
constexpr uint64_t kResolvedIndexMask = kHiddenFrame - 1;

struct StackSample {
  std::vector<uint64_t> pcs;  // innermost first, as recorded (return addresses past the first)
  // A stack shared by the snapshots of one trace (heaptrack: each call
  // path is built once, however many snapshots hold it); pcs is then empty.
  std::shared_ptr<const std::vector<uint64_t>> shared_pcs;
  const std::vector<uint64_t>& stack() const { return shared_pcs ? *shared_pcs : pcs; }
  double objects = 0, bytes = 0;  // in use, scaled up from the samples
  double alloc_objects = 0, alloc_bytes = 0;  // allocated since the start (has_allocated)
};

struct HeapSnapshot {
  std::string file;        // where it was read from (for messages)
  std::string backend;     // "jemalloc"
  uint64_t pid = 0;        // from the file name, when it says (jemalloc: PREFIX.PID.SEQ.KIND.heap)
  uint64_t process = 0;    // the report's key of its process (ProcessInfo::key; 0: the pid)
  std::string origin;      // the input it was read from, where two processes share its pid
  uint64_t sequence = 0;   // dump number within the process
  std::string trigger;     // jemalloc: i (interval), m (manual), u (growth), f (final); "cut" (heaptrack, cut short)
  uint64_t time_ms = 0;    // heaptrack: since the process started
  uint64_t sample_period = 0;  // mean bytes between samples
  std::vector<StackSample> stacks;
  // heaptrack writes every frame as the call instruction (ip - 1); jemalloc
  // writes return addresses past the first.
  bool call_sites = false;
  // The backend counts what was allocated, freed or not (heaptrack): pprof's
  // alloc_objects and alloc_space.
  bool has_allocated = false;
  std::vector<Mapping> maps;
  // The frames stacks refer to with kResolvedFrame (memray), shared by the
  // snapshots of one capture.
  std::shared_ptr<const std::vector<ResolvedFrame>> resolved;
  double total_bytes = 0, total_objects = 0;
};

// One file holds the whole run, snapshots over time (heaptrack's trace,
// bytehound's .dat), rather than one dump per moment (jemalloc).
inline bool whole_run(const HeapSnapshot& s) {
  return s.backend == "heaptrack" || s.backend == "bytehound" || s.backend == "memray";
}

// Most bytes of one profile file read (a real jemalloc dump is kilobytes to
// a few MiB); most frames of one stack (jemalloc records at most 128).
constexpr uint64_t kMaxProfileFile = 256ull << 20;
constexpr size_t kMaxStackFrames = 1024;
// Frames kept of a site's heaviest stack (sites.h; jemalloc records at most
// 128): also what the run's budget counts for each distinct stack.
constexpr size_t kMaxSiteStack = 64;

// What one report run may hold of the profiles it read, in all: each
// distinct stack once (dumps of one process repeat most of theirs), and
// every sample. Past it the run is refused in one line, however the
// memory is spread over dumps (several dumps each under the file limit).
constexpr uint64_t kMaxProfileMemory = 256ull << 20;

// The stacks of all the dumps one run reads, each distinct one kept once
// and shared by the samples that have it; the run's memory budget.
class StackInterner {
 public:
  explicit StackInterner(uint64_t budget = kMaxProfileMemory) : budget_(budget) {}
  // The one shared copy of `pcs`; counts a sample. Throws FileError naming
  // `name` past the budget.
  std::shared_ptr<const std::vector<uint64_t>> intern(std::vector<uint64_t>&& pcs, const std::string& name);
  uint64_t bytes() const { return bytes_; }
  size_t distinct() const { return set_.size(); }

 private:
  struct Hash {
    size_t operator()(const std::shared_ptr<const std::vector<uint64_t>>& v) const;
  };
  struct Same {
    bool operator()(const std::shared_ptr<const std::vector<uint64_t>>& a,
                    const std::shared_ptr<const std::vector<uint64_t>>& b) const {
      return *a == *b;
    }
  };
  uint64_t budget_, bytes_ = 0, samples_ = 0;
  std::unordered_set<std::shared_ptr<const std::vector<uint64_t>>, Hash, Same> set_;
};

// A /proc/PID/maps line, "START-END PERMS OFFSET DEV INODE [PATH]": true
// for a mapping with a file (its path), false for anything else.
bool parse_map_line(const std::string& line, Mapping& m);

// True when `head` (the file's first bytes) is a jemalloc heap dump.
bool is_jemalloc_heap(const std::string& head);

// Parses a jemalloc `heap_v2/PERIOD` dump (prof.dump, lg_prof_interval,
// prof_gdump, prof_final) with its MAPPED_LIBRARIES section. Counts are
// scaled as jeprof scales them (a site of mean object size s sampled every
// P bytes is seen with probability 1 - exp(-s/P)). Throws FileError naming
// `name` and the line for anything malformed, and for a dump cut short.
// With `stacks`, every stack is interned there (StackSample::shared_pcs)
// and counted against the run's budget.
HeapSnapshot parse_jemalloc_heap(const std::string& text, const std::string& name, StackInterner* stacks = nullptr);

// PID, sequence and trigger from a jemalloc dump's file name; false when the
// name is not PREFIX.PID.SEQ.KINDn.heap.
bool parse_jemalloc_name(const std::string& path, uint64_t& pid, uint64_t& sequence, std::string& trigger);

// True when `head` is gperftools' heap profile ("heap profile: "): its heap
// profiler's dumps (HEAPPROFILE, HeapProfilerDump), or tcmalloc's sampled
// heap (MallocExtension::GetHeapSample, "@ heap_v2/PERIOD").
bool is_gperftools_heap(const std::string& head);

// Parses gperftools' heap profile: a totals line, one line a stack ("LIVE:
// LIVEBYTES [ALLOCS: ALLOCBYTES] @ 0x..."), then MAPPED_LIBRARIES. The heap
// profiler records every allocation (`@ heapprofile`: counts as they are);
// a sampled heap is scaled as for jemalloc. Live and allocated counts both
// (has_allocated). Errors as parse_jemalloc_heap.
HeapSnapshot parse_gperftools_heap(const std::string& text, const std::string& name, StackInterner* stacks = nullptr);

// PID and sequence from the name gperftools gives a dump, PREFIX.NNNN.heap,
// where memprofile exec's PREFIX ends in ".PID" (the process it started)
// and a child's in "_PID" (gperftools appends its own): false otherwise.
bool parse_gperftools_name(const std::string& path, uint64_t& pid, uint64_t& sequence);

// Either dump, by its first line.
HeapSnapshot parse_heap_dump(const std::string& text, const std::string& name, StackInterner* stacks = nullptr);
bool is_heap_dump(const std::string& head);

}  // namespace memprofile
