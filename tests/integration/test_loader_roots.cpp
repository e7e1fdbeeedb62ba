// Integration tier: real Debian root filesystems. The cases on synthetic inputs are
// tests/unit/test_loader.cpp.
// The loader model against real Debian root filesystems.
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

LoadResult load_in(const HostTree& tree, const std::string& exe, const LoadOptions& opts = {}) {
  auto r = resolve(tree, exe);
  REQUIRE(r);
  auto elf = tree.elf(r->path);
  REQUIRE(elf);
  return Loader(tree).load(r->path, *elf, opts);
}

const LoadedObject& must_find(const LoadResult& r, const std::string& name) {
  const LoadedObject* o = r.find(name);
  INFO("looking for " << name);
  REQUIRE(o);
  return *o;
}

}  // namespace

TEST_CASE("ld.so.cache of a Debian rootfs parses and matches x86_64 flags") {
  HostTree tree(testing::rootfs("amd64"));
  auto bytes = tree.read("/etc/ld.so.cache", 1 << 20);
  REQUIRE(bytes);
  auto entries = parse_ld_cache(*bytes);
  REQUIRE_FALSE(entries.empty());
  auto libc = std::find_if(entries.begin(), entries.end(), [](const LdCacheEntry& e) { return e.name == "libc.so.6"; });
  REQUIRE(libc != entries.end());
  CHECK(libc->path == "/lib/x86_64-linux-gnu/libc.so.6");
  CHECK(ld_cache_flags_match(libc->flags, EM_X86_64, 64));
  CHECK_FALSE(ld_cache_flags_match(libc->flags, EM_AARCH64, 64));
}

TEST_CASE("/bin/ls of the amd64 rootfs: loader through /lib64 absolute symlink, libraries through the cache") {
  HostTree tree(testing::rootfs("amd64"));
  LoadResult r = load_in(tree, "/bin/ls");
  CHECK(r.interpreter == "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2");
  const auto& libc = must_find(r, "libc.so.6");
  CHECK(libc.path == "/usr/lib/x86_64-linux-gnu/libc.so.6");
  CHECK(libc.via == "ld.so.cache");
  // A dependency of a dependency (libselinux -> libpcre2) is found too.
  CHECK_FALSE(must_find(r, "libpcre2-8.so.0").path.empty());
  CHECK(r.version_problems.empty());
}

TEST_CASE("/bin/ls of the arm64 rootfs resolves with aarch64 rules") {
  HostTree tree(testing::rootfs("arm64"));
  LoadResult r = load_in(tree, "/bin/ls");
  CHECK(r.interpreter == "/usr/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1");
  CHECK(must_find(r, "libc.so.6").path == "/usr/lib/aarch64-linux-gnu/libc.so.6");
}

TEST_CASE("$ORIGIN in RUNPATH is the directory of the executable") {
  Scratch s;
  testing::make_glibc_root(s.path());
  testing::copy_file(fixture("needs-shared-runpath"), s / "app/bin/prog");
  testing::copy_file(fixture("libshared.so.1"), s / "app/bin/lib/libshared.so.1");
  HostTree tree(s.path());
  LoadResult r = load_in(tree, "/app/bin/prog");
  const auto& lib = must_find(r, "libshared.so.1");
  CHECK(lib.path == "/app/bin/lib/libshared.so.1");
  CHECK(lib.via == "runpath");
}

TEST_CASE("DT_RPATH is searched, and a wrong-architecture candidate is passed over") {
  Scratch s;
  testing::make_glibc_root(s.path());
  testing::copy_file(fixture("needs-shared-rpath"), s / "usr/bin/prog");
  // The rpath directory holds an aarch64 library of the same name; the
  // loader skips it and finds the right one in the default directories.
  testing::copy_file(fixture("fake_preload-arm64.so"), s / "opt/app/lib/libshared.so.1");
  testing::copy_file(fixture("libshared.so.1"), s / "usr/lib/x86_64-linux-gnu/libshared.so.1");
  HostTree tree(s.path());
  LoadResult r = load_in(tree, "/usr/bin/prog");
  const auto& lib = must_find(r, "libshared.so.1");
  CHECK(lib.path == "/usr/lib/x86_64-linux-gnu/libshared.so.1");
  CHECK(lib.via == "default");
  REQUIRE(lib.skipped.size() == 1);
  CHECK_THAT(lib.skipped[0], Catch::Contains("/opt/app/lib/libshared.so.1: wrong architecture (aarch64"));
}

TEST_CASE("RPATH wins over LD_LIBRARY_PATH, which wins over the defaults") {
  Scratch s;
  testing::make_glibc_root(s.path());
  testing::copy_file(fixture("needs-shared-rpath"), s / "usr/bin/prog");
  testing::copy_file(fixture("needs-shared"), s / "usr/bin/plain");
  testing::copy_file(fixture("libshared.so.1"), s / "opt/app/lib/libshared.so.1");
  testing::copy_file(fixture("libshared.so.1"), s / "env/libshared.so.1");
  testing::copy_file(fixture("libshared.so.1"), s / "usr/lib/x86_64-linux-gnu/libshared.so.1");
  HostTree tree(s.path());
  LoadOptions env;
  env.ld_library_path = "/env";
  CHECK(must_find(load_in(tree, "/usr/bin/prog", env), "libshared.so.1").via == "rpath");
  CHECK(must_find(load_in(tree, "/usr/bin/plain", env), "libshared.so.1").path == "/env/libshared.so.1");
  CHECK(must_find(load_in(tree, "/usr/bin/plain"), "libshared.so.1").via == "default");
}

TEST_CASE("a library missing from the root is reported unresolved") {
  Scratch s;
  testing::make_glibc_root(s.path());
  testing::copy_file(fixture("needs-shared"), s / "usr/bin/prog");
  HostTree tree(s.path());
  LoadResult r = load_in(tree, "/usr/bin/prog");
  CHECK(must_find(r, "libshared.so.1").path.empty());
  CHECK_FALSE(must_find(r, "libc.so.6").path.empty());
}

TEST_CASE("a version the root's libc lacks is a version problem") {
  Scratch s;
  testing::make_glibc_root(s.path());
  testing::copy_file(fixture("dynamic"), s / "usr/bin/prog");
  testing::copy_file(fixture("uses_future.so"), s / "usr/lib/profiler.so");
  HostTree tree(s.path());
  LoadOptions opts;
  opts.preload = {"/usr/lib/profiler.so"};
  LoadResult r = load_in(tree, "/usr/bin/prog", opts);
  REQUIRE(r.version_problems.size() == 1);
  CHECK(r.version_problems[0].object == "/usr/lib/profiler.so");
  CHECK(r.version_problems[0].version == "GLIBC_2.99");
  CHECK(r.version_problems[0].provider == "/usr/lib/x86_64-linux-gnu/libc.so.6");
}

TEST_CASE("musl: libc.so is the loader itself, other libraries come from musl's default path") {
  Scratch s;
  testing::copy_file(fixture("musl-dynamic"), s / "bin/prog");
  testing::copy_file("/lib/x86_64-linux-musl/libc.so", s / "lib/ld-musl-x86_64.so.1");
  HostTree tree(s.path());
  LoadResult r = load_in(tree, "/bin/prog");
  CHECK(r.interpreter == "/lib/ld-musl-x86_64.so.1");
  CHECK(must_find(r, "libc.so").path == "/lib/ld-musl-x86_64.so.1");
  CHECK(Loader(tree).default_dirs(EM_X86_64, 64, true) == std::vector<std::string>{"/lib", "/usr/local/lib", "/usr/lib"});
  testing::write_file(s / "etc/ld-musl-x86_64.path", "/opt/lib:/usr/lib\n");
  CHECK(Loader(tree).default_dirs(EM_X86_64, 64, true) == std::vector<std::string>{"/opt/lib", "/usr/lib"});
}
