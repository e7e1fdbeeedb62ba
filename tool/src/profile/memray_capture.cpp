#include "profile/memray_capture.h"

#include <lz4frame.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <unordered_map>

#include "base/error.h"
#include "base/memory_ceiling.h"
#include "profile/heaptrack_trace.h"
#include "profile/span_ledger.h"

namespace memprofile {

namespace {

constexpr unsigned char kMagic[7] = {'m', 'e', 'm', 'r', 'a', 'y', '\0'};
constexpr unsigned char kLz4Magic[4] = {0x04, 0x22, 0x4d, 0x18};
constexpr uint64_t kInitialSpanMs = 1000;  // one second, doubled as the run goes on

// The end of the records inside one: the file was cut there.
struct Cut {};

// The capture's bytes as one stream: LZ4-framed (memray compresses a file
// when its process ends cleanly) or raw.
class ByteStream {
 public:
  ByteStream(Reader& in, const std::string& name) : in_(in), name_(name) {}
  ~ByteStream() {
    if (dctx_) LZ4F_freeDecompressionContext(dctx_);
  }
  ByteStream(const ByteStream&) = delete;
  ByteStream& operator=(const ByteStream&) = delete;

  // Looks at the first bytes: an LZ4 frame is decoded from here on.
  void open() {
    raw_fill();
    if (raw_.size() - raw_pos_ >= 4 && std::memcmp(raw_.data() + raw_pos_, kLz4Magic, 4) == 0) {
      if (LZ4F_isError(LZ4F_createDecompressionContext(&dctx_, LZ4F_VERSION)))
        throw FileError(name_, "cannot make an LZ4 decoder");
      compressed_ = true;
    }
  }
  bool compressed() const { return compressed_; }

  // Exactly n bytes into dst (nullptr: skipped); false when the stream
  // ends first.
  bool take(void* dst, size_t n) {
    auto* out = static_cast<unsigned char*>(dst);
    while (n > 0) {
      if (pos_ == buf_.size() && !refill()) return false;
      size_t k = std::min(n, buf_.size() - pos_);
      if (out) {
        std::memcpy(out, buf_.data() + pos_, k);
        out += k;
      }
      pos_ += k;
      n -= k;
      offset_ += k;
    }
    return true;
  }
  // The next byte, or -1 at the end.
  int next() {
    unsigned char b;
    return take(&b, 1) ? b : -1;
  }
  uint64_t offset() const { return offset_; }  // in the decoded stream

 private:
  bool refill() {
    buf_.clear();
    pos_ = 0;
    while (buf_.empty()) {
      if (raw_pos_ == raw_.size() && !raw_fill()) {
        if (compressed_ && !frame_done_) cut_frame_ = true;
        return false;
      }
      if (!compressed_) {
        buf_.assign(raw_.begin() + static_cast<std::ptrdiff_t>(raw_pos_), raw_.end());
        raw_pos_ = raw_.size();
        continue;
      }
      if (frame_done_) return false;  // what follows one frame is not read (memray writes one)
      buf_.resize(1 << 16);
      size_t dst = buf_.size(), src = raw_.size() - raw_pos_;
      size_t hint = LZ4F_decompress(dctx_, buf_.data(), &dst, raw_.data() + raw_pos_, &src, nullptr);
      if (LZ4F_isError(hint))
        throw FileError(name_, "its LZ4 frame does not decode (" + std::string(LZ4F_getErrorName(hint)) +
                                   "): a damaged capture");
      raw_pos_ += src;
      buf_.resize(dst);
      decoded_ += dst;
      if (decoded_ > kMaxMemrayDecoded)
        throw FileError(name_, "decodes to more than " + std::to_string(kMaxMemrayDecoded >> 30) +
                                   " GiB (memprofile's limit for one capture)");
      if (hint == 0) frame_done_ = true;
    }
    return true;
  }

  bool raw_fill() {
    if (raw_pos_ < raw_.size()) return true;
    raw_.resize(1 << 16);
    raw_pos_ = 0;
    size_t r = in_.read(raw_.data(), raw_.size());
    raw_.resize(r);
    return r > 0;
  }

  Reader& in_;
  const std::string& name_;
  LZ4F_dctx* dctx_ = nullptr;
  bool compressed_ = false, frame_done_ = false;

 public:
  bool cut_frame_ = false;  // the LZ4 frame ends before its end mark

 private:
  std::string raw_, buf_;
  size_t raw_pos_ = 0, pos_ = 0;
  uint64_t offset_ = 0, decoded_ = 0;
};

// A live block: its size and call path.
struct Block {
  uint64_t size;
  uint32_t site;
};
// A live mmap range [start, end) of a call path (munmap may take part).
struct Range {
  uint64_t end;
  uint32_t site;
};

// memray's allocators (hooks.h): which allocate, which free, which map.
enum class Kind { Allocate, Free, Map, Unmap };
bool allocator_kind(unsigned a, Kind& k) {
  if (a == 2 || a == 15) return k = Kind::Free, true;  // free, PyMem free: no size
  if (a == 10) return k = Kind::Map, true;
  if (a == 11) return k = Kind::Unmap, true;
  if (a >= 1 && a <= 14) return k = Kind::Allocate, true;
  return false;
}

class CaptureReader {
 public:
  CaptureReader(Reader& in, const std::string& name, const std::vector<MemrayMark>& marks)
      : in_(in, name), name_(name), marks_(marks) {}

  std::vector<HeapSnapshot> read() {
    in_.open();
    header();
    use_marks();
    try {
      MemoryCheck memory(name_);
      while (record()) {
        memory();
      }
    } catch (const Cut&) {
      cut_ = true;
    }
    return snapshots();
  }

 private:
  [[noreturn]] void bad(const std::string& what) const {
    throw FileError(name_, "byte " + std::to_string(in_.offset()) + (in_.compressed() ? " (decoded)" : "") + ": " + what);
  }
  [[noreturn]] void limit(const char* what, size_t n) const {
    throw FileError(name_, "more than " + std::to_string(n) + " " + what +
                               " (memprofile's limit for one capture: docs/report.md)");
  }

  template <class T>
  T raw() {
    T v;
    if (!in_.take(&v, sizeof v)) throw Cut{};
    return v;  // host order: memray writes its own, little-endian on every host this builds for
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      int b = in_.next();
      if (b < 0) throw Cut{};
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    bad("a varint of more than 10 bytes");
  }
  int64_t signed_varint() {
    uint64_t z = varint();
    return static_cast<int64_t>((z >> 1) ^ (~(z & 1) + 1));
  }
  // A delta against the shared previous value (memray's DeltaEncodedFields).
  uint64_t delta(uint64_t& prev) { return prev += static_cast<uint64_t>(signed_varint()); }
  std::string cstring() {
    std::string s;
    for (int b; (b = in_.next()) != 0;) {
      if (b < 0) throw Cut{};
      if (s.size() >= kMaxMemrayString) bad("a string of more than " + std::to_string(kMaxMemrayString) + " bytes");
      s.push_back(static_cast<char>(b));
    }
    return s;
  }

  void header() {
    unsigned char magic[7];
    if (!in_.take(magic, sizeof magic)) throw FileError(name_, "truncated: it ends before memray's header");
    if (std::memcmp(magic, kMagic, sizeof magic) != 0)
      throw FileError(name_, "not a memray capture (it does not start with \"memray\")");
    try {
      int32_t version = raw<int32_t>();
      if (version != kMemrayVersion)
        throw FileError(name_, "memray capture format version " + std::to_string(version) + "; memprofile reads version " +
                                   std::to_string(kMemrayVersion) + " (memray 1.11 to 1.18)");
      native_ = raw<uint8_t>() != 0;
      if (raw<uint8_t>() != 0)
        throw FileError(name_, "an aggregated capture (memray run --aggregate keeps no history of allocations); "
                               "memprofile reads memray's default format");
      raw<uint64_t>();  // allocations (0 when the process was killed)
      raw<uint64_t>();  // frames
      start_ms_ = raw<int64_t>();  // ms since the epoch: the MEMORY_RECORDs are relative to it
      end_ms_ = raw<int64_t>();  // written when the capture is closed (else the start time, or 0)
      cstring();        // command line
      pid_ = static_cast<uint32_t>(raw<int32_t>());
      main_tid_ = raw<uint64_t>();
      skipped_ = raw<uint64_t>();
      raw<uint8_t>();  // the Python allocator
      raw<uint8_t>();  // trace_python_allocators
    } catch (const Cut&) {
      throw FileError(name_, "truncated: it ends inside memray's header");
    }
  }

  // The marks, as times since the start, are where the ledger's spans end:
  // those within the capture (after its start, and before its end when the
  // header has one: a closed capture's), at most kMaxSpans - 1. A mark
  // someone asked for ('m') is kept before any scheduled one ('i'); each
  // kind is thinned evenly, its last kept.
  void use_marks() {
    using Mark = std::pair<uint64_t, char>;
    std::vector<Mark> asked, scheduled;
    const bool closed = end_ms_ > start_ms_;
    for (const auto& m : marks_) {
      if (start_ms_ <= 0 || m.epoch_ms <= static_cast<uint64_t>(start_ms_)) continue;
      if (closed && m.epoch_ms > static_cast<uint64_t>(end_ms_)) continue;
      (m.kind == 'm' ? asked : scheduled).emplace_back(m.epoch_ms - static_cast<uint64_t>(start_ms_), m.kind);
    }
    auto thin = [](std::vector<Mark> v, size_t keep) {
      std::sort(v.begin(), v.end());
      v.erase(std::unique(v.begin(), v.end(), [](const Mark& a, const Mark& b) { return a.first == b.first; }), v.end());
      if (v.size() <= keep) return v;
      std::vector<Mark> out;
      for (size_t k = 0; k < keep; ++k) out.push_back(v[((k + 1) * v.size() + keep - 1) / keep - 1]);  // ceil((k+1) n / keep)-th
      return out;
    };
    asked = thin(std::move(asked), SpanLedger::kMaxSpans - 1);
    scheduled = thin(std::move(scheduled), SpanLedger::kMaxSpans - 1 - asked.size());
    std::vector<Mark> at = asked;
    for (const auto& m : scheduled)  // one at the same moment as an asked one is that one
      if (!std::binary_search(asked.begin(), asked.end(), m, [](const Mark& a, const Mark& b) { return a.first < b.first; }))
        at.push_back(m);
    if (at.empty()) return;
    std::sort(at.begin(), at.end());
    std::vector<uint64_t> ends;
    for (const auto& m : at) {
      ends.push_back(m.first);
      mark_kinds_.push_back(m.second);
    }
    ledger_ = SpanLedger(std::move(ends));
  }

  // One record; false at the end (the trailer, or the zero padding of a
  // process that did not end cleanly).
  bool record() {
    int b = in_.next();
    if (b < 0) {
      cut_ = true;
      return false;
    }
    unsigned type = static_cast<unsigned>(b) & 0x0f, flags = static_cast<unsigned>(b) >> 4;
    switch (type) {
      case 0:
        if (flags == 1) return false;  // the trailer
        if (flags == 0) return padding();
        bad("a record of type 0 with flags " + std::to_string(flags));
      case 1:
        allocation(flags, false);
        return true;
      case 2:
        allocation(flags, true);
        return true;
      case 3:
        frame_index(!(flags & 1));
        return true;
      case 4:
        push(delta(last_frame_));
        return true;
      case 5:
        native_index();
        return true;
      case 6:
        segments_.clear();  // a new memory map follows (after a dlopen or dlclose)
        return true;
      case 7:
        segment_header();
        return true;
      case 9:
        pop(flags + 1);
        return true;
      case 10:
        cstring();  // a thread's name
        return true;
      case 11:
        varint();  // RSS
        now_ = varint();
        ledger_.reach(now_);
        return true;
      case 12:
        tid_ = raw<uint64_t>();
        return true;
      default:
        bad("a record of type " + std::to_string(type) + ", which memray's format version 11 does not have");
    }
  }

  // A zero byte where a record would start: memray grows its file ahead, so
  // a process that did not end cleanly leaves zeros after its last record.
  // Anything but zeros after it is damage.
  bool padding() {
    uint64_t at = in_.offset() - 1;
    for (int b; (b = in_.next()) >= 0;)
      if (b != 0) throw FileError(name_, "byte " + std::to_string(at) + ": a zero byte where a record starts, and records after it: a damaged capture");
    cut_ = true;
    return false;
  }

  void frame_index(bool entry) {
    uint64_t id = delta(last_frame_);
    ResolvedFrame f;
    f.function = cstring();
    f.file = cstring();
    f.line = static_cast<int>(delta(last_line_));
    f.entry = entry;
    if (frame_ids_.count(id)) bad("two Python frames of id " + std::to_string(id));
    if (resolved_->size() >= kMaxMemrayFrames) limit("Python frames", kMaxMemrayFrames);
    frame_ids_.emplace(id, static_cast<uint32_t>(resolved_->size()));
    resolved_->push_back(std::move(f));
  }

  std::vector<uint32_t>& stack() {
    auto it = stacks_.find(tid_);
    if (it != stacks_.end()) return it->second;
    if (stacks_.size() >= kMaxMemrayThreads) limit("threads", kMaxMemrayThreads);
    return stacks_[tid_];
  }

  // The Python call-path tree: node 0 is the root; a node is a frame id
  // under its parent.
  void push(uint64_t frame) {
    auto& s = stack();
    uint32_t parent = s.empty() ? 0 : s.back();
    auto [it, added] = py_children_.emplace(std::make_pair(parent, frame), static_cast<uint32_t>(py_nodes_.size()));
    if (added) {
      if (py_nodes_.size() >= kMaxMemrayNodes) limit("Python call-path nodes", kMaxMemrayNodes);
      py_nodes_.push_back({frame, parent});
    }
    if (s.size() >= kMaxStackFrames) {  // deeper than any stack kept: counted, so pops stay paired
      ++overflow_[tid_];
      return;
    }
    s.push_back(it->second);
  }

  void pop(unsigned n) {
    auto& s = stack();
    for (unsigned i = 0; i < n; ++i) {
      auto o = overflow_.find(tid_);
      if (o != overflow_.end() && o->second > 0) {
        --o->second;
      } else if (!s.empty()) {
        s.pop_back();
      }
    }
  }

  void native_index() {
    uint64_t ip = delta(last_ip_);
    uint64_t parent = delta(last_native_);
    if (native_nodes_.size() >= kMaxMemrayNodes) limit("native call-path nodes", kMaxMemrayNodes);
    native_nodes_.push_back({ip, parent});
  }

  void segment_header() {
    std::string file = cstring();
    uint64_t n = varint();
    uint64_t base = raw<uint64_t>();
    for (uint64_t i = 0; i < n; ++i) {
      if (in_.next() != 8) bad("a module's segment list ends early (" + std::to_string(i) + " of " + std::to_string(n) + ")");
      uint64_t vaddr = raw<uint64_t>();
      uint64_t memsz = varint();
      if (segments_.size() >= kMaxMemrayNodes) limit("module segments", kMaxMemrayNodes);
      Mapping m;
      m.start = base + vaddr;
      m.end = m.start + memsz;
      m.offset = vaddr;
      m.offset_is_vaddr = true;
      m.executable = true;
      m.path = file;
      segments_.push_back(std::move(m));
    }
  }

  void allocation(unsigned allocator, bool with_native) {
    uint64_t address = delta(last_address_);
    Kind kind;
    if (!allocator_kind(allocator, kind)) bad("an allocation by allocator " + std::to_string(allocator));
    uint64_t size = with_native || kind != Kind::Free ? varint() : 0;
    uint64_t native = with_native ? delta(last_native_) : 0;
    switch (kind) {
      case Kind::Free:
        release(address);
        return;
      case Kind::Unmap:
        unmap(address, size);
        return;
      case Kind::Allocate:
      case Kind::Map:
        break;
    }
    uint32_t site = site_of(stack().empty() ? 0 : stack().back(), native);
    int64_t bytes = static_cast<int64_t>(std::min<uint64_t>(size, kMaxBlockSize));
    if (kind == Kind::Map) {
      unmap(address, size);  // what was mapped there before is gone
      if (ranges_.size() >= kMaxMemrayLiveBlocks) limit("live mappings", kMaxMemrayLiveBlocks);
      ranges_[address] = Range{address + size, site};
    } else {
      release(address);  // memray's reader replaces a block at the same address
      if (live_.size() >= kMaxMemrayLiveBlocks) limit("live allocations at once", kMaxMemrayLiveBlocks);
      live_[address] = Block{size, site};
    }
    ledger_.account(site, now_, bytes, 1);
  }

  void release(uint64_t address) {
    auto it = live_.find(address);
    if (it == live_.end()) return;  // allocated before tracking began
    ledger_.account(it->second.site, now_, -static_cast<int64_t>(std::min<uint64_t>(it->second.size, kMaxBlockSize)), -1);
    live_.erase(it);
  }

  // munmap of [address, address + size): what it covers of each live range
  // is given back; a range cut in the middle is left as two.
  void unmap(uint64_t address, uint64_t size) {
    uint64_t end = size > UINT64_MAX - address ? UINT64_MAX : address + size;
    auto it = ranges_.upper_bound(address);
    if (it != ranges_.begin()) --it;
    while (it != ranges_.end() && it->first < end) {
      uint64_t start = it->first;
      Range r = it->second;
      if (r.end <= address) {
        ++it;
        continue;
      }
      uint64_t cut_from = std::max(start, address), cut_to = std::min(r.end, end);
      ledger_.account(r.site, now_, -static_cast<int64_t>(std::min<uint64_t>(cut_to - cut_from, kMaxBlockSize)),
                      start >= address && r.end <= end ? -1 : 0);
      it = ranges_.erase(it);
      if (start < address) ranges_[start] = Range{address, r.site};
      if (r.end > end) it = ranges_.emplace(end, Range{r.end, r.site}).first;
    }
  }

  // A call path's index: its native frames (innermost first) then its
  // Python frames (innermost first, as kResolvedFrame references; those
  // above where tracking began on the main thread marked kHiddenFrame).
  uint32_t site_of(uint32_t python, uint64_t native) {
    bool main = tid_ == main_tid_;
    auto key = std::make_tuple(python, native, main);
    auto found = site_by_key_.find(key);
    if (found != site_by_key_.end()) return found->second;
    std::vector<uint64_t> pcs;
    for (uint64_t n = native; n != 0 && pcs.size() < kMaxStackFrames;) {
      if (n > native_nodes_.size()) bad("an allocation under native call-path node " + std::to_string(n) + ", which is not defined");
      pcs.push_back(native_nodes_[n - 1].first);
      n = native_nodes_[n - 1].second;
    }
    std::vector<uint64_t> py;
    for (uint32_t n = python; n != 0 && py.size() < kMaxStackFrames; n = py_nodes_[n].second) {
      auto f = frame_ids_.find(py_nodes_[n].first);
      if (f == frame_ids_.end()) bad("a Python frame of id " + std::to_string(py_nodes_[n].first) + ", which is not defined");
      py.push_back(kResolvedFrame | f->second);
    }
    if (main)
      for (size_t i = 0; i < std::min<uint64_t>(skipped_, py.size()); ++i) py[py.size() - 1 - i] |= kHiddenFrame;
    pcs.insert(pcs.end(), py.begin(), py.end());
    if (stacks_kept_.size() >= kMaxMemraySites && !site_by_stack_.count(pcs)) limit("distinct call paths", kMaxMemraySites);
    auto [it, added] = site_by_stack_.emplace(std::move(pcs), static_cast<uint32_t>(stacks_kept_.size()));
    if (added) {
      frames_ += it->first.size();
      if (frames_ > kMaxTraceFrames)
        throw FileError(name_, "its call paths have more than " + std::to_string(kMaxTraceFrames) +
                                   " frames in all (memprofile's limit for one profile: docs/report.md)");
      stacks_kept_.push_back(&it->first);
      ledger_.add_site();
    }
    site_by_key_.emplace(key, it->second);
    return it->second;
  }

  std::vector<HeapSnapshot> snapshots() {
    HeapSnapshot proto;
    proto.file = name_;
    proto.backend = "memray";
    proto.pid = pid_;
    proto.maps = segments_;
    proto.resolved = std::move(resolved_);
    std::vector<HeapSnapshot> out = ledger_.snapshots(proto, stacks_kept_, 1);  // ms
    for (size_t i = 0; i < out.size(); ++i)
      if (ledger_.marked(i)) out[i].trigger = std::string(1, mark_kinds_[i]);
    if (cut_ || in_.cut_frame_) out.back().trigger = "cut";
    return out;
  }

  ByteStream in_;
  const std::string& name_;
  const std::vector<MemrayMark>& marks_;
  std::vector<char> mark_kinds_;  // of the ledger's marks
  int64_t start_ms_ = 0, end_ms_ = 0;
  bool native_ = false, cut_ = false;
  uint32_t pid_ = 0;
  uint64_t main_tid_ = 0, skipped_ = 0, tid_ = 0, now_ = 0, frames_ = 0;
  uint64_t last_frame_ = 0, last_line_ = 0, last_ip_ = 0, last_native_ = 0, last_address_ = 0;
  std::shared_ptr<std::vector<ResolvedFrame>> resolved_ = std::make_shared<std::vector<ResolvedFrame>>();
  std::unordered_map<uint64_t, uint32_t> frame_ids_;         // memray's frame id -> index in resolved_
  std::vector<std::pair<uint64_t, uint32_t>> py_nodes_{{0, 0}};  // node -> (frame id, parent); 0: the root
  std::map<std::pair<uint32_t, uint64_t>, uint32_t> py_children_;
  std::unordered_map<uint64_t, std::vector<uint32_t>> stacks_;  // per thread: its Python stack, as nodes
  std::unordered_map<uint64_t, uint64_t> overflow_;             // per thread: pushes past kMaxStackFrames
  std::vector<std::pair<uint64_t, uint64_t>> native_nodes_;     // node n (from 1) at n - 1: (ip, parent)
  std::vector<Mapping> segments_;                                // of the newest memory map
  std::unordered_map<uint64_t, Block> live_;
  std::map<uint64_t, Range> ranges_;
  std::map<std::tuple<uint32_t, uint64_t, bool>, uint32_t> site_by_key_;
  std::map<std::vector<uint64_t>, uint32_t> site_by_stack_;
  std::vector<const std::vector<uint64_t>*> stacks_kept_;
  SpanLedger ledger_{kInitialSpanMs};
};

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

bool is_memray_name(const std::string& name) {
  if (ends_with(name, ".bin")) return name.size() > 4;
  size_t dot = name.rfind('.');
  if (dot == std::string::npos || dot + 1 == name.size() || dot + 1 + 9 < name.size()) return false;
  if (name.find_first_not_of("0123456789", dot + 1) != std::string::npos) return false;
  return ends_with(name.substr(0, dot), ".bin") && dot > 4;
}

std::vector<HeapSnapshot> read_memray_capture(Reader& in, const std::string& name, const std::vector<MemrayMark>& marks) {
  return CaptureReader(in, name, marks).read();
}

std::vector<MemrayMark> parse_memray_marks(const std::string& text, const std::string& name) {
  if (text.size() > kMaxMemrayMarksFile)
    throw FileError(name, "larger than " + std::to_string(kMaxMemrayMarksFile >> 20) + " MiB; not a marks file memprofile writes");
  std::vector<MemrayMark> out;
  size_t line = 0;
  for (size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1) {
    ++line;
    std::string l = text.substr(at, nl - at);
    size_t sp = l.find(' ');
    bool ok = sp != std::string::npos && sp > 0 && sp <= 16 && l.size() == sp + 2 && (l[sp + 1] == 'm' || l[sp + 1] == 'i') &&
              l.find_first_not_of("0123456789") == sp;
    if (!ok)
      throw FileError(name, "line " + std::to_string(line) + ": not a mark (\"EPOCH_MS m\" or \"EPOCH_MS i\"): a damaged marks file");
    out.push_back({std::stoull(l.substr(0, sp)), l[sp + 1]});
  }
  return out;
}

}  // namespace memprofile
