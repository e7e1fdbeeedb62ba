#include "profile/bytehound_dat.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>

#include "base/error.h"
#include "base/memory_ceiling.h"
#include "profile/heaptrack_trace.h"  // kMaxTraceFrames, kMaxBlockSize: the same bounds as a trace

namespace memprofile {

namespace {

constexpr uint64_t kInitialSpanUs = 1000000;  // one second, doubled as the run goes on

// The end of the event stream inside an event: the file was cut there.
struct Cut {};

// The chunks of a .dat as one byte stream: each chunk is a kind byte (1: an
// LZ4 block, 2: stored), a little-endian u32 length and the payload; events
// run across chunk boundaries.
class ChunkStream {
 public:
  ChunkStream(Reader& in, const std::string& name) : in_(in), name_(name) {}

  // Exactly n bytes into dst (nullptr: skipped); false when the stream ends
  // first (at a chunk boundary or inside a chunk: both are where a file cut
  // short ends).
  bool take(void* dst, uint64_t n) {
    auto* out = static_cast<unsigned char*>(dst);
    while (n > 0) {
      if (pos_ == buf_.size() && !next_chunk()) return false;
      size_t k = static_cast<size_t>(std::min<uint64_t>(n, buf_.size() - pos_));
      if (out) {
        std::memcpy(out, buf_.data() + pos_, k);
        out += k;
      }
      pos_ += k;
      n -= k;
    }
    return true;
  }
  // At an event boundary: whether another event follows.
  bool more() { return pos_ < buf_.size() || next_chunk(); }
  bool cut() const { return cut_; }
  uint64_t offset() const { return file_offset_; }  // of the chunk being read

 private:
  // The next chunk with bytes in it (empty ones are passed over).
  bool next_chunk() {
    while (read_chunk())
      if (!buf_.empty()) return true;
    return false;
  }

  bool read_chunk() {
    buf_.clear();
    pos_ = 0;
    unsigned char head[5];
    size_t got = read_some(head, sizeof head);
    if (got == 0) return false;
    file_offset_ = offset_ - got;
    if (got < sizeof head) return cut_ = true, false;
    uint32_t length;
    std::memcpy(&length, head + 1, 4);  // little-endian on every host this builds for
    if (head[0] != 1 && head[0] != 2)
      throw FileError(name_, "byte " + std::to_string(file_offset_) + ": a chunk of kind " + std::to_string(head[0]) +
                                 ", not 1 (LZ4) or 2 (stored): not a bytehound profile, or a damaged one");
    if (length > kMaxDatChunk)
      throw FileError(name_, "byte " + std::to_string(file_offset_) + ": a chunk of " + std::to_string(length) +
                                 " bytes (bytehound writes at most " + std::to_string(kMaxDatChunk >> 20) + " MiB)");
    std::string payload(length, '\0');
    if (read_some(payload.data(), length) < length) return cut_ = true, false;
    if (head[0] == 2) {
      buf_ = std::move(payload);
    } else if (!lz4_block_decode(reinterpret_cast<const unsigned char*>(payload.data()), length, buf_, kMaxDatChunk)) {
      throw FileError(name_, "byte " + std::to_string(file_offset_) + ": an LZ4 chunk that does not decode (damaged)");
    }
    return true;
  }

  size_t read_some(void* dst, size_t n) {
    size_t got = 0;
    while (got < n) {
      size_t r = in_.read(static_cast<char*>(dst) + got, n - got);
      if (r == 0) break;
      got += r;
    }
    offset_ += got;
    return got;
  }

  Reader& in_;
  const std::string& name_;
  std::string buf_;
  size_t pos_ = 0;
  uint64_t offset_ = 0, file_offset_ = 0;
  bool cut_ = false;
};

// speedy's encoding (bytehound's serializer): fixed-width little-endian
// integers, a u32 count before lists and strings, and its own varint (the
// leading 1-bits of the first byte count the bytes that follow; not LEB128).
class Events {
 public:
  Events(ChunkStream& s, const std::string& name) : s_(s), name_(name) {}
  template <typename T>
  T fixed() {
    T v;
    if (!s_.take(&v, sizeof v)) throw Cut();
    return v;
  }
  uint64_t u64() { return fixed<uint64_t>(); }
  uint32_t u32() { return fixed<uint32_t>(); }
  uint64_t varint() {
    uint8_t first = fixed<uint8_t>();
    int extra = __builtin_clz(static_cast<unsigned>(static_cast<uint8_t>(~first)) << 24 | 0xffffffu);
    if (first == 0xff) extra = 8;
    uint64_t rest = 0;
    if (extra > 0 && !s_.take(&rest, static_cast<uint64_t>(extra))) throw Cut();
    uint64_t high = extra >= 8 ? 0 : static_cast<uint64_t>(first & (0xffu >> extra));
    return extra >= 8 ? rest : (high << (8 * extra)) | rest;
  }
  void skip(uint64_t n) {
    if (!s_.take(nullptr, n)) throw Cut();
  }
  // A string or byte list of `n` bytes, kept when at most `cap`, else skipped
  // (and returned empty).
  std::string bytes(uint64_t n, uint64_t cap) {
    if (n > cap) {
      skip(n);
      return {};
    }
    std::string v(static_cast<size_t>(n), '\0');
    if (n && !s_.take(v.data(), n)) throw Cut();
    return v;
  }
  [[noreturn]] void bad(const std::string& what) {
    throw FileError(name_, "chunk at byte " + std::to_string(s_.offset()) + ": " + what);
  }

 private:
  ChunkStream& s_;
  const std::string& name_;
};

struct Block {
  uint64_t size, ts;
  uint32_t site;
};

// A block's key: bytehound's allocation id, or the pointer for an untracked
// (id 0) or invalid (all ones) one. Pointers are reused all the time; ids
// follow a block through its reallocations.
struct Key {
  uint64_t a, b;
  bool operator==(const Key& o) const { return a == o.a && b == o.b; }
};
struct KeyHash {
  size_t operator()(const Key& k) const { return static_cast<size_t>(k.a * 0x9e3779b97f4a7c15ull ^ k.b); }
};

class DatReader {
 public:
  DatReader(Reader& in, const std::string& name) : stream_(in, name), ev_(stream_, name), name_(name) {}

  std::vector<HeapSnapshot> read() {
    try {
      header();
      MemoryCheck memory(name_);
      while (stream_.more()) {
        memory();
        event();
      }
    } catch (const Cut&) {
      cut_ = true;
    }
    if (!have_header_) throw FileError(name_, "truncated: it ends before bytehound's header");
    return snapshots();
  }

 private:
  void header() {
    if (!stream_.more())
      throw FileError(name_, stream_.cut() ? "truncated: it ends before bytehound's header" : "empty: no chunk");
    if (ev_.u32() != 0) ev_.bad("does not start with bytehound's header event: not a bytehound profile");
    ev_.skip(16);  // id
    t0_ = ev_.u64();  // initial_timestamp: when bytehound started (monotonic µs)
    ev_.skip(8 + 16);  // timestamp, wall clock
    pid_ = ev_.u32();
    ev_.bytes(ev_.u32(), 0);  // cmdline
    ev_.bytes(ev_.u32(), 0);  // executable
    ev_.bytes(ev_.u32(), 0);  // arch
    ev_.skip(8);              // flags
    uint8_t pointer_size = ev_.fixed<uint8_t>();
    if (pointer_size != 8 && pointer_size != 4) ev_.bad("a pointer size of " + std::to_string(pointer_size) + " bytes");
    have_header_ = true;
  }

  void event() {
    uint32_t tag = ev_.u32();
    switch (tag) {
      case 0: ev_.bad("a second header");
      // Alloc, Realloc, Free of older files: no allocation id.
      case 1: alloc_event({0, 0}); break;
      case 2: realloc_event({0, 0}); break;
      case 3: free_event({0, 0}); break;
      case 4: file_event(false); break;  // File: a u32 length
      case 5: backtrace(ev_.u64(), 8, std::nullopt); break;
      case 6:  // MemoryDump
        ev_.skip(16);
        ev_.skip(ev_.u32());
        break;
      case 7: ev_.skip(4); break;                                // Marker
      case 8: ev_.skip(5 * 8 + 4 * 4 + 8); break;               // MemoryMap
      case 9: ev_.skip(4 * 8 + 4); break;                        // MemoryUnmap
      case 10: ev_.skip(8 + 8 + 4 + 3 * 4); break;              // Mallopt
      case 11: ev_.skip(ev_.u32()); break;                       // Environ
      case 12: ev_.skip(24); break;                              // WallClock
      case 13: case 18: {  // PartialBacktrace(32)
        uint64_t id = ev_.u64();
        uint32_t thread = ev_.u32(), invalidated = ev_.u32();
        backtrace(id, tag == 13 ? 8 : 4, std::make_pair(thread, invalidated));
        break;
      }
      case 14: case 15: case 16:
        ev_.bad("a post-processed file (bytehound postprocess writes decoded frames): report reads what the preload library writes");
      case 17: ev_.skip(7 * 8); break;                           // GroupStatistics (squeeze: culled, never live)
      case 19: backtrace(ev_.u64(), 4, std::nullopt); break;
      case 20: alloc_event(key()); break;    // AllocEx
      case 21: realloc_event(key()); break;  // ReallocEx
      case 22: free_event(key()); break;     // FreeEx
      case 23: file_event(true); break;      // File64: a u64 length
      // The map events: each field skipped as its type says ("u": a fixed
      // u64, "4": a u32, "v": a varint); they hold nothing report uses.
      case 24: fields("uvuvvv444"), ev_.skip(ev_.varint()); break;  // AddRegion, then its name
      case 25:  // RemoveRegion, then its sources; each source is at least 14
                // bytes, so the count is bounded by the stream
        fields("uvuv");
        for (uint64_t n = ev_.varint(); n > 0; --n) fields("uvuv4");
        break;
      case 26: fields("uvuvvvvvvv"); break;  // UpdateRegionUsage
      case 27: fields("vuvv444vuv4"); break;  // MemoryMapEx
      default: ev_.bad("an event of unknown kind " + std::to_string(tag) + " (bytehound 0.11 writes 0 to 27)");
    }
  }

  void fields(const char* types) {
    for (const char* t = types; *t; ++t) {
      if (*t == 'v') ev_.varint();
      else ev_.skip(*t == 'u' ? 8 : 4);
    }
  }

  [[noreturn]] void limit(const std::string& what, size_t n) {
    throw FileError(name_, "more than " + std::to_string(n) + " " + what +
                               " (memprofile's limit for one bytehound profile: docs/report.md)");
  }

  void alloc_event(Key id) {
    uint64_t ts = ev_.u64();
    allocate(id, ts, body());
  }
  void realloc_event(Key id) {
    uint64_t ts = ev_.u64(), old = ev_.u64();
    reallocate(id, ts, old, body());
  }
  void free_event(Key id) {
    uint64_t ts = ev_.u64(), ptr = ev_.u64();
    ev_.skip(12);  // backtrace, thread
    release(id, ts, ptr);
  }
  void file_event(bool wide) {
    uint64_t ts = ev_.u64();
    std::string path = ev_.bytes(ev_.u32(), 4096);
    file(ts, path, wide ? ev_.u64() : ev_.u32());
  }

  Key key() {
    uint64_t a = ev_.u64(), b = ev_.u64();
    return {a, b};
  }

  struct Body {
    uint64_t pointer, size, backtrace;
  };
  Body body() {
    Body b{ev_.u64(), ev_.u64(), ev_.u64()};
    ev_.skip(4 + 4 + 4 + 8);  // thread, flags, extra usable space, preceding free space
    return b;
  }

  static Key block_key(Key id, uint64_t pointer) {
    bool untracked = (id.a == 0 && id.b == 0) || (id.a == UINT64_MAX && id.b == UINT64_MAX);
    return untracked ? Key{0, pointer} : id;
  }

  void allocate(Key id, uint64_t ts, const Body& b) {
    Key k = block_key(id, b.pointer);
    if (live_.count(k)) return;  // bytehound's loader ignores a second one too
    if (live_.size() >= kMaxDatLiveBlocks) limit("live allocations at once", kMaxDatLiveBlocks);
    uint32_t site = site_of(b.backtrace);
    live_.emplace(k, Block{b.size, ts, site});
    account(site, ts, static_cast<int64_t>(std::min<uint64_t>(b.size, kMaxBlockSize)), 1);
  }

  void release(Key id, uint64_t ts, uint64_t pointer) {
    auto it = live_.find(block_key(id, pointer));
    if (it == live_.end()) return;  // allocated before tracking started
    account(it->second.site, ts, -static_cast<int64_t>(std::min<uint64_t>(it->second.size, kMaxBlockSize)), -1);
    live_.erase(it);
  }

  void reallocate(Key id, uint64_t ts, uint64_t old, const Body& b) {
    // As bytehound's loader: a reallocation of a block it never saw is
    // dropped, the new block with it.
    if (!live_.count(block_key(id, old))) return;
    release(id, ts, old);
    allocate(id, ts, b);
  }

  // A call path's index, one per distinct stack (bytehound can write the
  // same stack again under a new id).
  uint32_t site_of(uint64_t backtrace) {
    auto it = site_by_id_.find(backtrace);
    if (it != site_by_id_.end()) return it->second;
    // An allocation whose backtrace was never written: a site of no frames.
    return site_for({});
  }

  uint32_t site_for(std::vector<uint64_t> pcs) {
    if (stacks_.size() >= kMaxDatSites && !site_by_stack_.count(pcs))
      limit("distinct call paths", kMaxDatSites);
    auto [it, added] = site_by_stack_.emplace(std::move(pcs), static_cast<uint32_t>(stacks_.size()));
    if (added) {
      frames_ += it->first.size();
      if (frames_ > kMaxTraceFrames)
        throw FileError(name_, "its call paths have more than " + std::to_string(kMaxTraceFrames) +
                                   " frames in all (memprofile's limit for one profile: docs/report.md)");
      stacks_.push_back(&it->first);
      ledger_.add_site();
    }
    return it->second;
  }

  void backtrace(uint64_t id, int width, std::optional<std::pair<uint32_t, uint32_t>> partial) {
    uint32_t n = ev_.u32();
    std::vector<uint64_t> pcs;
    for (uint32_t i = 0; i < n; ++i) {
      uint64_t pc = width == 8 ? ev_.u64() : ev_.u32();
      if (pcs.size() < kMaxStackFrames) pcs.push_back(pc);
    }
    if (partial) {
      if (previous_.size() >= kMaxDatThreads && !previous_.count(partial->first)) limit("threads", kMaxDatThreads);
      // The frames past the first `invalidated` of this thread's previous
      // stack are still valid: they follow the new ones (0xffffffff: none).
      auto& prev = previous_[partial->first];
      if (partial->second != UINT32_MAX && partial->second <= prev.size())
        for (size_t i = partial->second; i < prev.size() && pcs.size() < kMaxStackFrames; ++i) pcs.push_back(prev[i]);
      prev = pcs;
    }
    if (site_by_id_.count(id)) return;  // an id is defined by its first backtrace
    if (site_by_id_.size() >= kMaxDatBacktraces) limit("backtraces", kMaxDatBacktraces);
    site_by_id_.emplace(id, site_for(std::move(pcs)));
  }

  // /proc/self/maps snapshots are kept (the newest by time: the stream is not
  // in time order); every other file (the mapped binaries) is skipped.
  void file(uint64_t ts, const std::string& path, uint64_t length) {
    if (path != "/proc/self/maps" || length > kMaxDatMaps || (have_maps_ && ts < maps_ts_)) {
      ev_.skip(length);
      return;
    }
    maps_ = ev_.bytes(length, kMaxDatMaps);
    maps_ts_ = ts;
    have_maps_ = true;
  }

  // What a block adds (or, freed, takes) goes to the span its time falls in.
  void account(uint32_t site, uint64_t ts, int64_t bytes, int64_t objects) {
    ledger_.account(site, ts > t0_ ? ts - t0_ : 0, bytes, objects);
  }

  std::vector<Mapping> mappings() const {
    std::vector<Mapping> maps;
    size_t start = 0;
    while (start < maps_.size()) {
      size_t end = maps_.find('\n', start);
      if (end == std::string::npos) end = maps_.size();
      Mapping m;
      if (parse_map_line(maps_.substr(start, end - start), m)) maps.push_back(std::move(m));
      start = end + 1;
    }
    return maps;
  }

  std::vector<HeapSnapshot> snapshots() const {
    HeapSnapshot proto;
    proto.file = name_;
    proto.backend = "bytehound";
    proto.pid = pid_;
    proto.maps = mappings();
    std::vector<HeapSnapshot> out = ledger_.snapshots(proto, stacks_, 1000);  // µs
    if (cut_ || stream_.cut()) out.back().trigger = "cut";
    return out;
  }

  ChunkStream stream_;
  Events ev_;
  const std::string& name_;
  bool have_header_ = false, cut_ = false, have_maps_ = false;
  uint64_t t0_ = 0, pid_ = 0, maps_ts_ = 0, frames_ = 0;
  SpanLedger ledger_{kInitialSpanUs};
  std::string maps_;
  std::unordered_map<Key, Block, KeyHash> live_;
  std::unordered_map<uint64_t, uint32_t> site_by_id_;
  std::map<std::vector<uint64_t>, uint32_t> site_by_stack_;
  std::vector<const std::vector<uint64_t>*> stacks_;  // by site index, into site_by_stack_
  std::unordered_map<uint32_t, std::vector<uint64_t>> previous_;  // per thread, for partial backtraces
};

}  // namespace

bool is_bytehound_name(const std::string& name) {
  return name.rfind("memory-profiling_", 0) == 0 ||
         (name.size() > 4 && name.compare(name.size() - 4, 4, ".dat") == 0);
}

bool lz4_block_decode(const unsigned char* src, size_t n, std::string& out, size_t limit) {
  const unsigned char* end = src + n;
  const size_t base = out.size();
  auto length = [&](size_t v) -> std::optional<size_t> {
    if (v != 15) return v;
    for (;;) {
      if (src == end) return std::nullopt;
      unsigned char b = *src++;
      v += b;
      if (v > limit) return std::nullopt;
      if (b != 255) return v;
    }
  };
  while (src < end) {
    unsigned char token = *src++;
    auto literals = length(token >> 4);
    if (!literals || *literals > static_cast<size_t>(end - src) || out.size() + *literals > limit) return false;
    out.append(reinterpret_cast<const char*>(src), *literals);
    src += *literals;
    if (src == end) break;  // the last sequence is literals alone
    if (end - src < 2) return false;
    size_t offset = static_cast<size_t>(src[0]) | static_cast<size_t>(src[1]) << 8;
    src += 2;
    auto match = length(token & 15);
    if (!match) return false;
    size_t count = *match + 4;
    // A match refers to what this block decoded, never before it.
    if (offset == 0 || offset > out.size() - base || out.size() + count > limit) return false;
    size_t from = out.size() - offset;
    for (size_t i = 0; i < count; ++i) out.push_back(out[from + i]);  // may overlap itself
  }
  return true;
}

std::vector<HeapSnapshot> read_bytehound_dat(Reader& in, const std::string& name) {
  return DatReader(in, name).read();
}

}  // namespace memprofile
