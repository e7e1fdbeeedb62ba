// A tiny ELF64 writer for hostile inputs: a valid little x86_64 ET_DYN with
// PT_INTERP, one PT_LOAD and PT_DYNAMIC, whose fields tests then break.
#pragma once

#include <elf.h>

#include <cstring>
#include <string>
#include <vector>

namespace testing {

struct ElfBuilder {
  std::string interp = "/lib64/ld-linux-x86-64.so.2";
  std::vector<std::string> needed = {"libc.so.6"};
  // Knobs for breaking it.
  uint16_t phnum_override = 0;
  uint64_t phoff_override = 0;
  uint64_t dynamic_offset_override = 0;
  uint64_t strsz_override = 0;
  bool strtab_unterminated = false;
  size_t truncate_to = 0;

  static constexpr uint64_t kPhoff = 64, kInterp = 256, kStrtab = 320, kDynamic = 512, kSize = 1024;

  std::string build() const {
    std::string f(kSize, '\0');
    Elf64_Ehdr eh{};
    std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
    eh.e_ident[EI_CLASS] = ELFCLASS64;
    eh.e_ident[EI_DATA] = ELFDATA2LSB;
    eh.e_ident[EI_VERSION] = EV_CURRENT;
    eh.e_type = ET_DYN;
    eh.e_machine = EM_X86_64;
    eh.e_version = EV_CURRENT;
    eh.e_phoff = phoff_override ? phoff_override : kPhoff;
    eh.e_ehsize = sizeof(Elf64_Ehdr);
    eh.e_phentsize = sizeof(Elf64_Phdr);
    eh.e_phnum = phnum_override ? phnum_override : 3;
    std::memcpy(&f[0], &eh, sizeof eh);

    std::string strtab(1, '\0');
    std::vector<uint64_t> offsets;
    for (const auto& n : needed) {
      offsets.push_back(strtab.size());
      strtab += n;
      strtab += '\0';
    }
    if (strtab_unterminated) strtab.back() = 'X';
    std::memcpy(&f[kStrtab], strtab.data(), strtab.size());
    std::memcpy(&f[kInterp], interp.c_str(), interp.size() + 1);

    std::vector<Elf64_Dyn> dyn;
    for (auto off : offsets) dyn.push_back({DT_NEEDED, {off}});
    dyn.push_back({DT_STRTAB, {kStrtab}});
    dyn.push_back({DT_STRSZ, {strsz_override ? strsz_override : strtab.size()}});
    dyn.push_back({DT_NULL, {0}});
    std::memcpy(&f[kDynamic], dyn.data(), dyn.size() * sizeof(Elf64_Dyn));

    Elf64_Phdr ph[3]{};
    ph[0].p_type = PT_INTERP;
    ph[0].p_offset = ph[0].p_vaddr = kInterp;
    ph[0].p_filesz = ph[0].p_memsz = interp.size() + 1;
    ph[1].p_type = PT_LOAD;
    ph[1].p_flags = PF_R;
    ph[1].p_filesz = ph[1].p_memsz = kSize;
    ph[1].p_align = 4096;
    ph[2].p_type = PT_DYNAMIC;
    ph[2].p_offset = dynamic_offset_override ? dynamic_offset_override : kDynamic;
    ph[2].p_vaddr = kDynamic;
    ph[2].p_filesz = ph[2].p_memsz = dyn.size() * sizeof(Elf64_Dyn);
    std::memcpy(&f[kPhoff], ph, sizeof ph);
    if (truncate_to) f.resize(truncate_to);
    return f;
  }
};

}  // namespace testing
