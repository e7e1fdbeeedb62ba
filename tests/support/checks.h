// Catch2 checks shared by the unit and integration tiers: how a failed
// command must look, and preflight's JSON verdict.
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support.h"

namespace testing {

// Exactly one line on stderr, starting "memprofile: ", saying `what`; exit 2.
inline void require_one_line_error(const RunResult& r, const std::string& what) {
  INFO("stderr: " << r.err << "\nstdout: " << r.out);
  CHECK(r.exit_code == 2);
  auto l = lines(r.err);
  REQUIRE(l.size() == 1);
  CHECK_THAT(l[0], Catch::StartsWith("memprofile: ") && Catch::Contains(what));
}

// The same, with the line naming `path` first ("memprofile: <path>: ").
inline void require_one_line_error(const RunResult& r, const std::string& path, const std::string& what) {
  INFO("stderr: " << r.err << "\nstdout: " << r.out);
  CHECK(r.exit_code == 2);
  auto l = lines(r.err);
  REQUIRE(l.size() == 1);
  CHECK_THAT(l[0], Catch::StartsWith("memprofile: " + path + ": "));
  CHECK_THAT(l[0], Catch::Contains(what));
}

// `memprofile preflight --json ARGS`, which must exit `want_exit`.
inline nlohmann::json preflight_json(std::vector<std::string> args, int want_exit) {
  args.insert(args.begin(), {"preflight", "--json"});
  RunResult r = run_memprofile(args);
  INFO("stderr: " << r.err << "\nstdout: " << r.out);
  REQUIRE(r.exit_code == want_exit);
  return nlohmann::json::parse(lines(r.out).at(0));
}

// The finding codes of a preflight verdict, in order.
inline std::vector<std::string> codes(const nlohmann::json& j) {
  std::vector<std::string> out;
  for (const auto& f : j["findings"]) out.push_back(f["code"]);
  return out;
}

inline bool has(const nlohmann::json& j, const std::string& code) {
  auto c = codes(j);
  return std::find(c.begin(), c.end(), code) != c.end();
}

}  // namespace testing
