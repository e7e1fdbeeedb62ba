// Integration tier: every ELF file under /usr against readelf. The cases on synthetic inputs are
// tests/unit/test_differential.cpp.
// Differential: over every ELF file under /usr/bin and the machine's
// multiarch library directory, what memprofile reads agrees with readelf.
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

std::map<std::string, ReadelfFacts> readelf_all(const std::string& list_file, const std::string& anchor) {
  // readelf prints "File: X" headers only with several files: lead each
  // batch with an anchor file so every batch has at least two.
  testing::RunResult r = testing::run("xargs -d '\\n' -n 300 readelf -lWd " + testing::quote(anchor) + " < " +
                                      testing::quote(list_file));
  std::map<std::string, ReadelfFacts> out;
  std::regex file_re("^File: (.*)$");
  std::regex interp_re(R"(\[Requesting program interpreter: (.*)\]$)");
  std::regex needed_re(R"(\(NEEDED\)\s+Shared library: \[(.*)\]$)");
  ReadelfFacts* cur = nullptr;
  std::smatch m;
  for (const auto& line : testing::lines(r.out)) {
    if (std::regex_match(line, m, file_re)) {
      cur = &out[m[1]];
    } else if (!cur) {
      continue;
    } else if (std::regex_search(line, m, interp_re)) {
      cur->interpreter = m[1];
    } else if (std::regex_search(line, m, needed_re)) {
      cur->needed.push_back(m[1]);
    } else if (line.rfind("  DYNAMIC ", 0) == 0) {
      cur->dynamic = true;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("differential: linkage, interpreter and needed agree with readelf over /usr") {
  Scratch s;
  std::string multiarch = "/usr/lib/x86_64-linux-gnu";
  testing::RunResult r = testing::run_memprofile({"check", "--json", "/usr/bin", multiarch});
  REQUIRE((r.exit_code == 0 || r.exit_code == 1 || r.exit_code == 2));
  std::map<std::string, json> ours;
  std::string list;
  for (const auto& line : testing::lines(r.out)) {
    json j = json::parse(line);
    ours[j["path"]] = j;
    list += j["path"].get<std::string>() + "\n";
  }
  REQUIRE(ours.size() > 500);
  testing::write_file(s / "list", list);
  auto theirs = readelf_all(s / "list", testing::fixture("dynamic"));

  size_t compared = 0;
  std::vector<std::string> disagreements;
  for (const auto& [path, j] : ours) {
    auto it = theirs.find(path);
    if (it == theirs.end()) continue;
    const ReadelfFacts& t = it->second;
    ++compared;
    std::string linkage = j["linkage"];
    std::string interp = j["interpreter"].is_null() ? "" : j["interpreter"].get<std::string>();
    auto needed = j["needed"].get<std::vector<std::string>>();
    bool ok = interp == t.interpreter && needed == t.needed;
    if (linkage == "static") ok = ok && !t.dynamic;
    if (linkage == "dynamic") ok = ok && !t.interpreter.empty();
    if (linkage == "static-pie") ok = ok && t.dynamic && t.interpreter.empty() && t.needed.empty();
    if (!t.dynamic) ok = ok && (linkage == "static" || linkage == "relocatable" || linkage == "core");
    if (!ok) disagreements.push_back(path + " (ours: " + linkage + " " + interp + ")");
  }
  INFO("disagreements: " << disagreements.size() << (disagreements.empty() ? "" : ", first: " + disagreements[0]));
  CHECK(disagreements.empty());
  CHECK(compared + 5 >= ours.size());  // readelf read (nearly) all of them
  CHECK(compared > 500);
}

