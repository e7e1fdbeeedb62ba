// HTTP GET over libcurl for the registry source: the body streams through
// the Reader interface as it arrives, with at most kMaxBuffered bytes held
// per request (the transfer pauses while the reader is behind), so a layer
// of gigabytes costs a megabyte. Redirects are not followed here: the caller
// decides what goes to the next host (distribution.cpp never sends its
// Authorization header to another one).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/stream.h"

namespace memprofile {

// A transfer that failed below HTTP: no connection, TLS, a timeout, a
// connection cut partway through. The message says what, without the URL.
class HttpError : public Error {
 public:
  enum class Kind { Connect, Timeout, Tls, Truncated, TooLarge, Other };
  HttpError(Kind kind, const std::string& what) : Error(what), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

struct TlsOptions {
  bool verify = true;        // false: any certificate, any host name
  std::string extra_ca_pem;  // CAs trusted besides the system's (PEM)
  std::string client_cert, client_key;  // PEM files, both or neither
};

// What the requests of one image share: TLS settings, DNS and TLS session
// caches, and a pool of connection caches (one per concurrent request), so
// sequential requests reuse their connections.
class HttpClient {
 public:
  HttpClient(TlsOptions tls, long timeout_seconds);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;
  const TlsOptions& tls() const { return tls_; }
  long timeout() const { return timeout_; }
  // Every request goes over this unix socket (the Docker daemon's), the
  // URL naming only the path; "" = TCP as the URL says.
  void set_unix_socket(std::string path) { unix_socket_ = std::move(path); }

  // For HttpGet.
  void* acquire_multi();
  void release_multi(void* multi);
  void configure(void* easy) const;
  // The server certificate at `url`, read without verifying it: "subject
  // ..., issuer ..." for error messages; "" when it cannot be read.
  std::string describe_certificate(const std::string& url) const;

 private:
  TlsOptions tls_;
  long timeout_;
  std::string unix_socket_;
  void* share_ = nullptr;
  std::mutex pool_mutex_;
  std::vector<void*> pool_;
  std::mutex share_mutex_[8];
  static void lock(void*, int, int, void*);
  static void unlock(void*, int, void*);
};

// Every request is bounded in time and size, whatever the server does:
//   - a stall: fewer than kLowSpeedFloor bytes a second over `timeout`
//     seconds fails ("timed out"), so a trickle of 2 B/s does not keep a
//     request alive (a transfer paused because the reader is behind is not
//     the server's fault and is not counted);
//   - a deadline for the whole request: `timeout` seconds plus one second per
//     kDeadlineBytesPerSecond of the body it may have (4 MiB until
//     limit_body says how much), so a request of a few KiB gets about
//     two minutes, a 1 GiB layer four and a half hours;
//   - the body: refused past limit_body's bytes as they arrive.
class HttpGet : public Reader {
 public:
  static constexpr size_t kMaxBuffered = 1 << 20;
  static constexpr long kLowSpeedFloor = 1024;                   // bytes a second
  static constexpr uint64_t kDeadlineBytesPerSecond = 64 << 10;  // bytes a second
  static constexpr uint64_t kDefaultBodyBound = 4 << 20;
  // With `form`, the request is a POST of that application/x-www-form-
  // urlencoded body (the OAuth2 token request); otherwise a GET.
  HttpGet(HttpClient& client, const std::string& url, const std::vector<std::string>& headers,
          const std::string* form = nullptr);
  ~HttpGet() override;
  HttpGet(const HttpGet&) = delete;
  HttpGet& operator=(const HttpGet&) = delete;

  // Waits for the response's status line and headers. Throws HttpError.
  long status();
  // A header of the response (name in lower case); "" when absent.
  std::string header(const std::string& lower_name);
  // Content-Length, or -1.
  int64_t content_length();
  // The body as it arrives; 0 at its end. Throws HttpError.
  size_t read(void* buf, size_t n) override;
  // The whole body, refused past `cap` bytes (checked as bytes arrive).
  std::string read_all(size_t cap, const std::string& too_large);
  // From now on, a body over `max_bytes` (by Content-Length, or as bytes
  // arrive) fails with HttpError(TooLarge, too_large); the deadline becomes
  // the one for a body of that size.
  void limit_body(uint64_t max_bytes, const std::string& too_large);
  uint64_t received() const;
  const std::string& url() const;

 private:
  void check_declared_length();
  struct Impl;
  std::unique_ptr<Impl> d_;
};

// URL helpers (libcurl's parser).
std::string url_resolve(const std::string& base, const std::string& reference);
// "scheme://host:port", the port always written.
std::string url_origin(const std::string& url);
std::string url_escape(const std::string& s);

}  // namespace memprofile
