// serve's transport: an HTTP/1.1 server on one thread, over Boost.Beast
// (docs/serve.md says why Beast). It knows nothing of profiles: each
// request goes to the handler, which answers at once or later from another
// thread. What it bounds, whatever the clients do: the connections open at
// once (past it a new one is closed at accept), a request's header bytes
// (431), a body (none is read: 413), the time to send a whole request
// (slowloris: the connection is dropped) and to take a whole response.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace memprofile {

struct HttpRequest {
  std::string method;
  std::string path;   // the target before '?'
  std::string query;  // after it, as sent
  std::string authorization;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// Answers a request: exactly once, from any thread.
using Respond = std::function<void(HttpResponse)>;
using HttpHandler = std::function<void(const HttpRequest&, Respond)>;

struct HttpLimits {
  size_t connections = 128;
  size_t header_bytes = 8192;
  std::chrono::seconds request_time{10};   // to send a whole request
  std::chrono::seconds response_time{60};  // to take a whole response
};

// ADDR:PORT, [V6]:PORT or :PORT (loopback). Throws Error naming `text`.
struct ListenAddress {
  std::string host;
  uint16_t port = 0;
};
ListenAddress parse_listen(const std::string& text);
// Whether the address is a loopback one (127.0.0.0/8, ::1). Throws Error
// when it is not an IP address.
bool is_loopback(const std::string& host);

class HttpServer {
 public:
  // Binds now: throws Error naming the address when it cannot.
  HttpServer(const ListenAddress& at, const HttpLimits& limits, HttpHandler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The address and port bound (the port the kernel chose for :0).
  std::string bound() const;
  // Calls `check` on the server's thread every `period` while it serves;
  // stops when it returns false. Before run().
  void every(std::chrono::milliseconds period, std::function<bool()> check);
  // Serves on this thread until SIGTERM or SIGINT, or stop().
  void run();
  void stop();
  // Open connections now, for tests and the bench.
  size_t open_connections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace memprofile
