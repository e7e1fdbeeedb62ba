// What memprofile knows about one ELF file: the facts a dynamic loader acts on
// (program headers, the dynamic segment, symbol versions), read from the file
// and normalised through libelf's GElf_* types. Nothing here runs the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace memprofile {

enum class Linkage {
  Dynamic,        // has PT_INTERP: the kernel starts the named loader
  Static,         // no PT_DYNAMIC at all
  StaticPie,      // PT_DYNAMIC but no PT_INTERP and no DT_NEEDED (self-relocating)
  SharedLibrary,  // PT_DYNAMIC, no PT_INTERP, loaded by someone else
  Relocatable,    // ET_REL object file: not loadable
  Core,           // ET_CORE
};

enum class Libc { Glibc, Musl, None, Unknown };

const char* to_string(Linkage);
const char* to_string(Libc);

struct VersionNeed {
  std::string file;                   // vn_file, e.g. "libc.so.6"
  std::vector<std::string> versions;  // vna_name, e.g. "GLIBC_2.34"
};

// Where the heap of the code in one object goes besides glibc's malloc, as
// its symbols and strings say (allocators.cpp). Names only of the entry
// points memprofile knows (allocator_of), at most kMaxHeapNames of each.
struct HeapFacts {
  std::vector<std::string> imports;  // called from another object: "mi_malloc_aligned", "je_malloc"
  std::vector<std::string> defines;  // defined here, in the dynamic or the static symbol table
  std::vector<std::string> weak_imports;  // called where some library defines them (abseil's weak sdallocx)
  bool defines_operator_new = false;      // exports C++'s operator new or new[] (_Znwm, _Znam...)
  bool calls_operator_new = false;        // imports it: C++ code that news
  // An allocator linked in whose names are gone (stripped), by its messages
  // among the strings: "jemalloc", "mimalloc", or "".
  std::string carried_by_strings;
  bool malloc_in_symtab = false;     // malloc defined in .symtab (exported or not)
  bool symtab = false;               // a static symbol table was read
  // An embedded jemalloc: the variable it reads its settings from
  // ("MALLOC_CONF", "_RJEM_MALLOC_CONF"), and whether profiling is built in.
  std::string jemalloc_conf_env;
  bool jemalloc_prof = false;
  bool tcmalloc_heap_profiler = false;  // gperftools' heap profiler is linked in (HeapProfilerStart defined)
  bool heap_profiler_dump_export = false;  // ...and HeapProfilerDump is in the dynamic symbols: callable by name
  bool dotnet_host = false;             // names libhostfxr.so: .NET's host
  // A managed runtime this object is (by the entry points it defines):
  // "cpython", "jvm", "node", "dotnet", or "".
  std::string runtime;
  // CPython built without the GIL (3.13t): its objects live in mimalloc's
  // heaps, and PYTHONMALLOC=malloc is not supported there. Known by the
  // entry points only that build exports (_Py_MergeZeroLocalRefcount).
  bool cpython_free_threaded = false;
  std::string mallctl_export;  // a jemalloc mallctl in the dynamic symbols ("je_mallctl"): callable by name
  std::string mallctl_symtab;  // one in .symtab alone ("_rjem_mallctl"): the control library finds it there
  // The processes the heap lives in: the program calls fork() itself (its
  // children run its code, and its preload's fork handlers); a heaptrack
  // built with memprofile's fork fix exports memprofile_heaptrack_fork_safe
  // (preload/heaptrack/fork-lock.patch), a bytehound memprofile_bytehound_fork_safe
  // (preload/bytehound/fork-child.patch).
  bool calls_fork = false;
  bool heaptrack_fork_safe = false;
  bool bytehound_fork_safe = false;
};
constexpr size_t kMaxHeapNames = 64;

// The allocator a symbol is an entry point of ("jemalloc", "mimalloc",
// "tcmalloc", "snmalloc", "rpmalloc", "tbbmalloc"), or "" for none; for
// jemalloc, *prefix gets its prefix ("je_", "_rjem_", "" unprefixed). By
// pattern: jemalloc's own API names (mallocx, sdallocx, mallctl...) after any
// prefix, and each other allocator's prefix before an allocation verb.
std::string allocator_of(const std::string& symbol, std::string* prefix = nullptr);

struct ElfInfo {
  int elf_class = 0;  // 32 or 64
  bool little_endian = true;
  uint16_t machine = 0;  // EM_*
  uint16_t type = 0;     // ET_*
  Linkage linkage = Linkage::Static;

  std::string interpreter;  // PT_INTERP, empty when absent
  bool has_dynamic = false;
  std::string soname;
  std::vector<std::string> needed;
  std::string rpath;    // raw DT_RPATH (colon separated), empty when absent
  std::string runpath;  // raw DT_RUNPATH
  bool nodeflib = false;  // DF_1_NODEFLIB: skip the cache and default dirs
  std::vector<VersionNeed> verneed;
  std::vector<std::string> verdef;  // version names this object defines

  bool gnu_abi_tag = false;  // NT_GNU_ABI_TAG note: glibc's crt files leave it
  bool go = false;
  std::string go_version;  // "go1.19.8" when the build info is readable

  // Dynamic symbols this object defines (only the ones memprofile asks about).
  bool defines_malloc = false;
  bool defines_free = false;
  HeapFacts heap;

  Libc libc() const;
  // Highest GLIBC_x.y required through VERNEED, "" when none.
  std::string glibc_required() const;
  bool is_64() const { return elf_class == 64; }
  // A program the kernel can start: dynamic, static or static-pie (not a
  // shared library, an object file or something else).
  bool is_program() const {
    return linkage == Linkage::Dynamic || linkage == Linkage::Static || linkage == Linkage::StaticPie;
  }
};

// "x86_64", "aarch64", ... or "machine-<n>".
std::string machine_name(uint16_t machine);
// Debian multiarch triplet for the machine, "" when unknown.
std::string multiarch_triplet(uint16_t machine, int elf_class);
const char* elf_type_name(uint16_t type);

// Compares "GLIBC_2.34"-style version suffixes numerically: <0, 0, >0.
int compare_glibc_versions(const std::string& a, const std::string& b);

// Reads an ELF file from an open descriptor. `name` is used in error
// messages. Throws FileError when the file is not ELF or is malformed.
ElfInfo read_elf_fd(int fd, const std::string& name);
// The same over bytes already in memory (archives, fuzzing). The buffer may be
// a prefix of the file: facts outside it are reported as unreadable.
ElfInfo read_elf_memory(const void* data, size_t size, const std::string& name);

// Reads a writable buffer in place, without copying it (a sparse image of a
// file streamed from an archive: only some ranges are real, the rest zeros).
// With use_sections false, section headers are not consulted at all.
ElfInfo read_elf_buffer(char* data, size_t size, const std::string& name, bool use_sections);

bool has_elf_magic(const void* data, size_t size);

}  // namespace memprofile
