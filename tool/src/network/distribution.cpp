#include "network/distribution.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "base/error.h"
#include "base/json_text.h"
#include "base/unique_fd.h"
#include "network/http.h"
#include "network/registries_conf.h"
#include "network/auth.h"
#include "network/reference.h"
#include "source/store.h"

namespace memprofile {

using nlohmann::json;

namespace {

constexpr size_t kMaxJson = kMaxSmallBlob;  // a manifest, index or config, as for archives
constexpr size_t kMaxErrorBody = 16 << 10;
constexpr int kMaxRedirects = 10;
constexpr int kMaxTries = 4;           // a 429 or 5xx is tried again, three times
constexpr long kMaxRetryAfter = 30;    // seconds
constexpr const char* kAcceptManifests =
    "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, "
    "application/vnd.docker.distribution.manifest.list.v2+json, "
    "application/vnd.docker.distribution.manifest.v2+json";

constexpr const char* kTlsHint =
    "; trust its CA with --cert-dir DIR (a DIR/*.crt file), or pass --tls-verify=false (an unknown CA, or a "
    "registry that speaks plain HTTP)";

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string status_text(long st) {
  switch (st) {
    case 400: return "400 Bad Request";
    case 401: return "401 Unauthorized";
    case 403: return "403 Forbidden";
    case 404: return "404 Not Found";
    case 405: return "405 Method Not Allowed";
    case 429: return "429 Too Many Requests";
    case 500: return "500 Internal Server Error";
    case 502: return "502 Bad Gateway";
    case 503: return "503 Service Unavailable";
    case 504: return "504 Gateway Timeout";
    default: return "HTTP " + std::to_string(st);
  }
}

std::string host_of(const std::string& url) {
  std::string o = url_origin(url);
  size_t p = o.find("://");
  return p == std::string::npos ? url : o.substr(p + 3);
}

// The registry's own words from an error body ({"errors":[{"code","message"}]}).
std::string registry_error(HttpGet& r) {
  std::string body;
  try {
    char buf[4096];
    for (size_t k; body.size() < kMaxErrorBody && (k = r.read(buf, sizeof buf)) > 0;) body.append(buf, k);
    json j = json::parse(body);
    const json& e = j.at("errors").at(0);
    std::string code = e.value("code", ""), message = e.value("message", "");
    if (code.empty() && message.empty()) return "";
    return code + (code.empty() || message.empty() ? "" : ": ") + message;
  } catch (...) {
    return "";
  }
}

// ---- TLS: --cert-dir as skopeo reads it --------------------------------------

TlsOptions tls_options(const RegistryRef& ref, const RegistryOptions& opts) {
  TlsOptions t;
  t.verify = opts.tls_verify;
  std::vector<std::string> dirs;
  if (!opts.cert_dir.empty()) {
    struct stat st;
    if (stat(opts.cert_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      throw FileError(opts.cert_dir, "--cert-dir: not a directory");
    dirs.push_back(opts.cert_dir);
  } else {
    dirs = {"/etc/containers/certs.d/" + ref.registry, "/etc/docker/certs.d/" + ref.registry};
  }
  std::string cas;
  for (const auto& dir : dirs) {
    DIR* d = opendir(dir.c_str());
    if (!d) continue;
    std::vector<std::string> names;
    while (dirent* e = readdir(d)) names.push_back(e->d_name);
    closedir(d);
    std::sort(names.begin(), names.end());
    auto ends = [](const std::string& s, const char* suf) {
      size_t n = std::strlen(suf);
      return s.size() > n && s.compare(s.size() - n, n, suf) == 0;
    };
    for (const auto& n : names) {
      std::string path = dir + "/" + n;
      if (ends(n, ".crt")) {
        UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
        if (!fd) throw FileError(path, std::string("cannot open: ") + std::strerror(errno));
        char buf[16 << 10];
        std::string pem;
        for (ssize_t k; (k = ::read(fd.get(), buf, sizeof buf)) > 0 && pem.size() < (1u << 20);) pem.append(buf, k);
        cas += pem + "\n";
      } else if (ends(n, ".cert")) {
        std::string key = dir + "/" + n.substr(0, n.size() - 5) + ".key";
        if (access(key.c_str(), R_OK) != 0) throw FileError(path, "client certificate without its key " + key);
        if (t.client_cert.empty()) {
          t.client_cert = path;
          t.client_key = key;
        }
      } else if (ends(n, ".key")) {
        std::string cert = dir + "/" + n.substr(0, n.size() - 4) + ".cert";
        if (access(cert.c_str(), R_OK) != 0) throw FileError(path, "client key without its certificate " + cert);
      }
    }
  }
  if (!cas.empty()) {
    // Added to the system's CAs, not instead of them.
    std::string system;
    for (const char* bundle : {"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"}) {
      UniqueFd fd(::open(bundle, O_RDONLY | O_CLOEXEC));
      if (!fd) continue;
      char buf[64 << 10];
      for (ssize_t k; (k = ::read(fd.get(), buf, sizeof buf)) > 0 && system.size() < (16u << 20);) system.append(buf, k);
      break;
    }
    t.extra_ca_pem = system + "\n" + cas;
  }
  return t;
}

long timeout_seconds() {
  std::string v = env("MEMPROFILE_REGISTRY_TIMEOUT");
  if (v.empty()) return 60;
  long s = std::strtol(v.c_str(), nullptr, 10);
  return s > 0 ? s : 60;
}

// ---- the distribution API ----------------------------------------------------

class Registry {
 public:
  Registry(std::string source, RegistryRef ref, const RegistryOptions& opts)
      : source_(std::move(source)), ref_(std::move(ref)), opts_(opts), http_(tls_options(ref_, opts), timeout_seconds()) {
    ping();
  }

  const std::string& source() const { return source_; }

  // GET /v2/REPO/KIND/REFERENCE, authenticated, following redirects (the
  // Authorization header only ever to the registry's own origin), tried
  // again on 429 and 5xx. `what` names the object in messages.
  std::unique_ptr<HttpGet> get(const std::string& kind, const std::string& reference, const std::string& what) {
    std::string url = base_ + "/v2/" + ref_.repository + "/" + kind + "/" + reference;
    bool reauthenticated = false;
    for (int attempt = 1;; ++attempt) {
      std::string at = url;
      std::set<std::string> seen{at};
      std::unique_ptr<HttpGet> r;
      long st = 0;
      for (int hops = 0;; ++hops) {
        std::vector<std::string> headers;
        if (kind == "manifests") headers.push_back(std::string("Accept: ") + kAcceptManifests);
        std::string auth = authorization();
        if (!auth.empty() && url_origin(at) == origin_) headers.push_back("Authorization: " + auth);
        r = std::make_unique<HttpGet>(http_, at, headers);
        st = status_of(*r, what);
        if (st != 301 && st != 302 && st != 303 && st != 307 && st != 308) break;
        std::string location = r->header("location");
        if (location.empty()) fail(what + ": " + host_of(at) + " answered " + status_text(st) + " without a Location");
        std::string next = url_resolve(at, location);
        if (next.empty()) fail(what + ": " + host_of(at) + " redirects to a malformed URL \"" + location + "\"");
        if (opts_.same_host_only && host_of(next) != host_of(base_))
          fail(what + ": " + host_of(at) + " redirects to " + host_of(next) +
               ", another host (--registry-same-host allows only " + host_of(base_) + ")");
        if (!seen.insert(next).second)
          fail(what + ": redirect loop (" + std::to_string(hops + 1) + " redirects, back to " + next + ")");
        if (hops + 1 >= kMaxRedirects)
          fail(what + ": too many redirects (" + std::to_string(hops + 1) + ", the last to " + next +
               "; memprofile follows at most " + std::to_string(kMaxRedirects - 1) + ")");
        at = next;
      }
      if (st == 200) return r;
      bool ours = url_origin(at) == origin_;
      if (st == 401 && ours && !reauthenticated) {
        reauthenticated = true;
        if (authenticate(r->header("www-authenticate"), true)) {
          --attempt;
          continue;
        }
      }
      if ((st == 429 || st >= 500) && attempt < kMaxTries) {
        std::this_thread::sleep_for(retry_delay(r->header("retry-after"), attempt));
        continue;
      }
      std::string said = registry_error(*r);
      std::string host = host_of(at);
      std::string tail = said.empty() ? "" : " (" + said + ")";
      switch (st) {
        case 401:
          if (!ours)  // the credentials go to the registry's origin only
            fail(host + " answered " + status_text(st) + " for " + what + tail + " (a redirect from " +
                 host_of(base_) + "; memprofile sends no credentials to another host)");
          if (creds_.empty())
            fail(host + " requires credentials for " + what + " (" + status_text(st) + ")" + tail + "; log in with `skopeo login " +
                 ref_.registry + "` or `docker login " + ref_.registry + "`, or pass --creds USER:PASSWORD or --authfile FILE");
          fail(host + " refused " + creds_.who() + " for " + what + " (" +
               status_text(st) + ")" + tail);
        case 403:
          fail(host + " denies access to " + what + " (" + status_text(st) + ")" + tail +
               (creds_.empty() ? "; log in with `skopeo login " + ref_.registry + "` if the repository is private"
                               : " for " + creds_.who()));
        case 404:
          fail(host + " has no " + what + " (" + status_text(st) + ")" + tail);
        default:
          fail(host + " answered " + status_text(st) + " for " + what + tail +
               (st == 429 || st >= 500 ? " after " + std::to_string(kMaxTries) + " tries" : ""));
      }
    }
  }

  [[noreturn]] void fail(const std::string& what) const { throw FileError(source_, what); }

 private:
  long status_of(HttpGet& r, const std::string& what) {
    try {
      return r.status();
    } catch (const HttpError& e) {
      std::string host = host_of(r.url());
      std::string hint;
      if (e.kind() == HttpError::Kind::Tls)
        hint = opts_.tls_verify ? kTlsHint : "";
      throw FileError(source_, what + ": " + host + ": " + e.what() + hint);
    }
  }

  static std::chrono::milliseconds retry_delay(const std::string& retry_after, int attempt) {
    if (!retry_after.empty() && retry_after.find_first_not_of("0123456789") == std::string::npos &&
        retry_after.size() < 6)
      return std::chrono::seconds(std::min(std::stol(retry_after), kMaxRetryAfter));
    return std::chrono::milliseconds(500L << (attempt - 1));  // 0.5 s, 1 s, 2 s
  }

  std::string authorization() {
    std::lock_guard<std::mutex> g(mutex_);
    return auth_header_;
  }

  // GET /v2/: where the API is (HTTPS, or with --tls-verify=false plain HTTP
  // when HTTPS does not answer) and how it wants to be authenticated.
  void ping() {
    std::string host = ref_.api_host();
    std::vector<std::string> schemes = {"https"};
    if (!opts_.tls_verify) schemes.push_back("http");
    std::string first_error;
    for (const auto& scheme : schemes) {
      base_ = scheme + "://" + host;
      origin_ = url_origin(base_ + "/");
      HttpGet r(http_, base_ + "/v2/", {});
      try {
        long st = r.status();
        if (st == 401) authenticate(r.header("www-authenticate"), false);
        return;
      } catch (const HttpError& e) {
        std::string hint;
        if (e.kind() == HttpError::Kind::Tls && opts_.tls_verify)
          hint = kTlsHint;
        if (first_error.empty()) first_error = host + ": " + e.what() + hint;
        else first_error += "; over plain HTTP: " + std::string(e.what());
        // Nothing listens, or nothing answers: plain HTTP would not fare better.
        if (e.kind() == HttpError::Kind::Connect || e.kind() == HttpError::Kind::Timeout) break;
      }
    }
    fail(first_error);
  }

  // Answers a challenge. Returns true when it made a new Authorization
  // header (worth trying the request again).
  bool authenticate(const std::string& header, bool after_request) {
    std::lock_guard<std::mutex> g(mutex_);
    if (!creds_looked_up_) {
      creds_ = find_credentials(ref_, opts_);
      creds_looked_up_ = true;
    }
    std::string before = auth_header_;
    for (const auto& c : parse_challenges(header)) {
      if (c.scheme == "bearer") {
        auto realm = c.params.find("realm");
        if (realm == c.params.end() || realm->second.empty()) continue;
        if (opts_.same_host_only && host_of(realm->second) != host_of(base_))
          fail(host_of(base_) + " names the token realm " + realm->second + " on another host (--registry-same-host "
               "allows only " + host_of(base_) + "; memprofile sent it nothing)");
        std::string scope = "repository:" + ref_.repository + ":pull";
        if (auto s = c.params.find("scope"); s != c.params.end() && !s->second.empty() && after_request) scope = s->second;
        std::string service = c.params.count("service") ? c.params.at("service") : "";
        auth_header_ = "Bearer " + fetch_token(realm->second, service, scope);
        return auth_header_ != before;
      }
      if (c.scheme == "basic") {
        if (creds_.user.empty() && creds_.password.empty()) return false;
        auth_header_ = "Basic " + base64_encode(creds_.user + ":" + creds_.password);
        return auth_header_ != before;
      }
    }
    return false;
  }

  // The token request of the distribution spec's token auth: a GET with the
  // credentials as Basic, or, for an identity token, the OAuth2 POST of
  // docs/spec/auth/oauth.md (grant_type=refresh_token).
  std::string fetch_token(const std::string& realm, const std::string& service, const std::string& scope) {
    std::string url = realm;
    std::vector<std::string> headers;
    std::optional<std::string> form;
    if (!creds_.identity_token.empty()) {
      form = "grant_type=refresh_token&refresh_token=" + url_escape(creds_.identity_token) +
             "&client_id=memprofile&scope=" + url_escape(scope) + (service.empty() ? "" : "&service=" + url_escape(service));
      headers.push_back("Content-Type: application/x-www-form-urlencoded");
    } else {
      url += (realm.find('?') == std::string::npos ? "?" : "&") +
             (service.empty() ? "" : "service=" + url_escape(service) + "&") + "scope=" + url_escape(scope);
      if (!creds_.empty()) headers.push_back("Authorization: Basic " + base64_encode(creds_.user + ":" + creds_.password));
    }
    HttpGet r(http_, url, headers, form ? &*form : nullptr);
    std::string what = "a token for " + ref_.repository + " from " + host_of(url);
    long st = status_of(r, what);
    // OAuth2 answers a bad refresh token with 400 invalid_grant.
    if (st == 401 || st == 403 || (st == 400 && !creds_.identity_token.empty())) {
      if (creds_.empty())
        fail(host_of(url) + " gives no anonymous token for " + ref_.repository + " (" + status_text(st) +
             "); log in with `skopeo login " + ref_.registry + "` or `docker login " + ref_.registry +
             "`, or pass --creds USER:PASSWORD or --authfile FILE");
      fail("the token server " + host_of(url) + " refused " + creds_.who() + " (" + status_text(st) + ")");
    }
    if (st != 200) fail(what + ": " + status_text(st));
    std::string body;
    try {
      body = r.read_all(1 << 20, "the token server's answer is larger than 1 MiB");
    } catch (const Error& e) {
      fail(what + ": " + e.what());
    }
    try {
      json j = parse_json_bounded(body, what);
      if (!j.is_object()) fail(what + ": the answer is not a JSON object");
      std::string token = j.value("token", "");
      if (token.empty()) token = j.value("access_token", "");
      if (token.empty()) fail(what + ": the answer has no token");
      return token;
    } catch (const json::exception&) {
      fail(what + ": the answer is not JSON with a string \"token\"");
    } catch (const FileError&) {
      fail(what + ": the answer is not JSON");
    }
  }

  std::string source_;
  RegistryRef ref_;
  RegistryOptions opts_;
  HttpClient http_;
  std::string base_, origin_;
  std::mutex mutex_;
  std::string auth_header_;
  Credentials creds_;
  bool creds_looked_up_ = false;
};

// ---- blobs -------------------------------------------------------------------

// A blob as it arrives: hashed and counted; at its end the digest and the
// announced length must match. Transfer failures name the blob.
class VerifiedBlob : public Reader {
 public:
  VerifiedBlob(HttpGet& in, std::string hex, std::string name)
      : in_(in), hex_(std::move(hex)), name_(std::move(name)), length_(in.content_length()) {}
  size_t read(void* buf, size_t n) override {
    if (ended_) return 0;
    size_t k;
    try {
      k = in_.read(buf, n);
    } catch (const HttpError& e) {
      broken_ = true;
      throw FileError(name_, std::string(e.what()));
    }
    if (k > 0) {
      sha_.update(buf, k);
      count_ += k;
      return k;
    }
    ended_ = true;
    if (length_ >= 0 && count_ != static_cast<uint64_t>(length_))
      throw FileError(name_, "truncated: " + std::to_string(count_) + " of " + std::to_string(length_) + " bytes");
    std::string got = sha_.hex();
    if (got != hex_) throw FileError(name_, "digest mismatch: the blob's bytes hash to sha256:" + got);
    return 0;
  }
  bool broken() const { return broken_; }
  bool ended() const { return ended_; }

 private:
  HttpGet& in_;
  std::string hex_, name_;
  int64_t length_;
  Sha256 sha_;
  uint64_t count_ = 0;
  bool ended_ = false, broken_ = false;
};

// A registry image as a Store: "index.json" is an index of one entry, the
// manifest or index the reference names; "blobs/sha256/HEX" is fetched from
// /manifests/ when an index listed it, else from /blobs/.
class RegistryStore : public Store {
 public:
  RegistryStore(const std::string& source, const RegistryRef& ref, const RegistryOptions& opts)
      : reg_(source, ref, opts) {
    std::string reference = ref.digest.empty() ? ref.tag : ref.digest;
    std::string what = "manifest " + ref.repository + (ref.digest.empty() ? ":" : "@") + reference;
    auto r = reg_.get("manifests", reference, what);
    std::string body = read_json(*r, what);
    std::string hex = sha256_hex(body);
    if (!ref.digest.empty() && "sha256:" + hex != ref.digest)
      reg_.fail("digest mismatch: the manifest's bytes hash to sha256:" + hex);
    std::string media = r->header("content-type");
    media = media.substr(0, media.find(';'));
    note_manifest(hex, body);
    manifests_[hex] = body;
    json desc = {{"digest", "sha256:" + hex}, {"size", body.size()}};
    if (!media.empty()) desc["mediaType"] = media;
    index_ = json{{"schemaVersion", 2}, {"manifests", json::array({desc})}}.dump();
  }

  std::string source() const override { return reg_.source(); }
  bool parallel() const override { return true; }
  bool has(const std::string& name) const override { return name == "index.json" || !hex_of(name).empty(); }

  std::string read_small(const std::string& name) override {
    if (name == "index.json") return index_;
    std::string hex = hex_of(name);
    if (hex.empty()) reg_.fail("no " + name + " in a registry");
    bool manifest;
    {
      std::lock_guard<std::mutex> g(mutex_);
      if (auto it = manifests_.find(hex); it != manifests_.end()) return it->second;
      manifest = listed_.count(hex) > 0;
    }
    std::string what = std::string(manifest ? "manifest " : "blob ") + "sha256:" + hex;
    auto r = reg_.get(manifest ? "manifests" : "blobs", "sha256:" + hex, what);
    limit_to_descriptor(*r, hex, what);
    std::string body = read_json(*r, what);
    std::string got = sha256_hex(body);
    if (got != hex) reg_.fail(what + ": digest mismatch: its bytes hash to sha256:" + got);
    if (manifest) note_manifest(hex, body);
    return body;
  }

  LayerSummary summarize(const std::string& name, const LayerLimits& limits) override {
    std::string hex = hex_of(name);
    if (hex.empty()) reg_.fail("no " + name + " in a registry");
    std::string blob = reg_.source() + "@sha256:" + hex;
    auto r = reg_.get("blobs", "sha256:" + hex, "blob sha256:" + hex);
    limit_to_descriptor(*r, hex, "blob sha256:" + hex);
    VerifiedBlob v(*r, hex, blob);
    try {
      return summarize_layer(v, blob, limits);
    } catch (const FileError&) {
      // Bytes that are not the blob make a poor layer: say so rather than
      // what the layer reader tripped on.
      if (!v.broken() && !v.ended()) {
        char buf[64 << 10];
        while (v.read(buf, sizeof buf) > 0) {
        }
      }
      throw;
    }
  }

 private:
  static std::string hex_of(const std::string& name) {
    if (name.rfind("blobs/sha256/", 0) != 0) return "";
    std::string hex = name.substr(13);
    return valid_digest("sha256:" + hex) ? hex : "";
  }

  // The size a descriptor declared for the blob is enforced as its bytes
  // arrive, before the digest can be checked: a server that sends more (an
  // endless body) is cut off at the size plus nothing. A blob no descriptor
  // sized (the manifest a tag names) has read_json's cap, or the layer
  // reader's.
  void limit_to_descriptor(HttpGet& r, const std::string& hex, const std::string& what) {
    uint64_t size;
    {
      std::lock_guard<std::mutex> g(mutex_);
      auto it = sizes_.find(hex);
      if (it == sizes_.end()) return;
      size = it->second;
    }
    try {
      r.limit_body(size, "the server sends more than the " + std::to_string(size) + " bytes its descriptor declares");
    } catch (const HttpError& e) {
      reg_.fail(what + ": " + e.what());
    }
  }

  std::string read_json(HttpGet& r, const std::string& what) {
    try {
      return r.read_all(kMaxJson, "larger than " + std::to_string(kMaxJson >> 20) +
                                      " MiB, the limit for a manifest, index or config");
    } catch (const HttpError& e) {
      reg_.fail(what + ": " + e.what());
    } catch (const Error& e) {
      reg_.fail(what + ": " + e.what());
    }
  }

  // An index's children are manifests: fetched from /manifests/. Every
  // descriptor's size (of a child manifest, a config, a layer) is kept for
  // limit_to_descriptor; a digest listed with two sizes keeps the smaller.
  void note_manifest(const std::string& hex, const std::string& body) {
    std::lock_guard<std::mutex> g(mutex_);
    listed_.insert(hex);
    try {
      json j = parse_json_bounded(body, reg_.source());
      if (!j.is_object()) return;
      auto m = j.find("manifests");
      if (m != j.end() && m->is_array())
        for (const auto& d : *m)
          if (std::string dg = note_size(d); !dg.empty() && listed_.size() < 65536) listed_.insert(dg);
      if (auto c = j.find("config"); c != j.end()) note_size(*c);
      auto l = j.find("layers");
      if (l != j.end() && l->is_array())
        for (const auto& d : *l) note_size(d);
    } catch (const std::exception&) {
      // load_images reports malformed JSON with its position.
    }
  }

  // The hex digest a descriptor names ("" when it names none), its size noted.
  std::string note_size(const json& d) {
    if (!d.is_object() || !d.contains("digest") || !d["digest"].is_string()) return "";
    std::string dg = d["digest"].get<std::string>();
    if (!valid_digest(dg)) return "";
    std::string hex = dg.substr(7);
    auto size = d.find("size");
    if (size != d.end() && size->is_number_unsigned() && sizes_.size() < 65536) {
      uint64_t n = size->get<uint64_t>();
      auto [it, fresh] = sizes_.emplace(hex, n);
      if (!fresh) it->second = std::min(it->second, n);
    }
    return hex;
  }

  Registry reg_;
  std::string index_;
  std::mutex mutex_;
  std::map<std::string, std::string> manifests_;  // the one the reference named
  std::set<std::string> listed_;                  // digests that are manifests
  std::map<std::string, uint64_t> sizes_;         // hex digest -> its descriptor's size
};

}  // namespace

// ---- public -------------------------------------------------------------------

std::unique_ptr<Store> open_registry(const std::string& source, const RegistryOptions& opts) {
  RegistryRef ref = parse_registry_ref(source.substr(kRegistryPrefix.size()));
  std::vector<PullSource> sources;
  try {
    sources = pull_sources(load_registries_conf(opts.registries_conf), ref);
  } catch (const FileError& e) {
    throw FileError(source, std::string("registries.conf: ") + e.what());
  }
  // Mirrors first, as skopeo: a mirror that fails passes to the next source,
  // and the last one's failure is the answer, with the mirrors' reasons.
  std::string mirrors_failed;
  for (size_t i = 0; i < sources.size(); ++i) {
    const PullSource& s = sources[i];
    RegistryOptions o = opts;
    if (s.insecure) o.tls_verify = false;
    bool last = i + 1 == sources.size();
    try {
      return std::make_unique<RegistryStore>(source, s.ref, o);
    } catch (const FileError& e) {
      if (last && mirrors_failed.empty()) throw;
      std::string why = std::string(e.what()).substr(e.path().size() + 2);  // what follows "PATH: "
      if (!last) {
        bool named = why.rfind(s.ref.registry, 0) == 0;  // most reasons start with the host
        mirrors_failed += (mirrors_failed.empty() ? "" : "; ") + (named ? why : s.ref.registry + ": " + why);
        continue;
      }
      throw FileError(source, why + " (mirrors also failed: " + mirrors_failed + ")");
    }
  }
  throw FileError(source, "no source to pull from");  // pull_sources always gives one
}

}  // namespace memprofile
