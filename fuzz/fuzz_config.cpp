// libFuzzer target for the image config parser (untrusted JSON).
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/error.h"
#include "image/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto c = memprofile::parse_image_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    (void)c.env_value("PATH");
    (void)memprofile::Platform::parse(c.platform.str());
  } catch (const memprofile::Error&) {
  }
  return 0;
}
