#include "network/http.h"

#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>

namespace memprofile {

namespace {

std::once_flag g_init;

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

bool is_tls_error(CURLcode c) {
  switch (c) {
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_SHUTDOWN_FAILED:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SSL_CLIENTCERT:
      return true;
    default:
      return false;
  }
}

}  // namespace

// ---- client ------------------------------------------------------------------

HttpClient::HttpClient(TlsOptions tls, long timeout_seconds) : tls_(std::move(tls)), timeout_(timeout_seconds) {
  std::call_once(g_init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  CURLSH* sh = curl_share_init();
  curl_share_setopt(sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
  curl_share_setopt(sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
  curl_share_setopt(sh, CURLSHOPT_LOCKFUNC, &HttpClient::lock);
  curl_share_setopt(sh, CURLSHOPT_UNLOCKFUNC, &HttpClient::unlock);
  curl_share_setopt(sh, CURLSHOPT_USERDATA, this);
  share_ = sh;
}

HttpClient::~HttpClient() {
  for (void* m : pool_) curl_multi_cleanup(static_cast<CURLM*>(m));
  curl_share_cleanup(static_cast<CURLSH*>(share_));
}

void HttpClient::lock(void*, int data, int, void* self) {
  static_cast<HttpClient*>(self)->share_mutex_[static_cast<unsigned>(data) % 8].lock();
}
void HttpClient::unlock(void*, int data, void* self) {
  static_cast<HttpClient*>(self)->share_mutex_[static_cast<unsigned>(data) % 8].unlock();
}

void* HttpClient::acquire_multi() {
  {
    std::lock_guard<std::mutex> g(pool_mutex_);
    if (!pool_.empty()) {
      void* m = pool_.back();
      pool_.pop_back();
      return m;
    }
  }
  CURLM* m = curl_multi_init();
  if (!m) throw Error("libcurl: cannot make a transfer handle");
  return m;
}

void HttpClient::release_multi(void* multi) {
  std::lock_guard<std::mutex> g(pool_mutex_);
  pool_.push_back(multi);
}

void HttpClient::configure(void* e) const {
  CURL* easy = static_cast<CURL*>(e);
  curl_easy_setopt(easy, CURLOPT_SHARE, static_cast<CURLSH*>(share_));
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(easy, CURLOPT_USERAGENT, "memprofile");
  curl_easy_setopt(easy, CURLOPT_BUFFERSIZE, 256L << 10);
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT, timeout_);
  // A stall or a trickle (under kLowSpeedFloor bytes a second over
  // `timeout_` seconds, headers included) is a timeout. A paused transfer is
  // not checked (the reader is behind, not the server). http.h: the deadline.
  curl_easy_setopt(easy, CURLOPT_LOW_SPEED_LIMIT, HttpGet::kLowSpeedFloor);
  curl_easy_setopt(easy, CURLOPT_LOW_SPEED_TIME, timeout_);
  curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
  if (!tls_.verify) {
    curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, 0L);
  } else if (!tls_.extra_ca_pem.empty()) {
    curl_blob blob{const_cast<char*>(tls_.extra_ca_pem.data()), tls_.extra_ca_pem.size(), CURL_BLOB_NOCOPY};
    curl_easy_setopt(easy, CURLOPT_CAINFO_BLOB, &blob);
  }
  if (!tls_.client_cert.empty()) {
    curl_easy_setopt(easy, CURLOPT_SSLCERT, tls_.client_cert.c_str());
    curl_easy_setopt(easy, CURLOPT_SSLKEY, tls_.client_key.c_str());
  }
  if (!unix_socket_.empty()) curl_easy_setopt(easy, CURLOPT_UNIX_SOCKET_PATH, unix_socket_.c_str());
}

std::string HttpClient::describe_certificate(const std::string& url) const {
  CURL* easy = curl_easy_init();
  if (!easy) return "";
  curl_easy_setopt(easy, CURLOPT_URL, url.c_str());
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_CONNECT_ONLY, 1L);
  curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, 0L);
  curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, 0L);
  curl_easy_setopt(easy, CURLOPT_CERTINFO, 1L);
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT, timeout_);
  curl_easy_setopt(easy, CURLOPT_TIMEOUT, timeout_);
  std::string out;
  if (curl_easy_perform(easy) == CURLE_OK) {
    curl_certinfo* ci = nullptr;
    if (curl_easy_getinfo(easy, CURLINFO_CERTINFO, &ci) == CURLE_OK && ci && ci->num_of_certs > 0) {
      std::string subject, issuer;
      for (curl_slist* l = ci->certinfo[0]; l; l = l->next) {
        std::string line = l->data;
        if (line.rfind("Subject:", 0) == 0) subject = trim(line.substr(8));
        if (line.rfind("Issuer:", 0) == 0) issuer = trim(line.substr(7));
      }
      if (!subject.empty()) out = "subject \"" + subject + "\", issuer \"" + issuer + "\"";
    }
  }
  curl_easy_cleanup(easy);
  return out;
}

// ---- one request -------------------------------------------------------------

struct HttpGet::Impl {
  HttpClient* client = nullptr;
  CURLM* multi = nullptr;
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  std::string url;
  char errbuf[CURL_ERROR_SIZE] = {0};

  std::string buf;
  size_t off = 0;
  bool paused = false, done = false, headers_done = false;
  CURLcode result = CURLE_OK;
  long status = 0;
  std::map<std::string, std::string> resp;
  uint64_t received = 0, delivered = 0;
  uint64_t body_bound = kDefaultBodyBound;  // the deadline is made for this size
  bool limited = false, over_limit = false;
  std::string too_large;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();

  long deadline_seconds() const {
    return client->timeout() + static_cast<long>(body_bound / kDeadlineBytesPerSecond);
  }
  void check_deadline() const {
    auto spent = std::chrono::steady_clock::now() - started;
    if (spent > std::chrono::seconds(deadline_seconds()))
      throw HttpError(HttpError::Kind::Timeout,
                      "timed out: not done after " + std::to_string(deadline_seconds()) + " s (" +
                          std::to_string(delivered + (buf.size() - off)) + " bytes received; memprofile allows " +
                          std::to_string(client->timeout()) + " s plus 1 s per " +
                          std::to_string(kDeadlineBytesPerSecond >> 10) + " KiB of the body)");
  }

  static size_t on_header(char* p, size_t size, size_t n, void* self) {
    auto* d = static_cast<Impl*>(self);
    std::string line(p, size * n);
    if (line.rfind("HTTP/", 0) == 0) {
      d->resp.clear();
      d->headers_done = false;
      size_t sp = line.find(' ');
      d->status = sp == std::string::npos ? 0 : std::strtol(line.c_str() + sp + 1, nullptr, 10);
    } else if (trim(line).empty()) {
      if (d->status >= 200) d->headers_done = true;
    } else if (size_t colon = line.find(':'); colon != std::string::npos) {
      d->resp[lower(trim(line.substr(0, colon)))] = trim(line.substr(colon + 1));
    }
    return size * n;
  }

  static size_t on_body(char* p, size_t size, size_t n, void* self) {
    auto* d = static_cast<Impl*>(self);
    size_t len = size * n;
    size_t held = d->buf.size() - d->off;
    if (held > 0 && held + len > kMaxBuffered) {
      d->paused = true;
      return CURL_WRITEFUNC_PAUSE;
    }
    if (d->limited && d->received + len > d->body_bound) {
      d->over_limit = true;
      return 0;  // libcurl ends the transfer (CURLE_WRITE_ERROR)
    }
    if (d->off > 0 && d->off >= d->buf.size() / 2) {
      d->buf.erase(0, d->off);
      d->off = 0;
    }
    d->buf.append(p, len);
    d->received += len;
    return len;
  }

  void check_done() {
    int left = 0;
    while (CURLMsg* m = curl_multi_info_read(multi, &left))
      if (m->msg == CURLMSG_DONE) {
        done = true;
        result = m->data.result;
      }
  }

  template <class Pred>
  void pump(Pred ready) {
    while (!ready() && !done) {
      check_deadline();
      int running = 0;
      CURLMcode mc = curl_multi_perform(multi, &running);
      if (mc != CURLM_OK) throw HttpError(HttpError::Kind::Other, std::string("libcurl: ") + curl_multi_strerror(mc));
      check_done();
      if (ready() || done) break;
      if (paused) break;  // the reader has to take bytes first
      curl_multi_poll(multi, nullptr, 0, 1000, nullptr);
    }
  }

  [[noreturn]] void fail() {
    if (over_limit) throw HttpError(HttpError::Kind::TooLarge, too_large);
    std::string detail = errbuf[0] ? errbuf : curl_easy_strerror(result);
    switch (result) {
      case CURLE_COULDNT_CONNECT:
      case CURLE_COULDNT_RESOLVE_HOST:
      case CURLE_COULDNT_RESOLVE_PROXY:
        throw HttpError(HttpError::Kind::Connect, "cannot connect: " + detail);
      case CURLE_OPERATION_TIMEDOUT:
        throw HttpError(HttpError::Kind::Timeout,
                        "timed out: under " + std::to_string(kLowSpeedFloor) + " bytes a second for " +
                            std::to_string(client->timeout()) + " s (" + detail + ")");
      case CURLE_RECV_ERROR:
        // TLS 1.3 reports a refused client certificate at the first read.
        if (!headers_done && detail.find("alert") != std::string::npos)
          throw HttpError(HttpError::Kind::Tls, "TLS: the server refused the connection (" + detail +
                                                    "); it may want a client certificate: NAME.cert and NAME.key in "
                                                    "--cert-dir");
        [[fallthrough]];
      case CURLE_PARTIAL_FILE:
      case CURLE_GOT_NOTHING:
      case CURLE_HTTP2_STREAM:
      case CURLE_HTTP2: {
        std::string got = std::to_string(delivered + (buf.size() - off));
        auto cl = resp.find("content-length");
        throw HttpError(HttpError::Kind::Truncated,
                        headers_done ? "truncated: the connection closed after " + got + " bytes" +
                                           (cl != resp.end() ? " of " + cl->second : "") + " (" + detail + ")"
                                     : "the connection closed before a response (" + detail + ")");
      }
      default:
        if (is_tls_error(result)) {
          std::string cert;
          if (result == CURLE_PEER_FAILED_VERIFICATION) cert = client->describe_certificate(url);
          throw HttpError(HttpError::Kind::Tls,
                          "TLS: " + detail + (cert.empty() ? "" : "; the server's certificate: " + cert));
        }
        throw HttpError(HttpError::Kind::Other, detail);
    }
  }
};

HttpGet::HttpGet(HttpClient& client, const std::string& url, const std::vector<std::string>& headers,
                 const std::string* form)
    : d_(std::make_unique<Impl>()) {
  d_->client = &client;
  d_->url = url;
  d_->easy = curl_easy_init();
  if (!d_->easy) throw Error("libcurl: cannot make a request handle");
  client.configure(d_->easy);
  for (const auto& h : headers) d_->headers = curl_slist_append(d_->headers, h.c_str());
  curl_easy_setopt(d_->easy, CURLOPT_URL, url.c_str());
  curl_easy_setopt(d_->easy, CURLOPT_HTTPHEADER, d_->headers);
  curl_easy_setopt(d_->easy, CURLOPT_ERRORBUFFER, d_->errbuf);
  curl_easy_setopt(d_->easy, CURLOPT_HEADERFUNCTION, &Impl::on_header);
  curl_easy_setopt(d_->easy, CURLOPT_HEADERDATA, d_.get());
  curl_easy_setopt(d_->easy, CURLOPT_WRITEFUNCTION, &Impl::on_body);
  curl_easy_setopt(d_->easy, CURLOPT_WRITEDATA, d_.get());
  if (form) {
    curl_easy_setopt(d_->easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(form->size()));
    curl_easy_setopt(d_->easy, CURLOPT_COPYPOSTFIELDS, form->c_str());
  }
  d_->multi = static_cast<CURLM*>(client.acquire_multi());
  curl_multi_add_handle(d_->multi, d_->easy);
}

HttpGet::~HttpGet() {
  curl_multi_remove_handle(d_->multi, d_->easy);
  curl_easy_cleanup(d_->easy);
  curl_slist_free_all(d_->headers);
  d_->client->release_multi(d_->multi);
}

long HttpGet::status() {
  d_->pump([&] { return d_->headers_done; });
  if (!d_->headers_done) {
    if (d_->done && d_->result == CURLE_OK && d_->status >= 200) return d_->status;
    d_->fail();
  }
  if (d_->limited) check_declared_length();
  return d_->status;
}

// A Content-Length past limit_body's bound is refused before any byte.
void HttpGet::check_declared_length() {
  std::string v = d_->resp.count("content-length") ? d_->resp["content-length"] : "";
  bool number = !v.empty() && v.size() <= 19 && v.find_first_not_of("0123456789") == std::string::npos;
  if (number && std::stoull(v) > d_->body_bound) throw HttpError(HttpError::Kind::TooLarge, d_->too_large);
}

std::string HttpGet::header(const std::string& name) {
  status();
  auto it = d_->resp.find(name);
  return it == d_->resp.end() ? "" : it->second;
}

int64_t HttpGet::content_length() {
  std::string v = header("content-length");
  if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 18) return -1;
  return std::stoll(v);
}

size_t HttpGet::read(void* out, size_t n) {
  Impl& d = *d_;
  if (d.off == d.buf.size()) {
    d.buf.clear();
    d.off = 0;
    if (d.paused) {
      d.paused = false;
      curl_easy_pause(d.easy, CURLPAUSE_CONT);
    }
    d.pump([&] { return d.off < d.buf.size(); });
    if (d.off == d.buf.size()) {
      if (d.done && d.result != CURLE_OK) d.fail();
      if (!d.done && d.paused) return read(out, n);
      return 0;
    }
  }
  size_t k = std::min(n, d.buf.size() - d.off);
  std::memcpy(out, d.buf.data() + d.off, k);
  d.off += k;
  d.delivered += k;
  return k;
}

std::string HttpGet::read_all(size_t cap, const std::string& too_large) {
  int64_t cl = content_length();
  if (cl > static_cast<int64_t>(cap)) throw Error(too_large);
  std::string out;
  char chunk[64 << 10];
  for (size_t k; (k = read(chunk, sizeof chunk)) > 0;) {
    if (out.size() + k > cap) throw Error(too_large);
    out.append(chunk, k);
  }
  return out;
}

void HttpGet::limit_body(uint64_t max_bytes, const std::string& too_large) {
  d_->limited = true;
  d_->body_bound = max_bytes;
  d_->too_large = too_large;
  if (d_->headers_done) check_declared_length();
  if (d_->received > max_bytes) {
    d_->over_limit = true;
    throw HttpError(HttpError::Kind::TooLarge, too_large);
  }
}

uint64_t HttpGet::received() const { return d_->delivered; }
const std::string& HttpGet::url() const { return d_->url; }

// ---- URLs ----------------------------------------------------------------------

std::string url_resolve(const std::string& base, const std::string& reference) {
  CURLU* u = curl_url();
  std::string out;
  if (curl_url_set(u, CURLUPART_URL, base.c_str(), 0) == CURLUE_OK &&
      curl_url_set(u, CURLUPART_URL, reference.c_str(), 0) == CURLUE_OK) {
    char* s = nullptr;
    if (curl_url_get(u, CURLUPART_URL, &s, 0) == CURLUE_OK) out = s;
    curl_free(s);
  }
  curl_url_cleanup(u);
  return out;
}

std::string url_origin(const std::string& url) {
  CURLU* u = curl_url();
  std::string out;
  if (curl_url_set(u, CURLUPART_URL, url.c_str(), 0) == CURLUE_OK) {
    char *scheme = nullptr, *host = nullptr, *port = nullptr;
    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
    curl_url_get(u, CURLUPART_HOST, &host, 0);
    curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT);
    if (scheme && host) out = lower(scheme) + "://" + lower(host) + ":" + (port ? port : "");
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
  }
  curl_url_cleanup(u);
  return out;
}

std::string url_escape(const std::string& s) {
  char* e = curl_easy_escape(nullptr, s.data(), static_cast<int>(s.size()));
  std::string out = e ? e : "";
  curl_free(e);
  return out;
}

}  // namespace memprofile
