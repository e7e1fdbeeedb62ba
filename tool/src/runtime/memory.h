// Where a process's memory is, as the kernel counts it, beside the
// allocator's view: what `memprofile status` shows for each process of a
// tree, so a heap that stays flat while RSS climbs is said, not hidden.
//   - RSS split as the kernel splits it (/proc/PID/status: RssAnon,
//     RssFile, RssShmem) and swap (VmSwap);
//   - the container's cgroup (/proc/PID/cgroup; v2's memory.current and
//     memory.stat, or v1's memory.usage_in_bytes and memory.stat): what
//     the OOM killer counts, page cache, tmpfs and kernel memory included.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace memprofile {

struct ProcessMemory {
  bool known = false;  // /proc/PID/status could be read
  uint64_t rss = 0, anon = 0, file = 0, shmem = 0, swap = 0;  // bytes
};

struct CgroupMemory {
  bool known = false;
  std::string version;  // "v2", "v1"
  std::string path;     // the cgroup, as /proc/PID/cgroup names it
  uint64_t current = 0;  // memory.current (v2), memory.usage_in_bytes (v1)
  uint64_t anon = 0, file = 0, shmem = 0, kernel = 0;  // memory.stat (v1: rss, cache, shmem; no kernel)
  std::string why;  // when not known: why
};

// /proc/PID/status's memory lines (`proc` the /proc to read).
ProcessMemory read_process_memory(long pid, const std::string& proc = "/proc");

// The memory cgroup of PID, read under `sys_fs_cgroup` (default
// /sys/fs/cgroup).
CgroupMemory read_cgroup_memory(long pid, const std::string& proc = "/proc",
                                const std::string& sys_fs_cgroup = "/sys/fs/cgroup");

// The allocator's figures as the control library reports them (its reply's
// "allocator" object), in one model for both allocators.
struct AllocatorView {
  bool known = false;
  std::string name;        // "jemalloc", "glibc"
  uint64_t allocated = 0;  // what the application holds (jemalloc stats.allocated; glibc in use)
  uint64_t resident = 0;   // what the allocator holds resident (jemalloc stats.resident; glibc arena + mmapped)
};

// The gap between RSS and the allocator, named by cause; each line "WHAT:
// BYTES (how it is computed)". Empty when the figures are not known.
struct GapItem {
  std::string what;
  std::string cause;  // the same as a metric's label: allocator_overhead, outside_allocator, file_and_shmem
  uint64_t bytes = 0;
  std::string how;
};
std::vector<GapItem> memory_gap(const ProcessMemory& m, const AllocatorView& a);

}  // namespace memprofile
