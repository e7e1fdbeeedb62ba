#include "serve/serve.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <functional>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>

#include <unistd.h>

#include "base/error.h"
#include "base/sink.h"
#include "runtime/proc_tree.h"
#include "serve/metrics.h"
#include "serve/tree_profile.h"

namespace memprofile {

namespace {

using Clock = std::chrono::steady_clock;

// Seconds past --timeout that shutdown waits for a job still running.
constexpr double kShutdownMargin = 2;

Clock::duration seconds_d(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// A number of seconds as a person writes it: 10, 2.5.
std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// One thread that runs jobs in turn, with every signal blocked: SIGTERM
// and SIGINT reach the server's thread, which stops. stop() runs what is
// queued (each job sees the service stopping and ends at once) and joins;
// a job that does not end in time (stuck in the kernel: a read of a
// process in D state) is left to itself, its thread detached, so that
// serve still ends. The queue lives as long as the thread does.
class Worker {
 public:
  Worker() : s_(std::make_shared<State>()) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    thread_ = std::thread([s = s_] { loop(*s); });
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }
  ~Worker() {
    // The last owner of the service may be a job of this very worker, ending
    // late: it cannot join itself.
    if (thread_.joinable() && thread_.get_id() == std::this_thread::get_id()) {
      {
        std::lock_guard<std::mutex> l(s_->mu);
        s_->done = true;
      }
      thread_.detach();
      return;
    }
    stop(Clock::time_point::max());
  }
  // Ends the worker by `deadline`: true when its thread ended, false when
  // it was left running (detached).
  bool stop(Clock::time_point deadline) {
    std::unique_lock<std::mutex> l(s_->mu);
    s_->done = true;
    s_->cv.notify_all();
    if (!thread_.joinable()) return s_->finished;
    const bool ended = deadline == Clock::time_point::max()
                           ? (s_->cv.wait(l, [this] { return s_->finished; }), true)
                           : s_->cv.wait_until(l, deadline, [this] { return s_->finished; });
    l.unlock();
    if (ended)
      thread_.join();
    else
      thread_.detach();
    return ended;
  }
  // False once stopping: the job is not run.
  bool post(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> l(s_->mu);
      if (s_->done) return false;
      s_->jobs.push_back(std::move(job));
    }
    s_->cv.notify_all();
    return true;
  }
  // Waits `d` unless the worker is being stopped: false then.
  bool sleep_for(Clock::duration d) {
    std::unique_lock<std::mutex> l(s_->mu);
    return !s_->cv.wait_for(l, d, [this] { return s_->done; });
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::function<void()>> jobs;
    bool done = false, finished = false;
  };
  static void loop(State& s) {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> l(s.mu);
        s.cv.wait(l, [&s] { return s.done || !s.jobs.empty(); });
        if (s.jobs.empty()) {
          s.finished = true;
          s.cv.notify_all();
          return;
        }
        job = std::move(s.jobs.front());
        s.jobs.pop_front();
      }
      job();
    }
  }
  std::shared_ptr<State> s_;
  std::thread thread_;
};

// Every answer's body goes out as report's outputs do (base/sink.h): an
// encoder writes its bytes to a sink, here the response's buffer.
HttpResponse answer(int status, std::string content_type, const std::function<void(Sink&)>& encode) {
  HttpResponse r;
  r.status = status;
  r.content_type = std::move(content_type);
  BufferSink body("the response body");
  encode(body);
  r.body = body.take();
  return r;
}

HttpResponse text(int status, std::string body) {
  if (body.empty() || body.back() != '\n') body += '\n';
  return answer(status, "text/plain; charset=utf-8", [&body](Sink& out) { out.write(body); });
}

// A header's value: one line, at most 4 KiB.
std::string header_value(const std::string& s) {
  std::string out;
  for (char c : s) out += static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? ' ' : c;
  if (out.size() > 4096) out = out.substr(0, 4093) + "...";
  return out;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += (out.empty() ? "" : "; ") + l;
  return out;
}

HttpResponse profile_response(const TreeHeap& heap) {
  HttpResponse r;
  try {
    r = answer(200, "application/octet-stream", [&heap](Sink& out) { out.write(encode_tree_heap(heap)); });
  } catch (const Error& e) {
    return text(503, std::string("memprofile serve: ") + e.what());
  }
  r.headers.push_back({"Content-Disposition", "attachment; filename=\"heap\""});
  r.headers.push_back({"X-Memprofile-Processes", std::to_string(heap.members.size())});
  if (!heap.left_out.empty()) {
    r.headers.push_back({"X-Memprofile-Left-Out", std::to_string(heap.left_out.size())});
    r.headers.push_back({"X-Memprofile-Left-Out-Why", header_value(joined(heap.left_out))});
  }
  return r;
}

// ?seconds=N among the query's parameters: 0 when absent; -1 when it is not
// a number of 1 to `max`.
long seconds_of(const std::string& query, unsigned max) {
  size_t at = 0;
  while (at <= query.size()) {
    size_t amp = query.find('&', at);
    std::string kv = query.substr(at, amp == std::string::npos ? std::string::npos : amp - at);
    if (kv.rfind("seconds=", 0) == 0) {
      std::string v = kv.substr(8);
      if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos) return -1;
      long n = std::stol(v);
      return n >= 1 && n <= static_cast<long>(max) ? n : -1;
    }
    if (amp == std::string::npos) break;
    at = amp + 1;
  }
  return 0;
}

// Constant in time for tokens of one length: a token is not guessed a
// byte at a time.
bool same_token(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char d = 0;
  for (size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
}

// The credentials of an "Authorization: Bearer TOKEN" header, or "" for any
// other: the scheme in any case (RFC 7235 2.1: "a case-insensitive token"),
// then one or more spaces.
std::string bearer_credentials(const std::string& header) {
  static const std::string scheme = "bearer";
  if (header.size() <= scheme.size() || header[scheme.size()] != ' ') return "";
  for (size_t i = 0; i < scheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(header[i])) != scheme[i]) return "";
  size_t at = header.find_first_not_of(' ', scheme.size());
  return at == std::string::npos ? "" : header.substr(at);
}

// Whether `parent` (the program exec --serve serves) waits for a child
// (its main thread in the kernel's do_wait) and this process is the only
// child it has left: it is exiting, and waits on us. Also true when it has
// gone (we were handed to another parent).
bool waits_in_kernel(long pid) {
  std::ifstream wchan("/proc/" + std::to_string(pid) + "/wchan");
  std::string where;
  std::getline(wchan, where);
  // "0" when the kernel does not say (a program of another user, not
  // dumpable): never taken for a wait.
  return where == "do_wait";
}

bool waits_on_us(long parent) {
  if (getppid() != parent) return true;
  if (!waits_in_kernel(parent)) return false;
  for (const auto& [pid, e] : read_process_table())
    if (e.ppid == parent && pid != getpid()) return false;
  // Again after the scan: a child it waited for may have ended between them.
  return waits_in_kernel(parent);
}

// An answer made once for all who ask meanwhile: while it is made, the
// requests that come wait for it; one made less than its age ago is
// answered again. Guarded by the service's mutex.
struct SharedAnswer {
  bool running = false;
  std::vector<Respond> waiting;
  std::optional<HttpResponse> last;  // the last 200
  Clock::time_point at;
};

// waits_on_us, seen `n` times in a row: a shell waiting on one command after
// another is seen between two of them now and then, not n ticks running.
class WaitsOnUs {
 public:
  WaitsOnUs(long parent, int n) : parent_(parent), n_(n) {}
  bool operator()() {
    seen_ = waits_on_us(parent_) ? seen_ + 1 : 0;
    return seen_ >= n_;
  }

 private:
  long parent_;
  int n_, seen_ = 0;
};

}  // namespace

std::string read_token(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw FileError(path, "cannot read the token file");
  std::string token;
  std::getline(in, token);
  while (!token.empty() && (token.back() == ' ' || token.back() == '\t' || token.back() == '\r')) token.pop_back();
  size_t start = token.find_first_not_of(" \t");
  token = start == std::string::npos ? "" : token.substr(start);
  if (token.empty()) throw FileError(path, "the token file's first line is empty");
  for (char c : token)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) throw FileError(path, "the token holds a control character");
  return token;
}

// Held by the service and by every job it posts: a job left running at
// shutdown (Worker::stop) keeps what it uses.
struct Service::Impl : std::enable_shared_from_this<Service::Impl> {
  ServeOptions o;
  std::string token;  // "" when none is asked
  std::mutex mu;
  // The heap: one snapshot at a time, answered again for min_interval.
  SharedAnswer heap_answer;
  Clock::time_point snapshot_started;  // the last snapshot's, for the interval
  std::shared_ptr<const TreeHeap> last_heap;  // the last snapshot, while no newer one is being read
  Clock::time_point last_heap_at;            // when it began
  bool growth_running = false;
  // /metrics: the same, with its own age.
  SharedAnswer metrics_answer;
  std::atomic<bool> stopping{false};
  // Last, so they stop (and join) before the state above goes.
  Worker snapshots, status, growth;

  // Before the server goes: every job ends (answering 503) and every
  // pending answer is dropped while the server can still take it. A job
  // that has not ended by --timeout and a margin is left running: the
  // workers that did not end, by name.
  std::vector<std::string> shutdown() {
    stopping = true;
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(o.target.timeout + kShutdownMargin));
    std::vector<std::string> left;
    if (!snapshots.stop(deadline)) left.push_back("a snapshot");  // first: a growth waits on it
    if (!growth.stop(deadline)) left.push_back("a growth");
    if (!status.stop(deadline)) left.push_back("a status");
    std::lock_guard<std::mutex> l(mu);
    heap_answer.waiting.clear();
    metrics_answer.waiting.clear();
    return left;
  }

  // A snapshot of the tree, on the snapshots worker, no sooner than
  // min_interval after the last one began. The last one is kept, with when
  // it began: a growth starts from it while it is younger than the interval.
  std::shared_ptr<const TreeHeap> take_snapshot() {
    Clock::time_point next;
    {
      std::lock_guard<std::mutex> l(mu);
      next = snapshot_started + seconds_d(o.min_interval);
    }
    if (stopping || (Clock::now() < next && !snapshots.sleep_for(next - Clock::now())))
      throw Error("serve is stopping");
    const Clock::time_point started = Clock::now();
    {
      std::lock_guard<std::mutex> l(mu);
      snapshot_started = started;
      last_heap.reset();  // its memory is given back before the next is read
    }
    auto heap = std::make_shared<const TreeHeap>(snapshot_tree(o.target));
    std::lock_guard<std::mutex> l(mu);
    last_heap = heap;
    last_heap_at = started;
    return heap;
  }

  void heap(Respond respond) {
    share(heap_answer, o.min_interval, true, snapshots, std::move(respond),
          [this] { return profile_response(*take_snapshot()); });
  }

  // `a`'s answer for `respond`: the last one while younger than `max_age`
  // (with its age in a header when `say_age`), else the one `make` gives
  // on worker `w` (made once for every request that waits meanwhile, at
  // most max_waiting of them: beyond, 429). An error is 503, never kept.
  void share(SharedAnswer& a, double max_age, bool say_age, Worker& w, Respond respond,
             std::function<HttpResponse()> make) {
    std::unique_lock<std::mutex> l(mu);
    if (a.last && Clock::now() - a.at < std::chrono::duration<double>(max_age)) {
      HttpResponse r = *a.last;
      if (say_age)
        r.headers.push_back({"X-Memprofile-Snapshot-Age",
                             std::to_string(std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - a.at).count())});
      l.unlock();
      return respond(std::move(r));
    }
    if (a.waiting.size() >= o.max_waiting) {
      l.unlock();
      return respond(busy());
    }
    a.waiting.push_back(std::move(respond));
    if (a.running) return;
    a.running = true;
    l.unlock();
    post_or_refuse(w, a.waiting, a.running, [this, self = shared_from_this(), &a, make = std::move(make)] {
      HttpResponse r;
      try {
        r = make();
      } catch (const std::exception& e) {
        r = text(503, std::string("memprofile serve: ") + e.what());
      }
      std::vector<Respond> waiting;
      {
        std::lock_guard<std::mutex> g(mu);
        a.running = false;
        waiting.swap(a.waiting);
        if (r.status == 200) {
          a.last = r;
          a.at = Clock::now();
        }
      }
      for (auto& answer : waiting) answer(r);
    });
  }

  // Posts the job that answers `waiting`, or, when stopping, answers them 503.
  void post_or_refuse(Worker& w, std::vector<Respond>& waiting, bool& running, std::function<void()> job) {
    if (w.post(std::move(job))) return;
    std::vector<Respond> refused;
    {
      std::lock_guard<std::mutex> l(mu);
      running = false;
      refused.swap(waiting);
    }
    for (auto& r : refused) r(text(503, "memprofile serve: stopping"));
  }

  // Two snapshots N seconds apart on the growth worker (the snapshots
  // themselves on the snapshots worker, in turn with the rest): one at a
  // time. The first is the last one taken while it is younger than the
  // minimum interval, so that a scraper asking every interval (Grafana
  // Alloy's delta profiles: seconds = its interval - 1) is answered within
  // it. N below the minimum interval is answered over the minimum interval,
  // and the profile and a header say so.
  void grown(long seconds, Respond respond) {
    {
      std::lock_guard<std::mutex> l(mu);
      if (growth_running) return respond(busy());
      growth_running = true;
    }
    auto job = [this, self = shared_from_this(), seconds, respond] {
      HttpResponse r;
      try {
        r = growth_over(seconds);
      } catch (const std::exception& e) {
        r = text(503, std::string("memprofile serve: ") + e.what());
      }
      {
        std::lock_guard<std::mutex> l(mu);
        growth_running = false;
      }
      respond(std::move(r));
    };
    if (!growth.post(std::move(job))) respond(text(503, "memprofile serve: stopping"));
  }

  HttpResponse growth_over(long seconds) {
    std::shared_ptr<const TreeHeap> before;
    Clock::time_point from;
    {
      std::lock_guard<std::mutex> l(mu);
      if (last_heap && Clock::now() - last_heap_at < seconds_d(o.min_interval)) {
        before = last_heap;
        from = last_heap_at;
      }
    }
    if (!before) {
      before = on_snapshots();
      std::lock_guard<std::mutex> l(mu);
      from = last_heap_at;
    }
    const bool raised = seconds < o.min_interval;
    const double span = raised ? o.min_interval : static_cast<double>(seconds);
    const Clock::time_point until = from + seconds_d(span);
    if (Clock::now() < until && !growth.sleep_for(until - Clock::now())) return text(503, "memprofile serve: stopping");
    TreeHeap grown = growth_between(*before, on_snapshots());
    if (raised)
      grown.notes.push_back("seconds=" + std::to_string(seconds) + " was asked; the growth is over at least the minimum "
                            "interval between snapshots, " + number(o.min_interval) + " s (serve --min-interval)");
    HttpResponse r = profile_response(grown);
    if (raised) r.headers.push_back({"X-Memprofile-Seconds-Raised", std::to_string(seconds) + " to " + number(o.min_interval)});
    return r;
  }

  // take_snapshot on the snapshots worker, waited for.
  std::shared_ptr<const TreeHeap> on_snapshots() {
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    std::shared_ptr<const TreeHeap> out;
    std::exception_ptr error;
    bool posted = snapshots.post([&] {
      try {
        out = take_snapshot();
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> l(m);
      done = true;
      cv.notify_all();
    });
    if (!posted) throw Error("serve is stopping");
    std::unique_lock<std::mutex> l(m);
    cv.wait(l, [&] { return done; });
    if (error) std::rethrow_exception(error);
    return out;
  }

  void metrics(Respond respond) {
    share(metrics_answer, o.metrics_max_age, false, status, std::move(respond), [this] {
      return answer(200, "text/plain; version=0.0.4; charset=utf-8",
                    [this](Sink& out) { out.write(tree_metrics(o.target)); });
    });
  }

  HttpResponse busy() const {
    HttpResponse r = text(429, "memprofile serve: a snapshot is being taken and enough scrapes wait for it; try again later");
    r.headers.push_back({"Retry-After", std::to_string(static_cast<long>(o.min_interval) + 1)});
    return r;
  }
};

Service::Service(const ServeOptions& options) : impl_(std::make_shared<Impl>()) {
  impl_->o = options;
  if (!options.token_file.empty()) impl_->token = read_token(options.token_file);
}

Service::~Service() = default;

std::vector<std::string> Service::shutdown() {
  return impl_->shutdown();
}

// serve's endpoints, one row each: the path, the method, the handler, and
// its line in the index (/debug/pprof/, a link and what it serves; none
// for the index itself). A new endpoint is a row and its handler: the
// dispatch, the index page and serve's start line read this table.
const std::vector<Service::Route>& Service::routes() {
  static const std::vector<Route> table = {
      {"/debug/pprof/heap", "GET", &Service::heap_route, "heap",
       "every process's heap in use now, one pprof profile (labels pid, program, backend); heap?seconds=N: the "
       "growth over N seconds"},
      {"/debug/pprof/allocs", "GET", &Service::heap_route, "allocs", "the same profile, at the path Go serves it"},
      {"/metrics", "GET", &Service::metrics_route, "/metrics",
       "memory per process and per tree, Prometheus' text format"},
      {"/debug/pprof/", "GET", &Service::index_route, nullptr, nullptr},
      {"/debug/pprof", "GET", &Service::index_route, nullptr, nullptr},
  };
  return table;
}

std::string Service::paths_served() {
  std::string out;
  for (const auto& r : routes())
    if (r.link) out += (out.empty() ? "" : ", ") + std::string(r.path);
  return out;
}

void Service::index_route(const HttpRequest&, Respond respond) {
  respond(answer(200, "text/html; charset=utf-8", [](Sink& out) {
    out.write("<html><head><title>/debug/pprof/</title></head><body>\n"
              "<p>memprofile serve: the heap of a profiled process tree</p>\n<ul>\n");
    for (const auto& r : routes())
      if (r.link)
        out.write(std::string("<li><a href=\"") + r.link + "\">" + r.link + "</a>: " + r.says + "</li>\n");
    out.write("</ul></body></html>\n");
  }));
}

void Service::metrics_route(const HttpRequest&, Respond respond) { impl_->metrics(std::move(respond)); }

void Service::heap_route(const HttpRequest& req, Respond respond) {
  Impl& s = *impl_;
  long seconds = seconds_of(req.query, s.o.max_seconds);
  if (seconds < 0)
    return respond(text(400, "memprofile serve: seconds must be a whole number from 1 to " +
                                 std::to_string(s.o.max_seconds) + " (serve --max-seconds)"));
  if (seconds > 0) return s.grown(seconds, std::move(respond));
  s.heap(std::move(respond));
}

void Service::handle(const HttpRequest& req, Respond respond) {
  Impl& s = *impl_;
  if (!s.token.empty() && !same_token(bearer_credentials(req.authorization), s.token)) {
    HttpResponse r = text(401, "memprofile serve: a bearer token is needed (Authorization: Bearer TOKEN)");
    r.headers.push_back({"WWW-Authenticate", "Bearer"});
    return respond(std::move(r));
  }
  const Route* route = nullptr;
  for (const auto& r : routes())
    if (req.path == r.path) route = &r;
  if (!route) return respond(text(404, "memprofile serve: no such path; see /debug/pprof/"));
  if (req.method != route->method) {
    HttpResponse r = text(405, std::string("memprofile serve: only ") + route->method);
    r.headers.push_back({"Allow", route->method});
    return respond(std::move(r));
  }
  (this->*(route->handle))(req, std::move(respond));
}

void check_serve_options(const ServeOptions& o) {
  ListenAddress at = parse_listen(o.listen);
  if (!is_loopback(at.host) && o.token_file.empty())
    throw Error("--listen " + o.listen + ": not a loopback address, so serve needs a bearer token: --token-file FILE "
                "(profiles name the code and its memory: see docs/serve.md)");
  if (!o.token_file.empty()) read_token(o.token_file);
  if (!(o.min_interval >= 0 && o.min_interval <= 86400) || !(o.metrics_max_age >= 0 && o.metrics_max_age <= 3600))
    throw Error("serve: an interval must be 0 to 86400 seconds");
}

void run_serve(const ServeOptions& o) {
  check_serve_options(o);
  set_memory_ceiling(o.max_memory_mib << 20, "serve --max-memory");
  ListenAddress at = parse_listen(o.listen);
  Service service(o);
  HttpServer server(at, o.limits, [&service](const HttpRequest& req, Respond respond) {
    try {
      service.handle(req, respond);
    } catch (const std::exception& e) {
      respond(text(500, std::string("memprofile serve: ") + e.what()));
    }
  });
  if (o.child_of_target)
    server.every(std::chrono::milliseconds(500), [waits = WaitsOnUs(o.target.pid, 4)]() mutable { return !waits(); });
  std::cerr << "memprofile serve: listening on " << server.bound() << " for the tree of pid " << o.target.pid
            << " (" << Service::paths_served() << ")" << std::endl;
  server.run();
  // The jobs end while the server that takes their answers is still there.
  std::vector<std::string> left = service.shutdown();
  if (left.empty()) return;
  // A job stuck past its deadline cannot be waited for, and must not keep
  // the port or the process: said, and the process ends now, without the
  // destructors that would wait on it.
  std::string what;
  for (const auto& l : left) what += (what.empty() ? "" : ", ") + l;
  std::cerr << "memprofile serve: " << what << " did not end within " << o.target.timeout + kShutdownMargin
            << " s of stopping (stuck in the kernel?): leaving it" << std::endl;
  std::cout.flush();
  std::_Exit(0);
}

}  // namespace memprofile
