#include "serve/http_server.h"

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <csignal>
#include <cstring>
#include <optional>

#include "base/error.h"

namespace memprofile {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

ListenAddress parse_listen(const std::string& text) {
  const std::string bad = "--listen " + text + ": expected ADDR:PORT, [IPV6]:PORT or :PORT";
  size_t colon = text.rfind(':');
  if (colon == std::string::npos) throw Error(bad);
  ListenAddress a;
  a.host = text.substr(0, colon);
  if (a.host.size() >= 2 && a.host.front() == '[' && a.host.back() == ']') a.host = a.host.substr(1, a.host.size() - 2);
  if (a.host.empty()) a.host = "127.0.0.1";
  const std::string port = text.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) throw Error(bad);
  unsigned long n = std::stoul(port);
  if (n > 65535) throw Error(bad);
  a.port = static_cast<uint16_t>(n);
  is_loopback(a.host);  // an IP address, or the error names it
  return a;
}

bool is_loopback(const std::string& host) {
  boost::system::error_code ec;
  net::ip::address a = net::ip::make_address(host, ec);
  if (ec) throw Error("--listen " + host + ": not an IP address (a name is not resolved: give the address)");
  return a.is_loopback();
}

namespace {

// One connection: a request read within the limits, handed on, its
// response written, then the next request (keep-alive) or the end.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, const HttpLimits& limits, const HttpHandler& handler,
          std::weak_ptr<net::io_context> ioc, std::shared_ptr<std::atomic<size_t>> open)
      : stream_(std::move(socket)), buffer_(limits.header_bytes), limits_(limits), handler_(handler),
        ioc_(std::move(ioc)), open_(std::move(open)) {
    ++*open_;
  }
  ~Session() { --*open_; }

  void read() {
    parser_.emplace();
    head_ = false;
    parser_->header_limit(static_cast<std::uint32_t>(limits_.header_bytes));
    parser_->body_limit(0);
    // The buffer keeps what came after the last request: a pipelined next one.
    stream_.expires_after(limits_.request_time);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

 private:
  void on_read(beast::error_code ec) {
    if (ec == http::error::header_limit || ec == beast::http::error::buffer_overflow)
      return refuse(431, "request header fields too large: at most " + std::to_string(limits_.header_bytes) + " bytes\n");
    if (ec == http::error::body_limit || ec == http::error::unexpected_body)
      return refuse(413, "a request body is not read here\n");
    if (ec) return close();  // the client's end, a timeout (slowloris), or bytes that are not HTTP
    const auto& req = parser_->get();
    HttpRequest r;
    r.method = std::string(req.method_string());
    std::string target(req.target());
    // The absolute form (RFC 9112 3.2.2), as a proxy sends it: its path.
    for (const char* scheme : {"http://", "https://"})
      if (target.rfind(scheme, 0) == 0) {
        size_t slash = target.find('/', std::strlen(scheme));
        target = slash == std::string::npos ? "/" : target.substr(slash);
      }
    size_t q = target.find('?');
    r.path = target.substr(0, q);
    if (q != std::string::npos) r.query = target.substr(q + 1);
    if (auto it = req.find(http::field::authorization); it != req.end()) r.authorization = std::string(it->value());
    keep_alive_ = req.keep_alive();
    head_ = req.method() == http::verb::head;
    // The handler may answer from another thread: the answer comes back to
    // this one to be written.
    handler_(r, [self = shared_from_this(), ioc = ioc_](HttpResponse res) {
      if (auto io = ioc.lock()) net::post(*io, [self, res = std::move(res)]() mutable { self->write(std::move(res)); });
    });
  }

  void refuse(int status, std::string body) {
    keep_alive_ = false;
    HttpResponse res;
    res.status = status;
    res.body = std::move(body);
    write(std::move(res));
  }

  void write(HttpResponse res) {
    auto out = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(res.status), 11);
    out->set(http::field::server, "memprofile");
    out->set(http::field::content_type, res.content_type);
    for (const auto& [k, v] : res.headers) out->set(k, v);
    out->body() = std::move(res.body);
    out->keep_alive(keep_alive_);
    out->prepare_payload();
    if (head_) {
      // HEAD: the headers GET would have, Content-Length included, no body.
      const std::string length = std::to_string(out->body().size());
      out->body().clear();
      out->set(http::field::content_length, length);
    }
    stream_.expires_after(limits_.response_time);
    http::async_write(stream_, *out, [self = shared_from_this(), out](beast::error_code ec, size_t) {
      if (ec || !self->keep_alive_) return self->close();
      self->read();
    });
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;  // at most the header limit: its max_size
  std::optional<http::request_parser<http::empty_body>> parser_;
  const HttpLimits& limits_;
  const HttpHandler& handler_;
  std::weak_ptr<net::io_context> ioc_;
  std::shared_ptr<std::atomic<size_t>> open_;
  bool keep_alive_ = false;
  bool head_ = false;
};

}  // namespace

struct HttpServer::Impl {
  // Shared with every pending answer: one that comes after the server has
  // gone is dropped, not written into freed memory.
  std::shared_ptr<net::io_context> ioc = std::make_shared<net::io_context>(1);
  tcp::acceptor acceptor{*ioc};
  net::signal_set signals{*ioc, SIGINT, SIGTERM};
  HttpLimits limits;
  HttpHandler handler;
  std::shared_ptr<std::atomic<size_t>> open = std::make_shared<std::atomic<size_t>>(0);
  net::steady_timer timer{*ioc};
  std::chrono::milliseconds period{0};
  std::function<bool()> check;

  void tick() {
    timer.expires_after(period);
    timer.async_wait([this](beast::error_code ec) {
      if (ec) return;
      if (!check()) return ioc->stop();
      tick();
    });
  }

  void accept() {
    acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted) return;
      if (!ec) {
        if (*open >= limits.connections) {
          // Past the limit the newest is closed at once: the ones being
          // served go on, and nothing more is held for it.
          beast::error_code ignored;
          socket.close(ignored);
        } else {
          std::make_shared<Session>(std::move(socket), limits, handler, ioc, open)->read();
        }
      }
      accept();
    });
  }
};

HttpServer::HttpServer(const ListenAddress& at, const HttpLimits& limits, HttpHandler handler)
    : impl_(std::make_unique<Impl>()) {
  impl_->limits = limits;
  impl_->handler = std::move(handler);
  beast::error_code ec;
  tcp::endpoint ep(net::ip::make_address(at.host, ec), at.port);
  if (ec) throw Error("--listen " + at.host + ": not an IP address");
  const std::string where = "--listen " + at.host + ":" + std::to_string(at.port);
  impl_->acceptor.open(ep.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(ep, ec);
  if (!ec) impl_->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) throw Error(where + ": cannot listen: " + ec.message());
}

HttpServer::~HttpServer() {
  stop();
}

std::string HttpServer::bound() const {
  beast::error_code ec;
  tcp::endpoint ep = impl_->acceptor.local_endpoint(ec);
  if (ec) return "?";
  std::string host = ep.address().to_string();
  if (ep.address().is_v6()) host = "[" + host + "]";
  return host + ":" + std::to_string(ep.port());
}

void HttpServer::every(std::chrono::milliseconds period, std::function<bool()> check) {
  impl_->period = period;
  impl_->check = std::move(check);
}

void HttpServer::run() {
  impl_->signals.async_wait([this](beast::error_code ec, int) {
    if (!ec) stop();
  });
  if (impl_->check) impl_->tick();
  impl_->accept();
  impl_->ioc->run();
}

void HttpServer::stop() {
  impl_->ioc->stop();
}

size_t HttpServer::open_connections() const {
  return *impl_->open;
}

}  // namespace memprofile
