#include "archive/tar_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "base/error.h"

namespace memprofile {

namespace {

// ustar's size field: 11 octal digits, 8 GiB - 1.
constexpr uint64_t kMaxOctalSize = 077777777777ull;

std::string pax_record(const std::string& key, const std::string& value) {
  // "LEN key=value\n", where LEN counts its own digits.
  size_t n = key.size() + value.size() + 3, len = n + std::to_string(n).size();
  while (len != n + std::to_string(len).size()) len = n + std::to_string(len).size();
  return std::to_string(len) + " " + key + "=" + value + "\n";
}

}  // namespace

TarWriter::TarWriter(const std::string& path) : path_(path) {
  if (path != "-") {
    file_ = UniqueFd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!file_) throw FileError(path, std::string("cannot create: ") + std::strerror(errno));
  }
  fd_ = file_ ? file_.get() : STDOUT_FILENO;
}

void TarWriter::write(const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd_, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw FileError(path_ == "-" ? "stdout" : path_, std::string("write failed: ") + std::strerror(errno));
    c += w;
    n -= static_cast<size_t>(w);
  }
}

void TarWriter::pad(uint64_t size) {
  static const char zeros[512] = {};
  write(zeros, (512 - size % 512) % 512);
}

void TarWriter::ustar_header(const std::string& name, uint64_t size, char type) {
  char h[512];
  std::memset(h, 0, sizeof h);
  std::memcpy(h, name.data(), std::min<size_t>(name.size(), 99));
  std::snprintf(h + 100, 8, "%07o", 0644);
  std::snprintf(h + 108, 8, "%07o", 0);
  std::snprintf(h + 116, 8, "%07o", 0);
  if (size <= kMaxOctalSize) {
    std::snprintf(h + 124, 12, "%011llo", static_cast<unsigned long long>(size));
  } else {  // GNU base-256, for readers that ignore the PAX size
    h[124] = static_cast<char>(0x80);
    for (int i = 11; i >= 1; --i, size >>= 8) h[124 + i] = static_cast<char>(size & 0xff);
  }
  std::snprintf(h + 136, 12, "%011llo", static_cast<unsigned long long>(std::time(nullptr)));
  h[156] = type;
  std::memcpy(h + 257, "ustar\0" "00", 8);
  std::memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (size_t i = 0; i < sizeof h; ++i) sum += static_cast<unsigned char>(h[i]);
  std::snprintf(h + 148, 8, "%06o", sum);
  h[155] = ' ';
  write(h, sizeof h);
}

void TarWriter::header(const std::string& name, uint64_t size) {
  std::string pax;
  if (name.size() >= 100) pax += pax_record("path", name);
  if (size > kMaxOctalSize) pax += pax_record("size", std::to_string(size));
  if (!pax.empty()) {
    ustar_header("././@PaxHeader", pax.size(), 'x');
    write(pax.data(), pax.size());
    pad(pax.size());
  }
  ustar_header(name, size, '0');
}

void TarWriter::entry(const std::string& name, const std::string& content) {
  header(name, content.size());
  write(content.data(), content.size());
  pad(content.size());
}

void TarWriter::finish() {
  static const char end[1024] = {};
  write(end, sizeof end);
}

}  // namespace memprofile
