// The record the control library writes beside each snapshot it takes
// (NAME.mem.json, ctl/memrecord.c): where the process's memory was then.
// Two of them, the first and the last of a process, say which bucket grew:
// the heap (see the sites), anonymous memory outside the allocator, file-
// backed or shared memory, or the cgroup beyond the processes' RSS.
#pragma once

#include <cstdint>
#include <string>

namespace memprofile {

struct MemoryRecord {
  uint64_t rss = 0, anon = 0, file = 0, shmem = 0, swap = 0;  // bytes
  bool has_allocator = false;
  std::string allocator;               // "jemalloc", "glibc"
  uint64_t allocated = 0, resident = 0;  // the allocator's
  bool has_cgroup = false;
  uint64_t cgroup = 0;  // the cgroup's charge
};

// Parses a record (at most 64 KiB of JSON). Throws FileError naming `name`.
MemoryRecord parse_memory_record(const std::string& text, const std::string& name);

// Where the memory grew between two records of one process, in one line,
// with the heap profile's own growth for a record without the allocator.
std::string memory_verdict(const MemoryRecord& first, const MemoryRecord& last, double profile_growth);

// "RSS 10.0 MiB -> 74.0 MiB (+64.0 MiB): anonymous +64.0 MiB, ..." for the text report.
std::string memory_change(const MemoryRecord& first, const MemoryRecord& last);

}  // namespace memprofile
