// ELF reading, in the style of bloaty's src/elf.cc: normalise through libelf's
// GElf_* at the edge, and bounds-check every offset and length the file hands
// us before using it. We read what the dynamic loader reads (program headers
// and the dynamic segment), not section headers, so that stripped or
// section-less files are judged the way ld.so judges them.
#include "elf/elf_info.h"

#include <elf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>

#include "base/error.h"

namespace memprofile {

const char* to_string(Linkage l) {
  switch (l) {
    case Linkage::Dynamic: return "dynamic";
    case Linkage::Static: return "static";
    case Linkage::StaticPie: return "static-pie";
    case Linkage::SharedLibrary: return "shared-library";
    case Linkage::Relocatable: return "relocatable";
    case Linkage::Core: return "core";
  }
  return "unknown";
}

const char* to_string(Libc l) {
  switch (l) {
    case Libc::Glibc: return "glibc";
    case Libc::Musl: return "musl";
    case Libc::None: return "none";
    case Libc::Unknown: return "unknown";
  }
  return "unknown";
}

std::string machine_name(uint16_t machine) {
  switch (machine) {
    case EM_X86_64: return "x86_64";
    case EM_AARCH64: return "aarch64";
    case EM_386: return "i386";
    case EM_ARM: return "arm";
    case EM_RISCV: return "riscv";
    case EM_PPC64: return "ppc64";
    case EM_PPC: return "ppc";
    case EM_S390: return "s390";
    case EM_MIPS: return "mips";
    case EM_LOONGARCH: return "loongarch";
    default: return "machine-" + std::to_string(machine);
  }
}

std::string multiarch_triplet(uint16_t machine, int elf_class) {
  switch (machine) {
    case EM_X86_64: return elf_class == 64 ? "x86_64-linux-gnu" : "x86_64-linux-gnux32";
    case EM_AARCH64: return "aarch64-linux-gnu";
    case EM_386: return "i386-linux-gnu";
    case EM_ARM: return "arm-linux-gnueabihf";
    case EM_RISCV: return elf_class == 64 ? "riscv64-linux-gnu" : "";
    case EM_PPC64: return "powerpc64le-linux-gnu";
    case EM_S390: return "s390x-linux-gnu";
    case EM_MIPS: return elf_class == 64 ? "mips64el-linux-gnuabi64" : "mipsel-linux-gnu";
    case EM_LOONGARCH: return "loongarch64-linux-gnu";
    default: return "";
  }
}

const char* elf_type_name(uint16_t type) {
  switch (type) {
    case ET_NONE: return "ET_NONE";
    case ET_REL: return "ET_REL";
    case ET_EXEC: return "ET_EXEC";
    case ET_DYN: return "ET_DYN";
    case ET_CORE: return "ET_CORE";
    default: return "ET_OTHER";
  }
}

bool has_elf_magic(const void* data, size_t size) {
  return size >= SELFMAG && std::memcmp(data, ELFMAG, SELFMAG) == 0;
}

namespace {

// "GLIBC_2.34" -> {2, 34}; anything unparsable sorts lowest.
std::vector<unsigned long> version_numbers(const std::string& v) {
  std::vector<unsigned long> out;
  size_t i = v.find('_');
  i = (i == std::string::npos) ? 0 : i + 1;
  while (i < v.size()) {
    size_t j = i;
    unsigned long n = 0;
    while (j < v.size() && v[j] >= '0' && v[j] <= '9' && j - i < 9) n = n * 10 + (v[j++] - '0');
    if (j == i) break;
    out.push_back(n);
    if (j >= v.size() || v[j] != '.') break;
    i = j + 1;
  }
  return out;
}

bool is_glibc_version(const std::string& v) {
  return v.rfind("GLIBC_", 0) == 0 && v.size() > 6 && v[6] >= '0' && v[6] <= '9';
}

}  // namespace

int compare_glibc_versions(const std::string& a, const std::string& b) {
  auto x = version_numbers(a), y = version_numbers(b);
  if (x < y) return -1;
  if (y < x) return 1;
  return 0;
}

Libc ElfInfo::libc() const {
  if (!interpreter.empty()) {
    if (interpreter.find("ld-musl-") != std::string::npos) return Libc::Musl;
    return Libc::Glibc;  // ld-linux*.so.*, ld64.so.*, ld.so.1: glibc's names
  }
  for (const auto& n : needed) {
    if (n == "libc.so.6") return Libc::Glibc;
    if (n == "libc.so" || n.rfind("libc.musl-", 0) == 0) return Libc::Musl;
  }
  if (soname == "libc.so.6") return Libc::Glibc;
  if (go) return Libc::None;  // the Go runtime makes its own system calls
  if (gnu_abi_tag) return Libc::Glibc;
  if (has_dynamic) return Libc::None;
  return Libc::Unknown;
}

std::string ElfInfo::glibc_required() const {
  std::string best;
  for (const auto& vn : verneed)
    for (const auto& v : vn.versions)
      if (is_glibc_version(v) && (best.empty() || compare_glibc_versions(v, best) > 0)) best = v;
  return best;
}

namespace {

constexpr size_t kMaxPhdrs = 4096;        // real files have < 20
constexpr size_t kMaxListEntries = 8192;  // DT_NEEDED, versions, chain walks
// Real hash chains are a handful of symbols long; a walk this long means a
// chain that loops back on itself or a table crafted to stall us.
constexpr uint64_t kMaxHashChain = 4096;
constexpr uint64_t kMaxDynString = 4096;  // PATH_MAX
constexpr uint64_t kNotesBudget = 1u << 20;  // bytes of PT_NOTE read per file
constexpr uint64_t kMaxChunk = 64u << 20; // largest single table we read
// Version tables have no size in the dynamic segment; real ones are a few KB.
// Read a window this large rather than the rest of the segment.
constexpr uint64_t kVersionWindow = 256u << 10;

void init_libelf() {
  static std::once_flag once;
  std::call_once(once, [] { elf_version(EV_CURRENT); });
}

struct ElfCloser {
  void operator()(Elf* e) const { elf_end(e); }
};
using ElfPtr = std::unique_ptr<Elf, ElfCloser>;

std::string hex(uint64_t v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

class Reader {
 public:
  Reader(Elf* elf, uint64_t file_size, std::string name, bool use_sections = true)
      : elf_(elf), size_(file_size), name_(std::move(name)), use_sections_(use_sections) {}

  ElfInfo read() {
    if (elf_kind(elf_) != ELF_K_ELF) fail("not an ELF file");
    if (!gelf_getehdr(elf_, &ehdr_)) fail("truncated or invalid ELF header");
    info_.elf_class = ehdr_.e_ident[EI_CLASS] == ELFCLASS64 ? 64 : 32;
    if (ehdr_.e_ident[EI_CLASS] != ELFCLASS32 && ehdr_.e_ident[EI_CLASS] != ELFCLASS64)
      fail("invalid ELF class " + std::to_string(ehdr_.e_ident[EI_CLASS]));
    info_.little_endian = ehdr_.e_ident[EI_DATA] == ELFDATA2LSB;
    info_.machine = ehdr_.e_machine;
    info_.type = ehdr_.e_type;

    read_program_headers();
    const GElf_Phdr* interp = find_phdr(PT_INTERP);
    const GElf_Phdr* dynamic = find_phdr(PT_DYNAMIC);
    if (interp) info_.interpreter = read_interp(*interp);
    for (const auto& ph : phdrs_)
      if (ph.p_type == PT_NOTE) read_notes(ph);
    if (dynamic) {
      info_.has_dynamic = true;
      read_dynamic(*dynamic);
    }
    info_.linkage = classify(interp != nullptr, dynamic != nullptr);
    bool executable = info_.linkage == Linkage::Dynamic || info_.linkage == Linkage::Static ||
                      info_.linkage == Linkage::StaticPie;
    if (info_.go || executable) read_go_buildinfo();
    return std::move(info_);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw FileError(name_, what); }

  std::string libelf_error() const {
    const char* m = elf_errmsg(-1);
    return m ? m : "unknown libelf error";
  }

  void check_range(uint64_t off, uint64_t len, const std::string& what) const {
    if (off > size_ || len > size_ - off)
      fail(what + " at offset " + hex(off) + " (" + std::to_string(len) +
           " bytes) lies past the end of the file (" + std::to_string(size_) + " bytes)");
    if (len > kMaxChunk) fail(what + " is implausibly large (" + std::to_string(len) + " bytes)");
  }

  Elf_Data* chunk(uint64_t off, uint64_t len, Elf_Type type, const std::string& what) {
    check_range(off, len, what);
    Elf_Data* d = elf_getdata_rawchunk(elf_, static_cast<int64_t>(off), len, type);
    if (!d) fail("cannot read " + what + ": " + libelf_error());
    return d;
  }

  void read_program_headers() {
    size_t n = 0;
    if (elf_getphdrnum(elf_, &n) != 0) fail("invalid program header count: " + libelf_error());
    if (n > kMaxPhdrs) fail("absurd program header count " + std::to_string(n));
    uint64_t entsize = gelf_fsize(elf_, ELF_T_PHDR, 1, EV_CURRENT);
    if (n > 0) check_range(ehdr_.e_phoff, n * entsize, "program header table");
    phdrs_.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      GElf_Phdr ph;
      if (!gelf_getphdr(elf_, static_cast<int>(i), &ph))
        fail("cannot read program header " + std::to_string(i) + ": " + libelf_error());
      phdrs_.push_back(ph);
    }
  }

  const GElf_Phdr* find_phdr(uint32_t type) const {
    for (const auto& ph : phdrs_)
      if (ph.p_type == type) return &ph;
    return nullptr;
  }

  std::string read_interp(const GElf_Phdr& ph) {
    if (ph.p_filesz == 0 || ph.p_filesz > 4096) fail("PT_INTERP has invalid size " + std::to_string(ph.p_filesz));
    Elf_Data* d = chunk(ph.p_offset, ph.p_filesz, ELF_T_BYTE, "PT_INTERP");
    const char* s = static_cast<const char*>(d->d_buf);
    const void* nul = std::memchr(s, '\0', d->d_size);
    if (!nul) fail("PT_INTERP string has no terminator");
    return std::string(s, static_cast<const char*>(nul));
  }

  void read_notes(const GElf_Phdr& ph) {
    if (ph.p_filesz == 0) return;
    if (ph.p_offset > size_ || ph.p_filesz > size_ - ph.p_offset) return;  // a torn note is not fatal
    // libelf copies a note segment it must convert; thousands of PT_NOTEs
    // over one large range would copy it each time. Real notes are < 1 KiB.
    if (ph.p_filesz > kNotesBudget - std::min(notes_read_, kNotesBudget)) return;
    notes_read_ += ph.p_filesz;
    Elf_Type t = ph.p_align == 8 ? ELF_T_NHDR8 : ELF_T_NHDR;
    Elf_Data* d = elf_getdata_rawchunk(elf_, static_cast<int64_t>(ph.p_offset), ph.p_filesz, t);
    if (!d) return;
    size_t off = 0, name_off = 0, desc_off = 0;
    GElf_Nhdr nh;
    for (size_t guard = 0; off < d->d_size && guard < kMaxListEntries; ++guard) {
      size_t next = gelf_getnote(d, off, &nh, &name_off, &desc_off);
      if (next == 0 || next <= off) break;
      const char* name = static_cast<const char*>(d->d_buf) + name_off;
      auto named = [&](const char* want) {
        size_t len = std::strlen(want) + 1;
        return nh.n_namesz == len && name_off + len <= d->d_size && std::memcmp(name, want, len) == 0;
      };
      if (named("GNU") && nh.n_type == NT_GNU_ABI_TAG) info_.gnu_abi_tag = true;
      if (named("Go") && nh.n_type == 4) info_.go = true;  // ELF_NOTE_GOBUILDID_TAG
      off = next;
    }
  }

  // Maps a virtual address to a file offset through PT_LOAD, also returning
  // how many bytes of file data follow it inside that segment.
  bool vaddr_to_offset(uint64_t vaddr, uint64_t* off, uint64_t* avail) const {
    for (const auto& ph : phdrs_) {
      if (ph.p_type != PT_LOAD) continue;
      if (vaddr >= ph.p_vaddr && vaddr - ph.p_vaddr < ph.p_filesz) {
        uint64_t delta = vaddr - ph.p_vaddr;
        if (ph.p_offset > size_ || delta > size_ - ph.p_offset) return false;
        *off = ph.p_offset + delta;
        *avail = std::min<uint64_t>(ph.p_filesz - delta, size_ - *off);
        return true;
      }
    }
    return false;
  }

  // A table addressed by a dynamic tag: `want` bytes (0: up to `window`
  // bytes, as many as the segment holds), or a clear error.
  Elf_Data* table_at(uint64_t vaddr, uint64_t want, Elf_Type type, const char* tag, uint64_t window = kVersionWindow) {
    uint64_t off = 0, avail = 0;
    if (!vaddr_to_offset(vaddr, &off, &avail))
      fail(std::string(tag) + " address " + hex(vaddr) + " is not inside any loadable segment");
    uint64_t len = want ? want : std::min<uint64_t>(avail, window);
    if (want && want > avail)
      fail(std::string(tag) + " table (" + std::to_string(want) + " bytes at " + hex(vaddr) +
           ") runs past the end of its segment");
    return chunk(off, len, type, tag);
  }

  std::string dynstr(uint64_t index, const char* what) const {
    if (!strtab_) fail(std::string(what) + " present but DT_STRTAB missing");
    if (index >= strtab_->d_size)
      fail(std::string(what) + " string offset " + std::to_string(index) + " is outside the string table (" +
           std::to_string(strtab_->d_size) + " bytes)");
    const char* base = static_cast<const char*>(strtab_->d_buf) + index;
    // Names and paths are at most PATH_MAX long; scanning further would let
    // many entries that share one long string cost entries x its length.
    const void* nul = std::memchr(base, '\0', std::min<uint64_t>(strtab_->d_size - index, kMaxDynString + 1));
    if (!nul)
      fail(std::string("string table has no terminator within ") + std::to_string(kMaxDynString) +
           " bytes (PATH_MAX) after offset " + std::to_string(index) + " (" + what + ")");
    return std::string(base, static_cast<const char*>(nul));
  }

  void read_dynamic(const GElf_Phdr& ph) {
    if (ph.p_filesz == 0) return;
    Elf_Data* d = chunk(ph.p_offset, ph.p_filesz, ELF_T_DYN, "PT_DYNAMIC");
    size_t entsize = gelf_fsize(elf_, ELF_T_DYN, 1, EV_CURRENT);
    size_t count = entsize ? d->d_size / entsize : 0;

    std::vector<uint64_t> needed;
    std::optional<uint64_t> soname, rpath, runpath, strtab, strsz, verneed, verdef, symtab, gnu_hash,
        sysv_hash;
    uint64_t verneednum = 0, verdefnum = 0, syment = 0;
    for (size_t i = 0; i < count; ++i) {
      GElf_Dyn dyn;
      if (!gelf_getdyn(d, static_cast<int>(i), &dyn)) break;
      if (dyn.d_tag == DT_NULL) break;
      uint64_t v = dyn.d_un.d_val;
      switch (dyn.d_tag) {
        case DT_NEEDED:
          if (needed.size() >= kMaxListEntries) fail("too many DT_NEEDED entries");
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
          if (v & DF_1_NODEFLIB) info_.nodeflib = true;
          if (v & DF_1_PIE) pie_flag_ = true;
          break;
        default: break;
      }
    }
    if (strtab) strtab_ = table_at(*strtab, strsz.value_or(0), ELF_T_BYTE, "DT_STRTAB", kMaxChunk);

    for (uint64_t n : needed) info_.needed.push_back(dynstr(n, "DT_NEEDED"));
    if (soname) info_.soname = dynstr(*soname, "DT_SONAME");
    if (rpath) info_.rpath = dynstr(*rpath, "DT_RPATH");
    if (runpath) info_.runpath = dynstr(*runpath, "DT_RUNPATH");
    if (verneed) read_verneed(*verneed, verneednum);
    if (verdef) read_verdef(*verdef, verdefnum);
    if (symtab && (gnu_hash || sysv_hash)) {
      if (syment == 0) syment = gelf_fsize(elf_, ELF_T_SYM, 1, EV_CURRENT);
      SymbolLookup lookup{*symtab, syment, gnu_hash, sysv_hash};
      info_.defines_malloc = defines_function(lookup, "malloc");
      info_.defines_free = defines_function(lookup, "free");
    }
  }

  void read_verneed(uint64_t vaddr, uint64_t declared) {
    Elf_Data* d = table_at(vaddr, 0, ELF_T_VNEED, "DT_VERNEED");
    uint64_t limit = declared ? std::min<uint64_t>(declared, kMaxListEntries) : kMaxListEntries;
    size_t off = 0;
    for (uint64_t i = 0; i < limit; ++i) {
      GElf_Verneed vn;
      if (!gelf_getverneed(d, static_cast<int>(off), &vn)) fail("truncated version-needed entry " + std::to_string(i));
      VersionNeed need;
      need.file = dynstr(vn.vn_file, "DT_VERNEED");
      size_t aux = off + vn.vn_aux;
      for (unsigned j = 0; j < vn.vn_cnt && j < kMaxListEntries; ++j) {
        // One budget for all entries together: every verneed may point at
        // the same auxiliary chain, which would cost entries x chain.
        if (++vernaux_seen_ > kMaxListEntries)
          fail("more than " + std::to_string(kMaxListEntries) + " version requirements (DT_VERNEED)");
        GElf_Vernaux va;
        if (aux > d->d_size || !gelf_getvernaux(d, static_cast<int>(aux), &va))
          fail("truncated version-needed auxiliary entry for " + need.file);
        need.versions.push_back(dynstr(va.vna_name, "DT_VERNEED"));
        if (va.vna_next == 0) break;
        aux += va.vna_next;
      }
      info_.verneed.push_back(std::move(need));
      if (vn.vn_next == 0) break;
      off += vn.vn_next;
      if (off > d->d_size) fail("version-needed chain leaves its table");
    }
  }

  void read_verdef(uint64_t vaddr, uint64_t declared) {
    Elf_Data* d = table_at(vaddr, 0, ELF_T_VDEF, "DT_VERDEF");
    uint64_t limit = declared ? std::min<uint64_t>(declared, kMaxListEntries) : kMaxListEntries;
    size_t off = 0;
    for (uint64_t i = 0; i < limit; ++i) {
      GElf_Verdef vd;
      if (!gelf_getverdef(d, static_cast<int>(off), &vd)) fail("truncated version-definition entry " + std::to_string(i));
      GElf_Verdaux va;
      size_t aux = off + vd.vd_aux;
      if (vd.vd_cnt > 0 && aux <= d->d_size && gelf_getverdaux(d, static_cast<int>(aux), &va) &&
          !(vd.vd_flags & VER_FLG_BASE))
        info_.verdef.push_back(dynstr(va.vda_name, "DT_VERDEF"));
      if (vd.vd_next == 0) break;
      off += vd.vd_next;
      if (off > d->d_size) fail("version-definition chain leaves its table");
    }
  }

  struct SymbolLookup {
    uint64_t symtab, syment;
    std::optional<uint64_t> gnu_hash, sysv_hash;
  };

  uint32_t word(const unsigned char* p) const {
    uint32_t v;
    std::memcpy(&v, p, 4);
    bool host_le = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
    return host_le == info_.little_endian ? v : __builtin_bswap32(v);
  }

  bool symbol_matches(const SymbolLookup& l, uint64_t index, const char* name) {
    if (l.syment == 0 || index > kMaxChunk / l.syment) return false;
    Elf_Data* d = table_at(l.symtab + index * l.syment, l.syment, ELF_T_SYM, "DT_SYMTAB");
    GElf_Sym sym;
    if (!gelf_getsym(d, 0, &sym)) return false;
    if (sym.st_shndx == SHN_UNDEF) return false;
    int bind = GELF_ST_BIND(sym.st_info), type = GELF_ST_TYPE(sym.st_info);
    if (bind != STB_GLOBAL && bind != STB_WEAK) return false;
    if (type != STT_FUNC && type != STT_GNU_IFUNC) return false;
    return dynstr(sym.st_name, "DT_SYMTAB") == name;
  }

  bool defines_function(const SymbolLookup& l, const char* name) {
    if (l.gnu_hash) return gnu_hash_lookup(l, name);
    return sysv_hash_lookup(l, name);
  }

  // Reads `count` 32-bit words of a hash table at `vaddr` + `at`.
  const unsigned char* hash_words(uint64_t vaddr, uint64_t at, uint64_t count, const char* tag) {
    if (count > kMaxChunk / 4 || at > kMaxChunk) fail(std::string(tag) + " is implausibly large");
    Elf_Data* d = table_at(vaddr + at, count * 4, ELF_T_BYTE, tag);
    return static_cast<const unsigned char*>(d->d_buf);
  }

  // The loader's own lookup (dl-lookup.c) over DT_GNU_HASH, reading only the
  // words it touches.
  bool gnu_hash_lookup(const SymbolLookup& l, const char* name) {
    const char* tag = "DT_GNU_HASH";
    const unsigned char* hdr = hash_words(*l.gnu_hash, 0, 4, tag);
    uint32_t nbuckets = word(hdr), symoffset = word(hdr + 4), bloom_size = word(hdr + 8);
    if (nbuckets == 0) return false;
    uint64_t buckets_at = 16 + uint64_t{bloom_size} * (info_.elf_class / 8);
    uint64_t chains_at = buckets_at + uint64_t{nbuckets} * 4;
    uint32_t h = 5381;
    for (const char* c = name; *c; ++c) h = h * 33 + static_cast<unsigned char>(*c);
    uint32_t idx = word(hash_words(*l.gnu_hash, buckets_at + uint64_t{h % nbuckets} * 4, 1, tag));
    if (idx == 0 || idx < symoffset) return false;
    // A chain has one word per symbol and every word is in the file: a walk
    // longer than the file has words is reading past a crafted table.
    const uint64_t max_steps = std::min<uint64_t>(size_ / 4, kMaxHashChain);
    for (uint64_t guard = 0; guard <= max_steps; ++guard, ++idx) {
      uint32_t chain = word(hash_words(*l.gnu_hash, chains_at + uint64_t{idx - symoffset} * 4, 1, tag));
      if ((chain | 1) == (h | 1) && symbol_matches(l, idx, name)) return true;
      if (chain & 1) return false;
    }
    fail(std::string(tag) + " chain for " + name + " has no end within " + std::to_string(max_steps) + " steps");
  }

  bool sysv_hash_lookup(const SymbolLookup& l, const char* name) {
    const char* tag = "DT_HASH";
    const unsigned char* hdr = hash_words(*l.sysv_hash, 0, 2, tag);
    uint32_t nbucket = word(hdr), nchain = word(hdr + 4);
    if (nbucket == 0) return false;
    uint32_t h = 0;
    for (const char* c = name; *c; ++c) {
      h = (h << 4) + static_cast<unsigned char>(*c);
      uint32_t g = h & 0xf0000000u;
      if (g) h ^= g >> 24;
      h &= ~g;
    }
    uint32_t i = word(hash_words(*l.sysv_hash, 8 + uint64_t{h % nbucket} * 4, 1, tag));
    // nchain comes from the file and a crafted chain can loop back on itself
    // (a 472-byte file with nchain 0xffffffff walked 2^32 steps): an honest
    // chain visits each symbol once, and there are no more symbols than the
    // file has 4-byte words, so stop there.
    const uint64_t max_steps = std::min<uint64_t>({uint64_t{nchain}, size_ / 4, kMaxHashChain});
    for (uint64_t guard = 0; i != 0 && i < nchain; ++guard) {
      if (guard > max_steps)
        fail(std::string(tag) + " chain for " + name + " loops (longer than " + std::to_string(max_steps) + " steps)");
      if (symbol_matches(l, i, name)) return true;
      i = word(hash_words(*l.sysv_hash, 8 + (uint64_t{nbucket} + i) * 4, 1, tag));
    }
    return false;
  }

  Linkage classify(bool has_interp, bool has_dynamic) const {
    if (info_.type == ET_REL) return Linkage::Relocatable;
    if (info_.type == ET_CORE) return Linkage::Core;
    if (has_interp) {
      // libc.so.6 and ld.so carry PT_INTERP so they can be run; they are
      // still libraries.
      if (!info_.soname.empty() && !pie_flag_) return Linkage::SharedLibrary;
      return Linkage::Dynamic;
    }
    if (!has_dynamic) return Linkage::Static;
    // PT_DYNAMIC without a loader: either a library loaded by someone else or
    // a static-pie that relocates itself. e_type is ET_DYN for both, so look
    // at what the file asks of a loader instead.
    if (!info_.needed.empty() || !info_.soname.empty()) return Linkage::SharedLibrary;
    if (pie_flag_ || info_.type == ET_EXEC) return Linkage::StaticPie;
    return Linkage::SharedLibrary;
  }

  // Go's build info: ".go.buildinfo" when sections exist, otherwise the
  // magic at a 16-byte boundary near the start of the first writable
  // segment (what Go's debug/buildinfo does).
  void read_go_buildinfo() {
    static const char kMagic[] = "\xff Go buildinf:";
    constexpr size_t kMagicLen = 14;
    uint64_t off = 0, avail = 0;
    bool found = false;
    size_t shstrndx = 0, shnum = 0;
    bool have_sections = use_sections_ && elf_getshdrnum(elf_, &shnum) == 0 && shnum > 0 &&
                         elf_getshdrstrndx(elf_, &shstrndx) == 0;
    if (have_sections) {
      Elf_Scn* scn = nullptr;
      for (size_t guard = 0; (scn = elf_nextscn(elf_, scn)) && guard < 65536; ++guard) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh)) break;
        const char* n = elf_strptr(elf_, shstrndx, sh.sh_name);
        if (n && std::strcmp(n, ".go.buildinfo") == 0 && sh.sh_type != SHT_NOBITS) {
          off = sh.sh_offset;
          avail = sh.sh_size;
          found = off <= size_ && avail <= size_ - off;
          break;
        }
      }
    }
    // Go always emits .go.buildinfo when it writes section headers; only a
    // section-less file needs the (costlier) scan of its data segment.
    if (!found && !have_sections) {
      for (const auto& ph : phdrs_) {
        if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_W)) continue;
        if (ph.p_offset > size_) return;
        uint64_t len = std::min<uint64_t>({ph.p_filesz, size_ - ph.p_offset, 64u << 10});
        Elf_Data* d = elf_getdata_rawchunk(elf_, static_cast<int64_t>(ph.p_offset), len, ELF_T_BYTE);
        if (!d) return;
        const auto* p = static_cast<const char*>(d->d_buf);
        for (uint64_t i = 0; i + 32 <= d->d_size; i += 16) {
          if (std::memcmp(p + i, kMagic, kMagicLen) == 0) {
            off = ph.p_offset + i;
            avail = d->d_size - i;
            found = true;
            break;
          }
        }
        break;
      }
    }
    if (!found || avail < 32) return;
    avail = std::min<uint64_t>(avail, 4096);
    Elf_Data* d = elf_getdata_rawchunk(elf_, static_cast<int64_t>(off), avail, ELF_T_BYTE);
    if (!d) return;
    const auto* p = static_cast<const unsigned char*>(d->d_buf);
    if (std::memcmp(p, kMagic, kMagicLen) != 0) return;
    info_.go = true;
    unsigned ptr_size = p[14], flags = p[15];
    if (flags & 2) {  // Go >= 1.18: the version string follows the header inline
      uint64_t len = 0;
      size_t i = 32;
      for (int shift = 0; i < d->d_size && shift < 64; shift += 7) {
        unsigned char b = p[i++];
        len |= uint64_t{b & 0x7fu} << shift;
        if (!(b & 0x80)) break;
      }
      if (len > 0 && len <= 128 && i + len <= d->d_size) info_.go_version.assign(reinterpret_cast<const char*>(p + i), len);
      return;
    }
    // Older Go: a pointer to a Go string header {data, len}.
    if (ptr_size != 4 && ptr_size != 8) return;
    bool big = flags & 1;
    auto ptr = [&](const unsigned char* q) {
      uint64_t v = 0;
      for (unsigned k = 0; k < ptr_size; ++k) v |= uint64_t{q[big ? ptr_size - 1 - k : k]} << (8 * k);
      return v;
    };
    uint64_t hdr_off = 0, hdr_avail = 0, str_off = 0, str_avail = 0;
    if (!vaddr_to_offset(ptr(p + 16), &hdr_off, &hdr_avail) || hdr_avail < 2 * ptr_size) return;
    Elf_Data* h = elf_getdata_rawchunk(elf_, static_cast<int64_t>(hdr_off), 2 * ptr_size, ELF_T_BYTE);
    if (!h) return;
    const auto* hp = static_cast<const unsigned char*>(h->d_buf);
    uint64_t data = ptr(hp), len = ptr(hp + ptr_size);
    if (len == 0 || len > 128 || !vaddr_to_offset(data, &str_off, &str_avail) || str_avail < len) return;
    Elf_Data* s = elf_getdata_rawchunk(elf_, static_cast<int64_t>(str_off), len, ELF_T_BYTE);
    if (s) info_.go_version.assign(static_cast<const char*>(s->d_buf), len);
  }

  Elf* elf_;
  uint64_t size_;
  std::string name_;
  GElf_Ehdr ehdr_{};
  std::vector<GElf_Phdr> phdrs_;
  Elf_Data* strtab_ = nullptr;
  bool pie_flag_ = false;
  bool use_sections_ = true;
  ElfInfo info_;
  uint64_t vernaux_seen_ = 0;  // version requirements read, over all DT_VERNEED entries
  uint64_t notes_read_ = 0;    // PT_NOTE bytes read
};

}  // namespace

ElfInfo read_elf_fd(int fd, const std::string& name) {
  init_libelf();
  struct stat st;
  if (fstat(fd, &st) != 0) throw FileError(name, std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw FileError(name, "not a regular file");
  unsigned char ident[EI_NIDENT];
  ssize_t got = pread(fd, ident, sizeof ident, 0);
  if (got < 0) throw FileError(name, std::string("cannot read: ") + std::strerror(errno));
  if (got == 0) throw FileError(name, "empty file");
  if (!has_elf_magic(ident, static_cast<size_t>(got))) throw FileError(name, "not an ELF file");
  if (got < EI_NIDENT) throw FileError(name, "truncated ELF header (" + std::to_string(got) + " bytes)");
  ElfPtr elf(elf_begin(fd, ELF_C_READ, nullptr));
  if (!elf) throw FileError(name, std::string("cannot parse ELF: ") + elf_errmsg(-1));
  return Reader(elf.get(), static_cast<uint64_t>(st.st_size), name).read();
}

ElfInfo read_elf_buffer(char* data, size_t size, const std::string& name, bool use_sections) {
  init_libelf();
  if (size == 0) throw FileError(name, "empty file");
  if (!has_elf_magic(data, size)) throw FileError(name, "not an ELF file");
  if (size < EI_NIDENT) throw FileError(name, "truncated ELF header (" + std::to_string(size) + " bytes)");
  ElfPtr elf(elf_memory(data, size));
  if (!elf) throw FileError(name, std::string("cannot parse ELF: ") + elf_errmsg(-1));
  return Reader(elf.get(), size, name, use_sections).read();
}

ElfInfo read_elf_memory(const void* data, size_t size, const std::string& name) {
  // libelf may convert in place; never let it touch the caller's bytes.
  std::vector<char> copy(static_cast<const char*>(data), static_cast<const char*>(data) + size);
  return read_elf_buffer(copy.data(), copy.size(), name, true);
}

}  // namespace memprofile
