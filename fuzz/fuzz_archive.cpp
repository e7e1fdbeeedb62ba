// libFuzzer target for image archives (docker save, legacy and OCI layout,
// OCI archives; plain, gzip or zstd): manifest.json / index.json, nested
// indexes, configs and layers, through load_images() as the CLI calls it.
// The input becomes a file (a memfd, named through /proc/self/fd) because
// load_images reads archives by path.
#include <dirent.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "base/error.h"
#include "source/load.h"

namespace {

const std::string& input_path() {
  static const std::string path = [] {
    int fd = memfd_create("fuzz-archive", MFD_CLOEXEC);
    if (fd < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    return "/proc/self/fd/" + std::to_string(fd);
  }();
  return path;
}

int input_fd() { return std::stoi(input_path().substr(sizeof "/proc/self/fd/" - 1)); }

void write_input(const uint8_t* data, size_t size) {
  int fd = input_fd();
  if (ftruncate(fd, 0) != 0) std::abort();
  for (size_t off = 0; off < size;) {
    ssize_t w = pwrite(fd, data + off, size - off, static_cast<off_t>(off));
    if (w <= 0) std::abort();
    off += static_cast<size_t>(w);
  }
}

// Descriptors open in this process. One that load_images leaves open is a
// leak that a long run (or a server) would die of, so it is a failure here;
// FUZZ_ARCHIVE_CLOSE_LEAKED_FDS=1 closes them instead, to keep fuzzing the
// rest while a known leak is being fixed.
std::set<int> open_fds() {
  DIR* d = opendir("/proc/self/fd");
  if (!d) std::abort();
  std::set<int> fds;
  while (const dirent* e = readdir(d))
    if (e->d_name[0] != '.' && std::atoi(e->d_name) != dirfd(d)) fds.insert(std::atoi(e->d_name));
  closedir(d);
  return fds;
}

void check_fds(const std::set<int>& before) {
  static const bool close_leaked = std::getenv("FUZZ_ARCHIVE_CLOSE_LEAKED_FDS") != nullptr;
  int leaked = 0;
  for (int fd : open_fds())
    if (!before.count(fd)) {
      ++leaked;
      if (close_leaked) ::close(fd);
    }
  if (leaked && !close_leaked) {
    std::fprintf(stderr, "fuzz_archive: load_images left %d file descriptor(s) open\n", leaked);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  write_input(data, size);
  const std::set<int> fds_before = open_fds();
  try {
    memprofile::ImageLoadOptions opts;
    opts.all_platforms = true;             // every manifest of an index is loaded
    opts.jobs = 1;                         // deterministic: layers one after another
    opts.source.limits.max_tar_bytes = 64 << 20;  // as fuzz_tar
    auto images = memprofile::load_images(input_path(), opts);
    for (const auto& img : images)
      if (img.tree) img.tree->walk("/", [](const std::string&) {});
  } catch (const memprofile::Error&) {
  }
  check_fds(fds_before);
  return 0;
}
