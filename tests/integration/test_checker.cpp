// Verdicts and findings, each fixture on its own and against a root.
#include <algorithm>
#include <catch2/catch.hpp>

#include "verdict/checker.h"
#include "image/file_tree.h"
#include "support.h"

using namespace memprofile;
using testing::fixture;
using testing::Scratch;

namespace {

FileVerdict check_file(const HostTree& tree, const std::string& path, CheckerOptions opts = {}) {
  Checker checker(tree, std::move(opts));
  auto r = resolve(tree, path);
  REQUIRE(r);
  auto elf = tree.elf(r->path);
  REQUIRE(elf);
  return checker.check(r->path, elf);
}

FileVerdict check_alone(const std::string& host_path, CheckerOptions opts = {}) {
  static HostTree host("/");
  return check_file(host, host_path, std::move(opts));
}

std::vector<std::string> codes(const FileVerdict& r) {
  std::vector<std::string> out;
  for (const auto& f : r.findings) out.push_back(f.code);
  return out;
}

bool has(const FileVerdict& r, const std::string& code) {
  auto c = codes(r);
  return std::find(c.begin(), c.end(), code) != c.end();
}

const Finding& get(const FileVerdict& r, const std::string& code) {
  for (const auto& f : r.findings)
    if (f.code == code) return f;
  FAIL("no finding " << code);
  throw;
}

}  // namespace

TEST_CASE("dynamic glibc program is profilable with no findings") {
  FileVerdict r = check_alone(fixture("dynamic"));
  CHECK(r.profilable());
  CHECK(r.findings.empty());
}

TEST_CASE("static program: STATIC_BINARY with the dynamic-link fix") {
  FileVerdict r = check_alone(fixture("static"));
  CHECK_FALSE(r.profilable());
  CHECK(codes(r) == std::vector<std::string>{"STATIC_BINARY"});
  CHECK_THAT(get(r, "STATIC_BINARY").fix, Catch::Contains("-static"));
}

TEST_CASE("Rust crt-static: STATIC_PIE with the RUSTFLAGS fix") {
  FileVerdict r = check_alone(fixture("rust-crt-static"));
  CHECK_FALSE(r.profilable());
  CHECK_THAT(get(r, "STATIC_PIE").fix, Catch::Contains("RUSTFLAGS='-C target-feature=-crt-static'"));
}

TEST_CASE("static Go: STATIC_BINARY pointing at pprof") {
  FileVerdict r = check_alone(fixture("go-static"));
  CHECK_FALSE(r.profilable());
  CHECK_THAT(get(r, "STATIC_BINARY").fix, Catch::Contains("pprof"));
  CHECK_THAT(get(r, "STATIC_BINARY").message, Catch::Contains("go1."));
}

TEST_CASE("cgo Go: profilable, with a GO_BINARY warning about the Go heap") {
  FileVerdict r = check_alone(fixture("go-cgo"));
  CHECK(r.profilable());
  CHECK(get(r, "GO_BINARY").severity == Severity::Warning);
  CHECK_THAT(get(r, "GO_BINARY").fix, Catch::Contains("pprof"));
}

TEST_CASE("musl program: MUSL_LIBC") {
  FileVerdict r = check_alone(fixture("musl-dynamic"));
  CHECK_FALSE(r.profilable());
  CHECK(has(r, "MUSL_LIBC"));
}

TEST_CASE("setuid, setgid and file capabilities warn about AT_SECURE") {
  CHECK(get(check_alone(fixture("setuid")), "SETUID").severity == Severity::Warning);
  CHECK(has(check_alone(fixture("setgid")), "SETGID"));
  FileVerdict caps = check_alone(fixture("setcap"));
  CHECK(caps.file_caps);
  CHECK(has(caps, "FILE_CAPABILITIES"));
  CHECK_FALSE(has(check_alone(fixture("dynamic")), "SETUID"));
}

TEST_CASE("object file: NOT_A_PROGRAM") {
  CHECK(has(check_alone(fixture("object.o")), "NOT_A_PROGRAM"));
}

TEST_CASE("shared library: an info finding, still profilable") {
  FileVerdict r = check_alone(fixture("libshared.so.1"));
  CHECK(r.profilable());
  CHECK(get(r, "SHARED_LIBRARY").severity == Severity::Info);
}

TEST_CASE("preload: a real interposer passes") {
  CheckerOptions o;
  o.preload = fixture("fake_preload.so");
  FileVerdict r = check_alone(fixture("dynamic"), o);
  CHECK(r.profilable());
  CHECK(r.findings.empty());
}

TEST_CASE("preload: wrong architecture") {
  CheckerOptions o;
  o.preload = fixture("fake_preload-arm64.so");
  FileVerdict r = check_alone(fixture("dynamic"), o);
  CHECK_FALSE(r.profilable());
  CHECK_THAT(get(r, "PRELOAD_WRONG_ARCH").message, Catch::Contains("aarch64 ELF64") && Catch::Contains("x86_64 ELF64"));
  // The same library fits the arm64 program.
  CHECK(check_alone(fixture("arm64-dynamic"), o).profilable());
}

TEST_CASE("preload: a library without malloc cannot interpose the allocator") {
  CheckerOptions o;
  o.preload = fixture("libshared.so.1");
  CHECK(has(check_alone(fixture("dynamic"), o), "PRELOAD_NO_MALLOC"));
}

TEST_CASE("preload: an executable is not a shared library") {
  CheckerOptions o;
  o.preload = fixture("static");
  CHECK(has(check_alone(fixture("dynamic"), o), "PRELOAD_NOT_SHARED"));
}

TEST_CASE("preload: missing, directory and script") {
  Scratch s;
  testing::make_dirs(s / "dir");
  CheckerOptions o;
  o.preload = s / "missing.so";
  CHECK(has(check_alone(fixture("dynamic"), o), "PRELOAD_NOT_FOUND"));
  o.preload = s / "dir";
  CHECK_THAT(get(check_alone(fixture("dynamic"), o), "PRELOAD_NOT_FOUND").message, Catch::Contains("not a regular file"));
  o.preload = fixture("script.sh");
  CHECK(has(check_alone(fixture("dynamic"), o), "PRELOAD_NOT_ELF"));
}

TEST_CASE("root: a scratch image without a loader or libc") {
  Scratch s;
  testing::copy_file(fixture("dynamic"), s / "app");
  HostTree tree(s.path());
  CheckerOptions o;
  o.use_root = true;
  FileVerdict r = check_file(tree, "/app", o);
  CHECK_FALSE(r.profilable());
  CHECK(has(r, "INTERPRETER_MISSING"));
  CHECK(has(r, "LIBC_MISSING"));
}

TEST_CASE("root: a Debian root runs a dynamic program, and knows its glibc") {
  Scratch s;
  testing::make_glibc_root(s.path());
  testing::copy_file(fixture("dynamic"), s / "usr/bin/app");
  HostTree tree(s.path());
  CheckerOptions o;
  o.use_root = true;
  FileVerdict r = check_file(tree, "/usr/bin/app", o);
  CHECK(r.profilable());
  CHECK(r.root_glibc == "GLIBC_2.36");
}

TEST_CASE("root: NEEDED_MISSING names the library and who needs it") {
  Scratch s;
  testing::make_glibc_root(s.path());
  testing::copy_file(fixture("needs-shared"), s / "usr/bin/app");
  HostTree tree(s.path());
  CheckerOptions o;
  o.use_root = true;
  FileVerdict r = check_file(tree, "/usr/bin/app", o);
  CHECK_THAT(get(r, "NEEDED_MISSING").message, Catch::Contains("libshared.so.1 (needed by /usr/bin/app)"));
}

TEST_CASE("root: a program built against a newer glibc than the root's") {
  Scratch s;
  testing::make_glibc_root(s.path());
  // The uses_future library plays the program here: what matters is its
  // GLIBC_2.99 requirement against the root's 2.36 libc.
  testing::copy_file(fixture("uses_future.so"), s / "usr/lib/x86_64-linux-gnu/libfuture.so");
  HostTree tree(s.path());
  CheckerOptions o;
  o.use_root = true;
  FileVerdict r = check_file(tree, "/usr/lib/x86_64-linux-gnu/libfuture.so", o);
  CHECK_THAT(get(r, "GLIBC_TOO_OLD").message, Catch::Contains("GLIBC_2.99") && Catch::Contains("GLIBC_2.36"));
}

TEST_CASE("root: a preload library needing a newer glibc than the root's") {
  Scratch s;
  testing::make_glibc_root(s.path());
  testing::copy_file(fixture("dynamic"), s / "usr/bin/app");
  testing::copy_file(fixture("uses_future.so"), s / "usr/lib/profiler.so");
  HostTree tree(s.path());
  CheckerOptions o;
  o.use_root = true;
  o.preload = "/usr/lib/profiler.so";
  FileVerdict r = check_file(tree, "/usr/bin/app", o);
  CHECK_FALSE(r.profilable());
  CHECK_THAT(get(r, "PRELOAD_GLIBC_TOO_NEW").message, Catch::Contains("GLIBC_2.99"));
  CHECK_FALSE(has(r, "GLIBC_TOO_OLD"));
}

TEST_CASE("root: a preload library whose dependency is missing") {
  Scratch s;
  testing::make_glibc_root(s.path());
  testing::copy_file(fixture("dynamic"), s / "usr/bin/app");
  // fake_preload needs only libc; needs-shared plays a preload that needs
  // libshared.so.1, which the root lacks.
  testing::copy_file(fixture("needs-shared"), s / "usr/lib/profiler.so");
  HostTree tree(s.path());
  CheckerOptions o;
  o.use_root = true;
  o.preload = "/usr/lib/profiler.so";
  FileVerdict r = check_file(tree, "/usr/bin/app", o);
  CHECK(has(r, "PRELOAD_NEEDED_MISSING"));
  CHECK_FALSE(has(r, "NEEDED_MISSING"));
}

TEST_CASE("root: an arm64 program in the arm64 Debian rootfs with an arm64 preload") {
  Scratch s;
  testing::make_glibc_root(s.path(), "arm64");
  testing::copy_file(fixture("arm64-dynamic"), s / "usr/bin/app");
  testing::copy_file(fixture("fake_preload-arm64.so"), s / "usr/lib/profiler.so");
  HostTree root(s.path());
  CheckerOptions o;
  o.use_root = true;
  o.preload = "/usr/lib/profiler.so";
  FileVerdict r = check_file(root, "/usr/bin/app", o);
  CHECK(r.profilable());
  CHECK(r.load->interpreter == "/usr/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1");
  CHECK(r.root_glibc == "GLIBC_2.36");
}

TEST_CASE("root: LD_PRELOAD=NAME (no '/') is searched like a needed library") {
  Scratch s;
  testing::make_glibc_root(s.path());
  testing::copy_file(fixture("dynamic"), s / "usr/bin/app");
  testing::copy_file(fixture("fake_preload.so"), s / "usr/lib/x86_64-linux-gnu/libprofiler.so");
  testing::copy_file(fixture("fake_preload.so"), s / "opt/lib/libonlyhere.so");
  testing::copy_file(fixture("fake_preload-arm64.so"), s / "opt/arm/libprofiler-arm.so");
  HostTree tree(s.path());
  CheckerOptions o;
  o.use_root = true;
  o.preload = "libprofiler.so";  // in a default directory
  FileVerdict r = check_file(tree, "/usr/bin/app", o);
  CHECK(r.profilable());
  CHECK_FALSE(has(r, "PRELOAD_NOT_FOUND"));
  REQUIRE(r.load);
  const LoadedObject* pre = r.load->find("libprofiler.so");
  REQUIRE(pre);
  CHECK(pre->path == "/usr/lib/x86_64-linux-gnu/libprofiler.so");

  o.preload = "libonlyhere.so";  // found only through LD_LIBRARY_PATH
  CHECK(has(check_file(tree, "/usr/bin/app", o), "PRELOAD_NOT_FOUND"));
  o.ld_library_path = "/opt/lib";
  CHECK_FALSE(has(check_file(tree, "/usr/bin/app", o), "PRELOAD_NOT_FOUND"));

  o.ld_library_path = "/opt/arm";  // the loader passes over a wrong-arch candidate
  o.preload = "libprofiler-arm.so";
  FileVerdict arm = check_file(tree, "/usr/bin/app", o);
  CHECK(has(arm, "PRELOAD_NOT_FOUND"));
  CHECK_FALSE(arm.profilable());
}
