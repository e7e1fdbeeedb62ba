#include "base/tar_reader.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>

#include "base/error.h"

namespace memprofile {

namespace {

constexpr size_t kBlock = 512;
constexpr uint64_t kMaxMeta = 1u << 20;  // longest PAX record set or GNU long name we accept
constexpr uint64_t kMaxSparseSegments = 1u << 16;  // data segments of one sparse file

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
  // Both are below 2^63 (sizes are checked), so the sum cannot wrap.
  uint64_t n = left_ + padding_;
  if (n) {
    in_.skip(n);
    pos_ += n;
  }
  left_ = padding_ = 0;
  sparse_.clear();
  sparse_mode_ = false;
}

size_t TarReader::read_stored(void* buf, size_t n) {
  if (left_ == 0) return 0;
  size_t r = in_.read(buf, static_cast<size_t>(std::min<uint64_t>(n, left_)));
  if (r == 0) fail("truncated tar: entry content ends early at offset " + std::to_string(pos_));
  left_ -= r;
  pos_ += r;
  return r;
}

size_t TarReader::read(void* buf, size_t n) {
  if (!sparse_mode_) return read_stored(buf, n);
  if (logical_ >= real_size_ || n == 0) return 0;
  // In a hole (before the next segment, or after the last): zeros.
  uint64_t next = segment_ < sparse_.size() ? sparse_[segment_].first : real_size_;
  if (logical_ < next) {
    size_t k = static_cast<size_t>(std::min<uint64_t>(n, next - logical_));
    std::memset(buf, 0, k);
    logical_ += k;
    return k;
  }
  // In a segment: its stored bytes, in order.
  uint64_t end = sparse_[segment_].first + sparse_[segment_].second;
  size_t r = read_stored(buf, static_cast<size_t>(std::min<uint64_t>(n, end - logical_)));
  if (r == 0) fail("truncated tar: sparse entry's data ends early at offset " + std::to_string(pos_));
  logical_ += r;
  if (logical_ == end) ++segment_;
  return r;
}

// The map of a PAX 1.0 sparse entry: at the start of its data, decimal
// lines (the count, then offset and size of each segment), padded to a
// block; what it takes is taken from the stored size.
void TarReader::read_sparse_map_v1(uint64_t at) {
  uint64_t want = 0, got_lines = 0;
  bool have_count = false;
  std::string line;
  char block[kBlock];
  for (;;) {
    if (left_ < kBlock) fail("sparse map runs past its entry at offset " + std::to_string(at));
    in_.read_exact(block, kBlock, name_ + ": sparse map");
    left_ -= kBlock;
    pos_ += kBlock;
    for (size_t i = 0; i < kBlock; ++i) {
      if (have_count && got_lines == 1 + 2 * want) return;
      char c = block[i];
      if (c != '\n') {
        if (c < '0' || c > '9' || line.size() > 20) fail("malformed sparse map at offset " + std::to_string(at));
        line += c;
        continue;
      }
      if (line.empty()) fail("malformed sparse map at offset " + std::to_string(at));
      uint64_t v = std::stoull(line);
      line.clear();
      ++got_lines;
      if (!have_count) {
        if (v > kMaxSparseSegments) fail("sparse map of more than " + std::to_string(kMaxSparseSegments) + " segments");
        want = v;
        have_count = true;
      } else if (got_lines % 2 == 0) {
        sparse_.push_back({v, 0});
      } else {
        sparse_.back().second = v;
      }
    }
    if (have_count && got_lines == 1 + 2 * want) return;
  }
}

// Segments in order, not overlapping, inside the real size, and together
// exactly the stored data.
void TarReader::check_sparse(uint64_t stored, uint64_t at) {
  uint64_t end = 0, total = 0;
  for (const auto& [off, len] : sparse_) {
    if (off < end || len > real_size_ || off > real_size_ - len)
      fail("sparse map with overlapping or out-of-range segments at offset " + std::to_string(at));
    end = off + len;
    total += len;
  }
  if (total != stored)
    fail("sparse map holds " + std::to_string(total) + " bytes but the entry stores " + std::to_string(stored) +
         " at offset " + std::to_string(at));
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

// What the extended headers before an entry said: GNU long names and
// links ('L', 'K') and PAX records ('x'), sparse maps among them.
struct TarReader::Extended {
  std::string long_name, long_link;
  bool have_long_name = false, have_long_link = false;
  std::string pax_path, pax_link;
  bool have_pax_path = false, have_pax_link = false, pax_caps = false;
  std::optional<uint64_t> pax_size, pax_uid, pax_gid;
  // GNU sparse files in PAX form (0.0, 0.1: map in records; 1.0: in the data).
  std::string sparse_name, sparse_major;
  bool have_sparse_name = false;
  std::optional<uint64_t> sparse_real;
  std::vector<std::pair<uint64_t, uint64_t>> sparse_map;
};

// One header block into h, its checksum checked; false at the end of the
// archive (EOF without the end-of-archive blocks is accepted, as tar does).
bool TarReader::read_header(unsigned char* h, uint64_t& at) {
  size_t got = 0;
  while (got < kBlock) {
    size_t r = in_.read(h + got, kBlock - got);
    if (r == 0) break;
    got += r;
  }
  at = pos_;
  pos_ += got;
  if (got == 0) return false;
  if (got < kBlock) fail("truncated tar header at offset " + std::to_string(at));
  if (all_zero(h)) return false;
  // Old tars summed signed chars; GNU tar and Go accept either sum.
  uint64_t sum = 0, stored = 0;
  int64_t signed_sum = 0;
  for (size_t i = 0; i < kBlock; ++i) {
    unsigned char c = (i >= 148 && i < 156) ? ' ' : h[i];
    sum += c;
    signed_sum += static_cast<signed char>(c);
  }
  if (!parse_number(h + 148, 8, &stored) || (stored != sum && static_cast<int64_t>(stored) != signed_sum))
    fail("bad tar header checksum at offset " + std::to_string(at) + " (not a tar archive, or corrupt)");
  return true;
}

// A PAX numeric value.
uint64_t TarReader::pax_number(const std::string& key, const std::string& value, uint64_t at) const {
  uint64_t v = 0;
  for (char c : value) {
    if (c < '0' || c > '9' || v > (UINT64_MAX / 10)) fail("bad PAX " + key + " at offset " + std::to_string(at));
    v = v * 10 + (c - '0');
  }
  return v;
}

// GNU.sparse.map (0.1): "offset,size,offset,size...".
void TarReader::pax_sparse_map(const std::string& value, uint64_t at, Extended& x) const {
  std::vector<uint64_t> nums;
  size_t k = 0;
  while (k <= value.size()) {
    size_t comma = value.find(',', k);
    if (comma == std::string::npos) comma = value.size();
    std::string part = value.substr(k, comma - k);
    if (part.empty() || part.size() > 20 || part.find_first_not_of("0123456789") != std::string::npos)
      fail("malformed GNU.sparse.map at offset " + std::to_string(at));
    nums.push_back(std::stoull(part));
    if (nums.size() > 2 * kMaxSparseSegments) fail("sparse map of too many segments");
    k = comma + 1;
  }
  if (nums.size() % 2) fail("malformed GNU.sparse.map at offset " + std::to_string(at));
  x.sparse_map.clear();
  for (size_t q = 0; q < nums.size(); q += 2) x.sparse_map.push_back({nums[q], nums[q + 1]});
}

// One PAX record KEY=VALUE; keys that do not matter to us are ignored.
void TarReader::pax_record(const std::string& key, const std::string& value, uint64_t at, Extended& x) const {
  if (key == "GNU.sparse.name") {
    x.sparse_name = value;
    x.have_sparse_name = true;
  } else if (key == "GNU.sparse.size" || key == "GNU.sparse.realsize") {
    x.sparse_real = pax_number(key, value, at);
  } else if (key == "GNU.sparse.major") {
    x.sparse_major = value;
  } else if (key == "GNU.sparse.offset") {  // 0.0: offset, numbytes, offset, ...
    uint64_t v = pax_number(key, value, at);
    if (x.sparse_map.size() >= kMaxSparseSegments) fail("sparse map of too many segments");
    x.sparse_map.push_back({v, 0});
  } else if (key == "GNU.sparse.numbytes") {
    uint64_t v = pax_number(key, value, at);
    if (x.sparse_map.empty()) fail("GNU.sparse.numbytes before its offset at offset " + std::to_string(at));
    x.sparse_map.back().second = v;
  } else if (key == "GNU.sparse.map") {
    pax_sparse_map(value, at, x);
  } else if (key == "path") {
    x.pax_path = value;
    x.have_pax_path = true;
  } else if (key == "linkpath") {
    x.pax_link = value;
    x.have_pax_link = true;
  } else if (key == "size") {
    x.pax_size = pax_number(key, value, at);
  } else if (key == "uid") {
    x.pax_uid = pax_number(key, value, at);
  } else if (key == "gid") {
    x.pax_gid = pax_number(key, value, at);
  } else if (key == "SCHILY.xattr.security.capability") {
    x.pax_caps = !value.empty();
  }
}

// A PAX extended header's records ("LEN KEY=VALUE\n", LEN counting itself).
void TarReader::read_pax(uint64_t size, uint64_t at, Extended& x) {
  std::string recs = read_blob(size, "PAX header");
  for (size_t i = 0; i < recs.size();) {
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
    if (eq != std::string::npos) pax_record(rec.substr(0, eq), rec.substr(eq + 1), at, x);
    i += len;
  }
}

// An extended header ('L', 'K', 'g', 'x') read into x: true; false for an
// entry's own header.
bool TarReader::read_extended(char type, uint64_t size, uint64_t at, Extended& x) {
  switch (type) {
    case 'L':
      x.long_name = field(reinterpret_cast<const unsigned char*>(read_blob(size, "GNU long name").c_str()), size);
      x.have_long_name = true;
      return true;
    case 'K':
      x.long_link = field(reinterpret_cast<const unsigned char*>(read_blob(size, "GNU long link").c_str()), size);
      x.have_long_link = true;
      return true;
    case 'g':  // global PAX header: nothing in it matters to us
      read_blob(size, "PAX global header");
      return true;
    case 'x':
      read_pax(size, at, x);
      return true;
    default:
      return false;
  }
}

// The entry a header block describes, with what its extended headers said.
TarEntry TarReader::make_entry(const unsigned char* h, uint64_t at, char type, uint64_t size, const Extended& x) const {
  uint64_t mode = 0, uid = 0, gid = 0;
  parse_number(h + 100, 8, &mode);
  parse_number(h + 108, 8, &uid);
  parse_number(h + 116, 8, &gid);
  TarEntry e;
  e.offset = at;
  e.type = type;
  e.mode = static_cast<uint32_t>(mode & 07777);
  e.uid = static_cast<uint32_t>(x.pax_uid.value_or(uid));
  e.gid = static_cast<uint32_t>(x.pax_gid.value_or(gid));
  e.size = x.pax_size.value_or(size);
  if (e.size > uint64_t{INT64_MAX}) fail("bad PAX size in tar header at offset " + std::to_string(at));
  // Only POSIX ustar ("ustar\0") has the name prefix; old GNU headers
  // ("ustar  ") keep times there.
  std::string prefix = field(h + 345, 155), base = field(h, 100);
  bool ustar = std::memcmp(h + 257, "ustar\0", 6) == 0;
  e.name = x.have_sparse_name ? x.sparse_name
           : x.have_pax_path  ? x.pax_path
           : x.have_long_name ? x.long_name
                              : (ustar && !prefix.empty() ? prefix + "/" + base : base);
  e.linkname = x.have_pax_link ? x.pax_link : x.have_long_link ? x.long_link : field(h + 157, 100);
  e.file_caps = x.pax_caps;
  // A pre-POSIX regular file ('\0') whose name ends in '/' is a directory,
  // as GNU tar and Go read it.
  if (e.type == '\0') e.type = !e.name.empty() && e.name.back() == '/' ? '5' : '0';
  // Links, directories, devices and fifos carry no content whatever size
  // says; every other type (unknown ones too) is followed by its size.
  if (std::strchr("123456", e.type)) e.size = 0;
  return e;
}

// Old GNU sparse ('S'): 4 segments in the header, more in extension blocks
// that follow it (not counted in the size), the real size at 483.
void TarReader::read_old_sparse(const unsigned char* h, uint64_t at) {
  uint64_t real = 0;
  if (!parse_number(h + 483, 12, &real) || real > uint64_t{INT64_MAX})
    fail("bad sparse real size in tar header at offset " + std::to_string(at));
  auto take = [&](const unsigned char* p, size_t count) {
    for (size_t k = 0; k < count; ++k) {
      uint64_t off = 0, len = 0;
      if (!parse_number(p + k * 24, 12, &off) || !parse_number(p + k * 24 + 12, 12, &len))
        fail("bad sparse map in tar header at offset " + std::to_string(at));
      if (off == 0 && len == 0) continue;
      if (sparse_.size() >= kMaxSparseSegments) fail("sparse map of too many segments at offset " + std::to_string(at));
      sparse_.push_back({off, len});
    }
  };
  take(h + 386, 4);
  bool extended = h[482] != 0;
  while (extended) {
    unsigned char xb[kBlock];
    in_.read_exact(xb, kBlock, name_ + ": sparse extension header");
    pos_ += kBlock;
    take(xb, 21);
    extended = xb[504] != 0;
  }
  content_at_ = pos_;
  real_size_ = real;
}

// Where the entry's content starts, and, for a sparse file, its map: then
// read() gives the file as extracted.
void TarReader::start_content(const unsigned char* h, uint64_t at, Extended& x, TarEntry& e) {
  left_ = e.size;
  padding_ = (kBlock - e.size % kBlock) % kBlock;
  content_at_ = pos_;
  sparse_.clear();
  sparse_mode_ = false;
  if (e.type == 'S') {
    read_old_sparse(h, at);
    e.type = '0';
  } else if ((e.type == '0' || e.type == '7') && (x.sparse_real || !x.sparse_map.empty() || x.sparse_major == "1")) {
    if (!x.sparse_real) fail("GNU sparse entry without its real size at offset " + std::to_string(at));
    real_size_ = *x.sparse_real;
    if (x.sparse_major == "1") read_sparse_map_v1(at);
    else sparse_ = std::move(x.sparse_map);
  } else {
    return;
  }
  check_sparse(left_, at);
  sparse_mode_ = true;
  e.sparse = true;
  segment_ = 0;
  logical_ = 0;
  e.size = real_size_;
}

bool TarReader::next(TarEntry& e) {
  if (ended_) return false;
  skip_rest();
  Extended x;
  for (int guard = 0; guard < 64; ++guard) {
    unsigned char h[kBlock];
    uint64_t at = 0;
    if (!read_header(h, at)) {
      ended_ = true;
      return false;
    }
    uint64_t size = 0;
    // Go's archive/tar refuses sizes past INT64_MAX too; ours would wrap the
    // skip arithmetic and read the archive from the start again, forever.
    if (!parse_number(h + 124, 12, &size) || size > uint64_t{INT64_MAX})
      fail("bad size field in tar header at offset " + std::to_string(at));
    char type = static_cast<char>(h[156]);
    if (read_extended(type, size, at, x)) continue;
    e = make_entry(h, at, type, size, x);
    start_content(h, at, x, e);
    return true;
  }
  fail("too many consecutive extended tar headers at offset " + std::to_string(pos_));
}

}  // namespace memprofile
