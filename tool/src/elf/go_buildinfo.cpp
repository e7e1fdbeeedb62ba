// Go's build info: ".go.buildinfo" when sections exist, otherwise the magic
// at a 16-byte boundary near the start of the first writable segment (what
// Go's debug/buildinfo does). It only adds facts: whatever is missing or
// damaged here leaves the file judged as it is, never its error.
#include <elf.h>

#include <algorithm>
#include <cstring>

#include "elf/analyses.h"

namespace memprofile {

void read_go_buildinfo(const ElfView& view, ElfInfo& info) {
  static const char kMagic[] = "\xff Go buildinf:";
  constexpr size_t kMagicLen = 14;
  const uint64_t size = view.size();
  ElfView::SectionSearch section = view.find_section(".go.buildinfo");
  uint64_t off = section.offset, avail = section.size;
  bool found = section.found;
  // Go always emits .go.buildinfo when it writes section headers; only a
  // section-less file needs the (costlier) scan of its data segment.
  if (!found && !section.sections) {
    for (const auto& ph : view.phdrs()) {
      if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_W)) continue;
      if (ph.p_offset > size) return;
      uint64_t len = std::min<uint64_t>({ph.p_filesz, size - ph.p_offset, 64u << 10});
      Elf_Data* d = view.try_chunk(ph.p_offset, len, ELF_T_BYTE);
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
  Elf_Data* d = view.try_chunk(off, avail, ELF_T_BYTE);
  if (!d) return;
  const auto* p = static_cast<const unsigned char*>(d->d_buf);
  if (std::memcmp(p, kMagic, kMagicLen) != 0) return;
  info.go = true;
  unsigned ptr_size = p[14], flags = p[15];
  if (flags & 2) {  // Go >= 1.18: the version string follows the header inline
    uint64_t len = 0;
    size_t i = 32;
    for (int shift = 0; i < d->d_size && shift < 64; shift += 7) {
      unsigned char b = p[i++];
      len |= uint64_t{b & 0x7fu} << shift;
      if (!(b & 0x80)) break;
    }
    if (len > 0 && len <= 128 && i + len <= d->d_size) info.go_version.assign(reinterpret_cast<const char*>(p + i), len);
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
  if (!view.vaddr_to_offset(ptr(p + 16), &hdr_off, &hdr_avail) || hdr_avail < 2 * ptr_size) return;
  Elf_Data* h = view.try_chunk(hdr_off, 2 * ptr_size, ELF_T_BYTE);
  if (!h) return;
  const auto* hp = static_cast<const unsigned char*>(h->d_buf);
  uint64_t data = ptr(hp), len = ptr(hp + ptr_size);
  if (len == 0 || len > 128 || !view.vaddr_to_offset(data, &str_off, &str_avail) || str_avail < len) return;
  Elf_Data* s = view.try_chunk(str_off, len, ELF_T_BYTE);
  if (s) info.go_version.assign(static_cast<const char*>(s->d_buf), len);
}

}  // namespace memprofile
