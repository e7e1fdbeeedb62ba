// The tar that `memprofile collect` writes, read back by collected.h: ustar
// entries, with a PAX header first for a name of 100 bytes or more or a size
// of 8 GiB or more (read by every tar and by --verify), so no name is cut
// and no size wrong.
#pragma once

#include <cstdint>
#include <string>

#include "base/unique_fd.h"

namespace memprofile {

class TarWriter {
 public:
  // "-" is standard output; else the file is created (or truncated).
  explicit TarWriter(const std::string& path);
  // A regular file's header; its `size` bytes follow through write(), then pad().
  void header(const std::string& name, uint64_t size);
  void write(const void* p, size_t n);
  // Zeros up to the next 512-byte block after an entry of `size` bytes.
  void pad(uint64_t size);
  // A whole entry at once.
  void entry(const std::string& name, const std::string& content);
  // The two zero blocks that end an archive.
  void finish();

 private:
  void ustar_header(const std::string& name, uint64_t size, char type);
  std::string path_;
  UniqueFd file_;  // the file, unless it is stdout
  int fd_;
};

}  // namespace memprofile
