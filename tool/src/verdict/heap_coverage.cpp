#include "verdict/heap_coverage.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <set>

namespace memprofile {

namespace {

std::string joined(const std::vector<std::string>& names, size_t most = 4) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < most; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > most) out += ", +" + std::to_string(names.size() - most) + " more";
  return out;
}

// The allocator an object carries, by the entry points it defines or the
// strings of one linked in: "jemalloc", "tcmalloc"... or "".
std::string carried_allocator(const ElfInfo& e, std::string* prefix) {
  // jemalloc's API names are exported by others too (gperftools' tcmalloc
  // has nallocx and sdallocx): an allocator's own prefix decides first.
  for (const char* want : {"tcmalloc", "mimalloc", "snmalloc", "rpmalloc", "tbbmalloc", "jemalloc"})
    for (const auto& name : e.heap.defines) {
      std::string p;
      if (allocator_of(name, &p) == want) {
        *prefix = p;
        return want;
      }
    }
  if (!e.heap.jemalloc_conf_env.empty()) {
    const std::string& env = e.heap.jemalloc_conf_env;
    std::string upper = env.substr(0, env.size() - std::string("MALLOC_CONF").size());
    std::string lower;
    for (char c : upper) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    *prefix = lower;
    return "jemalloc";
  }
  if (e.heap.tcmalloc_heap_profiler) return "tcmalloc";
  if (!e.heap.carried_by_strings.empty()) {
    prefix->clear();
    return e.heap.carried_by_strings;
  }
  return "";
}

// Whether a loaded object other than the preload defines `name`: a weak
// reference to it is then a call.
bool loaded_defines(const FileVerdict& r, const std::string& name) {
  auto has = [&](const ElfInfo& e) {
    return std::find(e.heap.defines.begin(), e.heap.defines.end(), name) != e.heap.defines.end();
  };
  if (has(*r.elf)) return true;
  if (r.load)
    for (const auto& o : r.load->objects)
      if (o.elf && !o.preload && has(*o.elf)) return true;
  return false;
}

// The library C++'s operator new binds to, where it is an allocator's own
// (libjemalloc, libtcmalloc, libmimalloc export new ahead of libstdc++,
// whose new calls malloc): "" when new goes through malloc or the preload
// takes it. The loader looks in the program, the preload, then the
// libraries in load order.
std::string operator_new_outside(const FileVerdict& r) {
  if (!r.load || r.elf->heap.defines_operator_new) return "";
  // Only where C++ code calls new (the program, or a library it loads).
  bool news = r.elf->heap.calls_operator_new;
  for (const auto& o : r.load->objects) news = news || (o.elf && !o.preload && o.elf->heap.calls_operator_new);
  if (!news) return "";
  for (const auto& o : r.load->objects) {
    if (!o.elf || !o.elf->heap.defines_operator_new) continue;
    if (o.preload) return "";
    const HeapFacts& h = o.elf->heap;
    bool allocator = o.elf->defines_malloc || !h.defines.empty();
    return allocator ? o.path : "";
  }
  return "";
}

// How to see the heap of a program that carries `family`.
std::string fix_for(const std::string& family, const ElfInfo& e, bool preload_is_jemalloc) {
  if (family == "jemalloc" && e.heap.jemalloc_prof)
    return "its jemalloc has profiling built in: run it with memprofile exec --backend jemalloc, which drives that "
           "jemalloc through " + e.heap.jemalloc_conf_env + (preload_is_jemalloc ? " (this preload does not)" : "");
  if (family == "tcmalloc" && e.heap.tcmalloc_heap_profiler)
    return "tcmalloc's own heap profiler is in it: run it with HEAPPROFILE=DIR/heap (gperftools' pprof reads the "
           "dumps), or build the profiling image against glibc's malloc";
  std::string what = family.empty() ? "the statically linked allocator" : family;
  return "build the profiling image without " + what +
         " (link glibc's malloc; for Rust, put #[global_allocator] behind a cargo feature the profiling build leaves "
         "off)";
}

bool preload_defines(const ElfInfo& preload, const std::string& name) {
  const auto& d = preload.heap.defines;
  return std::find(d.begin(), d.end(), name) != d.end();
}

Finding managed_finding(const std::string& runtime, const std::string& path) {
  if (runtime == "jvm")
    return make_finding("HEAP_MANAGED_JVM", path + " runs a JVM: the Java heap is the JVM's own (mmap), so the "
                                                   "profile shows the JVM's native heap only (malloc: threads, "
                                                   "code cache, direct buffers, JNI)");
  if (runtime == "node")
    return make_finding("HEAP_MANAGED_V8", path + " runs V8 (node): JavaScript objects live in V8's own heap "
                                                  "(mmap), so the profile shows node's native heap only (Buffers, "
                                                  "addons, libuv)");
  return make_finding("HEAP_MANAGED_DOTNET", path + " runs .NET: managed objects live in the GC's own heap "
                                                    "(mmap), so the profile shows the runtime's native heap only");
}

}  // namespace

std::optional<OwnJemalloc> own_jemalloc(const ElfInfo& program) {
  const HeapFacts& h = program.heap;
  if (h.jemalloc_conf_env.empty() || !h.jemalloc_prof) return std::nullopt;
  OwnJemalloc own{h.jemalloc_conf_env, h.mallctl_export, "", false};
  if (own.mallctl.empty()) {
    // The variable's prefix is its API's: _RJEM_MALLOC_CONF, _rjem_mallctl.
    std::string prefix = own.conf_env.substr(0, own.conf_env.size() - std::strlen("MALLOC_CONF"));
    for (char& c : prefix) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    own.symbol = h.mallctl_symtab.empty() ? prefix + "mallctl" : h.mallctl_symtab;
    own.in_symtab = !h.mallctl_symtab.empty();
  }
  return own;
}

std::string OwnJemalloc::reach() const {
  if (!mallctl.empty()) return "snapshot, start and stop reach it through " + mallctl;
  if (in_symtab)
    return "its " + symbol + " is not exported: the control library finds it in the program's symbol table, and "
           "snapshot, start and stop reach it there";
  return "the program is stripped and does not export its " + symbol + ": snapshot, start and stop reach it only "
         "where its debug file is installed (found by build-id or debuglink); without one it dumps every 1 GiB "
         "allocated (exec --dump-every-mb sets it) and at exit";
}

std::optional<OwnTcmalloc> own_tcmalloc(const ElfInfo& program) {
  const HeapFacts& h = program.heap;
  bool defines_malloc = program.defines_malloc || h.malloc_in_symtab;
  if (!defines_malloc || !h.tcmalloc_heap_profiler || own_jemalloc(program)) return std::nullopt;
  std::string prefix;
  if (carried_allocator(program, &prefix) != "tcmalloc") return std::nullopt;
  return OwnTcmalloc{h.heap_profiler_dump_export};
}

std::string managed_runtime(const ElfInfo& e, const std::optional<LoadResult>& load) {
  auto runtime_of = [](const HeapFacts& h) {
    return h.runtime == "cpython" && h.cpython_free_threaded ? "cpython-free-threaded" : h.runtime;
  };
  if (!e.heap.runtime.empty()) return runtime_of(e.heap);
  if (e.heap.dotnet_host) return "dotnet";
  if (load)
    for (const auto& o : load->objects)
      if (o.elf && !o.preload && !o.elf->heap.runtime.empty()) return runtime_of(o.elf->heap);
  for (const auto& n : e.needed) {
    if (n.rfind("libjvm.so", 0) == 0 || n.rfind("libjli.so", 0) == 0) return "jvm";
    if (n.rfind("libnode.so", 0) == 0) return "node";
    // libpython3.13t.so: the free-threaded build's library.
    if (n.rfind("libpython3", 0) == 0)
      return n.find("t.so") != std::string::npos ? "cpython-free-threaded" : "cpython";
    if (n.rfind("libcoreclr.so", 0) == 0 || n.rfind("libhostfxr.so", 0) == 0) return "dotnet";
  }
  return "";
}

std::vector<Finding> heap_coverage(const FileVerdict& r, const ElfInfo& preload, const std::string& preload_name) {
  std::vector<Finding> out;
  const ElfInfo& e = *r.elf;
  if (e.linkage != Linkage::Dynamic) return out;  // STATIC_*: no preload at all
  const bool preload_is_jemalloc = preload_defines(preload, "mallctl");
  std::string prefix;
  const std::string family = carried_allocator(e, &prefix);
  const bool own_malloc = e.defines_malloc || e.heap.malloc_in_symtab;
  const std::string runtime = managed_runtime(e, r.load);
  // CPython 3.13 carries mimalloc as an object allocator of its own, chosen
  // by PYTHONMALLOC (the free-threaded build's default): the CPython
  // finding below says what the profile sees of it.
  const bool cpython_mimalloc = runtime.rfind("cpython", 0) == 0 && family == "mimalloc";

  // 1. The program carries its own allocator.
  if (auto own = own_jemalloc(e); own && preload_is_jemalloc) {
    std::string reach = "; " + own->reach();
    out.push_back(make_finding("HEAP_OWN_JEMALLOC", r.path + " carries its own jemalloc" +
                                                        (prefix.empty() ? "" : " (prefix " + prefix + ")") +
                                                        " with profiling built in: memprofile exec drives it through " +
                                                        own->conf_env + " in place of the preloaded jemalloc" + reach));
  } else if (auto tc = own_tcmalloc(e)) {
    out.push_back(make_finding(
        "HEAP_OWN_TCMALLOC",
        r.path + " carries gperftools' tcmalloc with its heap profiler: memprofile exec drives that profiler "
                 "(HEAPPROFILE) in place of " + preload_name + ", whose malloc the program's own would bypass" +
            (tc->dump_export ? "; snapshot reaches it through HeapProfilerDump"
                             : "; it exports no HeapProfilerDump, so snapshot cannot reach it: it dumps every 1 GiB "
                               "allocated, every 100 MiB of growth and at exit")));
  } else if (own_malloc) {
    out.push_back(make_finding(
        "HEAP_OWN_MALLOC",
        r.path + " defines malloc itself (" + (family.empty() ? "an allocator" : family) +
            " linked in statically): the program comes before LD_PRELOAD in symbol lookup, so " + preload_name +
            "'s malloc is never called and the profile will not show this program's heap",
        fix_for(family, e, preload_is_jemalloc)));
  } else if (!family.empty() && !cpython_mimalloc) {
    std::vector<std::string> names;
    for (const auto& n : e.heap.defines)
      if (allocator_of(n) == family && n.rfind(prefix, 0) == 0) names.push_back(n);
    // The public names first: they are the short ones (_rjem_malloc, not
    // _rjem_je_malloc_default).
    std::stable_sort(names.begin(), names.end(),
                     [](const std::string& a, const std::string& b) { return a.size() < b.size(); });
    out.push_back(make_finding(
        "HEAP_OWN_ALLOCATOR",
        r.path + " carries " + family + (prefix.empty() ? "" : " with the prefix " + prefix) +
            (names.empty() ? "" : " (" + joined(names) + ")") +
            " and allocates through it, not malloc: no preload interposes those names, so the profile will not "
            "show what it allocates there",
        fix_for(family, e, preload_is_jemalloc)));
  }

  // 2. Code that calls an allocator's own entry points, which the preload
  // does not define (the preloaded jemalloc defines jemalloc's API, so a
  // call to mallocx from libjemalloc.so.2 is seen with it).
  std::vector<std::pair<std::string, const ElfInfo*>> callers = {{r.path, &e}};
  if (r.load)
    for (const auto& o : r.load->objects)
      if (o.elf && !o.preload && !o.path.empty() && o.path != r.canonical) callers.push_back({o.path, o.elf.get()});
  std::set<std::string> said;
  for (const auto& [path, elf] : callers) {
    std::vector<std::string> missed;
    std::string called;
    auto miss = [&](const std::string& n) {
      if (preload_defines(preload, n)) return;
      missed.push_back(n);
      if (called.empty()) called = allocator_of(n);
    };
    for (const auto& n : elf->heap.imports) miss(n);
    for (const auto& n : elf->heap.weak_imports)
      if (loaded_defines(r, n)) miss(n);
    if (missed.empty() || !said.insert(called).second) continue;
    out.push_back(make_finding(
        "HEAP_OWN_ALLOCATOR",
        (path == r.path ? r.path : path + " (loaded by " + r.path + ")") + " calls " + called +
            "'s own entry points (" + joined(missed) + ") in place of malloc: " + preload_name +
            " does not interpose them, so the profile will not show what is allocated through them",
        fix_for(called, e, preload_is_jemalloc)));
  }

  // C++'s new taken by an allocator library before libstdc++'s.
  if (std::string lib = operator_new_outside(r); !lib.empty())
    out.push_back(make_finding(
        "HEAP_OWN_ALLOCATOR",
        r.path + "'s C++ operator new binds to " + lib + ", an allocator's own, ahead of libstdc++'s (which calls "
                 "malloc): every `new` goes to that allocator, which " + preload_name + " does not interpose, so the "
                 "profile will not show them",
        "link the allocator library after libstdc++ in the profiling build (-lstdc++ first), or leave it out"));

  // 3. A managed runtime: the native heap only, or (CPython) pymalloc.
  if (runtime == "cpython")
    out.push_back(make_finding("HEAP_PYMALLOC",
                               r.path + " runs CPython: pymalloc keeps small objects in arenas of its own (mmap), " +
                                   (cpython_mimalloc ? "as does the mimalloc it carries (PYTHONMALLOC=mimalloc), " : "") +
                                   "which a preload profiler does not see; memprofile exec sets "
                                   "PYTHONMALLOC=malloc for it, so every object goes through malloc"));
  else if (runtime == "cpython-free-threaded")
    out.push_back(make_finding("HEAP_MANAGED_CPYTHON",
                               r.path + " runs free-threaded CPython: Python objects live in the heaps of the "
                                        "mimalloc it carries, and that build does not take PYTHONMALLOC=malloc, so "
                                        "the profile shows only what C extensions and the runtime malloc"));
  else if (!runtime.empty())
    out.push_back(managed_finding(runtime, r.path));
  return out;
}

}  // namespace memprofile
