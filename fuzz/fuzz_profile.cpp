// libFuzzer target for heap profiles: jemalloc heap_v2 dumps (parsed from
// memory), heaptrack raw traces (read from a memfd by path, as report
// reads them, plain or compressed), bytehound .dat files and memray captures
// (from memory). The first byte picks the reader (modulo 4: jemalloc,
// heaptrack, bytehound, memray).
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/error.h"
#include "base/stream.h"
#include "profile/bytehound_dat.h"
#include "profile/heap_profile.h"
#include "profile/heaptrack_trace.h"
#include "profile/memray_capture.h"

namespace {

int trace_fd() {
  static const int fd = [] {
    int f = memfd_create("fuzz-trace", MFD_CLOEXEC);
    if (f < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    return f;
  }();
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int reader = data[0] % 4;
  ++data;
  --size;
  try {
    if (reader == 0) {
      memprofile::parse_jemalloc_heap(std::string(reinterpret_cast<const char*>(data), size), "fuzz.heap");
    } else if (reader == 2) {
      memprofile::MemReader in(data, size);
      memprofile::read_bytehound_dat(in, "fuzz.dat");
    } else if (reader == 3) {
      memprofile::MemReader in(data, size);
      memprofile::read_memray_capture(in, "fuzz.bin");
    } else {
      int fd = trace_fd();
      if (ftruncate(fd, 0) != 0) std::abort();
      for (size_t off = 0; off < size;) {
        ssize_t w = pwrite(fd, data + off, size - off, static_cast<off_t>(off));
        if (w <= 0) std::abort();
        off += static_cast<size_t>(w);
      }
      memprofile::read_heaptrack_trace("/proc/self/fd/" + std::to_string(fd));
    }
  } catch (const memprofile::Error&) {
  }
  return 0;
}
