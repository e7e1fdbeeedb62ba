// What the folders that hold an ELF file themselves read of it, exported by
// elf/ so that no one outside it walks ELF structures: a layer's streamed
// capture (image/layer.cpp) and the symboliser's libdwfl handles
// (profile/symbolizer.cpp). Each is tolerant: a damaged file gives less,
// never an error (the checked view, elf_view.h, judges the file).
#pragma once

#include <gelf.h>
#include <libelf.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace memprofile {

// The parts of an ELF file whose first bytes are `head` that elf/'s
// analyses read beyond the start, by importance: PT_DYNAMIC, PT_INTERP and
// PT_NOTE, the first 64 KiB of the first writable segment (Go's build info),
// then the read-only segments. Empty when `head` holds no program headers.
struct FileRange {
  uint64_t offset, length;
};
std::vector<FileRange> ranges_read(const char* head, size_t len);

// Makes the copy `file` (`size` bytes) of an ELF file say it has no section
// headers: libelf sizes its section table from the header (or from section
// 0 when e_shnum is 0) and fills a record for each, and a crafted 4 MB file
// can declare 16M sections (3 GB). For a capture that never reads sections.
void forget_section_headers(char* file, size_t size);

// The PT_LOAD program headers of an open file, in order.
std::vector<GElf_Phdr> load_segments(Elf* elf);

// What a file's compressed debug sections inflate to, as their headers
// declare (SHF_COMPRESSED's Chdr, a .zdebug_ section's "ZLIB" size), read
// before anything is inflated; 0 for none (or no readable sections).
uint64_t inflated_debug_bytes(Elf* elf);

// The whole file's bytes as libelf holds them, and its machine (e_machine),
// for reading its instructions; nullopt when libelf cannot give them.
struct RawElf {
  const unsigned char* bytes;
  size_t size;
  unsigned machine;
};
std::optional<RawElf> raw_elf(Elf* elf);

}  // namespace memprofile
