// Unit tier: synthetic inputs only. The cases on the binary on the fixtures real toolchains built are
// tests/integration/test_cli_fixtures.cpp.
// The memprofile binary on hand-built input: bad files give one clear line,
// exit 2, and never a crash.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "elf_builder.h"
#include "checks.h"
#include "support.h"

using nlohmann::json;
using testing::fixture;
using testing::run_memprofile;
using testing::require_one_line_error;
using testing::RunResult;
using testing::Scratch;

TEST_CASE("bad input: empty file") {
  Scratch s;
  testing::write_file(s / "empty", "");
  require_one_line_error(run_memprofile({"check", s / "empty"}), s / "empty", "empty file");
}

TEST_CASE("bad input: text file") {
  Scratch s;
  testing::write_file(s / "notes.txt", "hello\n");
  require_one_line_error(run_memprofile({"check", s / "notes.txt"}), s / "notes.txt", "not an ELF file");
}

TEST_CASE("bad input: truncated ELF header") {
  Scratch s;
  testing::write_file(s / "trunc", testing::ElfBuilder{}.build().substr(0, 10));
  require_one_line_error(run_memprofile({"check", s / "trunc"}), s / "trunc", "truncated ELF header");
  testing::ElfBuilder b;
  b.truncate_to = 40;  // ident complete, rest of the header missing
  testing::write_file(s / "trunc2", b.build());
  require_one_line_error(run_memprofile({"check", s / "trunc2"}), s / "trunc2", "truncated ELF header");
}

TEST_CASE("bad input: hand-built ELF is read correctly when intact") {
  Scratch s;
  testing::ElfBuilder b;
  b.needed = {"libc.so.6", "libfoo.so.1"};
  testing::write_file(s / "good", b.build(), 0755);
  RunResult r = run_memprofile({"check", "--json", s / "good"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto j = json::parse(r.out);
  CHECK(j["linkage"] == "dynamic");
  CHECK(j["needed"] == json::array({"libc.so.6", "libfoo.so.1"}));
}

TEST_CASE("bad input: absurd e_phnum") {
  Scratch s;
  testing::ElfBuilder b;
  b.phnum_override = 0xfffe;
  testing::write_file(s / "phnum", b.build());
  require_one_line_error(run_memprofile({"check", s / "phnum"}), s / "phnum", "program header");
}

TEST_CASE("bad input: program headers past the end of the file") {
  Scratch s;
  testing::ElfBuilder b;
  b.phoff_override = 1u << 30;
  testing::write_file(s / "phoff", b.build());
  require_one_line_error(run_memprofile({"check", s / "phoff"}), s / "phoff", "program header");
}

TEST_CASE("bad input: dynamic segment past the end of the file") {
  Scratch s;
  testing::ElfBuilder b;
  b.dynamic_offset_override = 0x7fffffff00;
  testing::write_file(s / "dyn", b.build());
  require_one_line_error(run_memprofile({"check", s / "dyn"}), s / "dyn", "PT_DYNAMIC at offset 0x7fffffff00");
}

TEST_CASE("bad input: string table without terminator") {
  Scratch s;
  testing::ElfBuilder b;
  b.strtab_unterminated = true;
  testing::write_file(s / "str", b.build());
  require_one_line_error(run_memprofile({"check", s / "str"}), s / "str", "no terminator");
}

TEST_CASE("bad input: string table size past its segment") {
  Scratch s;
  testing::ElfBuilder b;
  b.strsz_override = 1u << 20;
  testing::write_file(s / "strsz", b.build());
  require_one_line_error(run_memprofile({"check", s / "strsz"}), s / "strsz", "DT_STRTAB");
}

TEST_CASE("bad input: missing file") {
  Scratch s;
  require_one_line_error(run_memprofile({"check", s / "nope"}), s / "nope", "no such file or directory");
}

TEST_CASE("bad input: symlink loop inside the root") {
  Scratch s;
  testing::symlink_to("/bin/b", s / "bin/a");
  testing::symlink_to("/bin/a", s / "bin/b");
  RunResult r = run_memprofile({"check", "--root", s.path(), "/bin/a"});
  require_one_line_error(r, "/bin/a", "too many levels of symbolic links");
}

TEST_CASE("bad input: relative path outside --root") {
  Scratch s;
  RunResult r = testing::run("cd / && " + testing::quote(testing::memprofile_bin()) + " check --root " +
                             testing::quote(s.path()) + " etc/passwd");
  require_one_line_error(r, "etc/passwd", "is outside --root");
}

