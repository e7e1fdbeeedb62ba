// Every finding code is documented with its cause and fix.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <set>

#include "verdict/findings.h"
#include "support.h"

TEST_CASE("docs/findings.md documents every finding code") {
  std::string doc = testing::read_file(testing::source_dir() + "/docs/findings.md");
  REQUIRE_FALSE(doc.empty());
  for (const auto& spec : memprofile::finding_catalog()) {
    INFO(spec.code);
    CHECK_THAT(doc, Catch::Contains(std::string("## `") + spec.code + "`"));
  }
}

TEST_CASE("finding codes are unique") {
  std::set<std::string> seen;
  for (const auto& spec : memprofile::finding_catalog()) CHECK(seen.insert(spec.code).second);
}
