#include "base/stream.h"

#ifdef MEMPROFILE_WITH_ISAL
#include <isa-l/igzip_lib.h>
#else
#include <zlib.h>
#endif
#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>
#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_getFrameHeader: a frame's declared window
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "base/error.h"
#include "base/unique_fd.h"

namespace memprofile {

void Reader::read_exact(void* buf, size_t n, const std::string& what) {
  auto* p = static_cast<unsigned char*>(buf);
  size_t got = 0;
  while (got < n) {
    size_t r = read(p + got, n - got);
    if (r == 0) throw Error(what + ": truncated (wanted " + std::to_string(n) + " bytes, got " + std::to_string(got) + ")");
    got += r;
  }
}

void Reader::skip(uint64_t n) {
  char buf[65536];
  while (n > 0) {
    size_t r = read(buf, static_cast<size_t>(std::min<uint64_t>(n, sizeof buf)));
    if (r == 0) return;
    n -= r;
  }
}

FdReader::FdReader(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}

FdReader::FdReader(int fd, std::string name, uint64_t offset, uint64_t length)
    : fd_(fd), name_(std::move(name)), windowed_(true), pos_(offset), end_(offset + length) {}

size_t FdReader::read(void* buf, size_t n) {
  for (;;) {
    ssize_t r;
    if (windowed_) {
      if (pos_ >= end_) return 0;
      n = static_cast<size_t>(std::min<uint64_t>(n, end_ - pos_));
      r = pread(fd_, buf, n, static_cast<off_t>(pos_));
    } else {
      r = ::read(fd_, buf, n);
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw FileError(name_, std::string("read error: ") + std::strerror(errno));
    pos_ += static_cast<uint64_t>(r);
    return static_cast<size_t>(r);
  }
}

void FdReader::skip(uint64_t n) {
  if (windowed_) {
    pos_ = n >= end_ - std::min(pos_, end_) ? end_ : pos_ + n;  // saturating: never wraps back
    return;
  }
  Reader::skip(n);
}

size_t MemReader::read(void* buf, size_t n) {
  n = std::min(n, left_);
  std::memcpy(buf, p_, n);
  p_ += n;
  left_ -= n;
  return n;
}

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr);
}
Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }
void Sha256::update(const void* data, size_t n) { EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, n); }
std::string Sha256::hex() {
  unsigned char md[32];
  unsigned len = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), md, &len);
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out += digits[md[i] >> 4];
    out += digits[md[i] & 15];
  }
  return out;
}

bool read_small_file(const std::string& path, std::string& out, size_t cap, const std::string& too_large) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT || errno == ENOTDIR) return false;
    throw FileError(path, std::string("cannot open: ") + std::strerror(errno));
  }
  out.clear();
  char buf[16 << 10];
  for (ssize_t n; (n = ::read(fd.get(), buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw FileError(path, std::string("cannot read: ") + std::strerror(errno));
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > cap) throw FileError(path, too_large);
  }
  return true;
}

void write_whole_file(const std::string& path, const std::string& bytes) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) throw FileError(path, std::string("cannot write: ") + std::strerror(errno));
  for (size_t off = 0; off < bytes.size();) {
    ssize_t w = ::write(fd.get(), bytes.data() + off, bytes.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw FileError(path, std::string("cannot write: ") + std::strerror(errno));
    off += static_cast<size_t>(w);
  }
  if (::close(fd.release()) != 0) throw FileError(path, std::string("cannot write: ") + std::strerror(errno));
}

std::string sha256_hex(const std::string& data) {
  Sha256 s;
  s.update(data.data(), data.size());
  return s.hex();
}

size_t HashingReader::read(void* buf, size_t n) {
  size_t r = in_.read(buf, n);
  sha_.update(buf, r);
  count_ += r;
  return r;
}

struct PrefetchReader::State {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::vector<char>> queue;
  bool eof = false, stop = false;
  std::exception_ptr error;
  std::vector<char> current;
  size_t pos = 0;
  std::thread thread;
};

PrefetchReader::PrefetchReader(Reader& in, size_t chunk, size_t depth)
    : in_(in), chunk_(chunk), depth_(depth), st_(std::make_unique<State>()) {
  st_->thread = std::thread([this] { run(); });
}

PrefetchReader::~PrefetchReader() { finish(); }

void PrefetchReader::finish() {
  {
    std::lock_guard<std::mutex> lock(st_->mu);
    st_->stop = true;
  }
  st_->cv.notify_all();
  if (st_->thread.joinable()) st_->thread.join();
}

void PrefetchReader::run() {
  try {
    for (;;) {
      std::vector<char> buf(chunk_);
      size_t got = 0;
      while (got < buf.size()) {
        size_t r = in_.read(buf.data() + got, buf.size() - got);
        if (r == 0) break;
        got += r;
      }
      buf.resize(got);
      std::unique_lock<std::mutex> lock(st_->mu);
      st_->cv.wait(lock, [&] { return st_->stop || st_->queue.size() < depth_; });
      if (st_->stop) return;
      if (got == 0) {
        st_->eof = true;
        st_->cv.notify_all();
        return;
      }
      st_->queue.push_back(std::move(buf));
      st_->cv.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(st_->mu);
    st_->error = std::current_exception();
    st_->eof = true;
    st_->cv.notify_all();
  }
}

size_t PrefetchReader::read(void* buf, size_t n) {
  State& s = *st_;
  if (s.pos == s.current.size()) {
    std::unique_lock<std::mutex> lock(s.mu);
    s.cv.wait(lock, [&] { return !s.queue.empty() || s.eof; });
    if (s.queue.empty()) {
      if (s.error) std::rethrow_exception(s.error);
      return 0;
    }
    s.current = std::move(s.queue.front());
    s.queue.pop_front();
    s.pos = 0;
    s.cv.notify_all();
  }
  n = std::min(n, s.current.size() - s.pos);
  std::memcpy(buf, s.current.data() + s.pos, n);
  s.pos += n;
  return n;
}

const char* to_string(Compression c) {
  switch (c) {
    case Compression::None: return "none";
    case Compression::Gzip: return "gzip";
    case Compression::Zstd: return "zstd";
  }
  return "none";
}

size_t PrefixedReader::read(void* buf, size_t n) {
  if (at_ < prefix_.size()) {
    size_t k = std::min(n, prefix_.size() - at_);
    std::memcpy(buf, prefix_.data() + at_, k);
    at_ += k;
    return k;
  }
  return rest_.read(buf, n);
}

namespace {

constexpr size_t kInBuf = 256 << 10;

class Limited : public Reader {
 public:
  Limited(std::string name, uint64_t max) : name_(std::move(name)), max_(max) {}

 protected:
  void account(size_t n) {
    out_ += n;
    if (out_ > max_)
      throw FileError(name_, "decompresses to more than " + std::to_string(max_) +
                                 " bytes; refusing (a decompression bomb?)");
  }
  std::string name_;
  uint64_t max_, out_ = 0;
};

class PlainReader : public Limited {
 public:
  PlainReader(std::unique_ptr<Reader> in, std::string name, uint64_t max)
      : Limited(std::move(name), max), in_(std::move(in)) {}
  size_t read(void* buf, size_t n) override {
    size_t r = in_->read(buf, n);
    account(r);
    return r;
  }
  void skip(uint64_t n) override {
    in_->skip(n);
    out_ += n;
  }

 private:
  std::unique_ptr<Reader> in_;
};

#ifdef MEMPROFILE_WITH_ISAL
// gzip through ISA-L's igzip, which inflates 2-3x faster than zlib. Handles
// concatenated members as gzip(1) does.
class GzipReader : public Limited {
 public:
  GzipReader(std::unique_ptr<Reader> in, std::string name, uint64_t max)
      : Limited(std::move(name), max), in_(std::move(in)), buf_(kInBuf) {
    isal_inflate_init(&st_);
    st_.crc_flag = ISAL_GZIP;
  }
  size_t read(void* buf, size_t n) override {
    if (n == 0 || done_) return 0;
    st_.next_out = static_cast<uint8_t*>(buf);
    st_.avail_out = static_cast<uint32_t>(std::min<size_t>(n, 1u << 30));
    while (st_.avail_out > 0) {
      if (st_.block_state == ISAL_BLOCK_FINISH) {
        // One member ended. Another may follow, after NUL padding, as gzip(1) allows.
        for (;;) {
          while (st_.avail_in > 0 && *st_.next_in == 0) {
            ++st_.next_in;
            --st_.avail_in;
          }
          if (st_.avail_in > 0 || !refill()) break;
        }
        // Anything but another member is trailing garbage: gzip(1) ignores
        // it, and the blob's digest tells whether it belongs there.
        if (st_.avail_in == 0 || *st_.next_in != 0x1f) {
          done_ = true;
          break;
        }
        uint8_t* next = st_.next_in;
        uint32_t avail = st_.avail_in;
        uint8_t* out = st_.next_out;
        uint32_t out_avail = st_.avail_out;
        isal_inflate_reset(&st_);
        st_.crc_flag = ISAL_GZIP;
        st_.next_in = next;
        st_.avail_in = avail;
        st_.next_out = out;
        st_.avail_out = out_avail;
      }
      if (st_.avail_in == 0 && !refill()) throw FileError(name_, "truncated gzip stream");
      int rc = isal_inflate(&st_);
      if (rc < 0) throw FileError(name_, "corrupt gzip data (igzip error " + std::to_string(rc) + ")");
    }
    size_t got = static_cast<size_t>(st_.next_out - static_cast<uint8_t*>(buf));
    account(got);
    return got;
  }

 private:
  bool refill() {
    size_t r = in_->read(buf_.data(), buf_.size());
    st_.next_in = buf_.data();
    st_.avail_in = static_cast<uint32_t>(r);
    return r > 0;
  }
  std::unique_ptr<Reader> in_;
  std::vector<uint8_t> buf_;
  inflate_state st_;
  bool done_ = false;
};

#else
// gzip through zlib, for static builds (Debian ships no static ISA-L).
// Handles concatenated members as gzip(1) does.
class GzipReader : public Limited {
 public:
  GzipReader(std::unique_ptr<Reader> in, std::string name, uint64_t max)
      : Limited(std::move(name), max), in_(std::move(in)), buf_(kInBuf) {
    if (inflateInit2(&z_, 16 + MAX_WBITS) != Z_OK) throw FileError(name_, "cannot initialise zlib");
  }
  ~GzipReader() override { inflateEnd(&z_); }
  size_t read(void* buf, size_t n) override {
    if (n == 0 || done_) return 0;
    z_.next_out = static_cast<Bytef*>(buf);
    z_.avail_out = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    while (z_.avail_out > 0) {
      if (member_done_) {
        for (;;) {
          while (z_.avail_in > 0 && *z_.next_in == 0) {
            ++z_.next_in;
            --z_.avail_in;
          }
          if (z_.avail_in > 0 || !refill()) break;
        }
        if (z_.avail_in == 0 || *z_.next_in != 0x1f) {
          done_ = true;
          break;
        }
        inflateReset(&z_);
        member_done_ = false;
      }
      if (z_.avail_in == 0 && !refill()) throw FileError(name_, "truncated gzip stream");
      int rc = inflate(&z_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        member_done_ = true;
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        throw FileError(name_, std::string("corrupt gzip data (") + (z_.msg ? z_.msg : "zlib error") + ")");
      }
    }
    size_t got = static_cast<size_t>(z_.next_out - static_cast<Bytef*>(buf));
    account(got);
    return got;
  }

 private:
  bool refill() {
    size_t r = in_->read(buf_.data(), buf_.size());
    z_.next_in = buf_.data();
    z_.avail_in = static_cast<uInt>(r);
    return r > 0;
  }
  std::unique_ptr<Reader> in_;
  std::vector<uint8_t> buf_;
  z_stream z_{};
  bool done_ = false, member_done_ = false;
};

#endif

class ZstdReader : public Limited {
 public:
  ZstdReader(std::unique_ptr<Reader> in, std::string name, uint64_t max)
      : Limited(std::move(name), max), in_(std::move(in)), buf_(kInBuf), ds_(ZSTD_createDStream()) {
    ZSTD_initDStream(ds_);
  }
  ~ZstdReader() override {
    end_turn();
    ZSTD_freeDStream(ds_);
  }
  size_t read(void* buf, size_t n) override {
    ZSTD_outBuffer out{buf, n, 0};
    while (out.pos == 0) {
      if (in_buf_.pos == in_buf_.size) {
        // At least a frame header's worth when there is that much: the
        // first read may hand over just the magic number.
        size_t r = 0;
        for (size_t got; r < ZSTD_FRAMEHEADERSIZE_MAX && (got = in_->read(buf_.data() + r, buf_.size() - r)) > 0;)
          r += got;
        if (r == 0) {
          if (!frame_done_) throw FileError(name_, "truncated zstd stream");
          // Done: the window goes before the turn does.
          ZSTD_freeDStream(ds_);
          ds_ = nullptr;
          end_turn();
          return 0;
        }
        in_buf_ = {buf_.data(), r, 0};
      }
      if (frame_done_) take_turn_if_large();  // a frame starts here
      size_t rc = ZSTD_decompressStream(ds_, &out, &in_buf_);
      if (ZSTD_isError(rc)) throw FileError(name_, std::string("corrupt zstd data: ") + ZSTD_getErrorName(rc));
      frame_done_ = rc == 0;
    }
    account(out.pos);
    return out.pos;
  }

 private:
  // A frame may declare a window up to zstd's limit (128 MiB, --long=27),
  // which decoding must hold. Layers with windows over zstd's default of
  // 8 MiB take turns, so two of them never decode at once.
  void take_turn_if_large() {
    if (holding_turn_) return;
    ZSTD_frameHeader h{};
    const char* at = static_cast<const char*>(in_buf_.src) + in_buf_.pos;
    // A later frame's header split across reads is left to the decoder's
    // own limit (the 128 MiB above).
    if (ZSTD_getFrameHeader(&h, at, in_buf_.size - in_buf_.pos) != 0) return;
    if (h.windowSize > (8u << 20)) {
      large_window_turn().take();
      holding_turn_ = true;
    }
  }
  void end_turn() {
    if (holding_turn_) large_window_turn().give();
    holding_turn_ = false;
  }
  // Taken and given back from any thread (a layer is decoded on a prefetch
  // thread and destroyed on its worker), so not a mutex.
  struct Turn {
    std::mutex m;
    std::condition_variable cv;
    bool taken = false;
    void take() {
      std::unique_lock<std::mutex> l(m);
      cv.wait(l, [&] { return !taken; });
      taken = true;
    }
    void give() {
      {
        std::lock_guard<std::mutex> l(m);
        taken = false;
      }
      cv.notify_one();
    }
  };
  static Turn& large_window_turn() {
    static Turn t;
    return t;
  }
  bool holding_turn_ = false;
  std::unique_ptr<Reader> in_;
  std::vector<uint8_t> buf_;
  ZSTD_DStream* ds_;
  ZSTD_inBuffer in_buf_{nullptr, 0, 0};
  bool frame_done_ = true;
};

}  // namespace

std::unique_ptr<Reader> decompress(Reader& in, const std::string& name, uint64_t max_output, Compression* detected) {
  unsigned char magic[4];
  size_t got = 0;
  while (got < sizeof magic) {
    size_t r = in.read(magic + got, sizeof magic - got);
    if (r == 0) break;
    got += r;
  }
  auto peeked = std::make_unique<PrefixedReader>(std::string(reinterpret_cast<char*>(magic), got), in);
  Compression c = Compression::None;
  if (got >= 2 && magic[0] == 0x1f && magic[1] == 0x8b) c = Compression::Gzip;
  if (got >= 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd) c = Compression::Zstd;
  if (detected) *detected = c;
  switch (c) {
    case Compression::Gzip: return std::make_unique<GzipReader>(std::move(peeked), name, max_output);
    case Compression::Zstd: return std::make_unique<ZstdReader>(std::move(peeked), name, max_output);
    case Compression::None: break;
  }
  return std::make_unique<PlainReader>(std::move(peeked), name, max_output);
}

}  // namespace memprofile
