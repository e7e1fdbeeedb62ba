// ELF reading, in the style of bloaty's src/elf.cc: a checked view
// (elf_view.h) normalises through libelf's GElf_* at the edge and
// bounds-checks every offset and length the file hands us before anything
// uses it; the analyses walk that view, one file each (dynamic.cpp,
// symbols.cpp, go_buildinfo.cpp). We read what the dynamic loader reads
// (program headers and the dynamic segment), not section headers, so that
// stripped or section-less files are judged the way ld.so judges them.
//
// This file holds the public API: reading a file or a buffer, the
// interpreter, the notes and the classification that need all the rest, and
// the small helpers over ElfInfo.
#include "elf/elf_info.h"

#include <elf.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <mutex>

#include "base/error.h"
#include "elf/analyses.h"
#include "elf/elf_view.h"

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

void init_libelf() {
  static std::once_flag once;
  std::call_once(once, [] { elf_version(EV_CURRENT); });
}

struct ElfCloser {
  void operator()(Elf* e) const { elf_end(e); }
};
using ElfPtr = std::unique_ptr<Elf, ElfCloser>;

std::string read_interp(const ElfView& view, const GElf_Phdr& ph) {
  if (ph.p_filesz == 0 || ph.p_filesz > 4096) view.fail("PT_INTERP has invalid size " + std::to_string(ph.p_filesz));
  Elf_Data* d = view.chunk(ph.p_offset, ph.p_filesz, ELF_T_BYTE, "PT_INTERP");
  const char* s = static_cast<const char*>(d->d_buf);
  const void* nul = std::memchr(s, '\0', d->d_size);
  if (!nul) view.fail("PT_INTERP string has no terminator");
  return std::string(s, static_cast<const char*>(nul));
}

// The notes libc() and the Go check look for; anything else is skipped.
void read_notes(ElfView& view, const GElf_Phdr& ph, ElfInfo& info) {
  Elf_Data* d = view.notes(ph);
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
    if (named("GNU") && nh.n_type == NT_GNU_ABI_TAG) info.gnu_abi_tag = true;
    if (named("Go") && nh.n_type == 4) info.go = true;  // ELF_NOTE_GOBUILDID_TAG
    off = next;
  }
}

Linkage classify(const ElfInfo& info, bool has_interp, bool has_dynamic, bool pie_flag) {
  if (info.type == ET_REL) return Linkage::Relocatable;
  if (info.type == ET_CORE) return Linkage::Core;
  if (has_interp) {
    // libc.so.6 and ld.so carry PT_INTERP so they can be run; they are
    // still libraries.
    if (!info.soname.empty() && !pie_flag) return Linkage::SharedLibrary;
    return Linkage::Dynamic;
  }
  if (!has_dynamic) return Linkage::Static;
  // PT_DYNAMIC without a loader: either a library loaded by someone else or
  // a static-pie that relocates itself. e_type is ET_DYN for both, so look
  // at what the file asks of a loader instead.
  if (!info.needed.empty() || !info.soname.empty()) return Linkage::SharedLibrary;
  if (pie_flag || info.type == ET_EXEC) return Linkage::StaticPie;
  return Linkage::SharedLibrary;
}

// The order matters: classification needs the dynamic segment's SONAME,
// DT_NEEDED and DF_1_PIE, and the Go check needs the classification.
ElfInfo read_elf(Elf* elf, uint64_t size, const std::string& name, bool use_sections) {
  ElfView view(elf, size, name, use_sections);
  ElfInfo info;
  info.elf_class = view.elf_class();
  info.little_endian = view.little_endian();
  info.machine = view.ehdr().e_machine;
  info.type = view.ehdr().e_type;

  const GElf_Phdr* interp = view.find_phdr(PT_INTERP);
  const GElf_Phdr* dynamic = view.find_phdr(PT_DYNAMIC);
  if (interp) info.interpreter = read_interp(view, *interp);
  for (const auto& ph : view.phdrs())
    if (ph.p_type == PT_NOTE) read_notes(view, ph, info);
  bool pie_flag = false;
  if (dynamic) {
    info.has_dynamic = true;
    pie_flag = read_dynamic(view, *dynamic, info);
  }
  info.linkage = classify(info, interp != nullptr, dynamic != nullptr, pie_flag);
  // Programs are searched for Go's build info; anything else only when a Go
  // note already marks it, so libraries are not scanned on a guess.
  if (info.go || info.is_program()) read_go_buildinfo(view, info);
  if (info.linkage != Linkage::Relocatable && info.linkage != Linkage::Core) read_heap_facts(view, info, info.heap);
  return info;
}

// The ELF header's size for the class its ident names: libelf takes a
// shorter file for no ELF at all.
uint64_t header_size(unsigned char elf_class) { return elf_class == ELFCLASS32 ? 52 : 64; }

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
  if (got < EI_NIDENT || static_cast<uint64_t>(st.st_size) < header_size(ident[EI_CLASS]))
    throw FileError(name, "truncated ELF header (" + std::to_string(st.st_size) + " bytes)");
  ElfPtr elf(elf_begin(fd, ELF_C_READ, nullptr));
  if (!elf) throw FileError(name, std::string("cannot parse ELF: ") + elf_errmsg(-1));
  return read_elf(elf.get(), static_cast<uint64_t>(st.st_size), name, true);
}

ElfInfo read_elf_buffer(char* data, size_t size, const std::string& name, bool use_sections) {
  init_libelf();
  if (size == 0) throw FileError(name, "empty file");
  if (!has_elf_magic(data, size)) throw FileError(name, "not an ELF file");
  if (size < EI_NIDENT || size < header_size(static_cast<unsigned char>(data[EI_CLASS])))
    throw FileError(name, "truncated ELF header (" + std::to_string(size) + " bytes)");
  ElfPtr elf(elf_memory(data, size));
  if (!elf) throw FileError(name, std::string("cannot parse ELF: ") + elf_errmsg(-1));
  return read_elf(elf.get(), size, name, use_sections);
}

ElfInfo read_elf_memory(const void* data, size_t size, const std::string& name) {
  // libelf may convert in place; never let it touch the caller's bytes.
  std::vector<char> copy(static_cast<const char*>(data), static_cast<const char*>(data) + size);
  return read_elf_buffer(copy.data(), copy.size(), name, true);
}

}  // namespace memprofile
