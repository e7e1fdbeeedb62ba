// A streaming tar reader (ustar, GNU long names, PAX headers) that never
// seeks backwards and never trusts a field: every size, name and checksum is
// checked, and memory for names and PAX records is bounded.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/stream.h"

namespace memprofile {

struct TarEntry {
  std::string name;      // as stored (after PAX/GNU long-name overrides)
  std::string linkname;  // for hardlinks and symlinks
  char type = '0';       // '0' file, '1' hardlink, '2' symlink, '3'/'4' device, '5' dir, '6' fifo, ...
  uint32_t mode = 0;
  uint32_t uid = 0, gid = 0;
  uint64_t size = 0;     // bytes of content read() gives (a sparse file's full size)
  bool file_caps = false;  // SCHILY.xattr.security.capability present
  uint64_t offset = 0;   // of the header, for messages
  bool sparse = false;   // a GNU sparse file: read() fills its holes with zeros
};

class TarReader {
 public:
  TarReader(Reader& in, std::string name) : in_(in), name_(std::move(name)) {}
  // Advances to the next entry (skipping unread content). False at the end.
  bool next(TarEntry& e);
  // Reads content of the current entry; 0 at its end.
  size_t read(void* buf, size_t n);
  const std::string& name() const { return name_; }
  // Offset in the underlying stream where the current entry's content starts.
  uint64_t content_offset() const { return content_at_; }

 private:
  [[noreturn]] void fail(const std::string& what) const;
  void skip_rest();
  std::string read_blob(uint64_t size, const char* what);
  size_t read_stored(void* buf, size_t n);
  void read_sparse_map_v1(uint64_t at);
  void check_sparse(uint64_t stored, uint64_t at);
  // next(), one step each: a header, the extended headers before an entry,
  // the entry, where its content is.
  struct Extended;
  bool read_header(unsigned char* h, uint64_t& at);
  bool read_extended(char type, uint64_t size, uint64_t at, Extended& x);
  void read_pax(uint64_t size, uint64_t at, Extended& x);
  void pax_record(const std::string& key, const std::string& value, uint64_t at, Extended& x) const;
  void pax_sparse_map(const std::string& value, uint64_t at, Extended& x) const;
  uint64_t pax_number(const std::string& key, const std::string& value, uint64_t at) const;
  TarEntry make_entry(const unsigned char* h, uint64_t at, char type, uint64_t size, const Extended& x) const;
  void read_old_sparse(const unsigned char* h, uint64_t at);
  void start_content(const unsigned char* h, uint64_t at, Extended& x, TarEntry& e);

  Reader& in_;
  std::string name_;
  uint64_t pos_ = 0;        // bytes consumed from `in_`
  uint64_t left_ = 0;       // stored content bytes of the current entry still unread
  uint64_t padding_ = 0;    // padding after the current entry's content
  uint64_t content_at_ = 0;
  bool ended_ = false;
  // A sparse entry (GNU 'S', or PAX GNU.sparse 0.0/0.1/1.0) is read as
  // the extracted file would be: its data segments at their offsets, zeros
  // in the holes, up to its real size.
  std::vector<std::pair<uint64_t, uint64_t>> sparse_;  // (offset, bytes), in order
  size_t segment_ = 0;
  uint64_t logical_ = 0, real_size_ = 0;
  bool sparse_mode_ = false;
};

}  // namespace memprofile
