// The checked view of one ELF file, private to elf/: every offset, length and
// address the file hands us is bounds-checked here before anything reads
// through it, the way bloaty's src/elf.cc keeps its ElfFile apart from the
// analyses that walk it (dynamic.cpp, symbols.cpp, go_buildinfo.cpp).
// Structures are normalised through libelf's GElf_* at this edge, so the
// analyses never see the file's class or byte order except through word().
#pragma once

#include <gelf.h>
#include <libelf.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace memprofile {

// Every bound on work done for one ELF file, in one place. A bound that is
// hit is the file's FileError, so the rest of an image is still judged
// (docs/preflight.md, "Limits").
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

class ElfView {
 public:
  // Reads and checks the ELF header and the program header table: the part
  // every analysis needs, and the part whose damage makes the file unusable.
  // Throws FileError naming `name`. `file_size` is the size of what `elf`
  // reads (the file, or the buffer's prefix of it). With use_sections false,
  // section headers are never consulted (a sparse buffer holds zeros there).
  ElfView(Elf* elf, uint64_t file_size, std::string name, bool use_sections);

  [[noreturn]] void fail(const std::string& what) const;

  const GElf_Ehdr& ehdr() const { return ehdr_; }
  int elf_class() const { return ehdr_.e_ident[EI_CLASS] == ELFCLASS64 ? 64 : 32; }
  bool little_endian() const { return ehdr_.e_ident[EI_DATA] == ELFDATA2LSB; }
  uint64_t size() const { return size_; }
  // The file size of one `type` entry in this file's class (gelf_fsize).
  size_t entry_size(Elf_Type type) const { return gelf_fsize(elf_, type, 1, EV_CURRENT); }
  // A 32-bit word of the file (hash tables), in the file's byte order.
  uint32_t word(const unsigned char* p) const;

  const std::vector<GElf_Phdr>& phdrs() const { return phdrs_; }
  // The first program header of `type`: the one ld.so acts on.
  const GElf_Phdr* find_phdr(uint32_t type) const;

  // `len` bytes at file offset `off`, converted to `type`, or the file's
  // error naming `what` when the range leaves the file, exceeds kMaxChunk or
  // libelf cannot read it.
  Elf_Data* chunk(uint64_t off, uint64_t len, Elf_Type type, const std::string& what) const;
  // The same for a read whose failure is not the file's error (notes, Go's
  // build info): the caller has checked the range; nullptr when libelf
  // cannot read it.
  Elf_Data* try_chunk(uint64_t off, uint64_t len, Elf_Type type) const;

  // Maps a virtual address to a file offset through PT_LOAD, also returning
  // how many bytes of file data follow it inside that segment.
  bool vaddr_to_offset(uint64_t vaddr, uint64_t* off, uint64_t* avail) const;
  // A table addressed by a dynamic tag: `want` bytes (0: up to `window`
  // bytes, as many as the segment holds), or a clear error.
  Elf_Data* table_at(uint64_t vaddr, uint64_t want, Elf_Type type, const char* tag,
                     uint64_t window = kVersionWindow) const;

  // A PT_NOTE segment ready for gelf_getnote, or nullptr: a torn note is not
  // fatal, and all notes of the file together read at most kNotesBudget.
  Elf_Data* notes(const GElf_Phdr& ph);

  // Where a section lies. `sections` is false when section headers may not
  // be consulted or the file has no readable table of them; otherwise
  // `found` says whether the first section called `name` that has file
  // contents lies wholly inside the file.
  struct SectionSearch {
    bool sections = false;
    bool found = false;
    uint64_t offset = 0, size = 0;
  };
  SectionSearch find_section(const char* name) const;

 private:
  std::string libelf_error() const;
  void check_range(uint64_t off, uint64_t len, const std::string& what) const;
  void read_program_headers();

  Elf* elf_;
  uint64_t size_;
  std::string name_;
  bool use_sections_;
  GElf_Ehdr ehdr_{};
  std::vector<GElf_Phdr> phdrs_;
  uint64_t notes_read_ = 0;  // PT_NOTE bytes read
};

// The dynamic string table (DT_STRTAB), read through the view: names of
// needed libraries, search paths, version and symbol names.
class DynStrings {
 public:
  explicit DynStrings(const ElfView& view) : view_(view) {}
  // DT_STRTAB's bytes; until set, every lookup is an error naming the tag
  // that asked.
  void set_table(Elf_Data* strtab) { strtab_ = strtab; }
  // The NUL-terminated string at `index`; `what` names the tag asking, for
  // the error when the index or the string leaves the table.
  std::string at(uint64_t index, const char* what) const;

 private:
  const ElfView& view_;
  Elf_Data* strtab_ = nullptr;
};

}  // namespace memprofile
