// libFuzzer target for the layer reader (decompression sniffing, tar
// parsing, ELF capture, flattening): any bytes give a summary or an Error.
#include <cstddef>
#include <cstdint>

#include "base/error.h"
#include "image/image_tree.h"
#include "image/layer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    memprofile::MemReader r(data, size);
    memprofile::LayerLimits limits;
    limits.max_tar_bytes = 64 << 20;
    memprofile::LayerSummary s = memprofile::summarize_layer(r, "fuzz", limits);
    memprofile::ImageTree tree;
    tree.apply(std::move(s));
    tree.walk("/", [](const std::string&) {});
  } catch (const memprofile::Error&) {
  }
  return 0;
}
