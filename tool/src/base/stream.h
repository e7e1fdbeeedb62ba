// Byte streams for reading images without extracting them: a descriptor or
// memory source, a SHA-256 tee, and transparent decompression (gzip through
// ISA-L's igzip, zstd, or none) chosen by magic bytes, never by file name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace memprofile {

class Reader {
 public:
  virtual ~Reader() = default;
  // Reads up to n bytes; returns 0 only at the end. Throws FileError.
  virtual size_t read(void* buf, size_t n) = 0;
  // Reads exactly n bytes or throws "truncated".
  void read_exact(void* buf, size_t n, const std::string& what);
  // Discards n bytes (seeks when the source can).
  virtual void skip(uint64_t n);
};

// A descriptor: a whole stream (pipes, stdin) or a window [offset, offset+len)
// of a seekable file read with pread, so several windows can be read at once.
class FdReader : public Reader {
 public:
  FdReader(int fd, std::string name);  // sequential read()
  FdReader(int fd, std::string name, uint64_t offset, uint64_t length);  // pread window
  size_t read(void* buf, size_t n) override;
  void skip(uint64_t n) override;
  uint64_t position() const { return pos_; }

 private:
  int fd_;
  std::string name_;
  bool windowed_ = false;
  uint64_t pos_ = 0, end_ = 0;
};

class MemReader : public Reader {
 public:
  MemReader(const void* data, size_t size) : p_(static_cast<const unsigned char*>(data)), left_(size) {}
  size_t read(void* buf, size_t n) override;

 private:
  const unsigned char* p_;
  size_t left_;
};

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t n);
  std::string hex();  // finishes the digest
 private:
  void* ctx_;
};
std::string sha256_hex(const std::string& data);

// A small file, whole: false when it does not exist (ENOENT, ENOTDIR);
// FileError when it cannot be read, or with `too_large` past `cap` bytes
// (checked as bytes arrive: a huge or endless file costs `cap`).
bool read_small_file(const std::string& path, std::string& out, size_t cap, const std::string& too_large);

// Creates or replaces the file at `path` with `bytes` (mode 0644). Throws
// FileError naming `path`.
void write_whole_file(const std::string& path, const std::string& bytes);

// Bytes already read from a stream (to see what it is), replayed, then the
// rest of the stream.
class PrefixedReader : public Reader {
 public:
  PrefixedReader(std::string prefix, Reader& rest) : prefix_(std::move(prefix)), rest_(rest) {}
  size_t read(void* buf, size_t n) override;

 private:
  std::string prefix_;
  size_t at_ = 0;
  Reader& rest_;
};

// Passes bytes through, hashing them and counting.
class HashingReader : public Reader {
 public:
  explicit HashingReader(Reader& in) : in_(in) {}
  size_t read(void* buf, size_t n) override;
  std::string hex() { return sha_.hex(); }
  uint64_t count() const { return count_; }

 private:
  Reader& in_;
  Sha256 sha_;
  uint64_t count_ = 0;
};

// Reads ahead of its consumer on a thread of its own, through a bounded
// queue: decompressing a layer and parsing it then use two cores.
class PrefetchReader : public Reader {
 public:
  explicit PrefetchReader(Reader& in, size_t chunk = 128 << 10, size_t depth = 4);
  ~PrefetchReader() override;
  PrefetchReader(const PrefetchReader&) = delete;
  PrefetchReader& operator=(const PrefetchReader&) = delete;
  size_t read(void* buf, size_t n) override;
  // Stops the reader thread and waits for it; `in` is then free to use.
  void finish();

 private:
  void run();
  struct State;
  Reader& in_;
  size_t chunk_, depth_;
  std::unique_ptr<State> st_;
};

enum class Compression { None, Gzip, Zstd };
const char* to_string(Compression);

// Sniffs the compression of `in` and returns a reader of the decompressed
// bytes. `max_output` bounds what a decompression bomb can make us read.
std::unique_ptr<Reader> decompress(Reader& in, const std::string& name, uint64_t max_output,
                                   Compression* detected = nullptr);

}  // namespace memprofile
