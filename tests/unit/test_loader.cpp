// Unit tier: synthetic inputs only. The cases on real Debian root filesystems are
// tests/integration/test_loader_roots.cpp.
// ld.so.cache parsing of hand-made input.
#include <elf.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>

#include "verdict/checker.h"
#include "elf/elf_info.h"
#include "base/error.h"
#include "image/file_tree.h"
#include "verdict/loader.h"
#include "support.h"

using namespace memprofile;
using testing::fixture;
using testing::Scratch;

namespace {

}  // namespace

TEST_CASE("garbage is not an ld.so.cache") {
  CHECK(parse_ld_cache("").empty());
  CHECK(parse_ld_cache("glibc-ld.so.cache1.1").empty());
  std::string huge = std::string("glibc-ld.so.cache1.1") + std::string("\xff\xff\xff\x7f", 4) + std::string(24, '\0');
  CHECK(parse_ld_cache(huge).empty());
}

