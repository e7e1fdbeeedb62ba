#include "elf/layout.h"

#include <algorithm>
#include <cstring>

#include "elf/elf_view.h"

namespace memprofile {

std::vector<FileRange> ranges_read(const char* head, size_t len) {
  std::vector<FileRange> out;
  Elf* e = elf_memory(const_cast<char*>(head), len);
  if (!e) return out;
  size_t n = 0;
  if (elf_getphdrnum(e, &n) == 0 && n < kMaxPhdrs) {
    std::vector<GElf_Phdr> ph;
    for (size_t i = 0; i < n; ++i) {
      GElf_Phdr p;
      if (gelf_getphdr(e, static_cast<int>(i), &p)) ph.push_back(p);
    }
    for (const auto& p : ph)
      if (p.p_type == PT_DYNAMIC || p.p_type == PT_INTERP || p.p_type == PT_NOTE) out.push_back({p.p_offset, p.p_filesz});
    for (const auto& p : ph)
      if (p.p_type == PT_LOAD && (p.p_flags & PF_W)) {
        out.push_back({p.p_offset, 64 << 10});
        break;
      }
    for (const auto& p : ph)
      if (p.p_type == PT_LOAD && !(p.p_flags & PF_X) && !(p.p_flags & PF_W)) out.push_back({p.p_offset, p.p_filesz});
  }
  elf_end(e);
  return out;
}

void forget_section_headers(char* file, size_t size) {
  if (size < sizeof(Elf64_Ehdr)) return;
  if (file[EI_CLASS] == ELFCLASS64) {
    auto* eh = reinterpret_cast<Elf64_Ehdr*>(file);
    eh->e_shoff = 0;
    eh->e_shnum = 0;
    eh->e_shstrndx = 0;
  } else if (file[EI_CLASS] == ELFCLASS32) {
    auto* eh = reinterpret_cast<Elf32_Ehdr*>(file);
    eh->e_shoff = 0;
    eh->e_shnum = 0;
    eh->e_shstrndx = 0;
  }
}

std::vector<GElf_Phdr> load_segments(Elf* elf) {
  std::vector<GElf_Phdr> loads;
  size_t phnum = 0;
  if (elf && elf_getphdrnum(elf, &phnum) == 0)
    for (size_t i = 0; i < phnum; ++i) {
      GElf_Phdr ph;
      if (gelf_getphdr(elf, static_cast<int>(i), &ph) && ph.p_type == PT_LOAD) loads.push_back(ph);
    }
  return loads;
}

uint64_t inflated_debug_bytes(Elf* elf) {
  size_t shstrndx;
  if (!elf || elf_getshdrstrndx(elf, &shstrndx) != 0) return 0;
  uint64_t total = 0;
  for (Elf_Scn* scn = nullptr; (scn = elf_nextscn(elf, scn)) != nullptr;) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh)) continue;
    const char* name = elf_strptr(elf, shstrndx, sh.sh_name);
    if (!name || (std::strncmp(name, ".debug_", 7) != 0 && std::strncmp(name, ".zdebug_", 8) != 0)) continue;
    uint64_t size = 0;
    if (sh.sh_flags & SHF_COMPRESSED) {
      GElf_Chdr ch;
      size = gelf_getchdr(scn, &ch) ? ch.ch_size : UINT64_MAX / 4;
    } else if (name[1] == 'z') {
      Elf_Data* raw = elf_rawdata(scn, nullptr);
      const auto* b = raw && raw->d_size >= 12 ? static_cast<const unsigned char*>(raw->d_buf) : nullptr;
      if (b && std::memcmp(b, "ZLIB", 4) == 0)
        for (int i = 4; i < 12; ++i) size = size << 8 | b[i];
    }
    total = std::min<uint64_t>(total + std::min<uint64_t>(size, UINT64_MAX / 4), UINT64_MAX / 4);
  }
  return total;
}

std::optional<RawElf> raw_elf(Elf* elf) {
  size_t size = 0;
  const char* raw = elf ? elf_rawfile(elf, &size) : nullptr;
  GElf_Ehdr eh;
  if (!raw || !gelf_getehdr(elf, &eh)) return std::nullopt;
  return RawElf{reinterpret_cast<const unsigned char*>(raw), size, eh.e_machine};
}

}  // namespace memprofile
