// preflight over real images built with buildah (tests/fixtures/images.sh)
// and over hand-built hostile archives.
#include <sys/stat.h>
#include <zstd.h>

#include <set>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "archive_builder.h"
#include "support.h"

using nlohmann::json;
using testing::run_memprofile;
using testing::OciImage;
using testing::RunResult;
using testing::Scratch;
using testing::TarWriter;

namespace {

json preflight_json(std::vector<std::string> args, int want_exit) {
  args.insert(args.begin(), {"preflight", "--json"});
  RunResult r = run_memprofile(args);
  INFO("stderr: " << r.err << "\nstdout: " << r.out);
  REQUIRE(r.exit_code == want_exit);
  return json::parse(testing::lines(r.out).at(0));
}

std::vector<std::string> codes(const json& j) {
  std::vector<std::string> out;
  for (const auto& f : j["findings"]) out.push_back(f["code"]);
  return out;
}

bool has(const json& j, const std::string& code) {
  auto c = codes(j);
  return std::find(c.begin(), c.end(), code) != c.end();
}

void require_one_line_error(const RunResult& r, const std::string& what) {
  INFO("stderr: " << r.err << "\nstdout: " << r.out);
  CHECK(r.exit_code == 2);
  auto l = testing::lines(r.err);
  REQUIRE(l.size() == 1);
  CHECK_THAT(l[0], Catch::StartsWith("memprofile: ") && Catch::Contains(what));
}

}  // namespace

TEST_CASE("hostile: a symlink loop as entrypoint") {
  Scratch s;
  OciImage img;
  img.layer(TarWriter().add("app", "", '2', 0777, "/loop").add("loop", "", '2', 0777, "/app").finish());
  img.write(s / "img");
  CHECK(has(preflight_json({s / "img"}, 1), "ENTRYPOINT_MISSING"));
}

TEST_CASE("hostile: gzip bomb stops at the output bound") {
  Scratch s;
  OciImage img;
  img.layer(TarWriter().add("zeros", std::string(64 << 20, '\0')).finish());
  img.write(s / "img");
  require_one_line_error(run_memprofile({"preflight", "--max-layer-bytes", "8000000", s / "img"}), "decompresses to more than");
}

TEST_CASE("hostile: absurd tar sizes and garbage headers") {
  Scratch s;
  OciImage big;
  big.layer(TarWriter().add("app", "abc", '0', 0755, "", 1ll << 40).unterminated());
  big.write(s / "big");
  require_one_line_error(run_memprofile({"preflight", s / "big"}), "truncated");
  OciImage junk;
  junk.layer(std::string(4096, 'J'), true);
  junk.write(s / "junk");
  require_one_line_error(run_memprofile({"preflight", s / "junk"}), "checksum");
}

TEST_CASE("hostile: not an image at all") {
  Scratch s;
  testing::write_file(s / "x.tar", TarWriter().add("hello.txt", "hi").finish());
  require_one_line_error(run_memprofile({"preflight", s / "x.tar"}), "not an image archive");
  testing::make_dirs(s / "dir");
  require_one_line_error(run_memprofile({"preflight", s / "dir"}), "not an OCI image layout");
  require_one_line_error(run_memprofile({"preflight", s / "nope.tar"}), "cannot open");
}

