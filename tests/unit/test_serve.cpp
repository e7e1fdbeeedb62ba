// memprofile serve's routes and policy without a socket (serve/serve.h), its
// listen addresses and token file (http_server.h), and its metrics' text
// (metrics.h) from a tree's answer, checked against the text format's rules.
#include <catch2/catch.hpp>
#include <fstream>
#include <optional>

#include "base/error.h"
#include "serve/http_server.h"
#include "serve/metrics.h"
#include "serve/serve.h"
#include "support.h"

using namespace memprofile;
using testing::Scratch;

namespace {

// One request through the service; the answer it gave at once.
HttpResponse ask(Service& s, const std::string& method, const std::string& path, const std::string& query = "",
                 const std::string& authorization = "") {
  std::optional<HttpResponse> got;
  s.handle({method, path, query, authorization}, [&](HttpResponse r) { got = std::move(r); });
  REQUIRE(got);
  return *got;
}

}  // namespace

// ?seconds under the minimum interval is taken (answered over the interval:
// tests/e2e/serve_http.sh), so it does not answer at once.
TEST_CASE("serve: routes, methods and ?seconds are answered before any snapshot") {
  ServeOptions o;
  o.target.pid = 999999999;  // no such process: a snapshot would fail, and none is asked for
  o.min_interval = 5;
  o.max_seconds = 60;
  Service s(o);
  CHECK(ask(s, "GET", "/debug/pprof/goroutine").status == 404);
  CHECK(ask(s, "GET", "/").status == 404);
  HttpResponse post = ask(s, "POST", "/metrics");
  CHECK(post.status == 405);
  CHECK(post.headers == std::vector<std::pair<std::string, std::string>>{{"Allow", "GET"}});
  CHECK(ask(s, "DELETE", "/debug/pprof/heap").status == 405);
  for (const char* q : {"seconds=0", "seconds=-1", "seconds=abc", "seconds=61", "seconds=99999999999", "seconds="})
    CHECK(ask(s, "GET", "/debug/pprof/heap", q).status == 400);
  HttpResponse index = ask(s, "GET", "/debug/pprof/");
  CHECK(index.status == 200);
  CHECK_THAT(index.body, Catch::Contains("href=\"allocs\""));
  s.shutdown();
}

TEST_CASE("serve: with a token, every path needs it, compared whole, its scheme in any case") {
  Scratch dir;
  const std::string file = dir.path() + "/token";
  std::ofstream(file) << "  s3cret-token \n";
  ServeOptions o;
  o.target.pid = 999999999;
  o.token_file = file;
  Service s(o);
  CHECK(ask(s, "GET", "/debug/pprof/").status == 401);
  CHECK(ask(s, "GET", "/nope", "", "Bearer s3cret-token").status == 404);
  CHECK(ask(s, "GET", "/debug/pprof/", "", "Bearer s3cret-toke").status == 401);
  CHECK(ask(s, "GET", "/debug/pprof/", "", "Bearer s3cret-tokenX").status == 401);
  // RFC 7235 2.1: the scheme is a case-insensitive token.
  CHECK(ask(s, "GET", "/debug/pprof/", "", "bearer s3cret-token").status == 200);
  CHECK(ask(s, "GET", "/debug/pprof/", "", "BEARER s3cret-token").status == 200);
  CHECK(ask(s, "GET", "/debug/pprof/", "", "Bearer  s3cret-token").status == 200);
  CHECK(ask(s, "GET", "/debug/pprof/", "", "Bearers3cret-token").status == 401);
  CHECK(ask(s, "GET", "/debug/pprof/", "", "Basic s3cret-token").status == 401);
  CHECK(ask(s, "GET", "/debug/pprof/", "", "Bearer s3cret-token").status == 200);
  s.shutdown();
  std::ofstream(file) << "\n";
  CHECK_THROWS_WITH(read_token(file), Catch::Contains("token: the token file's first line is empty"));
  CHECK_THROWS_WITH(read_token(dir.path() + "/none"), Catch::Contains("none: cannot read the token file"));
}

TEST_CASE("serve: listen addresses, and the token an open one needs") {
  CHECK(parse_listen("127.0.0.1:6060").port == 6060);
  CHECK(parse_listen(":0").host == "127.0.0.1");
  CHECK(parse_listen("[::1]:80").host == "::1");
  CHECK(is_loopback("127.3.4.5"));
  CHECK(is_loopback("::1"));
  CHECK_FALSE(is_loopback("0.0.0.0"));
  CHECK_FALSE(is_loopback("10.1.2.3"));
  for (const char* bad : {"localhost:80", "127.0.0.1", "127.0.0.1:65536", "127.0.0.1:-1", "1.2.3.4:x"})
    CHECK_THROWS_AS(parse_listen(bad), Error);
  ServeOptions o;
  o.listen = "0.0.0.0:6060";
  CHECK_THROWS_WITH(check_serve_options(o), Catch::Contains("needs a bearer token: --token-file"));
  o.listen = "127.0.0.1:6060";
  o.min_interval = -1;
  CHECK_THROWS_AS(check_serve_options(o), Error);
}

TEST_CASE("serve: /metrics' text: one HELP and TYPE a family, labels escaped, not UTF-8 replaced") {
  TreeAnswer t;
  Member m;
  m.pid = 3999998;
  m.comm = "w\"ork\\er\nx\xff";
  m.reply = nlohmann::json{{"ok", true}, {"pid", 3999998}, {"program", "/app/a\"b"}, {"backend", "jemalloc"}, {"recording", true},
                           {"allocator", {{"name", "jemalloc"}, {"allocated", 100}, {"resident", 300}}},
                           {"disk_bytes", 7}, {"max_bytes", 9}, {"free_bytes", 11}, {"min_free_bytes", 1},
                           {"output_dir", "/out"}};
  m.memory.known = true;
  m.memory.rss = 1000;
  m.memory.anon = 800;
  t.ms.push_back(m);
  Member gone;
  gone.pid = 3999999;
  gone.comm = "w\"ork\\er\nx\xff";
  t.ms.push_back(gone);
  t.served = 1;
  const std::string text = metrics_text(t);
  CHECK_THAT(text, Catch::Contains("# HELP memprofile_process_served "));
  CHECK_THAT(text, Catch::Contains("# TYPE memprofile_process_served gauge\n"));
  // Process 3999998 is not this machine's: its program is its answer's.
  CHECK_THAT(text, Catch::Contains("memprofile_process_served{pid=\"3999998\",program=\"/app/a\\\"b\",backend=\"jemalloc\"} 1\n"));
  CHECK_THAT(text, Catch::Contains("memprofile_process_served{pid=\"3999999\",program=\"w\\\"ork\\\\er\\nx\xEF\xBF\xBD\",backend=\"\"} 0\n"));
  CHECK_THAT(text, Catch::Contains("state=\"allocated\"} 100\n"));
  CHECK_THAT(text, Catch::Contains("memprofile_profiles_budget_bytes{root_pid=\"3999998\",output_dir=\"/out\"} 9\n"));
  // Each family's HELP once.
  size_t helps = 0;
  for (size_t at = text.find("# HELP memprofile_process_allocator_bytes "); at != std::string::npos;
       at = text.find("# HELP memprofile_process_allocator_bytes ", at + 1))
    ++helps;
  CHECK(helps == 1);
}
