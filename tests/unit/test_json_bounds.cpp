// JSON from an image is parsed into a tree only after a counting pass: a
// 4 MiB config of tiny values, or nested brackets, would otherwise cost a
// hundred megabytes (#12).
#include <catch2/catch.hpp>

#include "archive_builder.h"
#include "base/error.h"
#include "base/json_text.h"
#include "support.h"

using memprofile::FileError;
using memprofile::kMaxJsonDepth;
using memprofile::kMaxJsonValues;
using memprofile::parse_json_bounded;

TEST_CASE("json: a real-sized document parses as before") {
  auto j = parse_json_bounded(R"({"config":{"Env":["A=1","B=2"]},"rootfs":{"diff_ids":[]}})", "config.json");
  CHECK(j["config"]["Env"][1] == "B=2");
}

TEST_CASE("json: too many values, too deep, or malformed: one line naming the file") {
  std::string flat = "[" + std::string(kMaxJsonValues * 2, '0') + "]";
  for (size_t i = 2; i < flat.size() - 1; i += 2) flat[i] = ',';
  CHECK_THROWS_WITH(parse_json_bounded(flat, "cfg.json"),
                    Catch::Equals("cfg.json: more than " + std::to_string(kMaxJsonValues) + " JSON values (memprofile's limit)"));
  std::string deep = std::string(kMaxJsonDepth + 1, '[') + std::string(kMaxJsonDepth + 1, ']');
  CHECK_THROWS_WITH(parse_json_bounded(deep, "cfg.json"), Catch::Contains("cfg.json: JSON nested more than"));
  std::string ok_deep = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  CHECK_NOTHROW(parse_json_bounded(ok_deep, "cfg.json"));
  CHECK_THROWS_WITH(parse_json_bounded("{\"a\":", "cfg.json"), Catch::StartsWith("cfg.json: malformed JSON: "));
  CHECK_THROWS_AS(parse_json_bounded("{\"a\":", "cfg.json"), FileError);
}

TEST_CASE("json: preflight refuses a config of a million values with exit 2 and one line") {
  testing::OciImage img;
  img.layer(testing::TarWriter().add("app", "x", '0', 0755).finish());
  std::string values(2'000'000, '0');
  for (size_t i = 1; i < values.size(); i += 2) values[i] = ',';
  values.pop_back();
  img.config_override = R"({"architecture":"amd64","os":"linux","config":{"Entrypoint":["/app"]},"history":[)" + values + "]}";
  testing::Scratch s;
  img.write(s / "oci");
  auto r = testing::run_memprofile({"preflight", s / "oci"});
  CHECK(r.exit_code == 2);
  CHECK(testing::lines(r.err).size() == 1);
  CHECK_THAT(r.err, Catch::Contains("JSON values (memprofile's limit)"));
}

TEST_CASE("json: a parse error quotes nothing of the file (it may be a secret a link led to)") {
  std::string what;
  try {
    parse_json_bounded("\"root:$6$secret-hash:19000:0:99999:7:::\nbin:x", "/out/memprofile-proc.1.json");
  } catch (const FileError& e) {
    what = e.what();
  }
  CHECK_THAT(what, Catch::StartsWith("/out/memprofile-proc.1.json: malformed JSON"));
  CHECK(what.find("secret") == std::string::npos);
  CHECK(what.find("root") == std::string::npos);
}
