// Unit tier: synthetic inputs only. The cases on binaries real toolchains made are
// tests/integration/test_elf_toolchains.cpp.
// ELF facts that need no toolchain: version ordering, non-ELF refusals.
#include <elf.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>

#include "elf/elf_info.h"
#include "base/error.h"
#include "support.h"

using namespace memprofile;
using testing::fixture;

namespace {

}  // namespace

TEST_CASE("glibc versions compare numerically") {
  CHECK(compare_glibc_versions("GLIBC_2.9", "GLIBC_2.10") < 0);
  CHECK(compare_glibc_versions("GLIBC_2.2.5", "GLIBC_2.2") > 0);
  CHECK(compare_glibc_versions("GLIBC_2.34", "GLIBC_2.34") == 0);
}

TEST_CASE("non-ELF input is refused with the file's name") {
  CHECK_THROWS_WITH(read_elf_memory("#!/bin/sh\n", 10, "x.sh"), "x.sh: not an ELF file");
  CHECK_THROWS_WITH(read_elf_memory("\x7f" "ELF", 4, "short"), Catch::Contains("short: truncated ELF header"));
}

TEST_CASE("allocator entry points are told by pattern, with jemalloc's prefix") {
  std::string prefix;
  CHECK(allocator_of("_rjem_mallocx", &prefix) == "jemalloc");
  CHECK(prefix == "_rjem_");
  CHECK(allocator_of("je_malloc", &prefix) == "jemalloc");
  CHECK(prefix == "je_");
  // A prefix nobody listed is still found by jemalloc's own API names.
  CHECK(allocator_of("myapp_sdallocx", &prefix) == "jemalloc");
  CHECK(prefix == "myapp_");
  CHECK(allocator_of("mallctl", &prefix) == "jemalloc");
  CHECK(prefix.empty());
  CHECK(allocator_of("mi_malloc_aligned") == "mimalloc");
  CHECK(allocator_of("mi_free") == "mimalloc");
  CHECK(allocator_of("tc_malloc") == "tcmalloc");
  CHECK(allocator_of("sn_rust_alloc") == "snmalloc");
  CHECK(allocator_of("rpmalloc") == "rpmalloc");
  CHECK(allocator_of("scalable_malloc") == "tbbmalloc");
  // Not allocators: glibc's own, and names that only share a start.
  for (const char* name : {"malloc", "free", "malloc_usable_size", "rpmatch", "mi_version", "tc_flush", "memset",
                           "tc_filter_delete", "sn_snapshot_free_list", "scalable_renew"}) {
    INFO(name);
    CHECK(allocator_of(name).empty());
  }
}
