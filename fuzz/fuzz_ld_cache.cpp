// libFuzzer target for the /etc/ld.so.cache parser (an untrusted image file).
#include <cstddef>
#include <cstdint>
#include <string>

#include "verdict/loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  auto entries = memprofile::parse_ld_cache(bytes);
  for (const auto& e : entries) (void)memprofile::ld_cache_flags_match(e.flags, 62, 64);
  return 0;
}
