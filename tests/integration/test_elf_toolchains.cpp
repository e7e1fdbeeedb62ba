// Integration tier: binaries real toolchains made. The cases on synthetic inputs are
// tests/unit/test_elf.cpp.
// Classification of real binaries made by real toolchains.
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

ElfInfo read(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  try {
    ElfInfo info = read_elf_fd(fd, path);
    close(fd);
    return info;
  } catch (...) {
    close(fd);
    throw;
  }
}

bool needs(const ElfInfo& e, const std::string& lib) {
  return std::find(e.needed.begin(), e.needed.end(), lib) != e.needed.end();
}

}  // namespace

TEST_CASE("gcc dynamic executable is dynamic glibc with its interpreter") {
  ElfInfo e = read(fixture("dynamic"));
  CHECK(e.linkage == Linkage::Dynamic);
  CHECK(e.machine == EM_X86_64);
  CHECK(e.elf_class == 64);
  CHECK(e.little_endian);
  CHECK(e.type == ET_DYN);
  CHECK(e.interpreter == "/lib64/ld-linux-x86-64.so.2");
  CHECK(e.libc() == Libc::Glibc);
  CHECK(needs(e, "libc.so.6"));
  CHECK(compare_glibc_versions(e.glibc_required(), "GLIBC_2.2.5") >= 0);
  CHECK_FALSE(e.go);
}

TEST_CASE("gcc -static executable is static with a glibc ABI note") {
  ElfInfo e = read(fixture("static"));
  CHECK(e.linkage == Linkage::Static);
  CHECK(e.type == ET_EXEC);
  CHECK(e.interpreter.empty());
  CHECK_FALSE(e.has_dynamic);
  CHECK(e.gnu_abi_tag);
  CHECK(e.libc() == Libc::Glibc);
}

TEST_CASE("gcc -static-pie is static-pie although e_type is ET_DYN") {
  ElfInfo e = read(fixture("static-pie"));
  CHECK(e.type == ET_DYN);
  CHECK(e.has_dynamic);
  CHECK(e.interpreter.empty());
  CHECK(e.needed.empty());
  CHECK(e.linkage == Linkage::StaticPie);
  CHECK(e.libc() == Libc::Glibc);
}

TEST_CASE("Rust +crt-static lands in static-pie, default Rust is dynamic") {
  CHECK(read(fixture("rust-crt-static")).linkage == Linkage::StaticPie);
  ElfInfo dyn = read(fixture("rust-dynamic"));
  CHECK(dyn.linkage == Linkage::Dynamic);
  CHECK(dyn.libc() == Libc::Glibc);
}

TEST_CASE("shared library with SONAME is shared-library, not static-pie") {
  ElfInfo e = read(fixture("libshared.so.1"));
  CHECK(e.linkage == Linkage::SharedLibrary);
  CHECK(e.soname == "libshared.so.1");
}

TEST_CASE("glibc's own libc.so.6 is a shared library despite PT_INTERP") {
  ElfInfo e = read(testing::rootfs("amd64") + "/usr/lib/x86_64-linux-gnu/libc.so.6");
  CHECK(e.linkage == Linkage::SharedLibrary);
  CHECK_FALSE(e.interpreter.empty());
  CHECK(e.defines_malloc);
  CHECK(e.defines_free);
  CHECK(std::find(e.verdef.begin(), e.verdef.end(), "GLIBC_2.36") != e.verdef.end());
}

TEST_CASE("aarch64 cross-compiled binaries are read as aarch64") {
  ElfInfo dyn = read(fixture("arm64-dynamic"));
  CHECK(dyn.machine == EM_AARCH64);
  CHECK(dyn.linkage == Linkage::Dynamic);
  CHECK(dyn.interpreter == "/lib/ld-linux-aarch64.so.1");
  CHECK(machine_name(dyn.machine) == "aarch64");
  ElfInfo st = read(fixture("arm64-static"));
  CHECK(st.machine == EM_AARCH64);
  CHECK(st.linkage == Linkage::Static);
}

TEST_CASE("musl dynamic binary names musl's loader and libc") {
  ElfInfo e = read(fixture("musl-dynamic"));
  CHECK(e.linkage == Linkage::Dynamic);
  CHECK(e.interpreter == "/lib/ld-musl-x86_64.so.1");
  CHECK(e.libc() == Libc::Musl);
}

TEST_CASE("musl static binary is static without a glibc note") {
  ElfInfo e = read(fixture("musl-static"));
  CHECK(e.linkage == Linkage::Static);
  CHECK_FALSE(e.gnu_abi_tag);
  CHECK(e.libc() == Libc::Unknown);
}

TEST_CASE("static Go binary is detected with its version") {
  ElfInfo e = read(fixture("go-static"));
  CHECK(e.go);
  CHECK(e.go_version.rfind("go1.", 0) == 0);
  CHECK(e.linkage == Linkage::Static);
  CHECK(e.libc() == Libc::None);
}

TEST_CASE("cgo Go binary is dynamic glibc and still Go") {
  ElfInfo e = read(fixture("go-cgo"));
  CHECK(e.go);
  CHECK(e.linkage == Linkage::Dynamic);
  CHECK(e.libc() == Libc::Glibc);
}

TEST_CASE("relocatable object is not a program") {
  ElfInfo e = read(fixture("object.o"));
  CHECK(e.linkage == Linkage::Relocatable);
}

TEST_CASE("RPATH and RUNPATH are read raw, $ORIGIN unexpanded") {
  CHECK(read(fixture("needs-shared-runpath")).runpath == "$ORIGIN/lib");
  CHECK(read(fixture("needs-shared-runpath")).rpath.empty());
  CHECK(read(fixture("needs-shared-rpath")).rpath == "/opt/app/lib");
  CHECK(read(fixture("needs-shared-rpath")).runpath.empty());
}

TEST_CASE("preload library interposing malloc defines malloc and free") {
  ElfInfo p = read(fixture("fake_preload.so"));
  CHECK(p.defines_malloc);
  CHECK(p.defines_free);
  ElfInfo lib = read(fixture("libshared.so.1"));
  CHECK_FALSE(lib.defines_malloc);
  // It calls malloc (undefined reference) but does not define it.
  CHECK_FALSE(read(fixture("dynamic")).defines_malloc);
}

TEST_CASE("a library linked against a future glibc requires that version") {
  ElfInfo e = read(fixture("uses_future.so"));
  CHECK(e.glibc_required() == "GLIBC_2.99");
}

TEST_CASE("reading the same file from memory gives the same facts") {
  std::string bytes = testing::read_file(fixture("dynamic"));
  ElfInfo m = read_elf_memory(bytes.data(), bytes.size(), "dynamic");
  ElfInfo f = read(fixture("dynamic"));
  CHECK(m.needed == f.needed);
  CHECK(m.interpreter == f.interpreter);
  CHECK(m.glibc_required() == f.glibc_required());
}

