// The dynamic segment, read the way ld.so reads it (elf/get-dynamic-info.h):
// the tags first, then the tables they point at, through the checked view.
#include <elf.h>
#include <gelf.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "elf/analyses.h"

namespace memprofile {

namespace {

// DT_VERNEED and DT_VERDEF are the same shape: a chain of entries linked by
// byte offsets (vn_next, vd_next) through a table the dynamic segment gives
// no size for, each entry with its own chain of auxiliary entries. One
// walker follows the outer chain for both, so both get the same bounds.
template <typename Entry>
struct VersionChain {
  const char* tag;    // "DT_VERNEED", for table errors
  Elf_Type type;      // how libelf converts the table
  const char* entry;  // "version-needed", for entry errors
  Entry* (*get)(Elf_Data*, int, Entry*);
  GElf_Word Entry::*next;
};

const VersionChain<GElf_Verneed> kVerneed{"DT_VERNEED", ELF_T_VNEED, "version-needed", gelf_getverneed,
                                          &GElf_Verneed::vn_next};
const VersionChain<GElf_Verdef> kVerdef{"DT_VERDEF", ELF_T_VDEF, "version-definition", gelf_getverdef,
                                        &GElf_Verdef::vd_next};

// Calls visit(table, offset, entry) for each entry of the chain at `vaddr`.
// `declared` is DT_VERNEEDNUM or DT_VERDEFNUM (0 when absent): the walk stops
// there or at kMaxListEntries, whichever is first, or where the chain ends.
template <typename Entry, typename Visit>
void walk_version_chain(const ElfView& view, const VersionChain<Entry>& chain, uint64_t vaddr, uint64_t declared,
                        Visit visit) {
  Elf_Data* d = view.table_at(vaddr, 0, chain.type, chain.tag);
  uint64_t limit = declared ? std::min<uint64_t>(declared, kMaxListEntries) : kMaxListEntries;
  size_t off = 0;
  for (uint64_t i = 0; i < limit; ++i) {
    Entry e;
    if (!chain.get(d, static_cast<int>(off), &e))
      view.fail(std::string("truncated ") + chain.entry + " entry " + std::to_string(i));
    visit(d, off, e);
    if (e.*chain.next == 0) break;
    off += e.*chain.next;
    if (off > d->d_size) view.fail(std::string(chain.entry) + " chain leaves its table");
  }
}

void read_verneed(const ElfView& view, const DynStrings& strings, uint64_t vaddr, uint64_t declared,
                  ElfInfo& info) {
  uint64_t vernaux_seen = 0;  // version requirements read, over all entries
  walk_version_chain(view, kVerneed, vaddr, declared, [&](Elf_Data* d, size_t off, const GElf_Verneed& vn) {
    VersionNeed need;
    need.file = strings.at(vn.vn_file, "DT_VERNEED");
    size_t aux = off + vn.vn_aux;
    for (unsigned j = 0; j < vn.vn_cnt && j < kMaxListEntries; ++j) {
      // One budget for all entries together: every verneed may point at
      // the same auxiliary chain, which would cost entries x chain.
      if (++vernaux_seen > kMaxListEntries)
        view.fail("more than " + std::to_string(kMaxListEntries) + " version requirements (DT_VERNEED)");
      GElf_Vernaux va;
      if (aux > d->d_size || !gelf_getvernaux(d, static_cast<int>(aux), &va))
        view.fail("truncated version-needed auxiliary entry for " + need.file);
      need.versions.push_back(strings.at(va.vna_name, "DT_VERNEED"));
      if (va.vna_next == 0) break;
      aux += va.vna_next;
    }
    info.verneed.push_back(std::move(need));
  });
}

void read_verdef(const ElfView& view, const DynStrings& strings, uint64_t vaddr, uint64_t declared, ElfInfo& info) {
  walk_version_chain(view, kVerdef, vaddr, declared, [&](Elf_Data* d, size_t off, const GElf_Verdef& vd) {
    // Only the first auxiliary entry names the version; the rest name its
    // parents. The base entry names the file itself, not a version.
    GElf_Verdaux va;
    size_t aux = off + vd.vd_aux;
    if (vd.vd_cnt > 0 && aux <= d->d_size && gelf_getverdaux(d, static_cast<int>(aux), &va) &&
        !(vd.vd_flags & VER_FLG_BASE))
      info.verdef.push_back(strings.at(va.vda_name, "DT_VERDEF"));
  });
}

}  // namespace

bool read_dynamic(const ElfView& view, const GElf_Phdr& ph, ElfInfo& info) {
  if (ph.p_filesz == 0) return false;
  Elf_Data* d = view.chunk(ph.p_offset, ph.p_filesz, ELF_T_DYN, "PT_DYNAMIC");
  size_t entsize = view.entry_size(ELF_T_DYN);
  size_t count = entsize ? d->d_size / entsize : 0;

  // The tags first: a table's address may come before the string table
  // that names its entries.
  std::vector<uint64_t> needed;
  std::optional<uint64_t> soname, rpath, runpath, strtab, strsz, verneed, verdef, symtab, gnu_hash,
      sysv_hash;
  uint64_t verneednum = 0, verdefnum = 0, syment = 0;
  bool pie = false;
  for (size_t i = 0; i < count; ++i) {
    GElf_Dyn dyn;
    if (!gelf_getdyn(d, static_cast<int>(i), &dyn)) break;
    if (dyn.d_tag == DT_NULL) break;
    uint64_t v = dyn.d_un.d_val;
    switch (dyn.d_tag) {
      case DT_NEEDED:
        if (needed.size() >= kMaxListEntries) view.fail("too many DT_NEEDED entries");
        needed.push_back(v);
        break;
      case DT_SONAME: soname = v; break;
      case DT_RPATH: rpath = v; break;
      case DT_RUNPATH: runpath = v; break;
      case DT_STRTAB: strtab = v; break;
      case DT_STRSZ: strsz = v; break;
      case DT_VERNEED: verneed = v; break;
      case DT_VERNEEDNUM: verneednum = v; break;
      case DT_VERDEF: verdef = v; break;
      case DT_VERDEFNUM: verdefnum = v; break;
      case DT_SYMTAB: symtab = v; break;
      case DT_SYMENT: syment = v; break;
      case DT_GNU_HASH: gnu_hash = v; break;
      case DT_HASH: sysv_hash = v; break;
      case DT_FLAGS_1:
        if (v & DF_1_NODEFLIB) info.nodeflib = true;
        if (v & DF_1_PIE) pie = true;
        break;
      default: break;
    }
  }
  DynStrings strings(view);
  if (strtab) strings.set_table(view.table_at(*strtab, strsz.value_or(0), ELF_T_BYTE, "DT_STRTAB", kMaxChunk));

  for (uint64_t n : needed) info.needed.push_back(strings.at(n, "DT_NEEDED"));
  if (soname) info.soname = strings.at(*soname, "DT_SONAME");
  if (rpath) info.rpath = strings.at(*rpath, "DT_RPATH");
  if (runpath) info.runpath = strings.at(*runpath, "DT_RUNPATH");
  if (verneed) read_verneed(view, strings, *verneed, verneednum, info);
  if (verdef) read_verdef(view, strings, *verdef, verdefnum, info);
  if (symtab && (gnu_hash || sysv_hash)) {
    if (syment == 0) syment = view.entry_size(ELF_T_SYM);
    SymbolLookup lookup{*symtab, syment, gnu_hash, sysv_hash};
    info.defines_malloc = defines_function(view, strings, lookup, "malloc");
    info.defines_free = defines_function(view, strings, lookup, "free");
    read_dynamic_symbols(view, strings, lookup, strtab.value_or(0), info.heap);
  }
  return pie;
}

}  // namespace memprofile
