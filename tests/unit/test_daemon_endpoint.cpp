// docker-daemon: names (":latest" added as docker run means it, IDs and
// digests kept) and the daemon found as the docker CLI finds it: DOCKER_HOST,
// else the current context, else the default socket. No daemon needed.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "base/stream.h"
#include "network/daemon.h"
#include "support.h"

using namespace memprofile;
using testing::EnvGuard;
using testing::Scratch;

TEST_CASE("docker-daemon names: a bare name means :latest, tags, digests and IDs are kept", "[daemon]") {
  CHECK(daemon_image_name("app") == "app:latest");
  CHECK(daemon_image_name("localhost/leaky") == "localhost/leaky:latest");
  CHECK(daemon_image_name("localhost:5000/team/app") == "localhost:5000/team/app:latest");
  CHECK(daemon_image_name("localhost:5000/team/app:1.4") == "localhost:5000/team/app:1.4");
  CHECK(daemon_image_name("app@sha256:0123") == "app@sha256:0123");
  CHECK(daemon_image_name("sha256:60ffaa4b52df") == "sha256:60ffaa4b52df");
  CHECK_THROWS_WITH(daemon_image_name(""), Catch::Contains("names no image"));
  CHECK_THROWS_WITH(daemon_image_name("a b"), Catch::Contains("no spaces or control characters"));
}

TEST_CASE("the daemon: DOCKER_HOST first, then the current context, then the default socket", "[daemon]") {
  Scratch dir;
  EnvGuard config("DOCKER_CONFIG", dir.path().c_str());
  EnvGuard context("DOCKER_CONTEXT", nullptr);
  EnvGuard tls("DOCKER_TLS_VERIFY", nullptr);
  EnvGuard tls2("DOCKER_TLS", nullptr);
  EnvGuard cert("DOCKER_CERT_PATH", nullptr);
  {
    EnvGuard host("DOCKER_HOST", nullptr);
    DaemonEndpoint ep = daemon_endpoint();
    CHECK(ep.host == "unix:///var/run/docker.sock");
    CHECK(ep.unix_socket == "/var/run/docker.sock");
    CHECK(ep.from == "the default");
  }
  // A context, named in config.json; its files sit under the hash of its name.
  std::string hash = sha256_hex("remote");
  std::filesystem::create_directories(dir / ("contexts/meta/" + hash));
  std::ofstream(dir / ("contexts/meta/" + hash + "/meta.json"))
      << R"({"Name":"remote","Endpoints":{"docker":{"Host":"tcp://10.0.0.5","SkipTLSVerify":false}}})";
  std::ofstream(dir / "config.json") << R"({"currentContext":"remote"})";
  {
    EnvGuard host("DOCKER_HOST", nullptr);
    DaemonEndpoint ep = daemon_endpoint();
    CHECK(ep.from == "docker context remote");
    CHECK(ep.base_url == "http://10.0.0.5:2375");
    CHECK(ep.unix_socket.empty());
  }
  {
    EnvGuard host("DOCKER_HOST", "unix:///run/user/1000/docker.sock");  // beats the context
    DaemonEndpoint ep = daemon_endpoint();
    CHECK(ep.from == "DOCKER_HOST");
    CHECK(ep.unix_socket == "/run/user/1000/docker.sock");
  }
  {
    EnvGuard host("DOCKER_HOST", nullptr);
    EnvGuard ctx("DOCKER_CONTEXT", "default");  // beats config.json
    CHECK(daemon_endpoint().host == "unix:///var/run/docker.sock");
  }
  {
    EnvGuard host("DOCKER_HOST", nullptr);
    EnvGuard ctx("DOCKER_CONTEXT", "gone");
    CHECK_THROWS_WITH(daemon_endpoint(), Catch::Contains("docker context gone") && Catch::Contains("is missing"));
  }
}

TEST_CASE("the daemon over TCP: ports and TLS as the docker CLI sets them", "[daemon]") {
  Scratch dir;
  std::ofstream(dir / "ca.pem") << "-----BEGIN CERTIFICATE-----\n";
  EnvGuard context("DOCKER_CONTEXT", nullptr);
  EnvGuard cert("DOCKER_CERT_PATH", dir.path().c_str());
  {
    EnvGuard host("DOCKER_HOST", "tcp://build.example:2375");
    EnvGuard tls("DOCKER_TLS_VERIFY", nullptr);
    EnvGuard tls2("DOCKER_TLS", nullptr);
    CHECK(daemon_endpoint().base_url == "http://build.example:2375");
  }
  {
    EnvGuard host("DOCKER_HOST", "tcp://[::1]");
    EnvGuard tls("DOCKER_TLS_VERIFY", "1");
    DaemonEndpoint ep = daemon_endpoint();
    CHECK(ep.base_url == "https://[::1]:2376");
    CHECK(ep.tls.verify);
    CHECK(ep.tls.extra_ca_pem.find("BEGIN CERTIFICATE") != std::string::npos);
  }
  {
    EnvGuard host("DOCKER_HOST", "ssh://me@build");
    CHECK_THROWS_WITH(daemon_endpoint(), Catch::Contains("forward the socket"));
  }
  {
    EnvGuard host("DOCKER_HOST", "unix://relative.sock");
    CHECK_THROWS_WITH(daemon_endpoint(), Catch::Contains("absolute path"));
  }
}
