#include "profile/heap_profile.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "base/error.h"
#include "base/memory_ceiling.h"

namespace memprofile {

namespace {

// One line at a time over the text, counting lines for messages, and
// looking at the process's memory every few thousand (a line can become a
// stack, a frame, a mapping: base/memory_ceiling.h).
class Lines {
 public:
  Lines(const std::string& text, const std::string& name) : text_(text), memory_(name) {}
  bool next(std::string& line) {
    if (pos_ >= text_.size()) return false;
    memory_();
    size_t end = text_.find('\n', pos_);
    if (end == std::string::npos) end = text_.size();
    line.assign(text_, pos_, end - pos_);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    pos_ = end + 1;
    ++number_;
    return true;
  }
  size_t number() const { return number_; }

 private:
  const std::string& text_;
  MemoryCheck memory_;
  size_t pos_ = 0, number_ = 0;
};

bool parse_u64(const char*& p, uint64_t& out, int base = 10) {
  while (*p == ' ') ++p;
  if ((base == 10 && (*p < '0' || *p > '9')) || (base == 16 && !std::isxdigit(static_cast<unsigned char>(*p))))
    return false;
  errno = 0;
  char* end;
  out = std::strtoull(p, &end, base);
  if (errno == ERANGE) return false;
  p = end;
  return true;
}

bool expect(const char*& p, const char* lit) {
  while (*p == ' ' && *lit != ' ') ++p;
  size_t n = std::strlen(lit);
  if (std::strncmp(p, lit, n) != 0) return false;
  p += n;
  return true;
}

// "  t*: OBJS: BYTES [AOBJS: ABYTES]" (also "  tN: ..."); false when not that.
bool parse_counts(const std::string& line, bool& total, uint64_t& objs, uint64_t& bytes) {
  const char* p = line.c_str();
  while (*p == ' ') ++p;
  if (*p != 't') return false;
  ++p;
  total = *p == '*';
  if (total) ++p;
  else {
    uint64_t thread;
    if (!parse_u64(p, thread)) return false;
  }
  uint64_t aobjs, abytes;
  return expect(p, ":") && parse_u64(p, objs) && expect(p, ":") && parse_u64(p, bytes) && expect(p, " [") &&
         parse_u64(p, aobjs) && expect(p, ":") && parse_u64(p, abytes) && expect(p, "]");
}

// jeprof's AdjustSamples for heap_v2: a site whose objects average s bytes,
// sampled every `period` bytes, is seen with probability 1 - exp(-s/period).
void scale(StackSample& s, uint64_t period) {
  if (period == 0 || s.objects <= 0) return;
  double ratio = (s.bytes / s.objects) / static_cast<double>(period);
  double factor = 1 / (1 - std::exp(-ratio));
  s.objects *= factor;
  s.bytes *= factor;
}

// The frames " 0x... 0x..." from q to the line's end into pcs; false for
// anything else. Throws `bad` past kMaxStackFrames.
template <typename Bad>
bool parse_frames(const char* q, std::vector<uint64_t>& pcs, const Bad& bad) {
  while (*q == ' ') ++q;
  while (*q) {
    uint64_t pc;
    if (!expect(q, "0x") || !parse_u64(q, pc, 16)) return false;
    if (pcs.size() == kMaxStackFrames) throw bad("more than " + std::to_string(kMaxStackFrames) + " frames");
    pcs.push_back(pc);
    while (*q == ' ') ++q;
  }
  return true;
}

// The stack's frames shared through the run's interner, when there is one.
void intern_stack(StackSample& s, StackInterner* stacks, const std::string& name) {
  if (!stacks) return;
  s.shared_pcs = stacks->intern(std::move(s.pcs), name);
  s.pcs = {};
}

// MAPPED_LIBRARIES' lines, to the end: the mappings with a file.
void read_maps(Lines& lines, HeapSnapshot& snap, const std::string& name) {
  std::string line;
  while (lines.next(line)) {
    Mapping m;
    if (parse_map_line(line, m)) snap.maps.push_back(std::move(m));
  }
  if (snap.maps.empty()) throw FileError(name, "truncated: MAPPED_LIBRARIES lists no file");
}

}  // namespace

bool parse_map_line(const std::string& line, Mapping& m) {
  const char* p = line.c_str();
  uint64_t dev_major, dev_minor, inode;
  if (!parse_u64(p, m.start, 16) || *p++ != '-' || !parse_u64(p, m.end, 16) || *p++ != ' ') return false;
  if (std::strlen(p) < 5) return false;
  m.executable = p[2] == 'x';
  p += 4;
  if (!parse_u64(p, m.offset, 16) || !parse_u64(p, dev_major, 16) || *p++ != ':' || !parse_u64(p, dev_minor, 16) ||
      !parse_u64(p, inode))
    return false;
  while (*p == ' ') ++p;
  if (*p != '/') return false;  // anonymous, [heap], [stack], [vdso]
  m.path = p;
  // The kernel marks a file replaced since it was mapped.
  static const std::string deleted = " (deleted)";
  if (m.path.size() > deleted.size() && m.path.compare(m.path.size() - deleted.size(), deleted.size(), deleted) == 0)
    m.path.resize(m.path.size() - deleted.size());
  return m.end > m.start;
}

size_t StackInterner::Hash::operator()(const std::shared_ptr<const std::vector<uint64_t>>& v) const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the addresses
  for (uint64_t pc : *v) h = (h ^ pc) * 1099511628211ull;
  return static_cast<size_t>(h);
}

std::shared_ptr<const std::vector<uint64_t>> StackInterner::intern(std::vector<uint64_t>&& pcs, const std::string& name) {
  // A sample's own cost (StackSample and its snapshot's share), then the
  // stack's if it is new: its addresses, the set's node, and what report
  // builds of it later, its frames symbolised for its site's example stack
  // (about 160 bytes a frame, kMaxSiteStack frames at most).
  constexpr uint64_t kSampleBytes = sizeof(StackSample), kStackBytes = 64, kFrameBytes = 160;
  ++samples_;
  bytes_ += kSampleBytes;
  auto v = std::make_shared<const std::vector<uint64_t>>(std::move(pcs));
  auto [it, added] = set_.insert(v);
  if (added) bytes_ += kStackBytes + 8 * v->size() + kFrameBytes * std::min<uint64_t>(v->size(), kMaxSiteStack);
  if (bytes_ > budget_)
    throw FileError(name, "the profiles read so far hold more than " + std::to_string(budget_ >> 20) + " MiB of stacks (" +
                              std::to_string(samples_) + " samples, " + std::to_string(set_.size()) +
                              " distinct stacks): memprofile's limit for one report; name fewer dumps or processes");
  return *it;
}

bool is_jemalloc_heap(const std::string& head) { return head.rfind("heap_v2/", 0) == 0; }

HeapSnapshot parse_jemalloc_heap(const std::string& text, const std::string& name, StackInterner* stacks) {
  HeapSnapshot snap;
  snap.file = name;
  snap.backend = "jemalloc";
  parse_jemalloc_name(name, snap.pid, snap.sequence, snap.trigger);
  Lines lines(text, name);
  std::string line;
  auto bad = [&](const std::string& what) {
    return FileError(name, "line " + std::to_string(lines.number()) + ": " + what);
  };
  if (!lines.next(line) || !is_jemalloc_heap(line))
    throw FileError(name, "not a jemalloc heap profile (it starts with \"heap_v2/PERIOD\")");
  // jemalloc ends every line, the maps' last included: a dump without a
  // final newline was cut short, maybe inside the maps.
  if (text.back() != '\n') throw FileError(name, "truncated: the last line is cut short (no final newline)");
  const char* p = line.c_str() + std::strlen("heap_v2/");
  if (!parse_u64(p, snap.sample_period) || *p) throw bad("malformed header: " + line.substr(0, 80));
  // The process totals, then one line per thread.
  bool total;
  uint64_t objs, bytes;
  if (!lines.next(line) || !parse_counts(line, total, objs, bytes) || !total)
    throw bad("expected the totals line \"  t*: OBJECTS: BYTES [...]\"");
  bool mapped = false;
  StackSample* open = nullptr;  // the stack whose t* line is still due
  while (lines.next(line)) {
    if (line.rfind("@", 0) == 0) {
      if (open) throw bad("a stack without its counts (\"  t*: ...\" missing)");
      StackSample s;
      if (!parse_frames(line.c_str() + 1, s.pcs, bad)) throw bad("malformed stack: " + line.substr(0, 80));
      if (s.pcs.empty()) throw bad("an empty stack");
      intern_stack(s, stacks, name);
      snap.stacks.push_back(std::move(s));
      open = &snap.stacks.back();
    } else if (parse_counts(line, total, objs, bytes)) {
      if (!total) continue;  // per-thread split: the t* line already sums it
      if (!open) throw bad("counts outside a stack");
      open->objects = static_cast<double>(objs);
      open->bytes = static_cast<double>(bytes);
      scale(*open, snap.sample_period);
      snap.total_objects += open->objects;
      snap.total_bytes += open->bytes;
      open = nullptr;
    } else if (line == "MAPPED_LIBRARIES:") {
      mapped = true;
      break;
    } else if (!line.empty()) {
      throw bad("unexpected: " + line.substr(0, 80));
    }
  }
  if (open) throw FileError(name, "truncated: the last stack has no counts");
  if (!mapped)
    throw FileError(name, "truncated: no MAPPED_LIBRARIES section (jemalloc writes it last; the dump was cut short)");
  read_maps(lines, snap, name);
  return snap;
}

bool parse_jemalloc_name(const std::string& path, uint64_t& pid, uint64_t& sequence, std::string& trigger) {
  // PREFIX.PID.SEQ.KIND[N].heap, the prefix may hold dots of its own.
  std::string base = path.substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1);
  if (base.size() < 5 || base.compare(base.size() - 5, 5, ".heap") != 0) return false;
  base.resize(base.size() - 5);
  size_t k = base.rfind('.');
  if (k == std::string::npos || k == 0) return false;
  std::string kind = base.substr(k + 1);
  size_t s = base.rfind('.', k - 1);
  if (s == std::string::npos || s == 0) return false;
  size_t pd = base.rfind('.', s - 1);
  if (pd == std::string::npos) return false;
  const char* q = base.c_str() + s + 1;
  uint64_t seq, id;
  if (!parse_u64(q, seq) || q != base.c_str() + k) return false;
  q = base.c_str() + pd + 1;
  if (!parse_u64(q, id) || q != base.c_str() + s) return false;
  if (kind.empty() || std::strchr("imuf", kind[0]) == nullptr) return false;
  pid = id;
  sequence = seq;
  trigger = kind.substr(0, 1);
  return true;
}

bool is_gperftools_heap(const std::string& head) { return head.rfind("heap profile: ", 0) == 0; }

bool is_heap_dump(const std::string& head) { return is_jemalloc_heap(head) || is_gperftools_heap(head); }

namespace {

// An object count as gperftools 2.10 prints it: an int32 with %d, which
// wraps negative past 2^31 allocations in a long run; taken modulo 2^32.
bool parse_count(const char*& p, uint64_t& out) {
  while (*p == ' ') ++p;
  bool negative = *p == '-';
  if (negative) ++p;
  if (!parse_u64(p, out)) return false;
  if (negative) {
    if (out == 0 || out > (1ull << 31)) return false;
    out = (1ull << 32) - out;
  }
  return true;
}

// "LIVE: LIVEBYTES [ALLOCS: ALLOCBYTES] @" at p; p after the '@'.
bool parse_bucket(const char*& p, uint64_t (&n)[4]) {
  return parse_count(p, n[0]) && expect(p, ":") && parse_u64(p, n[1]) && expect(p, " [") && parse_count(p, n[2]) &&
         expect(p, ":") && parse_u64(p, n[3]) && expect(p, "]") && expect(p, " @");
}

}  // namespace

HeapSnapshot parse_gperftools_heap(const std::string& text, const std::string& name, StackInterner* stacks) {
  HeapSnapshot snap;
  snap.file = name;
  snap.backend = "tcmalloc";
  parse_gperftools_name(name, snap.pid, snap.sequence);
  Lines lines(text, name);
  std::string line;
  auto bad = [&](const std::string& what) {
    return FileError(name, "line " + std::to_string(lines.number()) + ": " + what);
  };
  if (!lines.next(line) || !is_gperftools_heap(line))
    throw FileError(name, "not a gperftools heap profile (it starts with \"heap profile: \")");
  if (text.back() != '\n') throw FileError(name, "truncated: the last line is cut short (no final newline)");
  const char* p = line.c_str() + std::strlen("heap profile: ");
  uint64_t n[4];
  if (!parse_bucket(p, n)) throw bad("malformed header: " + line.substr(0, 80));
  // What was recorded: every allocation (the heap profiler), or a sample
  // every PERIOD bytes (tcmalloc's heap sample).
  while (*p == ' ') ++p;
  if (std::strcmp(p, "heapprofile") == 0) {
    snap.sample_period = 0;
  } else if (std::strncmp(p, "heap_v2/", 8) == 0) {
    p += 8;
    if (!parse_u64(p, snap.sample_period) || *p) throw bad("malformed sampling period: " + line.substr(0, 80));
  } else {
    throw bad("a kind of heap profile memprofile does not read: " + line.substr(0, 80));
  }
  // The heap profiler counts every allocation, freed or not: pprof's
  // alloc_space. A sample's are not scaled to match.
  snap.has_allocated = snap.sample_period == 0;
  bool mapped = false;
  while (lines.next(line)) {
    if (line == "MAPPED_LIBRARIES:") {
      mapped = true;
      break;
    }
    if (line.empty()) continue;
    p = line.c_str();
    if (!parse_bucket(p, n)) throw bad("malformed stack: " + line.substr(0, 80));
    StackSample s;
    if (!parse_frames(p, s.pcs, bad)) throw bad("malformed stack: " + line.substr(0, 80));
    s.objects = static_cast<double>(n[0]);
    s.bytes = static_cast<double>(n[1]);
    s.alloc_objects = static_cast<double>(n[2]);
    s.alloc_bytes = static_cast<double>(n[3]);
    scale(s, snap.sample_period);
    snap.total_objects += s.objects;
    snap.total_bytes += s.bytes;
    // A stack the profiler could not unwind counts in the totals only.
    if (s.pcs.empty()) continue;
    intern_stack(s, stacks, name);
    snap.stacks.push_back(std::move(s));
  }
  if (!mapped)
    throw FileError(name, "truncated: no MAPPED_LIBRARIES section (gperftools writes it last; the dump was cut short)");
  read_maps(lines, snap, name);
  return snap;
}

bool parse_gperftools_name(const std::string& path, uint64_t& pid, uint64_t& sequence) {
  // PREFIX.PID.NNNN.heap, or PREFIX.PID_CHILD.NNNN.heap.
  std::string base = path.substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1);
  if (base.size() < 5 || base.compare(base.size() - 5, 5, ".heap") != 0) return false;
  base.resize(base.size() - 5);
  size_t k = base.rfind('.');
  if (k == std::string::npos || k == 0) return false;
  const char* q = base.c_str() + k + 1;
  uint64_t seq, id;
  if (!parse_u64(q, seq) || *q) return false;
  size_t d = base.rfind('.', k - 1);
  if (d == std::string::npos) return false;
  std::string who = base.substr(d + 1, k - d - 1);
  if (size_t u = who.rfind('_'); u != std::string::npos) who = who.substr(u + 1);
  q = who.c_str();
  if (!parse_u64(q, id) || *q || id == 0) return false;
  pid = id;
  sequence = seq;
  return true;
}

HeapSnapshot parse_heap_dump(const std::string& text, const std::string& name, StackInterner* stacks) {
  if (is_gperftools_heap(text.substr(0, 16))) return parse_gperftools_heap(text, name, stacks);
  return parse_jemalloc_heap(text, name, stacks);
}

}  // namespace memprofile
