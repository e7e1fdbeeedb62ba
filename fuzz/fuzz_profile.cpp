// libFuzzer target for heap profiles: jemalloc heap_v2 dumps (parsed from
// memory), heaptrack raw traces (read from a memfd by path, as report
// reads them, plain or compressed), bytehound .dat files and memray captures
// (from memory, with marks, and as a marks file). The first byte picks the
// reader (modulo 4: jemalloc, heaptrack, bytehound, memray).
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

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
      // The same bytes as a marks file, then the capture with marks every
      // (last byte + 1) ms from the start time in its header: spans end at
      // marks, beyond the records, and past the ledger's bound (thinned).
      try {
        memprofile::parse_memray_marks(std::string(reinterpret_cast<const char*>(data), size), "fuzz.marks");
      } catch (const memprofile::Error&) {
      }
      std::vector<memprofile::MemrayMark> marks;
      constexpr size_t kStartTime = 29;  // magic, version, two flags, two counts
      if (size >= kStartTime + 8) {
        uint64_t start;
        std::memcpy(&start, data + kStartTime, sizeof start);
        for (uint64_t k = 1; k <= 40; ++k) marks.push_back({start + k * (data[size - 1] + 1u), k % 2 ? 'm' : 'i'});
      }
      memprofile::MemReader in(data, size);
      memprofile::read_memray_capture(in, "fuzz.bin", marks);
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
