// docker:// references normalised as docker and skopeo do (docker.io,
// library/, latest), WWW-Authenticate challenges, and credentials from auth
// files and --creds. No network.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>

#include "base/error.h"
#include "network/reference.h"
#include "network/auth.h"
#include "support.h"

using namespace memprofile;
using testing::EnvGuard;
using testing::Scratch;

namespace {
std::string norm(const std::string& name) { return parse_registry_ref(name).str(); }
}  // namespace

TEST_CASE("registry references are normalised as docker and skopeo normalise them") {
  CHECK(norm("debian") == "docker.io/library/debian:latest");
  CHECK(norm("debian:12") == "docker.io/library/debian:12");
  CHECK(norm("library/debian") == "docker.io/library/debian:latest");
  CHECK(norm("grafana/grafana:10.0") == "docker.io/grafana/grafana:10.0");
  CHECK(norm("docker.io/debian") == "docker.io/library/debian:latest");
  CHECK(norm("index.docker.io/debian") == "docker.io/library/debian:latest");
  CHECK(norm("quay.io/prometheus/node-exporter") == "quay.io/prometheus/node-exporter:latest");
  CHECK(norm("localhost/app") == "localhost/app:latest");
  CHECK(norm("localhost:5000/app:v1") == "localhost:5000/app:v1");
  CHECK(norm("127.0.0.1:5000/a/b/c:v1.2-rc_3") == "127.0.0.1:5000/a/b/c:v1.2-rc_3");
  // A first component without a dot or a port is a namespace on docker.io.
  CHECK(norm("myhost/app") == "docker.io/myhost/app:latest");
  // Only the registry is case-insensitive.
  CHECK(norm("GHCR.IO/owner/app") == "ghcr.io/owner/app:latest");
  std::string d = "sha256:" + std::string(64, 'a');
  RegistryRef r = parse_registry_ref("ghcr.io/owner/app@" + d);
  CHECK(r.registry == "ghcr.io");
  CHECK(r.repository == "owner/app");
  CHECK(r.tag.empty());
  CHECK(r.digest == d);
  CHECK(r.str() == "ghcr.io/owner/app@" + d);
  CHECK(parse_registry_ref("debian").api_host() == "registry-1.docker.io");
  CHECK(parse_registry_ref("localhost:5000/app").api_host() == "localhost:5000");
}

TEST_CASE("malformed registry references are refused with the expected syntax") {
  CHECK_THROWS_WITH(parse_registry_ref(""), Catch::Contains("no image named"));
  CHECK_THROWS_WITH(parse_registry_ref("Debian"), Catch::Contains("malformed repository"));
  CHECK_THROWS_WITH(parse_registry_ref("quay.io//app"), Catch::Contains("malformed repository"));
  CHECK_THROWS_WITH(parse_registry_ref("app:-x"), Catch::Contains("malformed tag"));
  CHECK_THROWS_WITH(parse_registry_ref("app@sha256:abc"), Catch::Contains("malformed digest"));
  CHECK_THROWS_WITH(parse_registry_ref("app:v1@sha256:" + std::string(64, 'a')), Catch::Contains("both a tag and a digest"));
  CHECK_THROWS_WITH(parse_registry_ref("quay.io/App"), Catch::Contains("docker://[HOST[:PORT]/]REPOSITORY"));
  CHECK_NOTHROW(parse_registry_ref("quay.io/app"));
}

TEST_CASE("WWW-Authenticate challenges are parsed, quoted commas included") {
  auto c = parse_challenges(
      "Bearer realm=\"https://auth.example.com/token\",service=\"registry.example.com\",scope=\"repository:a/b:pull,push\"");
  REQUIRE(c.size() == 1);
  CHECK(c[0].scheme == "bearer");
  CHECK(c[0].params.at("realm") == "https://auth.example.com/token");
  CHECK(c[0].params.at("service") == "registry.example.com");
  CHECK(c[0].params.at("scope") == "repository:a/b:pull,push");
  c = parse_challenges("Basic realm=\"Registry Realm\"");
  REQUIRE(c.size() == 1);
  CHECK(c[0].scheme == "basic");
  CHECK(c[0].params.at("realm") == "Registry Realm");
  c = parse_challenges("Basic realm=x, Bearer realm=\"y\", service=z");
  REQUIRE(c.size() == 2);
  CHECK(c[1].scheme == "bearer");
  CHECK(c[1].params.at("service") == "z");
  CHECK(parse_challenges("").empty());
}

TEST_CASE("base64 round trips") {
  for (const std::string& s : std::vector<std::string>{"", "a", "ab", "abc", "alice:s3cret", std::string("\0\xff\x10", 3)})
    CHECK(base64_decode(base64_encode(s)) == s);
  CHECK(base64_encode("alice:s3cret") == "YWxpY2U6czNjcmV0");
}

TEST_CASE("credentials: --creds, then --authfile, by registry and by namespace") {
  Scratch s;
  RegistryRef ref = parse_registry_ref("127.0.0.1:5000/team/app:v1");
  RegistryOptions o;
  o.creds = "bob:pw:with:colons";
  Credentials c = find_credentials(ref, o);
  CHECK(c.user == "bob");
  CHECK(c.password == "pw:with:colons");
  CHECK(c.from == "--creds");

  std::ofstream(s / "auth.json") << R"({"auths": {
    "https://127.0.0.1:5000/v1/": {"auth": ")" << base64_encode("alice:one") << R"("},
    "127.0.0.1:5000/team": {"auth": ")" << base64_encode("alice:two") << R"("},
    "other.io": {"auth": ")" << base64_encode("eve:x") << R"("}}})";
  o.creds.clear();
  o.authfile = s / "auth.json";
  c = find_credentials(ref, o);
  CHECK(c.user == "alice");
  CHECK(c.password == "two");  // the namespace key is the longer match
  CHECK(c.from == s / "auth.json");
  c = find_credentials(parse_registry_ref("127.0.0.1:5000/else/app"), o);
  CHECK(c.password == "one");
  std::ofstream(s / "hub.json") << R"({"auths": {"https://index.docker.io/v1/": {"auth": ")" << base64_encode("hub:pw")
                                << R"("}}})";
  o.authfile = s / "hub.json";
  CHECK(find_credentials(parse_registry_ref("debian"), o).user == "hub");
  {
    EnvGuard home("HOME", s.path().c_str()), xdg("XDG_RUNTIME_DIR", nullptr), file("REGISTRY_AUTH_FILE", nullptr),
        docker("DOCKER_CONFIG", nullptr);
    CHECK(find_credentials(ref, o).empty());  // not in hub.json, and no ~/.docker/config.json
    o.authfile.clear();
    CHECK(find_credentials(ref, o).empty());
    EnvGuard file2("REGISTRY_AUTH_FILE", (s / "auth.json").c_str());
    CHECK(find_credentials(ref, o).password == "two");
  }

  std::ofstream(s / "bad.json") << "{not json";
  o.authfile = s / "bad.json";
  CHECK_THROWS_AS(find_credentials(ref, o), FileError);
  o.authfile = s / "missing.json";
  CHECK_THROWS_WITH(find_credentials(ref, o), Catch::Contains("--authfile"));
}

TEST_CASE("credentials: an entry's identitytoken comes before its auth, and is never a user") {
  Scratch s;
  RegistryRef ref = parse_registry_ref("127.0.0.1:5000/team/app:v1");
  RegistryOptions o;
  std::ofstream(s / "auth.json") << R"({"auths": {"127.0.0.1:5000": {"auth": ")" << base64_encode("alice:pw")
                                 << R"(", "identitytoken": "refresh-1"}}})";
  o.authfile = s / "auth.json";
  Credentials c = find_credentials(ref, o);
  CHECK(c.identity_token == "refresh-1");
  CHECK(c.user.empty());
  CHECK(c.password.empty());
  CHECK_FALSE(c.empty());
  CHECK(c.who() == "the identity token from " + s / "auth.json");
  std::ofstream(s / "plain.json") << R"({"auths": {"127.0.0.1:5000": {"auth": ")" << base64_encode("alice:pw")
                                  << R"(", "identitytoken": ""}}})";
  o.authfile = s / "plain.json";
  c = find_credentials(ref, o);
  CHECK(c.identity_token.empty());
  CHECK(c.who() == "the credentials of alice from " + s / "plain.json");
}
