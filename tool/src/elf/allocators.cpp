// Where an object's heap goes besides glibc's malloc: the allocator entry
// points it calls or carries (its dynamic symbols, every one, and its static
// symbol table when present), and what an allocator linked into it says of
// itself in its read-only strings (the variable an embedded jemalloc reads,
// whether its profiler is built in). A preload profiler interposes malloc
// and the names it defines itself, nothing else: a program calling
// mi_malloc or _rjem_mallocx, or carrying its own malloc, is not seen.
//
// These facts never make the file unreadable: a table that is not where its
// tags say leaves them partial (a FileError inside is caught here).
#include <elf.h>
#include <gelf.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>

#include "base/error.h"
#include "elf/analyses.h"

namespace memprofile {

namespace {

bool ends_with(const std::string& s, const char* suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// The part after an allocator's prefix names an allocation call: it starts
// with a verb ("malloc_aligned", "free", "newarray"), after at most one
// qualifier ("heap_malloc", "aligned_alloc", "rust_alloc"). "filter_delete"
// does not.
bool names_allocation(std::string rest) {
  for (const char* q : {"heap_", "aligned_", "rust_", "posix_"})
    if (starts_with(rest, q)) {
      rest = rest.substr(std::strlen(q));
      break;
    }
  for (const char* verb : {"malloc", "calloc", "realloc", "alloc", "zalloc", "valloc", "pvalloc", "free", "cfree",
                           "memalign", "new", "delete", "expand", "recalloc", "rezalloc", "dealloc"})
    if (starts_with(rest, verb)) return true;
  return false;
}

// jemalloc's own API, which no other allocator names this way; the part
// before it is the build's prefix (--with-jemalloc-prefix).
// Longest first where one ends another ("sdallocx", "dallocx").
constexpr const char* kJemallocApi[] = {"sdallocx", "mallocx", "rallocx", "xallocx", "sallocx", "dallocx",
                                        "nallocx", "mallctlnametomib", "mallctlbymib", "mallctl",
                                        "malloc_stats_print"};

// An allocator's entry point that only answers a question (jemalloc's
// mallctl, nallocx, sallocx, malloc_stats_print; tcmalloc's tc_malloc_stats;
// mimalloc's mi_usable_size): a program calling it still allocates through
// malloc, so it is no call in place of malloc.
bool is_query(const std::string& name) {
  for (const char* q : {"mallctl", "mallctlnametomib", "mallctlbymib", "nallocx", "sallocx", "malloc_stats_print"})
    if (ends_with(name, q)) return true;
  for (const char* q : {"stats", "usable_size", "good_size", "malloc_size", "version", "option"})
    if (name.find(q) != std::string::npos) return true;
  return false;
}

void add_name(std::vector<std::string>& list, const std::string& name) {
  if (list.size() < kMaxHeapNames && std::find(list.begin(), list.end(), name) == list.end()) list.push_back(name);
}

// One symbol of either table: an allocator's entry point imported or
// defined, and malloc itself.
void note_symbol(const std::string& name, const GElf_Sym& sym, bool static_table, HeapFacts& h) {
  int type = GELF_ST_TYPE(sym.st_info), bind = GELF_ST_BIND(sym.st_info);
  bool defined = sym.st_shndx != SHN_UNDEF;
  if (defined && type != STT_FUNC && type != STT_GNU_IFUNC) return;
  // An embedded jemalloc's mallctl, local or not (built --without-export,
  // as tikv-jemalloc-sys builds it): what the control library calls.
  if (static_table && defined && (name == "mallctl" || name == "je_mallctl" || name == "_rjem_mallctl"))
    h.mallctl_symtab = name;
  // A local function (jemalloc's static do_rallocx) is no entry point.
  if (bind != STB_GLOBAL && bind != STB_WEAK) return;
  if (!defined && static_table) return;
  if (defined && static_table && name == "malloc") h.malloc_in_symtab = true;
  if (!static_table && !defined && name == "fork") h.calls_fork = true;
  if (!static_table && defined && name == "memprofile_heaptrack_fork_safe") h.heaptrack_fork_safe = true;
  if (!static_table && defined && name == "memprofile_bytehound_fork_safe") h.bytehound_fork_safe = true;
  // C++'s operator new and new[] (_Znwm, _Znam, their aligned and nothrow
  // forms): a library defining them ahead of libstdc++ takes every `new`.
  if (!static_table && (starts_with(name, "_Znw") || starts_with(name, "_Zna")))
    (defined ? h.defines_operator_new : h.calls_operator_new) = true;
  if (defined) {
    // What a managed runtime's own library (or a program linking it in) defines.
    static const std::pair<const char*, const char*> kRuntimes[] = {
        {"Py_Initialize", "cpython"},         {"JNI_CreateJavaVM", "jvm"}, {"JLI_Launch", "jvm"},
        {"napi_module_register", "node"},     {"coreclr_initialize", "dotnet"}};
    for (const auto& [marker, runtime] : kRuntimes)
      if (name == marker) h.runtime = runtime;
    if (name == "_Py_MergeZeroLocalRefcount" || name == "_Py_ExplicitMergeRefcount") h.cpython_free_threaded = true;
    if (!static_table && ends_with(name, "mallctl")) h.mallctl_export = name;
    // gperftools' heap profiler, linked in: HEAPPROFILE works only then (a
    // static libtcmalloc.a leaves it out unless something calls it, though
    // the variable's name is among its strings either way).
    if (name == "HeapProfilerStart") h.tcmalloc_heap_profiler = true;
    if (!static_table && name == "HeapProfilerDump") h.heap_profiler_dump_export = true;
  }
  if (allocator_of(name).empty()) return;
  if (defined) {
    add_name(h.defines, name);
  } else if (!is_query(name)) {
    // A weak reference is a call made only where some library defines the
    // name (abseil's `if (sdallocx) sdallocx(...)` else free): judged
    // against what the program loads (verdict/heap_coverage.cpp).
    add_name(bind == STB_WEAK ? h.weak_imports : h.imports, name);
  }
}

// How many entries DT_SYMTAB has, which no tag gives: DT_HASH's nchain, or
// past the last symbol that DT_GNU_HASH's buckets and chains reach.
uint64_t dynamic_symbol_count(const ElfView& view, const SymbolLookup& l) {
  auto words = [&](uint64_t vaddr, uint64_t at, uint64_t count, const char* tag) {
    if (count > kMaxChunk / 4 || at > kMaxChunk) view.fail(std::string(tag) + " is implausibly large");
    return static_cast<const unsigned char*>(view.table_at(vaddr + at, count * 4, ELF_T_BYTE, tag)->d_buf);
  };
  if (!l.gnu_hash) return l.sysv_hash ? view.word(words(*l.sysv_hash, 4, 1, "DT_HASH")) : 0;
  const char* tag = "DT_GNU_HASH";
  const unsigned char* hdr = words(*l.gnu_hash, 0, 4, tag);
  uint32_t nbuckets = view.word(hdr), symoffset = view.word(hdr + 4), bloom_size = view.word(hdr + 8);
  uint64_t buckets_at = 16 + uint64_t{bloom_size} * (view.elf_class() / 8);
  const unsigned char* buckets = words(*l.gnu_hash, buckets_at, nbuckets, tag);
  uint32_t last = 0;
  for (uint32_t i = 0; i < nbuckets; ++i) last = std::max(last, view.word(buckets + uint64_t{i} * 4));
  if (last < symoffset) return symoffset;
  uint64_t chains_at = buckets_at + uint64_t{nbuckets} * 4;
  for (uint64_t guard = 0; guard <= kMaxHashChain; ++guard, ++last)
    if (view.word(words(*l.gnu_hash, chains_at + uint64_t{last - symoffset} * 4, 1, tag)) & 1) return last + 1ull;
  view.fail(std::string(tag) + " last chain has no end");
}

// The read-only strings of a jemalloc or a .NET host linked in.
class StringScan {
 public:
  // The needles are put together at run time: as literals they would be
  // among memprofile's own strings, and memprofile would carry "jemalloc".
  StringScan(HeapFacts& h, int)
      : h_(h),
        jemalloc_says_(std::string("<jemalloc") + ">: "),
        leak_report_(std::string("Run jeprof") + " on dump output"),
        mimalloc_says_(std::string("mimalloc") + ": "),
        hostfxr_(std::string("libhostfxr") + ".so"),
        dotnet_root_(std::string("DOTNET") + "_ROOT") {}

  void scan(const char* p, size_t n) {
    // jemalloc's messages, many of them: one mention is not an allocator.
    jemalloc_said_ += count(p, n, jemalloc_says_);
    mimalloc_said_ += count(p, n, mimalloc_says_);
    // prof.c's leak report: only there when profiling is built in.
    if (find(p, n, leak_report_.c_str())) prof_ = true;
    hostfxr_seen_ = hostfxr_seen_ || find(p, n, hostfxr_.c_str());
    dotnet_root_seen_ = dotnet_root_seen_ || find(p, n, dotnet_root_.c_str());
    // The variable jemalloc reads, "<PREFIX>MALLOC_CONF" (prefix upper-cased)
    // as a string of its own: NUL before its first character and after it.
    static const char kConf[] = "MALLOC_CONF";
    const size_t len = sizeof kConf - 1;
    for (const char* at = p; at + len < p + n;) {
      const char* hit = static_cast<const char*>(memmem(at, static_cast<size_t>(p + n - at), kConf, len));
      if (!hit || hit + len >= p + n) break;
      const char* start = hit;
      while (start > p && hit - start < 64 && (std::isupper(static_cast<unsigned char>(start[-1])) ||
                                                std::isdigit(static_cast<unsigned char>(start[-1])) || start[-1] == '_'))
        --start;
      if (hit[len] == '\0' && start > p && start[-1] == '\0' && conf_.empty()) conf_.assign(start, hit + len);
      at = hit + len;
    }
  }

  void finish() {
    h_.dotnet_host = hostfxr_seen_ && dotnet_root_seen_;
    if (mimalloc_said_ >= kMessages) h_.carried_by_strings = "mimalloc";
    if (jemalloc_said_ < kMessages) return;
    h_.carried_by_strings = "jemalloc";
    h_.jemalloc_conf_env = conf_;
    h_.jemalloc_prof = prof_;
  }

 private:
  static constexpr unsigned kMessages = 3;
  static bool find(const char* p, size_t n, const char* s) { return memmem(p, n, s, std::strlen(s)) != nullptr; }
  static unsigned count(const char* p, size_t n, const std::string& s) {
    unsigned hits = 0;
    for (const char* at = p; hits < 1000;) {
      const void* hit = memmem(at, static_cast<size_t>(p + n - at), s.data(), s.size());
      if (!hit) break;
      ++hits;
      at = static_cast<const char*>(hit) + s.size();
    }
    return hits;
  }
  HeapFacts& h_;
  const std::string jemalloc_says_, leak_report_, mimalloc_says_, hostfxr_, dotnet_root_;
  unsigned jemalloc_said_ = 0, mimalloc_said_ = 0;
  bool prof_ = false, hostfxr_seen_ = false, dotnet_root_seen_ = false;
  std::string conf_;
};

// Every non-writable loaded segment (.rodata sits in one, or with the code),
// in windows, at most kStringsBudget bytes in all.
constexpr uint64_t kStringsWindow = 4u << 20;
constexpr uint64_t kStringsBudget = 256u << 20;
constexpr uint64_t kOverlap = 128;

void scan_strings(const ElfView& view, HeapFacts& h) {
  StringScan scan(h, 0);
  uint64_t budget = kStringsBudget;
  for (const auto& ph : view.phdrs()) {
    if (ph.p_type != PT_LOAD || (ph.p_flags & PF_W) || ph.p_offset > view.size()) continue;
    uint64_t end = std::min<uint64_t>(view.size(), ph.p_offset + ph.p_filesz);
    for (uint64_t off = ph.p_offset; off < end && budget > 0;) {
      uint64_t len = std::min({end - off, kStringsWindow, budget});
      Elf_Data* d = view.try_chunk(off, len, ELF_T_BYTE);
      if (!d) break;
      scan.scan(static_cast<const char*>(d->d_buf), d->d_size);
      budget -= len;
      if (off + len >= end) break;
      off += len - std::min(len, kOverlap);
    }
  }
  scan.finish();
}

// .symtab and .strtab, when the file keeps them (not stripped) and the
// view may read sections; the strings must fit in one chunk.
void read_static_symbols(const ElfView& view, HeapFacts& h) {
  ElfView::SectionSearch symtab = view.find_section(".symtab"), strtab = view.find_section(".strtab");
  if (!symtab.found || !strtab.found || strtab.size > kMaxChunk) return;
  Elf_Data* strings = view.try_chunk(strtab.offset, strtab.size, ELF_T_BYTE);
  if (!strings) return;
  h.symtab = true;
  const size_t entsize = view.entry_size(ELF_T_SYM);
  const uint64_t per_window = std::max<uint64_t>(1, kStringsWindow / entsize);
  const uint64_t count = symtab.size / entsize;
  const char* names = static_cast<const char*>(strings->d_buf);
  for (uint64_t first = 0; first < count; first += per_window) {
    uint64_t n = std::min(per_window, count - first);
    Elf_Data* d = view.try_chunk(symtab.offset + first * entsize, n * entsize, ELF_T_SYM);
    if (!d) return;
    for (uint64_t i = 0; i < n; ++i) {
      GElf_Sym sym;
      if (!gelf_getsym(d, static_cast<int>(i), &sym) || sym.st_name >= strings->d_size) continue;
      const char* name = names + sym.st_name;
      size_t len = strnlen(name, std::min<uint64_t>(strings->d_size - sym.st_name, kMaxDynString));
      note_symbol(std::string(name, len), sym, true, h);
    }
  }
}

}  // namespace

std::string allocator_of(const std::string& s, std::string* prefix) {
  for (const char* api : kJemallocApi)
    if (ends_with(s, api)) {
      if (prefix) *prefix = s.substr(0, s.size() - std::strlen(api));
      return "jemalloc";
    }
  // Prefixed jemalloc's malloc family: "je_malloc", "_rjem_free".
  for (const char* p : {"je_", "_rjem_", "jemalloc_"})
    if (starts_with(s, p) && names_allocation(s.substr(std::strlen(p)))) {
      if (prefix) *prefix = p;
      return "jemalloc";
    }
  struct Family {
    const char* prefix;
    const char* name;
  };
  static const Family kFamilies[] = {{"mi_", "mimalloc"},       {"tc_", "tcmalloc"},  {"sn_", "snmalloc"},
                                     {"rp", "rpmalloc"},        {"scalable_", "tbbmalloc"}};
  for (const auto& f : kFamilies)
    if (starts_with(s, f.prefix) && names_allocation(s.substr(std::strlen(f.prefix)))) {
      // rpmalloc's names are rpmalloc, rpfree, rpcalloc...: "rp" alone is a
      // common start, so only those.
      if (std::strcmp(f.prefix, "rp") == 0 &&
          !(starts_with(s, "rpmalloc") || s == "rpfree" || s == "rpcalloc" || s == "rprealloc" ||
            starts_with(s, "rpaligned_")))
        continue;
      if (prefix) *prefix = f.prefix;
      return f.name;
    }
  return "";
}

void read_dynamic_symbols(const ElfView& view, const DynStrings& strings, const SymbolLookup& lookup,
                          uint64_t strtab, HeapFacts& h) {
  try {
    if (lookup.syment == 0) return;
    // The hash tables count only the symbols they index: an executable that
    // exports nothing (symoffset 1 on arm64) hides its imports from them.
    // .dynsym's size says, where sections may be read; else the table
    // before DT_STRTAB, where it lies just before (as ld lays them out).
    uint64_t count = dynamic_symbol_count(view, lookup);
    ElfView::SectionSearch dynsym = view.find_section(".dynsym");
    if (dynsym.found)
      count = std::max(count, dynsym.size / lookup.syment);
    else if (strtab > lookup.symtab)
      count = std::max(count, std::min<uint64_t>((strtab - lookup.symtab) / lookup.syment, kMaxListEntries));
    count = std::min<uint64_t>(count, kMaxChunk / lookup.syment);
    if (count == 0) return;
    Elf_Data* d = view.table_at(lookup.symtab, count * lookup.syment, ELF_T_SYM, "DT_SYMTAB");
    for (uint64_t i = 1; i < count; ++i) {
      GElf_Sym sym;
      if (!gelf_getsym(d, static_cast<int>(i), &sym)) break;
      note_symbol(strings.at(sym.st_name, "DT_SYMTAB"), sym, false, h);
    }
  } catch (const FileError&) {
    // Partial facts: the loader-facing ones are read elsewhere.
  }
}

void read_heap_facts(const ElfView& view, const ElfInfo& info, HeapFacts& h) {
  try {
    read_static_symbols(view, h);
    bool carries_allocator = info.defines_malloc || h.malloc_in_symtab || !h.defines.empty();
    if (info.is_program() || carries_allocator) scan_strings(view, h);
  } catch (const FileError&) {
  }
}

}  // namespace memprofile
