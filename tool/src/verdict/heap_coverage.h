// Attached is not seeing: whether the heap of a program a preload profiler
// attaches to goes through the malloc it interposes. A program that carries
// its own malloc comes before LD_PRELOAD in symbol lookup; one that calls
// an allocator's own entry points (mi_malloc, _rjem_mallocx) never calls
// malloc; a managed runtime keeps its objects in heaps of its own. Each is
// a finding (docs/findings.md, "Heap coverage"), judged from the files alone.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "elf/elf_info.h"
#include "verdict/checker.h"
#include "verdict/findings.h"

namespace memprofile {

// A jemalloc linked into the program with its profiler built in, which
// `memprofile exec --backend jemalloc` drives in place of the preloaded one.
struct OwnJemalloc {
  std::string conf_env;  // the variable it reads: "MALLOC_CONF", "_RJEM_MALLOC_CONF"
  std::string mallctl;   // its mallctl as the dynamic symbols export it, "" when they do not
  // Its mallctl's name where it is not exported ("mallctl", "_rjem_mallctl",
  // from the variable's prefix): the control library looks for it in the
  // program's symbol table, or its debug file's. `in_symtab`: the file's own
  // .symtab names it (false: stripped, reached only through a debug file).
  std::string symbol;
  bool in_symtab = false;
  // One line on how start, stop and snapshot reach it.
  std::string reach() const;
};
// The program's own profiling jemalloc, or nullopt (none, or built without
// profiling).
std::optional<OwnJemalloc> own_jemalloc(const ElfInfo& program);

// gperftools' tcmalloc linked into the program, with its heap profiler
// (HEAPPROFILE): what memprofile exec drives in place of a preload that the
// program's own malloc would bypass.
struct OwnTcmalloc {
  bool dump_export = false;  // HeapProfilerDump exported: snapshot reaches it
};
std::optional<OwnTcmalloc> own_tcmalloc(const ElfInfo& program);

// The managed runtime the program is ("cpython", "cpython-free-threaded", "jvm", "node", "dotnet",
// or ""): it, or a library it needs (`load`, when its load was simulated),
// defines the runtime's entry points. CPython's pymalloc keeps small
// objects out of malloc unless PYTHONMALLOC=malloc.
std::string managed_runtime(const ElfInfo& program, const std::optional<LoadResult>& load);

// The heap coverage findings for the program `r` (with its simulated load
// when a root was given) under the preload library `preload` (its facts).
std::vector<Finding> heap_coverage(const FileVerdict& r, const ElfInfo& preload, const std::string& preload_name);

}  // namespace memprofile
