// Dynamic symbol lookup through the object's own hash tables, as ld.so looks
// symbols up (elf/dl-lookup.c): only the words a lookup touches are read,
// never the whole symbol table, whose size no dynamic tag gives.
#include <elf.h>
#include <gelf.h>

#include <algorithm>
#include <string>

#include "elf/analyses.h"

namespace memprofile {

namespace {

class SymbolTable {
 public:
  SymbolTable(const ElfView& view, const DynStrings& strings, const SymbolLookup& lookup)
      : view_(view), strings_(strings), l_(lookup) {}

  bool defines_function(const char* name) {
    if (l_.gnu_hash) return gnu_hash_lookup(name);
    return sysv_hash_lookup(name);
  }

 private:
  bool symbol_matches(uint64_t index, const char* name) {
    if (l_.syment == 0 || index > kMaxChunk / l_.syment) return false;
    Elf_Data* d = view_.table_at(l_.symtab + index * l_.syment, l_.syment, ELF_T_SYM, "DT_SYMTAB");
    GElf_Sym sym;
    if (!gelf_getsym(d, 0, &sym)) return false;
    if (sym.st_shndx == SHN_UNDEF) return false;
    int bind = GELF_ST_BIND(sym.st_info), type = GELF_ST_TYPE(sym.st_info);
    if (bind != STB_GLOBAL && bind != STB_WEAK) return false;
    if (type != STT_FUNC && type != STT_GNU_IFUNC) return false;
    return strings_.at(sym.st_name, "DT_SYMTAB") == name;
  }

  // Reads `count` 32-bit words of a hash table at `vaddr` + `at`.
  const unsigned char* hash_words(uint64_t vaddr, uint64_t at, uint64_t count, const char* tag) {
    if (count > kMaxChunk / 4 || at > kMaxChunk) view_.fail(std::string(tag) + " is implausibly large");
    Elf_Data* d = view_.table_at(vaddr + at, count * 4, ELF_T_BYTE, tag);
    return static_cast<const unsigned char*>(d->d_buf);
  }

  uint32_t word(const unsigned char* p) const { return view_.word(p); }

  // The loader's own lookup (dl-lookup.c) over DT_GNU_HASH, reading only the
  // words it touches.
  bool gnu_hash_lookup(const char* name) {
    const char* tag = "DT_GNU_HASH";
    const unsigned char* hdr = hash_words(*l_.gnu_hash, 0, 4, tag);
    uint32_t nbuckets = word(hdr), symoffset = word(hdr + 4), bloom_size = word(hdr + 8);
    if (nbuckets == 0) return false;
    uint64_t buckets_at = 16 + uint64_t{bloom_size} * (view_.elf_class() / 8);
    uint64_t chains_at = buckets_at + uint64_t{nbuckets} * 4;
    uint32_t h = 5381;
    for (const char* c = name; *c; ++c) h = h * 33 + static_cast<unsigned char>(*c);
    uint32_t idx = word(hash_words(*l_.gnu_hash, buckets_at + uint64_t{h % nbuckets} * 4, 1, tag));
    if (idx == 0 || idx < symoffset) return false;
    // A chain has one word per symbol and every word is in the file: a walk
    // longer than the file has words is reading past a crafted table.
    const uint64_t max_steps = std::min<uint64_t>(view_.size() / 4, kMaxHashChain);
    for (uint64_t guard = 0; guard <= max_steps; ++guard, ++idx) {
      uint32_t chain = word(hash_words(*l_.gnu_hash, chains_at + uint64_t{idx - symoffset} * 4, 1, tag));
      if ((chain | 1) == (h | 1) && symbol_matches(idx, name)) return true;
      if (chain & 1) return false;
    }
    view_.fail(std::string(tag) + " chain for " + name + " has no end within " + std::to_string(max_steps) +
               " steps");
  }

  bool sysv_hash_lookup(const char* name) {
    const char* tag = "DT_HASH";
    const unsigned char* hdr = hash_words(*l_.sysv_hash, 0, 2, tag);
    uint32_t nbucket = word(hdr), nchain = word(hdr + 4);
    if (nbucket == 0) return false;
    uint32_t h = 0;
    for (const char* c = name; *c; ++c) {
      h = (h << 4) + static_cast<unsigned char>(*c);
      uint32_t g = h & 0xf0000000u;
      if (g) h ^= g >> 24;
      h &= ~g;
    }
    uint32_t i = word(hash_words(*l_.sysv_hash, 8 + uint64_t{h % nbucket} * 4, 1, tag));
    // nchain comes from the file and a crafted chain can loop back on itself
    // (a 472-byte file with nchain 0xffffffff walked 2^32 steps): an honest
    // chain visits each symbol once, and there are no more symbols than the
    // file has 4-byte words, so stop there.
    const uint64_t max_steps = std::min<uint64_t>({uint64_t{nchain}, view_.size() / 4, kMaxHashChain});
    for (uint64_t guard = 0; i != 0 && i < nchain; ++guard) {
      if (guard > max_steps)
        view_.fail(std::string(tag) + " chain for " + name + " loops (longer than " + std::to_string(max_steps) +
                   " steps)");
      if (symbol_matches(i, name)) return true;
      i = word(hash_words(*l_.sysv_hash, 8 + (uint64_t{nbucket} + i) * 4, 1, tag));
    }
    return false;
  }

  const ElfView& view_;
  const DynStrings& strings_;
  const SymbolLookup& l_;
};

}  // namespace

bool defines_function(const ElfView& view, const DynStrings& strings, const SymbolLookup& lookup,
                      const char* name) {
  return SymbolTable(view, strings, lookup).defines_function(name);
}

}  // namespace memprofile
