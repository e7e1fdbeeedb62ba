#include "tar_reader.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "error.h"

namespace memprofile {

namespace {

constexpr size_t kBlock = 512;
constexpr uint64_t kMaxMeta = 1u << 20;  // longest PAX record set or GNU long name we accept

bool all_zero(const unsigned char* b) {
  return std::all_of(b, b + kBlock, [](unsigned char c) { return c == 0; });
}

// Octal, possibly space/NUL padded, or GNU base-256 for large values.
bool parse_number(const unsigned char* f, size_t len, uint64_t* out) {
  if (len > 0 && (f[0] & 0x80)) {
    uint64_t v = f[0] & 0x3f;
    for (size_t i = 1; i < len; ++i) {
      if (v >> 56) return false;
      v = (v << 8) | f[i];
    }
    *out = v;
    return true;
  }
  size_t i = 0;
  while (i < len && (f[i] == ' ' || f[i] == 0)) ++i;
  uint64_t v = 0;
  bool any = false;
  for (; i < len && f[i] >= '0' && f[i] <= '7'; ++i) {
    if (v >> 60) return false;
    v = v * 8 + (f[i] - '0');
    any = true;
  }
  for (; i < len; ++i)
    if (f[i] != ' ' && f[i] != 0) return false;
  *out = any ? v : 0;
  return true;
}

std::string field(const unsigned char* f, size_t len) {
  size_t n = 0;
  while (n < len && f[n]) ++n;
  return std::string(reinterpret_cast<const char*>(f), n);
}

}  // namespace

void TarReader::fail(const std::string& what) const { throw FileError(name_, what); }

void TarReader::skip_rest() {
  uint64_t n = left_ + padding_;
  if (n) {
    in_.skip(n);
    pos_ += n;
  }
  left_ = padding_ = 0;
}

size_t TarReader::read(void* buf, size_t n) {
  if (left_ == 0) return 0;
  size_t r = in_.read(buf, static_cast<size_t>(std::min<uint64_t>(n, left_)));
  if (r == 0) fail("truncated tar: entry content ends early at offset " + std::to_string(pos_));
  left_ -= r;
  pos_ += r;
  return r;
}

std::string TarReader::read_blob(uint64_t size, const char* what) {
  if (size > kMaxMeta) fail(std::string(what) + " at offset " + std::to_string(pos_) + " is too large (" +
                            std::to_string(size) + " bytes)");
  std::string out(static_cast<size_t>(size), '\0');
  in_.read_exact(out.data(), out.size(), name_ + ": " + what);
  uint64_t pad = (kBlock - size % kBlock) % kBlock;
  in_.skip(pad);
  pos_ += size + pad;
  return out;
}

bool TarReader::next(TarEntry& e) {
  if (ended_) return false;
  skip_rest();
  std::string long_name, long_link;
  bool have_long_name = false, have_long_link = false;
  std::string pax_path, pax_link;
  bool have_pax_path = false, have_pax_link = false, pax_caps = false;
  std::optional<uint64_t> pax_size, pax_uid, pax_gid;
  for (int guard = 0; guard < 64; ++guard) {
    unsigned char h[kBlock];
    size_t got = 0;
    while (got < kBlock) {
      size_t r = in_.read(h + got, kBlock - got);
      if (r == 0) break;
      got += r;
    }
    uint64_t at = pos_;
    pos_ += got;
    if (got == 0) {  // EOF without the end-of-archive blocks: accept, as tar does
      ended_ = true;
      return false;
    }
    if (got < kBlock) fail("truncated tar header at offset " + std::to_string(at));
    if (all_zero(h)) {
      ended_ = true;
      return false;
    }
    uint64_t sum = 0, stored = 0;
    for (size_t i = 0; i < kBlock; ++i) sum += (i >= 148 && i < 156) ? ' ' : h[i];
    if (!parse_number(h + 148, 8, &stored) || stored != sum)
      fail("bad tar header checksum at offset " + std::to_string(at) + " (not a tar archive, or corrupt)");
    uint64_t size = 0, mode = 0, uid = 0, gid = 0;
    // Go's archive/tar refuses sizes past INT64_MAX too; ours would wrap the
    // skip arithmetic and read the archive from the start again, forever.
    if (!parse_number(h + 124, 12, &size) || size > uint64_t{INT64_MAX})
      fail("bad size field in tar header at offset " + std::to_string(at));
    parse_number(h + 100, 8, &mode);
    parse_number(h + 108, 8, &uid);
    parse_number(h + 116, 8, &gid);
    char type = static_cast<char>(h[156]);
    switch (type) {
      case 'L':
        long_name = field(reinterpret_cast<const unsigned char*>(read_blob(size, "GNU long name").c_str()), size);
        have_long_name = true;
        continue;
      case 'K':
        long_link = field(reinterpret_cast<const unsigned char*>(read_blob(size, "GNU long link").c_str()), size);
        have_long_link = true;
        continue;
      case 'g':  // global PAX header: nothing in it matters to us
        read_blob(size, "PAX global header");
        continue;
      case 'x': {
        std::string recs = read_blob(size, "PAX header");
        size_t i = 0;
        while (i < recs.size()) {
          size_t sp = recs.find(' ', i);
          if (sp == std::string::npos) fail("malformed PAX record at offset " + std::to_string(at));
          uint64_t len = 0;
          for (size_t k = i; k < sp; ++k) {
            if (recs[k] < '0' || recs[k] > '9' || len > kMaxMeta) fail("malformed PAX record length at offset " + std::to_string(at));
            len = len * 10 + (recs[k] - '0');
          }
          if (len < sp - i + 2 || i + len > recs.size()) fail("malformed PAX record at offset " + std::to_string(at));
          std::string rec = recs.substr(sp + 1, i + len - sp - 2);  // without the trailing newline
          size_t eq = rec.find('=');
          if (eq != std::string::npos) {
            std::string key = rec.substr(0, eq), value = rec.substr(eq + 1);
            auto num = [&](std::optional<uint64_t>& dst) {
              uint64_t v = 0;
              for (char c : value) {
                if (c < '0' || c > '9' || v > (UINT64_MAX / 10)) fail("bad PAX " + key + " at offset " + std::to_string(at));
                v = v * 10 + (c - '0');
              }
              dst = v;
            };
            if (key == "path") pax_path = value, have_pax_path = true;
            else if (key == "linkpath") pax_link = value, have_pax_link = true;
            else if (key == "size") num(pax_size);
            else if (key == "uid") num(pax_uid);
            else if (key == "gid") num(pax_gid);
            else if (key == "SCHILY.xattr.security.capability") pax_caps = !value.empty();
          }
          i += len;
        }
        continue;
      }
      default: break;
    }
    e = TarEntry{};
    e.offset = at;
    e.type = type == '\0' ? '0' : type;
    e.mode = static_cast<uint32_t>(mode & 07777);
    e.uid = static_cast<uint32_t>(pax_uid.value_or(uid));
    e.gid = static_cast<uint32_t>(pax_gid.value_or(gid));
    e.size = pax_size.value_or(size);
    if (e.size > uint64_t{INT64_MAX}) fail("bad PAX size in tar header at offset " + std::to_string(at));
    std::string prefix = field(h + 345, 155), base = field(h, 100);
    bool ustar = std::memcmp(h + 257, "ustar", 5) == 0;
    e.name = have_pax_path ? pax_path : have_long_name ? long_name : (ustar && !prefix.empty() ? prefix + "/" + base : base);
    e.linkname = have_pax_link ? pax_link : have_long_link ? long_link : field(h + 157, 100);
    e.file_caps = pax_caps;
    // Links, directories and devices carry no content whatever size says.
    bool has_content = e.type == '0' || e.type == '7' || e.type == 'S';
    if (!has_content) e.size = 0;
    left_ = e.size;
    padding_ = (kBlock - e.size % kBlock) % kBlock;
    content_at_ = pos_;
    return true;
  }
  fail("too many consecutive extended tar headers at offset " + std::to_string(pos_));
}

}  // namespace memprofile
