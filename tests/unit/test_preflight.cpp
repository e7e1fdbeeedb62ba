// Unit tier: synthetic inputs only. The cases on real images built with buildah are
// tests/integration/test_preflight_images.cpp.
// preflight over hand-built hostile archives.
#include <sys/stat.h>
#include <zstd.h>

#include <set>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "archive_builder.h"
#include "checks.h"
#include "support.h"

using nlohmann::json;
using testing::run_memprofile;
using testing::OciImage;
using testing::RunResult;
using testing::codes;
using testing::has;
using testing::preflight_json;
using testing::require_one_line_error;
using testing::Scratch;
using testing::TarWriter;

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

