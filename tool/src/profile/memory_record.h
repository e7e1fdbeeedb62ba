// The record the control library writes beside each snapshot it takes
// (NAME.mem.json, ctl/memrecord.c): where the process's memory was then.
// Two of them, the first and the last of a process, say which bucket grew:
// the heap (see the sites), anonymous memory outside the allocator, file-
// backed or shared memory, or the cgroup beyond the processes' RSS.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace memprofile {

struct MemoryRecord {
  uint64_t pid = 0;
  uint64_t process = 0;  // the report's key of its process (ProcessInfo::key; 0: the pid)
  std::string origin;    // the input it was read from, where two processes share its pid
  int64_t time = 0;  // when it was taken, seconds since the epoch (0: not said)
  uint64_t rss = 0, anon = 0, file = 0, shmem = 0, swap = 0;  // bytes
  bool has_allocator = false;
  std::string allocator;               // "jemalloc", "glibc"
  uint64_t allocated = 0, resident = 0;  // the allocator's
  bool has_cgroup = false;
  uint64_t cgroup = 0;  // the cgroup's charge
  bool has_cgroup_split = false;
  uint64_t cgroup_shmem = 0, cgroup_file = 0;  // its memory.stat shmem, file (v1: cache)
};

// The record beside a dump, by the dump's path (an archive entry's,
// "ARCHIVE:ENTRY", too), in records keyed by that path; nullptr when none.
// Two pods' directories hold the same names: the path tells them apart.
const MemoryRecord* record_beside(const std::map<std::string, MemoryRecord>& memory, const std::string& dump_file);

// Parses a record (at most 64 KiB of JSON). Throws FileError naming `name`.
MemoryRecord parse_memory_record(const std::string& text, const std::string& name);

// Where the memory grew between two records of one process, in one line,
// with the heap profile's own growth for a record without the allocator.
// `with_sites`: a heap profile's sites follow the line (else the heap's
// growth points at a profiler that would name them).
std::string memory_verdict(const MemoryRecord& first, const MemoryRecord& last, double profile_growth,
                           bool with_sites = true);

// "RSS 10.0 MiB -> 74.0 MiB (+64.0 MiB): anonymous +64.0 MiB, ..." for the text report.
std::string memory_change(const MemoryRecord& first, const MemoryRecord& last);

}  // namespace memprofile
