// The analyses over a checked view (elf_view.h), private to elf/, one file
// each. elf_info.cpp runs them in the order the facts depend on each other.
#pragma once

#include <gelf.h>

#include <cstdint>
#include <optional>

#include "elf/elf_info.h"
#include "elf/elf_view.h"

namespace memprofile {

// dynamic.cpp: the dynamic segment `dynamic` (the first PT_DYNAMIC, as ld.so
// takes it): needed libraries, SONAME, search paths, DF_1_NODEFLIB, the
// version tables and whether malloc and free are defined. Returns whether
// DF_1_PIE is set, which classification needs and ElfInfo does not keep.
bool read_dynamic(const ElfView& view, const GElf_Phdr& dynamic, ElfInfo& info);

// symbols.cpp: where the dynamic symbols are and the hash tables that index
// them, all virtual addresses from dynamic tags.
struct SymbolLookup {
  uint64_t symtab, syment;
  std::optional<uint64_t> gnu_hash, sysv_hash;
};
// Whether the object defines `name` as a global or weak function, found the
// way ld.so finds it: through DT_GNU_HASH when present, else DT_HASH.
bool defines_function(const ElfView& view, const DynStrings& strings, const SymbolLookup& lookup,
                      const char* name);

// allocators.cpp: every dynamic symbol, for the allocator entry points the
// object imports or defines (info.heap); `strtab` is DT_STRTAB's address
// (0 when absent). Never the file's error.
void read_dynamic_symbols(const ElfView& view, const DynStrings& strings, const SymbolLookup& lookup,
                          uint64_t strtab, HeapFacts& heap);
// allocators.cpp: the static symbol table and the read-only strings (an
// embedded jemalloc's variable and profiler, tcmalloc's heap profiler),
// once the file is classified; never the file's error.
void read_heap_facts(const ElfView& view, const ElfInfo& info, HeapFacts& heap);

// go_buildinfo.cpp: Go's build info; sets info.go when it is there and
// info.go_version when its version string is readable. Never the file's error.
void read_go_buildinfo(const ElfView& view, ElfInfo& info);

}  // namespace memprofile
