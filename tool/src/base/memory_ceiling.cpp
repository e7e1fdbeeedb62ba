#include "base/memory_ceiling.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "base/error.h"

#if defined(__SANITIZE_ADDRESS__)
#define MEMPROFILE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MEMPROFILE_ASAN 1
#endif
#endif
#ifdef MEMPROFILE_ASAN
// The sanitizer runtime's own count (sanitizer/allocator_interface.h, which
// clang ships and Debian's gcc does not; libasan defines it for both).
extern "C" size_t __sanitizer_get_current_allocated_bytes();
#endif

namespace memprofile {

namespace {

std::atomic<uint64_t> g_ceiling{0};
std::atomic<const char*> g_option{"--max-memory"};

// Resident anonymous bytes: statm's resident pages less its shared
// (file-backed) ones. One read of a small /proc file: the kernel answers
// it from counters, whatever the process holds.
uint64_t anonymous_resident() {
  int fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[128];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  unsigned long long size = 0, resident = 0, shared = 0;
  if (std::sscanf(buf, "%llu %llu %llu", &size, &resident, &shared) != 3 || shared > resident) return 0;
  return (resident - shared) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace

void set_memory_ceiling(uint64_t bytes, const char* option) {
  g_option = option;
  g_ceiling = bytes;
}

uint64_t memory_ceiling() { return g_ceiling; }

uint64_t memory_in_use() {
#ifdef MEMPROFILE_ASAN
  return __sanitizer_get_current_allocated_bytes();
#else
  return anonymous_resident();
#endif
}

void check_memory(const std::string& file) {
  const uint64_t ceiling = g_ceiling;
  if (!ceiling) return;
  const uint64_t used = memory_in_use();
  if (used <= ceiling) return;
  throw FileError(file, "reading it takes memprofile past its memory ceiling of " + std::to_string(ceiling >> 20) +
                            " MiB (" + std::to_string(used >> 20) + " MiB held; " + g_option.load() +
                            " MIB raises it)");
}

}  // namespace memprofile
