// Integration tier: the binary on the fixtures real toolchains built. The cases on synthetic inputs are
// tests/unit/test_cli.cpp.
// The memprofile binary as users run it: exit codes, JSON, directory scans,
// and bad input that must give one clear line, exit 2, and never a crash.
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
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

namespace {

std::vector<json> json_lines(const std::string& out) {
  std::vector<json> v;
  for (const auto& l : testing::lines(out)) v.push_back(json::parse(l));
  return v;
}

}  // namespace

TEST_CASE("cli: exit 0 when every file is profilable") {
  RunResult r = run_memprofile({"check", fixture("dynamic"), fixture("rust-dynamic")});
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("profilable: yes"));
}

TEST_CASE("cli: exit 1 when some file is not") {
  RunResult r = run_memprofile({"check", fixture("dynamic"), fixture("static-pie")});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.out, Catch::Contains("STATIC_PIE"));
  CHECK_THAT(r.out, Catch::Contains("2 ELF files checked: 1 profilable, 1 not"));
}

TEST_CASE("cli: --json has the documented fields") {
  RunResult r = run_memprofile({"check", "--json", fixture("static-pie"), fixture("arm64-dynamic")});
  REQUIRE(r.exit_code == 1);
  auto objs = json_lines(r.out);
  REQUIRE(objs.size() == 2);
  for (const char* key : {"path", "arch", "linkage", "interpreter", "libc", "go", "needed", "glibc_required",
                          "profilable", "findings"})
    CHECK(objs[0].contains(key));
  CHECK(objs[0]["linkage"] == "static-pie");
  CHECK(objs[0]["profilable"] == false);
  CHECK(objs[0]["findings"][0]["code"] == "STATIC_PIE");
  for (const char* key : {"code", "severity", "message", "fix"}) CHECK(objs[0]["findings"][0].contains(key));
  CHECK(objs[1]["arch"] == "aarch64");
  CHECK(objs[1]["interpreter"] == "/lib/ld-linux-aarch64.so.1");
  CHECK(objs[1]["needed"] == json::array({"libc.so.6"}));
}

TEST_CASE("cli: a directory is scanned recursively, non-ELF files counted and skipped") {
  Scratch s;
  testing::copy_file(fixture("dynamic"), s / "bin/app");
  testing::copy_file(fixture("static"), s / "bin/deep/er/tool");
  testing::write_file(s / "README", "text");
  testing::write_file(s / "bin/run.sh", "#!/bin/sh\n", 0755);
  testing::symlink_to("app", s / "bin/link-to-app");
  RunResult r = run_memprofile({"check", "--json", s.path()});
  CHECK(r.exit_code == 1);
  auto objs = json_lines(r.out);
  REQUIRE(objs.size() == 2);
  CHECK(objs[0]["path"] == s / "bin/app");
  CHECK(objs[1]["path"] == s / "bin/deep/er/tool");
  CHECK_THAT(r.err, Catch::Contains("2 ELF files checked: 1 profilable, 1 not; 2 non-ELF files skipped"));
}

TEST_CASE("cli: --root takes absolute paths inside the root and relative host paths under it") {
  Scratch s;
  testing::make_glibc_root(s.path());
  testing::copy_file(fixture("dynamic"), s / "usr/bin/app");
  RunResult a = run_memprofile({"check", "--root", s.path(), "/usr/bin/app"});
  CHECK(a.exit_code == 0);
  CHECK_THAT(a.out, Catch::Contains("libc.so.6 => /usr/lib/x86_64-linux-gnu/libc.so.6 (ld.so.cache)"));
  RunResult b = run_memprofile({"check", "--root", s.path(), "--json", s / "usr/bin/app"});
  CHECK(b.exit_code == 0);
  auto j = json::parse(b.out);
  CHECK(j["path"] == "/usr/bin/app");
  CHECK(j["root"]["interpreter_found"] == true);
  CHECK(j["root"]["glibc_available"] == "GLIBC_2.36");
  CHECK(j["root"]["glibc_satisfied"] == true);
}

TEST_CASE("cli: a scratch-like root fails on the interpreter") {
  Scratch s;
  testing::copy_file(fixture("dynamic"), s / "app");
  RunResult r = run_memprofile({"check", "--root", s.path(), "/app"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.out, Catch::Contains("INTERPRETER_MISSING"));
}

TEST_CASE("bad input: shell script names its interpreter") {
  require_one_line_error(run_memprofile({"check", fixture("script.sh")}), fixture("script.sh"),
                         "a script run by '/bin/sh'");
}

TEST_CASE("bad input: every prefix of a real binary is an error or a verdict, never a crash") {
  Scratch s;
  std::string bytes = testing::read_file(fixture("dynamic"));
  for (size_t n : {1ul, 4ul, 16ul, 63ul, 64ul, 100ul, 300ul, 700ul, 1000ul, 4096ul, 8000ul}) {
    testing::write_file(s / "cut", bytes.substr(0, n));
    RunResult r = run_memprofile({"check", s / "cut"});
    INFO("prefix " << n << ": " << r.err);
    CHECK((r.exit_code == 2 || r.exit_code == 0 || r.exit_code == 1));
    if (r.exit_code == 2) CHECK(testing::lines(r.err).size() == 1);
  }
}

TEST_CASE("bad input: unreadable file") {
  Scratch s;
  testing::copy_file(fixture("dynamic"), s / "secret", 0000);
  chmod(s.path().c_str(), 0755);
  // As root every file is readable; drop to nobody for this one run.
  RunResult r = testing::run("setpriv --reuid=65534 --regid=65534 --clear-groups " +
                             testing::quote(testing::memprofile_bin()) + " check " + testing::quote(s / "secret"));
  require_one_line_error(r, s / "secret", "Permission denied");
}

TEST_CASE("bad input: --root that is not a directory") {
  RunResult r = run_memprofile({"check", "--root", fixture("dynamic"), "/x"});
  require_one_line_error(r, fixture("dynamic"), "cannot open root directory");
}

TEST_CASE("bad input: unknown option is a usage error with exit 2") {
  RunResult r = run_memprofile({"check", "--bogus", fixture("dynamic")});
  CHECK(r.exit_code == 2);
  CHECK_FALSE(r.err.empty());
}

TEST_CASE("cli: control characters in a name never reach the terminal raw, in text or in errors") {
  testing::Scratch dir;
  // A file whose name retitles the window and clears the screen.
  std::string evil = dir / "app\x1b]0;owned\x07\x1b[2J\xc2\x9b";
  std::filesystem::copy_file(fixture("static-pie"), evil);
  RunResult r = run_memprofile({"check", evil});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.out, Catch::Contains("app\\x1b]0;owned\\x07\\x1b[2J\\xc2\\x9b"));
  CHECK(r.out.find('\x1b') == std::string::npos);
  RunResult missing = run_memprofile({"check", evil + ".missing"});
  CHECK(missing.exit_code == 2);
  CHECK(missing.err.find('\x1b') == std::string::npos);
  CHECK_THAT(missing.err, Catch::Contains("app\\x1b]0;owned"));
  // JSON escapes them itself, unchanged by the filter.
  RunResult json = run_memprofile({"check", "--json", evil});
  CHECK_THAT(json.out, Catch::Contains("app\\u001b]0;owned\\u0007"));
}

TEST_CASE("cli: a report on a pipe goes out in one write, whole") {
  // buildah's RUN step stops relaying when the process ends: a report in
  // 4 KiB pieces could reach the build log cut. On a SOCK_SEQPACKET
  // standard output each write(2) is one message.
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) == 0);
  std::vector<std::string> args = {testing::memprofile_bin(), "check"};
  for (int i = 0; i < 40; ++i) args.push_back(fixture("dynamic"));
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(sv[1], STDOUT_FILENO);
    close(sv[0]);
    close(sv[1]);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(sv[1]);
  std::vector<size_t> writes;
  std::vector<char> buf(1 << 20);
  for (ssize_t n; (n = recv(sv[0], buf.data(), buf.size(), 0)) > 0;) writes.push_back(static_cast<size_t>(n));
  close(sv[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  REQUIRE(writes.size() == 1);
  CHECK(writes[0] > 4096);  // more than stdio's buffer on a pipe would hold
}
