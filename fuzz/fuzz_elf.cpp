// libFuzzer target for the ELF reader: any bytes must give facts or a
// memprofile::Error, never a crash, a hang or an out-of-bounds read.
#include <cstddef>
#include <cstdint>

#include "elf/elf_info.h"
#include "base/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    memprofile::ElfInfo info = memprofile::read_elf_memory(data, size, "fuzz");
    (void)info.libc();
    (void)info.glibc_required();
  } catch (const memprofile::Error&) {
  }
  return 0;
}
