// `memprofile serve`: a running tree's heap and memory where fleets already
// look. GET /debug/pprof/heap (and /debug/pprof/allocs, the path Grafana
// Alloy's pyroscope.scrape fetches): a gzipped pprof profile of every
// member's heap now (tree_profile.h); ?seconds=N, the growth over N seconds;
// /metrics: Prometheus' text (metrics.h); /debug/pprof/: an index. The
// policy that keeps the app safe is here: one snapshot at a time, a
// minimum interval between two, scrapes that come during one share its
// answer (or get 429 past a bound), a token on any address but loopback.
// The bytes go out through http_server.h.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/memory_ceiling.h"
#include "runtime/tree_control.h"
#include "serve/http_server.h"

namespace memprofile {

struct ServeOptions {
  ControlRequest target;  // the tree: pid, output dir, config, the answer's timeout
  std::string listen = "127.0.0.1:6060";
  std::string token_file;
  double min_interval = 10;     // seconds from one snapshot's start to the next's (at most a day)
  unsigned max_seconds = 300;   // ?seconds=N past it: 400
  size_t max_waiting = 32;      // scrapes sharing one snapshot; past it 429
  double metrics_max_age = 1;   // seconds a /metrics answer is shared
  uint64_t max_memory_mib = kServeMemoryCeiling >> 20;  // the process's memory ceiling (base/memory_ceiling.h)
  HttpLimits limits;
  // exec --serve: serve is a child of the program it serves. It ends when
  // the program waits for a child and it is the only one left: a program
  // that waits for all its children as it exits is not kept waiting.
  bool child_of_target = false;
};

// Reads the token file (one line; surrounding blanks dropped). Throws
// FileError naming it when it cannot, or it is empty or holds a control
// character.
std::string read_token(const std::string& path);

class Service {
 public:
  explicit Service(const ServeOptions& options);
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;
  void handle(const HttpRequest& req, Respond respond);
  // Ends every job (their scrapes get 503) and drops the answers pending:
  // called before the server that would write them goes. A job that has
  // not ended within the target's timeout and a margin is left running
  // (detached): the workers left so, by name ("a snapshot"), else none.
  std::vector<std::string> shutdown();
  // The paths the index lists, for serve's start line.
  static std::string paths_served();

 private:
  // One endpoint (serve.cpp's routes(): a new one is a row there).
  struct Route {
    const char* path;
    const char* method;
    void (Service::*handle)(const HttpRequest& req, Respond respond);
    const char* link;  // the index's link, relative to /debug/pprof/ (nullptr: not listed)
    const char* says;  // what it serves, in the index
  };
  static const std::vector<Route>& routes();
  void index_route(const HttpRequest& req, Respond respond);
  void heap_route(const HttpRequest& req, Respond respond);
  void metrics_route(const HttpRequest& req, Respond respond);
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// Checks the options before anything starts: the address, a token where it
// is not loopback, the token file. Throws Error or FileError.
void check_serve_options(const ServeOptions& options);

// Checks the options (a non-loopback address needs a token), serves until
// SIGTERM or SIGINT. Throws Error or FileError.
void run_serve(const ServeOptions& options);

}  // namespace memprofile
