// containers-registries.conf(5) as containers/image reads it for docker://
// pulls: the longest prefix, location rewriting, mirrors by digest or tag,
// blocked and insecure entries, the version 1 format, drop-in files, and
// one-line refusals of what upstream refuses. No network.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <fstream>

#include "base/error.h"
#include "network/registries_conf.h"
#include "support.h"

using namespace memprofile;
using testing::EnvGuard;
using testing::Scratch;

namespace {

std::vector<std::string> where(const std::string& conf, const std::string& ref) {
  std::vector<std::string> out;
  for (const auto& s : pull_sources(parse_registries_conf(conf, "test.conf", false), parse_registry_ref(ref)))
    out.push_back(s.ref.str() + (s.insecure ? " insecure" : "") + (s.mirror ? " mirror" : ""));
  return out;
}

const char* kExample = R"(
unqualified-search-registries = ["example.com"]

[[registry]]
prefix = "example.com/foo"
insecure = false
blocked = false
location = "internal-registry-for-example.com/bar"

[[registry.mirror]]
location = "example-mirror-0.local/mirror-for-foo"

[[registry.mirror]]
location = "example-mirror-1.local/mirrors/foo"
insecure = true

[[registry]]
location = "example.com"
)";

}  // namespace

TEST_CASE("registries.conf: the man page's example, mirrors first, then the location") {
  CHECK(where(kExample, "example.com/foo/image:latest") ==
        std::vector<std::string>{"example-mirror-0.local/mirror-for-foo/image:latest mirror",
                                 "example-mirror-1.local/mirrors/foo/image:latest insecure mirror",
                                 "internal-registry-for-example.com/bar/image:latest"});
  // The longest prefix wins; a prefix matches whole components only.
  CHECK(where(kExample, "example.com/foobar/image") == std::vector<std::string>{"example.com/foobar/image:latest"});
  CHECK(where(kExample, "other.io/foo/image") == std::vector<std::string>{"other.io/foo/image:latest"});
  // A digest goes along.
  std::string d = "@sha256:" + std::string(64, 'a');
  CHECK(where(kExample, "example.com/foo/x" + d).back() == "internal-registry-for-example.com/bar/x" + d);
}

TEST_CASE("registries.conf: mirrors by digest only, by tag only, and docker.io's library/") {
  std::string digest = "@sha256:" + std::string(64, 'b');
  const char* conf = R"(
[[registry]]
prefix = "docker.io/library"
location = "hub-cache.local:5000/library"
mirror-by-digest-only = true
[[registry.mirror]]
location = "digest-mirror.local/lib"

[[registry]]
location = "quay.io"
[[registry.mirror]]
location = "tags.local"
pull-from-mirror = "tag-only"
[[registry.mirror]]
location = "digests.local"
pull-from-mirror = "digest-only"
)";
  CHECK(where(conf, "debian:12") == std::vector<std::string>{"hub-cache.local:5000/library/debian:12"});
  CHECK(where(conf, "debian" + digest) == std::vector<std::string>{"digest-mirror.local/lib/debian" + digest + " mirror",
                                                                   "hub-cache.local:5000/library/debian" + digest});
  CHECK(where(conf, "quay.io/team/app:v1") ==
        std::vector<std::string>{"tags.local/team/app:v1 mirror", "quay.io/team/app:v1"});
  CHECK(where(conf, "quay.io/team/app" + digest) ==
        std::vector<std::string>{"digests.local/team/app" + digest + " mirror", "quay.io/team/app" + digest});
  // docker.io/alpine is not docker.io/library/alpine's prefix.
  CHECK(where(conf, "docker.io/someone/app").size() == 1);
}

TEST_CASE("registries.conf: blocked, insecure, wildcard hosts and the version 1 format") {
  const char* conf = R"(
[[registry]]
location = "blocked.io"
blocked = true
[[registry]]
prefix = "*.corp.example"
insecure = true
)";
  CHECK_THROWS_WITH(where(conf, "blocked.io/app"), Catch::Contains("test.conf") && Catch::Contains("blocked"));
  CHECK(where(conf, "reg.corp.example:5000/app") == std::vector<std::string>{"reg.corp.example:5000/app:latest insecure"});
  CHECK(where(conf, "corp.example/app") == std::vector<std::string>{"corp.example/app:latest"});
  const char* v1 = R"(
[registries.search]
registries = ['registry1.com']
[registries.insecure]
registries = ['registry3.com']
[registries.block]
registries = ['registry.untrusted.com']
)";
  CHECK(where(v1, "registry3.com/x") == std::vector<std::string>{"registry3.com/x:latest insecure"});
  CHECK_THROWS_WITH(where(v1, "registry.untrusted.com/x"), Catch::Contains("blocked"));
  CHECK_THROWS_WITH(parse_registries_conf(v1, "d.conf", true), Catch::Contains("version 2"));
}

TEST_CASE("registries.conf: what upstream refuses is one line naming the file") {
  auto refuse = [](const std::string& text, const std::string& says) {
    INFO(text);
    try {
      parse_registries_conf(text, "bad.conf", false);
      FAIL("accepted");
    } catch (const FileError& e) {
      std::string what = e.what();
      CHECK(what.rfind("bad.conf: ", 0) == 0);
      CHECK(what.find('\n') == std::string::npos);
      CHECK_THAT(what, Catch::Contains(says));
    }
  };
  refuse("[[registry]]\nprefix = \"a.io\"\n", "location is unset");
  refuse("[[registry]]\ninsecure = true\n", "both location and prefix are unset");
  refuse("[[registry]]\nlocation = \"https://a.io\"\n", "URI schemes are not supported");
  refuse("[[registry]]\nlocation = \"a.io\"\npull-from-mirror = \"all\"\n", "non-mirror registry");
  refuse("[[registry]]\nlocation = \"a.io\"\n[[registry.mirror]]\nlocation = \"m.io\"\npull-from-mirror = \"some\"\n",
         "unsupported pull-from-mirror value");
  refuse("[[registry]]\nlocation = \"a.io\"\nmirror-by-digest-only = true\n[[registry.mirror]]\nlocation = \"m.io\"\n"
         "pull-from-mirror = \"all\"\n",
         "at the same time");
  refuse("[[registry]]\nprefix = \"*.a.io/ns\"\n", "*.example.com");
  refuse("[[registry]]\nlocation = 5\n", "\"location\" must be a string");
  refuse("[[registry]]\nlocation = \"a.io\"\ninsecure = \"yes\"\n", "\"insecure\" must be true or false");
  refuse("registry = 3\n", "\"registry\" must be an array of tables");
  refuse("[registries.block]\nregistries = ['a.io']\n[[registry]]\nlocation = \"b.io\"\n", "mixing");
  refuse("[[registry]\nlocation = \"a.io\"\n", "malformed TOML: line");
  refuse("a = " + std::string(10000, '[') + "\n", "nested deeper than 32");
  refuse(std::string(5000, 'a') + "\n", "malformed TOML");
  std::string dotted = "a";
  for (int i = 0; i < 100000; ++i) dotted += ".a";
  refuse(dotted + " = 1\n", "a key of more than 32 parts");
  // A multi-line string may end in one or two extra quotes: the scanner
  // must not lose track of what follows (the parser would recurse).
  refuse("a = [\"\"\"x\"\"\"\", " + std::string(10000, '[') + std::string(10000, ']') + " ]\n", "nested deeper than 32");
  refuse("a = ['''x'''', " + std::string(10000, '{') + "\n", "nested deeper than 32");
  // The parser's time grows with the square of a line's values.
  std::string wide = "a = [";
  for (int i = 0; i < 10000; ++i) wide += "1,";
  refuse(wide + "]\n", "line 1: longer than 8 KiB");
  refuse("x = 1\ny = \"" + std::string(9000, 'a') + "\"", "line 2: longer than 8 KiB");
  // TOML is UTF-8; toml11 read past its buffer on an unterminated literal
  // string of invalid bytes (fuzz_registries_conf found it).
  refuse("[registries.search]\nregistries = ['a.i" + std::string(200, '\xde'), "line 2: not UTF-8");
  refuse("x = \"\xed\xa0\x80\"\n", "not UTF-8");  // a surrogate
  CHECK(parse_registries_conf("# caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x90\xb3\n[[registry]]\nlocation = \"a.io\"\n", "ok.conf", false)
            .registries.size() == 1);
  // Shapes upstream refuses as type mismatches, and conflicting entries.
  refuse("registries = 5\n", "\"registries\" must be a table");
  refuse("[registries]\nblock = [\"a.io\"]\n", "\"block\" must be a table");
  refuse("[[registry]]\nlocation = \"a.io\"\n[[registry]]\nprefix = \"b.io\"\nlocation = \"a.io\"\ninsecure = true\n",
         "conflicting 'insecure'");
  refuse("[[registry]]\nlocation = \"a.io\"\n[[registry]]\nprefix = \"b.io\"\nlocation = \"a.io\"\nblocked = true\n",
         "conflicting 'blocked'");
  // Strings and comments may hold any brackets and dots.
  CHECK(parse_registries_conf("# [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[ ....................................\n"
                              "[[registry]]\nlocation = \"a.io/" + std::string(100, '[') + "\" # {{{\n",
                              "ok.conf", false)
            .registries.size() == 1);
}

TEST_CASE("registries.conf: ports, host case, and rewrites that are not canonical names") {
  // A prefix without a port covers the host's ports too (upstream's rule);
  // the port goes along to the location.
  CHECK(where("[[registry]]\nprefix = \"a.io\"\nlocation = \"b.io\"\n", "a.io:5000/x") ==
        std::vector<std::string>{"b.io:5000/x:latest"});
  CHECK(where("[[registry]]\nlocation = \"localhost\"\ninsecure = true\n", "localhost:5000/x") ==
        std::vector<std::string>{"localhost:5000/x:latest insecure"});
  // Hosts compare in lower case.
  CHECK(where("[[registry]]\nprefix = \"A.IO\"\nlocation = \"b.io\"\n", "A.IO/x") ==
        std::vector<std::string>{"b.io/x:latest"});
  // docker.io as a location would need library/: upstream refuses, rather
  // than pull another image.
  CHECK_THROWS_WITH(where("[[registry]]\nprefix = \"a.io\"\nlocation = \"docker.io\"\n", "a.io/x"),
                    Catch::Contains("not a canonical image reference") && Catch::Contains("docker.io/library/x"));
  CHECK_THROWS_WITH(where("[[registry]]\nprefix = \"a.io/x\"\nlocation = \"a.io\"\n", "a.io/x"),
                    Catch::Contains("not a canonical image reference"));
}

TEST_CASE("registries.conf: the files, and drop-ins replacing entries by prefix") {
  Scratch s;
  EnvGuard home("HOME", s.path().c_str()), named("CONTAINERS_REGISTRIES_CONF", nullptr);
  mkdir((s / ".config").c_str(), 0755);
  mkdir((s / ".config/containers").c_str(), 0755);
  mkdir((s / ".config/containers/registries.conf.d").c_str(), 0755);
  std::ofstream(s / "main.conf") << "[[registry]]\nprefix = \"a.io\"\nlocation = \"first.local\"\n"
                                    "[[registry]]\nprefix = \"b.io\"\nlocation = \"kept.local\"\n";
  std::ofstream(s / ".config/containers/registries.conf.d/10-a.conf") << "[[registry]]\nprefix = \"a.io\"\nlocation = \"second.local\"\n";
  std::ofstream(s / ".config/containers/registries.conf.d/20-a.conf") << "[[registry]]\nprefix = \"a.io\"\nlocation = \"third.local\"\n";
  std::ofstream(s / ".config/containers/registries.conf.d/ignored.txt") << "not toml [[[";
  RegistriesConf c = load_registries_conf(s / "main.conf");
  CHECK(pull_sources(c, parse_registry_ref("a.io/x")).at(0).ref.registry == "third.local");
  CHECK(pull_sources(c, parse_registry_ref("b.io/x")).at(0).ref.registry == "kept.local");
  CHECK_THAT(c.files, Catch::Contains("main.conf") && Catch::Contains("20-a.conf") && !Catch::Contains("ignored"));
  {
    EnvGuard env("CONTAINERS_REGISTRIES_CONF", (s / "main.conf").c_str());
    CHECK(pull_sources(load_registries_conf(""), parse_registry_ref("b.io/x")).at(0).ref.registry == "kept.local");
  }
  // The user's own file replaces the system's.
  std::ofstream(s / ".config/containers/registries.conf") << "[[registry]]\nprefix = \"b.io\"\nlocation = \"user.local\"\n";
  CHECK(pull_sources(load_registries_conf(""), parse_registry_ref("b.io/x")).at(0).ref.registry == "user.local");
  // A file named on the command line must exist; a drop-in in the old format is refused.
  CHECK_THROWS_WITH(load_registries_conf(s / "missing.conf"), Catch::Contains("missing.conf: does not exist"));
  // Only regular files: a FIFO would block the open.
  REQUIRE(mkfifo((s / "fifo.conf").c_str(), 0600) == 0);
  CHECK_THROWS_WITH(load_registries_conf(s / "fifo.conf"), Catch::Contains("fifo.conf: not a regular file"));
  std::ofstream(s / ".config/containers/registries.conf.d/30-v1.conf") << "[registries.insecure]\nregistries = ['x.io']\n";
  CHECK_THROWS_WITH(load_registries_conf(""), Catch::Contains("30-v1.conf") && Catch::Contains("version 2"));
}
