#include "serve/serve.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <fstream>
#include <functional>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>

#include <unistd.h>

#include "base/error.h"
#include "runtime/proc_tree.h"
#include "serve/metrics.h"
#include "serve/tree_profile.h"

namespace memprofile {

namespace {

using Clock = std::chrono::steady_clock;

// One thread that runs jobs in turn, with every signal blocked: SIGTERM
// and SIGINT reach the server's thread, which stops. stop() runs what is
// queued (each job sees the service stopping and ends at once), then joins.
class Worker {
 public:
  Worker() {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    thread_ = std::thread([this] { loop(); });
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }
  ~Worker() { stop(); }
  void stop() {
    {
      std::lock_guard<std::mutex> l(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  // False once stopping: the job is not run.
  bool post(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (done_) return false;
      jobs_.push_back(std::move(job));
    }
    cv_.notify_all();
    return true;
  }
  // Waits `d` unless the worker is being stopped: false then.
  bool sleep_for(Clock::duration d) {
    std::unique_lock<std::mutex> l(mu_);
    return !cv_.wait_for(l, d, [this] { return done_; });
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [this] { return done_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool done_ = false;
  std::thread thread_;
};

HttpResponse text(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  if (r.body.empty() || r.body.back() != '\n') r.body += '\n';
  return r;
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
    r.body = encode_tree_heap(heap);
  } catch (const Error& e) {
    return text(503, std::string("memprofile serve: ") + e.what());
  }
  r.content_type = "application/octet-stream";
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

const char* const kIndex =
    "<html><head><title>/debug/pprof/</title></head><body>\n"
    "<p>memprofile serve: the heap of a profiled process tree</p>\n"
    "<ul>\n"
    "<li><a href=\"heap\">heap</a>: every process's heap in use now, one pprof profile (labels pid, program, backend)</li>\n"
    "<li><a href=\"allocs\">allocs</a>: the same profile, at the path Go serves it</li>\n"
    "<li>heap?seconds=N: the growth over N seconds</li>\n"
    "<li><a href=\"/metrics\">/metrics</a>: memory per process and per tree, Prometheus' text format</li>\n"
    "</ul></body></html>\n";

// Constant in time for tokens of one length: a token is not guessed a
// byte at a time.
bool same_token(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char d = 0;
  for (size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
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

struct Service::Impl {
  ServeOptions o;
  std::string token;  // "" when none is asked
  std::mutex mu;
  // The heap: one snapshot at a time, answered again for min_interval.
  SharedAnswer heap_answer;
  Clock::time_point snapshot_started;  // the last snapshot's, for the interval
  bool growth_running = false;
  // /metrics: the same, with its own age.
  SharedAnswer metrics_answer;
  std::atomic<bool> stopping{false};
  // Last, so they stop (and join) before the state above goes.
  Worker snapshots, status, growth;

  // Before the server goes: every job ends (answering 503) and every
  // pending answer is dropped while the server can still take it.
  void shutdown() {
    stopping = true;
    snapshots.stop();  // first: a growth waits on it
    growth.stop();
    status.stop();
    std::lock_guard<std::mutex> l(mu);
    heap_answer.waiting.clear();
    metrics_answer.waiting.clear();
  }

  // A snapshot of the tree, on the snapshots worker, no sooner than
  // min_interval after the last one began.
  TreeHeap take_snapshot() {
    Clock::time_point next;
    {
      std::lock_guard<std::mutex> l(mu);
      next = snapshot_started + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.min_interval));
    }
    if (stopping || (Clock::now() < next && !snapshots.sleep_for(next - Clock::now())))
      throw Error("serve is stopping");
    {
      std::lock_guard<std::mutex> l(mu);
      snapshot_started = Clock::now();
    }
    return snapshot_tree(o.target);
  }

  void heap(Respond respond) {
    share(heap_answer, o.min_interval, true, snapshots, std::move(respond),
          [this] { return profile_response(take_snapshot()); });
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
    post_or_refuse(w, a.waiting, a.running, [this, &a, make = std::move(make)] {
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
  // themselves on the snapshots worker, in turn with the rest): one at a time.
  void grown(long seconds, Respond respond) {
    {
      std::lock_guard<std::mutex> l(mu);
      if (growth_running) return respond(busy());
      growth_running = true;
    }
    auto job = [this, seconds, respond] {
      HttpResponse r;
      try {
        TreeHeap before = on_snapshots();
        if (!growth.sleep_for(std::chrono::seconds(seconds))) {
          r = text(503, "memprofile serve: stopping");
        } else {
          r = profile_response(growth_between(before, on_snapshots()));
        }
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

  // take_snapshot on the snapshots worker, waited for.
  TreeHeap on_snapshots() {
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    TreeHeap out;
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
      HttpResponse r;
      r.body = tree_metrics(o.target);
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      return r;
    });
  }

  HttpResponse busy() const {
    HttpResponse r = text(429, "memprofile serve: a snapshot is being taken and enough scrapes wait for it; try again later");
    r.headers.push_back({"Retry-After", std::to_string(static_cast<long>(o.min_interval) + 1)});
    return r;
  }
};

Service::Service(const ServeOptions& options) : impl_(std::make_unique<Impl>()) {
  impl_->o = options;
  if (!options.token_file.empty()) impl_->token = read_token(options.token_file);
}

Service::~Service() = default;

void Service::shutdown() {
  impl_->shutdown();
}

void Service::handle(const HttpRequest& req, Respond respond) {
  Impl& s = *impl_;
  if (!s.token.empty() && !same_token(req.authorization, "Bearer " + s.token)) {
    HttpResponse r = text(401, "memprofile serve: a bearer token is needed (Authorization: Bearer TOKEN)");
    r.headers.push_back({"WWW-Authenticate", "Bearer"});
    return respond(std::move(r));
  }
  const std::string& p = req.path;
  const bool heap = p == "/debug/pprof/heap" || p == "/debug/pprof/allocs";
  const bool known = heap || p == "/metrics" || p == "/debug/pprof/" || p == "/debug/pprof";
  if (!known) return respond(text(404, "memprofile serve: no such path; see /debug/pprof/"));
  if (req.method != "GET") {
    HttpResponse r = text(405, "memprofile serve: only GET");
    r.headers.push_back({"Allow", "GET"});
    return respond(std::move(r));
  }
  if (p == "/metrics") return s.metrics(std::move(respond));
  if (!heap) {
    HttpResponse r = text(200, kIndex);
    r.content_type = "text/html; charset=utf-8";
    return respond(std::move(r));
  }
  long seconds = seconds_of(req.query, s.o.max_seconds);
  if (seconds < 0)
    return respond(text(400, "memprofile serve: seconds must be a whole number from 1 to " +
                                 std::to_string(s.o.max_seconds) + " (serve --max-seconds)"));
  if (seconds > 0 && seconds < s.o.min_interval)
    return respond(text(400, "memprofile serve: seconds must be at least the minimum interval between snapshots, " +
                                 std::to_string(static_cast<long>(s.o.min_interval + 0.999)) + " (serve --min-interval)"));
  if (seconds > 0) return s.grown(seconds, std::move(respond));
  s.heap(std::move(respond));
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
            << " (/debug/pprof/heap, /debug/pprof/allocs, /metrics)" << std::endl;
  server.run();
  // The jobs end while the server that takes their answers is still there.
  service.shutdown();
}

}  // namespace memprofile
