#include "profile/heaptrack_trace.h"

#include <fcntl.h>

#include <cstdint>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "base/error.h"
#include "base/memory_ceiling.h"
#include "base/stream.h"
#include "base/unique_fd.h"

namespace memprofile {

namespace {

// Lines of a stream, each at most kMaxTraceLine bytes.
class LineStream {
 public:
  LineStream(Reader& in, std::string name) : in_(in), name_(std::move(name)), buf_(1 << 16) {}
  // False at the end; a last line without its newline is returned too (the
  // caller decides: heaptrack's writer flushes whole lines).
  bool next(std::string& line, bool& complete) {
    line.clear();
    for (;;) {
      if (pos_ == len_) {
        len_ = in_.read(buf_.data(), buf_.size());
        pos_ = 0;
        if (len_ == 0) {
          if (line.empty()) return false;
          complete = false;
          return true;
        }
      }
      const char* start = buf_.data() + pos_;
      const char* nl = static_cast<const char*>(std::memchr(start, '\n', len_ - pos_));
      size_t take = nl ? static_cast<size_t>(nl - start) : len_ - pos_;
      if (line.size() + take > kMaxTraceLine)
        throw FileError(name_, "line " + std::to_string(number_ + 1) + ": longer than " +
                                   std::to_string(kMaxTraceLine >> 20) + " MiB; not a heaptrack trace");
      line.append(start, take);
      pos_ += take + (nl ? 1 : 0);
      if (nl) {
        ++number_;
        complete = true;
        return true;
      }
    }
  }
  size_t number() const { return number_; }

 private:
  Reader& in_;
  std::string name_;
  std::vector<char> buf_;
  size_t pos_ = 0, len_ = 0, number_ = 0;
};

// Fields of a line after its type character.
class Fields {
 public:
  explicit Fields(const std::string& line) : p_(line.c_str() + 1), end_(line.c_str() + line.size()) {}
  bool hex(uint64_t& out) {
    if (*p_ != ' ') return false;
    ++p_;
    if (!std::isxdigit(static_cast<unsigned char>(*p_))) return false;
    out = 0;
    int digits = 0;
    while (std::isxdigit(static_cast<unsigned char>(*p_))) {
      if (++digits > 16) return false;
      char c = *p_++;
      out = out * 16 + static_cast<uint64_t>(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return true;
  }
  // "LEN BYTES": a sized string (file format 3).
  bool sized(std::string& out) {
    uint64_t n;
    if (!hex(n) || *p_ != ' ' || n > static_cast<uint64_t>(end_ - p_ - 1)) return false;
    out.assign(p_ + 1, static_cast<size_t>(n));
    p_ += 1 + n;
    return true;
  }
  bool done() const { return p_ == end_; }

 private:
  const char* p_;
  const char* end_;
};

void saturating_add(int64_t& sum, int64_t v) {
  if (__builtin_add_overflow(sum, v, &sum)) sum = v > 0 ? INT64_MAX : INT64_MIN;
}

struct Module {
  std::string path;
  uint64_t bias = 0;
  std::vector<std::pair<uint64_t, uint64_t>> segments;  // (p_vaddr, p_memsz)
};

struct Node {
  uint64_t ip;
  uint32_t parent;
};

struct Block {
  uint64_t size;
  uint32_t trace;
};

// Bytes and blocks each trace holds at one moment, nonzero ones only.
struct Held {
  uint32_t trace;
  int64_t bytes, blocks;            // in use
  uint64_t alloc_bytes, alloc_count;  // allocated since the start
};

struct Moment {
  uint64_t ms = 0;
  std::vector<Held> held;  // traces holding memory, or that ever allocated
};

// One pass over a raw trace, one member per kind of record: modules,
// trace nodes, allocations and frees (held per trace), timestamps (a
// snapshot at most every `interval_` ms); then the snapshots as
// HeapSnapshots with every module's segments as mappings.
class TraceReader {
 public:
  TraceReader(Reader& in, const std::string& path) : lines_(in, path), path_(path) {}

  std::vector<HeapSnapshot> read() {
    read_version();
    std::string line;
    MemoryCheck memory(path_);
    while (lines_.next(line, complete_)) {
      memory();
      if (!complete_) break;  // a cut last line: the process died, or the copy was taken while it wrote
      if (!line.empty()) record(line);
    }
    if (nodes_.empty() && live_.empty()) throw FileError(path_, "holds no allocation");
    // The state at the end is the last snapshot, whatever the spacing: the
    // records after the last timestamp count (a timestamp comes every 10 ms,
    // the last one may fall in the middle of the program's last round). At
    // the same millisecond it replaces the snapshot taken there.
    if (moments_.empty() || changed_ || !complete_) {
      if (moments_.size() > 1 && moments_.back().ms == now_ms_) moments_.pop_back();
      snapshot();
    }
    return snapshots();
  }

 private:
  FileError bad(const std::string& what) const {
    return FileError(path_, "line " + std::to_string(lines_.number()) + ": " + what);
  }

  void read_version() {
    std::string line;
    if (!lines_.next(line, complete_) || line.rfind("v ", 0) != 0)
      throw FileError(path_, "not a heaptrack trace (it starts with \"v VERSION FORMAT\")");
    Fields f(line);
    uint64_t version, format;
    if (!f.hex(version) || !f.hex(format)) throw bad("malformed version line");
    if (format < 3)
      throw FileError(path_, "heaptrack file format " + std::to_string(format) +
                                 " (heaptrack before 1.3): memprofile reads format 3; use heaptrack_print");
  }

  void record(const std::string& line) {
    if (line.size() > 1 && line[1] != ' ') throw bad("malformed record: " + line.substr(0, 60));
    Fields f(line);
    switch (line[0]) {
      case 'x':
        if (!f.sized(exe_)) throw bad("malformed executable line");
        break;
      case 'X':
      case 'S':
      case 'A':
      case '#':
      case 'R':
        break;
      case 'I': {
        uint64_t pages;
        if (!f.hex(page_size_) || !f.hex(pages)) throw bad("malformed system info line");
        break;
      }
      case 'm':
        module_line(f);
        break;
      case 't':
        trace_line(f);
        break;
      case '+':
        alloc_line(f);
        break;
      case '-':
        free_line(f);
        break;
      case 'c':
        time_line(f);
        break;
      case 'i':
      case 's':
      case 'a':
        throw FileError(path_, "an interpreted heaptrack trace (heaptrack_interpret's output, a .zst from heaptrack): "
                               "memprofile reads the raw trace the preload library writes; use heaptrack_print on "
                               "this one");
      default:
        throw bad("unknown record '" + line.substr(0, 1) + "'");
    }
  }

  // "m SIZE NAME BIAS VADDR MEMSZ...": a module and its segments; "m 1 -"
  // starts a new listing.
  void module_line(Fields& f) {
    std::string name;
    if (!f.sized(name)) throw bad("malformed module line");
    if (name == "-") {
      current_.clear();
      return;
    }
    Module m;
    m.path = name == "x" ? exe_ : name;
    if (!f.hex(m.bias)) throw bad("malformed module line");
    for (uint64_t vaddr, memsz; !f.done();) {
      if (!f.hex(vaddr) || !f.hex(memsz)) throw bad("malformed module segment");
      m.segments.push_back({vaddr, memsz});
    }
    if (modules_.size() >= (1u << 20)) throw bad("more than 1048576 module listings");
    modules_.push_back(std::move(m));
    current_.push_back(modules_.size() - 1);
  }

  // "t IP PARENT": trace node i (1-based) is a frame under its parent.
  void trace_line(Fields& f) {
    uint64_t ip, parent;
    if (!f.hex(ip) || !f.hex(parent)) throw bad("malformed trace line");
    if (parent > nodes_.size()) throw bad("trace refers to trace " + std::to_string(parent) + ", not yet defined");
    if (nodes_.size() >= 0xfffffffeu) throw bad("too many traces");
    nodes_.push_back({ip, static_cast<uint32_t>(parent)});
    depth_.push_back(parent ? static_cast<uint16_t>(std::min<int>(depth_[parent - 1] + 1, 0xffff)) : 1);
  }

  // "+ SIZE TRACE PTR".
  void alloc_line(Fields& f) {
    uint64_t size, trace, ptr;
    if (!f.hex(size) || !f.hex(trace) || !f.hex(ptr)) throw bad("malformed allocation line");
    if (trace > nodes_.size()) throw bad("allocation from trace " + std::to_string(trace) + ", not yet defined");
    // The same rules as for jemalloc dumps: a stack is at most
    // kMaxStackFrames deep (never cut, which would lose its root), and
    // a size is one an address space can hold.
    if (trace && depth_[trace - 1] > kMaxStackFrames)
      throw bad("an allocation's call stack is " +
                std::string(depth_[trace - 1] == 0xffff ? "65535 or more" : std::to_string(depth_[trace - 1])) +
                " frames deep; memprofile reads at most " + std::to_string(kMaxStackFrames));
    if (size > kMaxBlockSize) throw bad("an allocation of " + std::to_string(size) + " bytes, more than an address space holds (2^48)");
    // realloc across threads can report a reuse before the free: the
    // old block is gone.
    if (auto it = live_.find(ptr); it != live_.end()) hold(it->second.trace, -static_cast<int64_t>(it->second.size), -1);
    live_[ptr] = {size, static_cast<uint32_t>(trace)};
    hold(static_cast<uint32_t>(trace), static_cast<int64_t>(size), 1);
  }

  // "- PTR". A block allocated before tracking began is not ours to count.
  void free_line(Fields& f) {
    uint64_t ptr;
    if (!f.hex(ptr)) throw bad("malformed free line");
    if (auto it = live_.find(ptr); it != live_.end()) {
      hold(it->second.trace, -static_cast<int64_t>(it->second.size), -1);
      live_.erase(it);
    }
  }

  // "c MS": the time since the start; a snapshot when the interval has passed.
  void time_line(Fields& f) {
    uint64_t ms;
    if (!f.hex(ms)) throw bad("malformed timestamp line");
    if (ms >= now_ms_) now_ms_ = ms;
    if (moments_.empty() || now_ms_ >= next_at_) snapshot();
  }

  void hold(uint32_t trace, int64_t size, int64_t count) {
    if (trace >= bytes_.size()) {
      bytes_.resize(trace + 1, 0);
      blocks_.resize(trace + 1, 0);
      alloc_bytes_.resize(trace + 1, 0);
      alloc_count_.resize(trace + 1, 0);
    }
    changed_ = true;
    // Sizes are at most 2^48 (checked at '+'), but a crafted trace can list
    // many: the sums saturate rather than wrap.
    saturating_add(bytes_[trace], size);
    saturating_add(blocks_[trace], count);
    if (size > 0) {
      if (__builtin_add_overflow(alloc_bytes_[trace], static_cast<uint64_t>(size), &alloc_bytes_[trace]))
        alloc_bytes_[trace] = UINT64_MAX;
      ++alloc_count_[trace];
    }
  }

  void snapshot() {
    changed_ = false;
    Moment m;
    m.ms = now_ms_;
    for (uint32_t t = 0; t < bytes_.size(); ++t)
      if (bytes_[t] > 0 || alloc_count_[t] > 0) m.held.push_back({t, bytes_[t], blocks_[t], alloc_bytes_[t], alloc_count_[t]});
    moments_.push_back(std::move(m));
    // At most kMaxHeaptrackSnapshots: drop every other one (the first
    // stays), and take them half as often from now on.
    if (moments_.size() >= kMaxHeaptrackSnapshots) {
      std::vector<Moment> kept;
      for (size_t i = 0; i < moments_.size(); i += 2) kept.push_back(std::move(moments_[i]));
      moments_ = std::move(kept);
      interval_ *= 2;
    }
    next_at_ = now_ms_ + interval_;
  }

  // Every module's segments as mappings at their load address: the reader
  // finds an address's module by range (a module unloaded and another loaded
  // at the same place is rare; the last listed wins then).
  std::vector<Mapping> mappings() const {
    std::vector<Mapping> maps;
    for (const auto& m : modules_) {
      if (m.path.empty() || m.path[0] != '/') continue;  // linux-vdso.so.1 has no file
      for (const auto& [vaddr, memsz] : m.segments) {
        Mapping map;
        map.start = m.bias + vaddr;
        map.end = map.start + memsz;
        map.offset = vaddr;
        map.offset_is_vaddr = true;
        map.path = m.path;
        if (map.end > map.start) maps.push_back(std::move(map));
      }
    }
    return maps;
  }

  // A trace's stack, innermost first, built once and shared by every
  // snapshot that holds it; the frames of all of them together are bounded
  // (kMaxTraceFrames), so a trace of many deep paths is refused, not read
  // into gigabytes.
  std::shared_ptr<const std::vector<uint64_t>> stack_of(uint32_t trace) {
    auto pcs = std::make_shared<std::vector<uint64_t>>();
    if (trace) pcs->reserve(depth_[trace - 1]);
    for (uint32_t t = trace; t != 0 && pcs->size() < kMaxStackFrames; t = nodes_[t - 1].parent) pcs->push_back(nodes_[t - 1].ip);
    frames_built_ += pcs->size();
    if (frames_built_ > kMaxTraceFrames)
      throw FileError(path_, "the call paths that allocated have more than " + std::to_string(kMaxTraceFrames) +
                                 " frames in all (memprofile's limit for one trace: docs/report.md)");
    return pcs;
  }

  std::vector<HeapSnapshot> snapshots() {
    std::vector<Mapping> maps = mappings();
    std::unordered_map<uint32_t, std::shared_ptr<const std::vector<uint64_t>>> stacks;
    std::vector<HeapSnapshot> out;
    for (size_t i = 0; i < moments_.size(); ++i) {
      HeapSnapshot s;
      s.file = path_;
      s.backend = "heaptrack";
      s.sequence = i;
      s.time_ms = moments_[i].ms;
      s.call_sites = true;
      s.maps = maps;
      s.has_allocated = true;
      for (const auto& held : moments_[i].held) {
        auto it = stacks.find(held.trace);
        if (it == stacks.end()) it = stacks.emplace(held.trace, stack_of(held.trace)).first;
        StackSample sample;
        sample.shared_pcs = it->second;
        sample.bytes = static_cast<double>(std::max<int64_t>(held.bytes, 0));
        sample.objects = static_cast<double>(std::max<int64_t>(held.blocks, 0));
        sample.alloc_bytes = static_cast<double>(held.alloc_bytes);
        sample.alloc_objects = static_cast<double>(held.alloc_count);
        s.total_bytes += sample.bytes;
        s.total_objects += sample.objects;
        s.stacks.push_back(std::move(sample));
      }
      out.push_back(std::move(s));
    }
    // The last is the state at the end: at exit (heaptrack writes a last
    // timestamp at shutdown), or where a copy taken while it wrote ends (a
    // cut last line says so; a whole one cannot tell).
    if (!complete_) out.back().trigger = "cut";
    return out;
  }

  LineStream lines_;
  const std::string& path_;
  bool complete_ = true;
  std::string exe_;
  std::vector<Module> modules_;       // every module ever listed
  std::vector<size_t> current_;       // the ones listed since the last "m 1 -"
  std::vector<Node> nodes_;           // trace i is nodes_[i - 1]
  std::vector<uint16_t> depth_;       // frames of trace i's stack, depth_[i - 1] (saturates)
  std::vector<int64_t> bytes_, blocks_;  // per trace, held now
  std::vector<uint64_t> alloc_bytes_, alloc_count_;  // per trace, allocated so far
  std::unordered_map<uint64_t, Block> live_;
  uint64_t page_size_ = 4096, now_ms_ = 0, interval_ = 50, next_at_ = 0;
  std::vector<Moment> moments_;
  bool changed_ = false;  // allocations or frees since the last snapshot
  size_t frames_built_ = 0;
};

}  // namespace

bool is_heaptrack_trace(const std::string& head) { return head.rfind("v ", 0) == 0; }

std::vector<HeapSnapshot> read_heaptrack_trace(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) throw FileError(path, std::string("cannot open: ") + std::strerror(errno));
  FdReader raw(fd.get(), path);
  return read_heaptrack_trace(raw, path);
}

std::vector<HeapSnapshot> read_heaptrack_trace(Reader& raw, const std::string& path) {
  auto in = decompress(raw, path, 1ull << 40);
  return TraceReader(*in, path).read();
}

}  // namespace memprofile
