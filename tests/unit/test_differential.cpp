// Unit tier: needs nothing but this machine's own /usr. The cases on every
// ELF file under /usr against readelf are tests/integration/test_differential_readelf.cpp.
// What no ordinary library of this machine's /usr is called.
#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "support.h"

using nlohmann::json;
using testing::Scratch;

namespace {

struct ReadelfFacts {
  std::string interpreter;
  std::vector<std::string> needed;
  bool dynamic = false;
};

}  // namespace

TEST_CASE("differential: no ordinary library in /usr is called static-pie") {
  // file(1) 5.44 calls dozens of libraries here "static-pie"; a library with
  // a SONAME or DT_NEEDED is never one.
  testing::RunResult r = testing::run_memprofile({"check", "--json", "/usr/lib/x86_64-linux-gnu"});
  size_t libs = 0;
  for (const auto& line : testing::lines(r.out)) {
    json j = json::parse(line);
    if (j["linkage"] == "static-pie") {
      INFO(j["path"]);
      CHECK(j["soname"].is_null());
      CHECK(j["needed"].empty());
    }
    libs += j["linkage"] == "shared-library";
  }
  CHECK(libs > 100);
}
