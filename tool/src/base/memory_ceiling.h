// The memory one process of memprofile may hold while it reads profiles,
// counted as the kernel counts it: not a model of what each record costs
// (a model misses what it does not list: a stack's container, a string's
// heap block, the pprof being built), but the process's own anonymous
// resident memory, read from /proc/self/statm (under AddressSanitizer, the
// sanitizer's count of live heap bytes: its quarantine and shadow are no
// cost of the code). Readers check it as they go, and a run that passes the
// ceiling stops with one line naming the file being read and the ceiling:
// `report` in a pod, or serve beside a service, never takes the pod's
// memory limit with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace memprofile {

// report's and serve's ceilings unless set (--max-memory MIB).
constexpr uint64_t kReportMemoryCeiling = 512ull << 20;
constexpr uint64_t kServeMemoryCeiling = 256ull << 20;

// Sets the ceiling for the whole process (0: none) and the option that
// changes it, for the message.
void set_memory_ceiling(uint64_t bytes, const char* option);
uint64_t memory_ceiling();

// The process's memory now, as the ceiling counts it.
uint64_t memory_in_use();

// Throws FileError naming `file` when the process holds more than the
// ceiling. A few microseconds: for a step (a file, a chunk of one).
void check_memory(const std::string& file);

// For a loop over records: checks every `every` calls.
class MemoryCheck {
 public:
  explicit MemoryCheck(const std::string& file, size_t every = 4096) : file_(file), every_(every) {}
  void operator()() {
    if (++n_ % every_ == 0) check_memory(file_);
  }

 private:
  const std::string& file_;
  size_t every_, n_ = 0;
};

}  // namespace memprofile
