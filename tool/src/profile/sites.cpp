#include "profile/sites.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <map>

#include "base/memory_ceiling.h"
#include "runtime/backend.h"

namespace memprofile {

namespace {

std::string basename_of(const std::string& p) {
  size_t s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

void check_builds(const std::vector<HeapSnapshot>& snapshots, Symbolizer& symbolizer) {
  std::vector<std::pair<const Mapping*, uint64_t>> returns;
  for (const auto& snap : snapshots) {
    std::vector<const Mapping*> sorted = sorted_maps(snap);
    for (const auto& sample : snap.stacks)
      for (size_t i = 1; i < sample.stack().size(); ++i)  // the first may be where the sample was taken
        if (const Mapping* m = find_mapping(sorted, sample.stack()[i]))
          returns.push_back({m, sample.stack()[i] + (snap.call_sites ? 1 : 0)});
    if (returns.size() > (1u << 20)) break;  // plenty to judge by
  }
  symbolizer.check_builds(returns);
}

const Mapping* find_mapping(const std::vector<const Mapping*>& sorted, uint64_t pc) {
  auto it = std::upper_bound(sorted.begin(), sorted.end(), pc, [](uint64_t v, const Mapping* m) { return v < m->start; });
  if (it == sorted.begin()) return nullptr;
  const Mapping* m = *(it - 1);
  return pc < m->end ? m : nullptr;
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = std::fabs(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes < 0 ? -v : v, units[u]);
  return buf;
}

Site::Rises Site::rises() const {
  Rises r;
  for (size_t i = 1; i < bytes.size(); ++i)
    if (bytes[i] > bytes[i - 1] && r.rose++ == 0) r.since_first = bytes.size() - i;
  return r;
}

bool Site::leak_suspect() const {
  if (bytes.size() < 2 || growth() <= 0) return false;
  // A fall of less than 1/16 of what the site held does not count: a
  // snapshot taken while a growing container reallocates holds the old
  // block and the new one, and the next holds only the new one. Memory
  // that is really given back (temporary work) falls by far more.
  for (size_t i = 1; i < bytes.size(); ++i)
    if (bytes[i] < bytes[i - 1] - bytes[i - 1] / 16) return false;
  // One step up, at the last snapshot, is what a temporary block live at
  // that moment looks like (heaptrack's snapshots are exact): a suspect
  // rose in two intervals at least, when there are two. And a leak, once
  // begun, goes on: two steps among many flat intervals are a cache that
  // filled across a snapshot, or an allocator's arena that one call
  // happened to need (memray charges pymalloc's to the Python line).
  Rises r = rises();
  return r.rose >= std::min<size_t>(2, bytes.size() - 1) && 3 * r.rose >= r.since_first;
}

bool is_profiler_frame(const Frame& f) {
  std::string mod = basename_of(f.module);
  for (const BackendRow& row : backend_rows())
    for (const char* m : row.own_frames)
      if (starts_with(mod, m)) return true;
  return false;
}

namespace {

// FILE is in Rust's own library/{alloc,core,std} under a toolchain's
// source directory (not an app's own "library" directory).
bool rust_std_source(const std::string& file) {
  for (const char* crate : {"/library/alloc/", "/library/core/", "/library/std/"}) {
    size_t at = file.find(crate);
    if (at == std::string::npos) continue;
    std::string dir = file.substr(0, at);
    if (dir.size() >= std::strlen("/rustlib/src/rust") &&
        dir.compare(dir.size() - std::strlen("/rustlib/src/rust"), std::string::npos, "/rustlib/src/rust") == 0)
      return true;
    if (starts_with(dir, "/usr/src/rustc-") && dir.find('/', std::strlen("/usr/src/rustc-")) == std::string::npos) return true;
  }
  return false;
}

// A method of an implementation of Rust's allocator traits, whoever wrote
// it: "<tikv_jemallocator::Jemalloc as core::alloc::global::GlobalAlloc>::alloc",
// "<mimalloc::MiMalloc as ...GlobalAlloc>::dealloc", an Allocator's
// allocate or grow. By the trait, never by a list of crates.
bool implements_allocator_trait(const std::string& fn) {
  if (!starts_with(fn, "<")) return false;
  size_t close = fn.rfind(">::");
  if (close == std::string::npos || fn.find(" as ") == std::string::npos) return false;
  const std::string trait = fn.substr(0, close), method = fn.substr(close + 3);
  auto ends = [&](const char* tail) {
    size_t n = std::strlen(tail);
    return trait.size() >= n && trait.compare(trait.size() - n, n, tail) == 0;
  };
  if (!ends("::GlobalAlloc") && !ends(" GlobalAlloc") && !ends("::Allocator") && !ends(" Allocator")) return false;
  for (const char* m : {"alloc", "alloc_zeroed", "realloc", "dealloc", "allocate", "allocate_zeroed", "deallocate",
                        "grow", "grow_zeroed", "shrink"})
    if (method == m) return true;
  return false;
}

}  // namespace

bool is_allocator_frame(const Frame& f) {
  if (f.runtime || is_profiler_frame(f)) return true;
  // Whole modules: the profilers' preload libraries, libc and the loader,
  // the C++ and unwinder runtimes.
  std::string mod = basename_of(f.module);
  for (const char* m : {"libc.so", "libc-", "ld-linux", "ld-musl", "libstdc++", "libc++", "libgcc_s"})
    if (starts_with(mod, m)) return true;
  // Source files of the standard libraries, inlined or instantiated into
  // the program: Rust's alloc/core/std where each toolchain puts them
  // (rustup's builds: /rustc/HASH/library/...; Debian's rustc:
  // /usr/src/rustc-VERSION/library/...; rust-src: .../rustlib/src/rust/
  // library/...), libstdc++'s headers.
  const std::string& file = f.file;
  if (starts_with(file, "/rustc/") || starts_with(file, "library/alloc/") || starts_with(file, "library/core/") ||
      starts_with(file, "library/std/") || rust_std_source(file) || file.find("/usr/include/c++/") != std::string::npos)
    return true;
  // Functions, for allocators and templates compiled into the program itself
  // (a statically linked jemalloc, std::vector's growth, Rust's alloc crate).
  const std::string& fn = f.function;
  for (const char* name : {"malloc", "calloc", "realloc", "reallocarray", "free", "posix_memalign", "aligned_alloc",
                           "memalign", "valloc", "pvalloc", "mallocx", "rallocx"})
    if (fn == name) return true;
  // The allocators' own entry points and internals, linked in (jemalloc's
  // je_/_rjem_ and imalloc/prof_, mimalloc's mi_/_mi_, gperftools' tc_),
  // Rust's allocator shims (__rust_alloc*, __rust_dealloc, __rust_realloc,
  // __rdl_/__rg_), C++'s operator new and the standard libraries' templates.
  for (const char* p : {"je_", "prof_", "imalloc", "_rjem_", "mi_", "_mi_", "tc_", "tikv_jemallocator", "operator new",
                        "std::", "__gnu_cxx::", "__cxx", "alloc::", "core::", "<alloc::", "<core::", "__rust_alloc",
                        "__rust_dealloc", "__rust_realloc", "__rdl_", "__rg_", "hashbrown::"})
    if (starts_with(fn, p)) return true;
  // An implementation of GlobalAlloc or Allocator, in any crate.
  return implements_allocator_trait(fn);
}

std::vector<const Mapping*> sorted_maps(const HeapSnapshot& snap) {
  std::vector<const Mapping*> sorted;
  for (const auto& m : snap.maps) sorted.push_back(&m);
  std::sort(sorted.begin(), sorted.end(), [](const Mapping* a, const Mapping* b) { return a->start < b->start; });
  return sorted;
}

namespace {

// The Python interpreter's own module: python3.X, or libpython3.X.so.
bool is_interpreter_module(const std::string& module) {
  std::string mod = basename_of(module);
  if (starts_with(mod, "libpython")) return true;
  return starts_with(mod, "python") && mod.find_first_not_of("0123456789.", 6) == std::string::npos;
}

Frame python_frame(const ResolvedFrame& r) {
  Frame f;
  f.function = r.function;
  f.file = r.file;
  f.line = r.line;
  return f;
}

// memray's hybrid stack (its _memray.pyx hybrid_stack_trace): going from the
// outermost native frame in, each call of the interpreter's eval loop
// (_PyEval_EvalFrameDefault) stands for the Python frames it ran: one entry
// frame and those evaluated in the same C call after it. Python frames above
// where tracking began are dropped, with every native frame outside them.
// Native frames of the interpreter are its own allocation machinery
// (Frame::runtime): sites fold past them to the Python line. When the eval
// calls cannot all be paired (a stripped interpreter), the Python frames
// alone, as memray does.
std::vector<Frame> hybrid_stack(std::vector<Frame> native, const std::vector<std::pair<const ResolvedFrame*, bool>>& py) {
  std::vector<Frame> out;  // outermost first
  size_t keep_from = 0;    // in out: past the innermost hidden frame
  size_t p = py.size();    // py[p - 1]: the outermost not yet placed
  for (size_t i = native.size(); i-- > 0;) {
    Frame& nf = native[i];
    if (p > 0 && nf.function.find("_PyEval_EvalFrameDefault") != std::string::npos) {
      do {
        --p;
        out.push_back(python_frame(*py[p].first));
        if (py[p].second) keep_from = out.size();
      } while (p > 0 && !py[p - 1].first->entry);
      continue;
    }
    nf.runtime = nf.runtime || is_interpreter_module(nf.module);
    out.push_back(std::move(nf));
  }
  if (p > 0) {
    out.clear();
    keep_from = 0;
    for (size_t i = py.size(); i-- > 0;) {
      out.push_back(python_frame(*py[i].first));
      if (py[i].second) keep_from = out.size();
    }
  }
  std::vector<Frame> frames(std::make_move_iterator(out.begin() + static_cast<std::ptrdiff_t>(keep_from)),
                            std::make_move_iterator(out.end()));
  std::reverse(frames.begin(), frames.end());
  return frames;
}

}  // namespace

std::vector<Frame> stack_frames(const HeapSnapshot& snap, const std::vector<const Mapping*>& sorted,
                                const StackSample& sample, Symbolizer& symbolizer, size_t& outside) {
  std::vector<Frame> frames;
  std::vector<std::pair<const ResolvedFrame*, bool>> py;  // frames the profiler resolved (memray), hidden or not
  for (size_t i = 0; i < sample.stack().size(); ++i) {
    uint64_t pc = sample.stack()[i];
    if (pc & kResolvedFrame) {
      uint64_t at = pc & kResolvedIndexMask;
      if (snap.resolved && at < snap.resolved->size()) py.push_back({&(*snap.resolved)[at], (pc & kHiddenFrame) != 0});
      continue;
    }
    const Mapping* m = find_mapping(sorted, sample.stack()[i]);
    if (!m) {
      ++outside;
      Frame f;
      f.module = "?";
      f.module_offset = sample.stack()[i];
      frames.push_back(f);
      continue;
    }
    // The first address is where the sample was taken, the others are
    // return addresses (jeprof subtracts one from them too).
    for (auto& f : symbolizer.lookup(*m, sample.stack()[i], i > 0 && !snap.call_sites)) frames.push_back(std::move(f));
  }
  if (!py.empty()) frames = hybrid_stack(std::move(frames), py);
  if (frames.empty()) {  // the profiler could not unwind
    Frame f;
    f.function = "(no stack)";
    frames.push_back(f);
  }
  return frames;
}

size_t site_frame(const std::vector<Frame>& frames) {
  size_t first = 0;
  while (first < frames.size() && is_allocator_frame(frames[first])) ++first;
  if (first < frames.size()) return first;
  // All runtime (a library's start-up, the loader): the first named frame
  // past the profiler's own, else the first past it.
  first = 0;
  while (first < frames.size() && is_profiler_frame(frames[first])) ++first;
  size_t named = first;
  while (named < frames.size() && frames[named].function.empty()) ++named;
  if (named < frames.size()) return named;
  return first == frames.size() ? 0 : first;
}

// A site without a name (a static function of a binary with only dynamic
// symbols: PostgreSQL's AllocSetAlloc) is named by its nearest caller that
// has one, a few frames out at most, so that the ranking speaks in function
// names; the unnamed frames stay at the top of its stack.
size_t named_site_frame(const std::vector<Frame>& frames, size_t first) {
  if (first >= frames.size() || !frames[first].function.empty()) return first;
  for (size_t k = first + 1; k < frames.size() && k <= first + 4; ++k)
    if (!frames[k].function.empty() && !is_allocator_frame(frames[k])) return k;
  return first;
}

std::string site_key(const Frame& at) {
  return at.function.empty() ? at.str() : at.function + "\n" + at.file + ":" + std::to_string(at.line);
}

SiteTable fold_sites(const std::vector<HeapSnapshot>& snapshots, Symbolizer& symbolizer) {
  SiteTable table;
  std::map<std::string, size_t> index;  // site key -> table.sites
  std::vector<double> heaviest;         // per site: bytes of the stack kept as its example
  const size_t n = snapshots.size();
  size_t outside = 0;  // addresses in no file mapping
  check_builds(snapshots, symbolizer);
  for (size_t s = 0; s < n; ++s) {
    const HeapSnapshot& snap = snapshots[s];
    table.snapshots.push_back(snap.file);
    table.totals.push_back(snap.total_bytes);
    std::vector<const Mapping*> sorted = sorted_maps(snap);
    MemoryCheck memory(snap.file);
    for (const auto& sample : snap.stacks) {
      memory();
      std::vector<Frame> frames = stack_frames(snap, sorted, sample, symbolizer, outside);
      size_t first = site_frame(frames);
      const Frame& at = frames[named_site_frame(frames, first)];
      std::string key = site_key(at);
      auto [it, added] = index.emplace(key, table.sites.size());
      if (added) {
        Site site;
        site.frame = at;
        site.bytes.assign(n, 0);
        site.objects.assign(n, 0);
        table.sites.push_back(std::move(site));
        heaviest.push_back(-1);
      }
      Site& site = table.sites[it->second];
      site.bytes[s] += sample.bytes;
      site.objects[s] += sample.objects;
      if (sample.bytes > heaviest[it->second]) {
        heaviest[it->second] = sample.bytes;
        // Its innermost kMaxSiteStack frames: a table of many sites with
        // deep stacks (a recursive program) stays small.
        size_t keep = std::min(frames.size() - first, kMaxSiteStack);
        site.stack.assign(frames.begin() + static_cast<std::ptrdiff_t>(first),
                          frames.begin() + static_cast<std::ptrdiff_t>(first + keep));
      }
    }
  }
  table.warnings = symbolizer.warnings();
  if (outside)
    table.warnings.push_back(std::to_string(outside) + " sampled address" + (outside == 1 ? "" : "es") +
                             " fall in no mapped file (JIT code, or maps cut short): shown as ?+0xADDRESS");
  return table;
}

}  // namespace memprofile
