// The checked view (elf_view.h): the ELF header, the program headers, and
// every range read out of the file.
#include "elf/elf_view.h"

#include <elf.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "base/error.h"

namespace memprofile {

namespace {

std::string hex(uint64_t v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

}  // namespace

ElfView::ElfView(Elf* elf, uint64_t file_size, std::string name, bool use_sections)
    : elf_(elf), size_(file_size), name_(std::move(name)), use_sections_(use_sections) {
  if (elf_kind(elf_) != ELF_K_ELF) fail("not an ELF file");
  if (!gelf_getehdr(elf_, &ehdr_)) fail("truncated or invalid ELF header");
  if (ehdr_.e_ident[EI_CLASS] != ELFCLASS32 && ehdr_.e_ident[EI_CLASS] != ELFCLASS64)
    fail("invalid ELF class " + std::to_string(ehdr_.e_ident[EI_CLASS]));
  read_program_headers();
}

void ElfView::fail(const std::string& what) const { throw FileError(name_, what); }

std::string ElfView::libelf_error() const {
  const char* m = elf_errmsg(-1);
  return m ? m : "unknown libelf error";
}

uint32_t ElfView::word(const unsigned char* p) const {
  uint32_t v;
  std::memcpy(&v, p, 4);
  bool host_le = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
  return host_le == little_endian() ? v : __builtin_bswap32(v);
}

void ElfView::check_range(uint64_t off, uint64_t len, const std::string& what) const {
  if (off > size_ || len > size_ - off)
    fail(what + " at offset " + hex(off) + " (" + std::to_string(len) +
         " bytes) lies past the end of the file (" + std::to_string(size_) + " bytes)");
  if (len > kMaxChunk) fail(what + " is implausibly large (" + std::to_string(len) + " bytes)");
}

Elf_Data* ElfView::chunk(uint64_t off, uint64_t len, Elf_Type type, const std::string& what) const {
  check_range(off, len, what);
  Elf_Data* d = elf_getdata_rawchunk(elf_, static_cast<int64_t>(off), len, type);
  if (!d) fail("cannot read " + what + ": " + libelf_error());
  return d;
}

Elf_Data* ElfView::try_chunk(uint64_t off, uint64_t len, Elf_Type type) const {
  return elf_getdata_rawchunk(elf_, static_cast<int64_t>(off), len, type);
}

void ElfView::read_program_headers() {
  size_t n = 0;
  if (elf_getphdrnum(elf_, &n) != 0) fail("invalid program header count: " + libelf_error());
  if (n > kMaxPhdrs) fail("absurd program header count " + std::to_string(n));
  uint64_t entsize = entry_size(ELF_T_PHDR);
  if (n > 0) check_range(ehdr_.e_phoff, n * entsize, "program header table");
  phdrs_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    GElf_Phdr ph;
    if (!gelf_getphdr(elf_, static_cast<int>(i), &ph))
      fail("cannot read program header " + std::to_string(i) + ": " + libelf_error());
    phdrs_.push_back(ph);
  }
}

const GElf_Phdr* ElfView::find_phdr(uint32_t type) const {
  for (const auto& ph : phdrs_)
    if (ph.p_type == type) return &ph;
  return nullptr;
}

bool ElfView::vaddr_to_offset(uint64_t vaddr, uint64_t* off, uint64_t* avail) const {
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

Elf_Data* ElfView::table_at(uint64_t vaddr, uint64_t want, Elf_Type type, const char* tag, uint64_t window) const {
  uint64_t off = 0, avail = 0;
  if (!vaddr_to_offset(vaddr, &off, &avail))
    fail(std::string(tag) + " address " + hex(vaddr) + " is not inside any loadable segment");
  uint64_t len = want ? want : std::min<uint64_t>(avail, window);
  if (want && want > avail)
    fail(std::string(tag) + " table (" + std::to_string(want) + " bytes at " + hex(vaddr) +
         ") runs past the end of its segment");
  return chunk(off, len, type, tag);
}

Elf_Data* ElfView::notes(const GElf_Phdr& ph) {
  if (ph.p_filesz == 0) return nullptr;
  if (ph.p_offset > size_ || ph.p_filesz > size_ - ph.p_offset) return nullptr;  // a torn note is not fatal
  // libelf copies a note segment it must convert; thousands of PT_NOTEs
  // over one large range would copy it each time. Real notes are < 1 KiB.
  if (ph.p_filesz > kNotesBudget - std::min(notes_read_, kNotesBudget)) return nullptr;
  notes_read_ += ph.p_filesz;
  Elf_Type t = ph.p_align == 8 ? ELF_T_NHDR8 : ELF_T_NHDR;
  return try_chunk(ph.p_offset, ph.p_filesz, t);
}

ElfView::SectionSearch ElfView::find_section(const char* name) const {
  SectionSearch out;
  size_t shstrndx = 0, shnum = 0;
  out.sections = use_sections_ && elf_getshdrnum(elf_, &shnum) == 0 && shnum > 0 &&
                 elf_getshdrstrndx(elf_, &shstrndx) == 0;
  if (!out.sections) return out;
  Elf_Scn* scn = nullptr;
  for (size_t guard = 0; (scn = elf_nextscn(elf_, scn)) && guard < 65536; ++guard) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh)) break;
    const char* n = elf_strptr(elf_, shstrndx, sh.sh_name);
    if (n && std::strcmp(n, name) == 0 && sh.sh_type != SHT_NOBITS) {
      out.offset = sh.sh_offset;
      out.size = sh.sh_size;
      out.found = out.offset <= size_ && out.size <= size_ - out.offset;
      break;
    }
  }
  return out;
}

std::string DynStrings::at(uint64_t index, const char* what) const {
  if (!strtab_) view_.fail(std::string(what) + " present but DT_STRTAB missing");
  if (index >= strtab_->d_size)
    view_.fail(std::string(what) + " string offset " + std::to_string(index) + " is outside the string table (" +
               std::to_string(strtab_->d_size) + " bytes)");
  const char* base = static_cast<const char*>(strtab_->d_buf) + index;
  // Names and paths are at most PATH_MAX long; scanning further would let
  // many entries that share one long string cost entries x its length.
  const void* nul = std::memchr(base, '\0', std::min<uint64_t>(strtab_->d_size - index, kMaxDynString + 1));
  if (!nul)
    view_.fail(std::string("string table has no terminator within ") + std::to_string(kMaxDynString) +
               " bytes (PATH_MAX) after offset " + std::to_string(index) + " (" + what + ")");
  return std::string(base, static_cast<const char*>(nul));
}

}  // namespace memprofile
