// libFuzzer target for containers-registries.conf(5): TOML from the
// machine's configuration (the parser's recursion is bounded by a scan
// before it runs), and the pull sources chosen from it.
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/error.h"
#include "network/registries_conf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto conf = memprofile::parse_registries_conf(std::string(reinterpret_cast<const char*>(data), size), "fuzz",
                                                  size % 2 == 1);
    for (const char* ref : {"a.io/x:1", "docker.io/library/debian@sha256:"
                                        "0000000000000000000000000000000000000000000000000000000000000000",
                            "localhost:5000/team/app"})
      (void)memprofile::pull_sources(conf, memprofile::parse_registry_ref(ref));
  } catch (const memprofile::Error&) {
  }
  return 0;
}
