// The record beside each snapshot (memrecord.c): a leaf under the core,
// libc only, handed what it records.
#pragma once

#include <stdint.h>
#include <sys/types.h>

// The allocator's view of the process's memory: jemalloc's stats (through
// mallctl, after an epoch refresh), or glibc malloc's (mallinfo2) for the
// backends that leave malloc to glibc.
struct allocator_stats {
  const char* name;  // "jemalloc", "glibc"
  uint64_t allocated, active, resident, mapped, retained, metadata;  // jemalloc
  uint64_t arena, in_use, free, mmapped;                              // glibc: in_use counts mmapped blocks
  int wraps;  // glibc older than 2.33: mallinfo's ints, which wrap past 2 GiB
};

// NAME.mem.json beside the dump NAME in the directory `dfd`, for process
// `pid`, with the allocator's view when `as` is not NULL. Its size in bytes,
// or -1 when it could not be written.
long memory_record_write(int dfd, const char* dump_name, pid_t pid, const struct allocator_stats* as);
