// Unit tier: synthetic inputs only. The cases on exec against the kernel's real argument limit are
// tests/integration/test_exec_env_limit.cpp.
// The edges of the in-pod commands: `collect` never following a link out of
// the output directory, `collect --verify` taking every archive collect
// writes and nothing else.
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "archive_builder.h"
#include "support.h"

extern char** environ;

using nlohmann::json;
using testing::fixture;
using testing::launcher;
using testing::quote;
using testing::RunResult;
using testing::Scratch;

namespace {


RunResult collect(const Scratch& s, const std::string& extra = "") {
  return testing::run(launcher() + " collect --backend bytehound --output-dir " + quote(s / "out") + " --settle 0 --out " +
                      quote(s / "prof.tar") + " " + extra);
}

RunResult verify(const std::string& tar) { return testing::run(launcher() + " collect --verify " + quote(tar)); }

// The manifest of a tar collect wrote.
json manifest_of(const std::string& tar) {
  RunResult r = testing::run("tar -xOf " + quote(tar) + " MEMPROFILE-MANIFEST.json");
  REQUIRE(r.exit_code == 0);
  return json::parse(r.out);
}

// A hand-made archive: `entries` as given, then a manifest listing `listed`
// (name and content) as collect would.
struct Listed {
  std::string name, content;
};
std::string with_manifest(testing::TarWriter tar, const std::vector<Listed>& listed) {
  json files = json::array();
  for (const auto& f : listed)
    files.push_back({{"name", f.name}, {"size", f.content.size()}, {"sha256", memprofile::sha256_hex(f.content)}});
  tar.add("MEMPROFILE-MANIFEST.json", json{{"backend", "bytehound"}, {"files", files}}.dump(2));
  return tar.finish();
}

RunResult verify_bytes(const Scratch& s, const std::string& bytes) {
  testing::write_file(s / "hand.tar", bytes);
  return verify(s / "hand.tar");
}

// Exit 2 with one line naming the entry.
void check_rejected(const RunResult& r, const std::string& entry, const std::string& why) {
  INFO(r.out + r.err);
  CHECK(r.exit_code == 2);
  auto l = testing::lines(r.err);
  REQUIRE(l.size() == 1);
  CHECK_THAT(l[0], Catch::StartsWith("memprofile: ") && Catch::Contains("'" + entry + "'") && Catch::Contains(why));
}

const std::string kProfile = "memory-profiling_app_1_1.dat";

}  // namespace

TEST_CASE("collect: a symlink in the output directory is skipped and said, never followed") {
  Scratch s;
  testing::write_file(s / "secret", std::string(8192, 'S'));
  testing::write_file(s / ("out/" + kProfile), "profile");
  testing::symlink_to("../secret", s / "out/memory-profiling_link_1_1.dat");
  RunResult r = collect(s);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("skipped " + s / "out/memory-profiling_link_1_1.dat: a symbolic link (-> ../secret)"));
  CHECK(testing::read_file(s / "prof.tar").find("SSSS") == std::string::npos);
  json m = manifest_of(s / "prof.tar");
  REQUIRE(m["files"].size() == 1);
  CHECK(m["files"][0]["name"] == kProfile);
  REQUIRE(m["skipped"].size() == 1);
  CHECK(m["skipped"][0]["name"] == "memory-profiling_link_1_1.dat");
  CHECK(verify(s / "prof.tar").exit_code == 0);
}

TEST_CASE("collect: fifos, sockets and devices are skipped with one line each, without hanging") {
  Scratch s;
  testing::write_file(s / ("out/" + kProfile), "profile");
  REQUIRE(mkfifo((s / "out/memory-profiling_fifo.dat").c_str(), 0644) == 0);
  // Bound by a relative name: the scratch path is longer than sun_path.
  int sock = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, "sock");
  char cwd[4096];
  REQUIRE(getcwd(cwd, sizeof cwd));
  REQUIRE(chdir((s / "out").c_str()) == 0);
  int bound = bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  REQUIRE(chdir(cwd) == 0);
  REQUIRE(bound == 0);
  bool device = mknod((s / "out/memory-profiling_dev.dat").c_str(), S_IFCHR | 0644, makedev(1, 3)) == 0;
  RunResult r = testing::run("timeout 20 " + launcher() + " collect --backend bytehound --output-dir " + quote(s / "out") +
                             " --settle 0 --out " + quote(s / "prof.tar"));
  close(sock);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("skipped " + s / "out/memory-profiling_fifo.dat: a fifo"));
  CHECK_THAT(r.err, Catch::Contains("skipped " + s / "out/sock: a socket"));
  if (device) CHECK_THAT(r.err, Catch::Contains("skipped " + s / "out/memory-profiling_dev.dat: a character device"));
  CHECK(manifest_of(s / "prof.tar")["skipped"].size() == (device ? 3u : 2u));
}

TEST_CASE("collect: a file swapped for a symlink between listing and opening is refused") {
  Scratch s;
  testing::write_file(s / "secret", std::string(4096, 'S'));
  // Sorted first and bigger than a pipe: collect is still copying it, with
  // the listing done, when the test swaps the second file for a link.
  testing::write_file(s / "out/memory-profiling_a.dat", std::string(4 << 20, 'a'));
  testing::write_file(s / "out/memory-profiling_z.dat", std::string(4096, 'z'));
  REQUIRE(mkfifo((s / "tar.fifo").c_str(), 0644) == 0);
  RunResult r = testing::run(
      "(" + launcher() + " collect --backend bytehound --output-dir " + quote(s / "out") + " --settle 0 --out " +
      quote(s / "tar.fifo") + " 2>" + quote(s / "collect.err") + "; echo $? > " + quote(s / "collect.rc") + ") & " +
      "exec 3<" + quote(s / "tar.fifo") + "; dd bs=512 count=1 iflag=fullblock <&3 >" + quote(s / "prof.tar") +
      " 2>/dev/null; ln -s ../secret " + quote(s / "out/swap") + " && mv -T " + quote(s / "out/swap") + " " +
      quote(s / "out/memory-profiling_z.dat") + " && cat <&3 >>" + quote(s / "prof.tar") + "; exec 3<&-; wait");
  std::string err = testing::read_file(s / "collect.err");
  INFO(r.err + err);
  REQUIRE(r.exit_code == 0);
  CHECK(testing::read_file(s / "collect.rc") == "0\n");
  std::string tar = testing::read_file(s / "prof.tar");
  CHECK(tar.compare(0, 22, "memory-profiling_a.dat") == 0);  // the swap came after the listing
  CHECK(tar.find("SSSS") == std::string::npos);  // (not CHECK_THAT: no 4 MiB failure message)
  CHECK_THAT(err, Catch::Contains("skipped " + s / "out/memory-profiling_z.dat: replaced by a symbolic link"));
  CHECK(manifest_of(s / "prof.tar")["skipped"][0]["name"] == "memory-profiling_z.dat");
  CHECK(verify(s / "prof.tar").exit_code == 0);
}

TEST_CASE("collect: descends into subdirectories, not into linked ones, and only so deep") {
  Scratch s;
  testing::write_file(s / ("out/sub/inner/" + kProfile), "nested");
  testing::write_file(s / ("elsewhere/" + kProfile), "elsewhere");
  testing::symlink_to("../elsewhere", s / "out/linked");
  std::string deep = "out";
  for (int i = 0; i < 20; ++i) deep += "/d";
  testing::write_file(s / (deep + "/" + kProfile), "deep");
  RunResult r = collect(s);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("skipped " + s / "out/linked: a symbolic link (-> ../elsewhere)"));
  CHECK_THAT(r.err, Catch::Contains("directories deep"));
  json m = manifest_of(s / "prof.tar");
  REQUIRE(m["files"].size() == 1);
  CHECK(m["files"][0]["name"] == "sub/inner/" + kProfile);
  RunResult v = verify(s / "prof.tar");
  CHECK(v.exit_code == 0);
  CHECK_THAT(v.out, Catch::Contains("ok      sub/inner/" + kProfile));
}

TEST_CASE("collect: a name longer than ustar's 100 bytes goes in a PAX header that tar and --verify read") {
  Scratch s;
  std::string name = "memory-profiling_" + std::string(150, 'n') + ".dat";
  testing::write_file(s / ("out/" + name), "long");
  RunResult r = collect(s);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(testing::run("tar -tf " + quote(s / "prof.tar")).out, Catch::Contains(name + "\n"));
  RunResult v = verify(s / "prof.tar");
  CHECK(v.exit_code == 0);
  CHECK_THAT(v.out, Catch::Contains("ok      " + name));
}

TEST_CASE("collect --verify: a manifest over 1 MiB (thousands of files) verifies") {
  Scratch s;
  testing::make_dirs(s / "out");
  for (int i = 0; i < 10000; ++i) testing::write_file(s / ("out/memory-profiling_" + std::to_string(i) + ".dat"), "x");
  RunResult r = collect(s);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  RunResult v = verify(s / "prof.tar");
  INFO(v.err);
  CHECK(v.exit_code == 0);
  CHECK_THAT(v.out, Catch::Contains("archive matches its manifest"));
}

// 16 GiB of reading and hashing: run by name (its [.] tag keeps it out of ctest).
TEST_CASE("collect: a profile over ustar's 8 GiB streams through --verify", "[.][slow]") {
  Scratch s;
  testing::make_dirs(s / "out");
  testing::write_file(s / ("out/" + kProfile), "");
  REQUIRE(truncate((s / ("out/" + kProfile)).c_str(), (8ll << 30) + 513) == 0);  // sparse
  RunResult r = testing::run(launcher() + " collect --backend bytehound --output-dir " + quote(s / "out") +
                             " --settle 0 | " + launcher() + " collect --verify -");
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("ok      " + kProfile + " (8589935105 bytes)"));
}

TEST_CASE("collect --verify: an entry the manifest does not list is rejected") {
  Scratch s;
  testing::TarWriter tar;
  tar.add(kProfile, "profile").add("extra.dat", "sneaked in");
  check_rejected(verify_bytes(s, with_manifest(tar, {{kProfile, "profile"}})), "extra.dat", "not listed in the manifest");
}

TEST_CASE("collect --verify: a '..' or absolute path is rejected even when listed") {
  Scratch s;
  testing::TarWriter up;
  up.add("../evil", "x");
  check_rejected(verify_bytes(s, with_manifest(up, {{"../evil", "x"}})), "../evil", "'..'");
  testing::TarWriter abs;
  abs.add("/etc/evil", "x");
  check_rejected(verify_bytes(s, with_manifest(abs, {{"/etc/evil", "x"}})), "/etc/evil", "absolute path");
}

TEST_CASE("collect --verify: link and device entries are rejected") {
  Scratch s;
  testing::TarWriter sym;
  sym.add(kProfile, "", '2', 0777, "/etc/shadow");
  check_rejected(verify_bytes(s, with_manifest(sym, {{kProfile, ""}})), kProfile, "symbolic link");
  testing::TarWriter hard;
  hard.add(kProfile, "", '1', 0644, "/etc/shadow");
  check_rejected(verify_bytes(s, with_manifest(hard, {{kProfile, ""}})), kProfile, "hard link");
  testing::TarWriter dev;
  dev.add(kProfile, "", '3');
  check_rejected(verify_bytes(s, with_manifest(dev, {{kProfile, ""}})), kProfile, "device");
}

TEST_CASE("collect --verify: a listed file missing from the archive is rejected") {
  Scratch s;
  testing::TarWriter tar;
  tar.add(kProfile, "profile");
  check_rejected(verify_bytes(s, with_manifest(tar, {{kProfile, "profile"}, {"gone.dat", "x"}})), "gone.dat",
                 "missing from the archive");
}

TEST_CASE("collect --verify: duplicates in the archive or the manifest are rejected") {
  Scratch s;
  testing::TarWriter twice;
  twice.add(kProfile, "tampered").add(kProfile, "profile");
  check_rejected(verify_bytes(s, with_manifest(twice, {{kProfile, "profile"}})), kProfile, "twice in the archive");
  testing::TarWriter once;
  once.add(kProfile, "profile");
  check_rejected(verify_bytes(s, with_manifest(once, {{kProfile, "profile"}, {kProfile, "profile"}})), kProfile,
                 "twice in the manifest");
}

