#include "network/daemon.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/json_text.h"
#include "base/unique_fd.h"
#include "image/layer.h"

namespace memprofile {

namespace {

constexpr size_t kMaxDaemonFile = 1 << 20;   // config.json, meta.json, PEM files
constexpr size_t kMaxErrorBody = 64 << 10;   // the daemon's refusal: {"message": ...}
const char* const kDefaultHost = "unix:///var/run/docker.sock";

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string docker_config_dir() {
  std::string d = env("DOCKER_CONFIG");
  if (!d.empty()) return d;
  return env("HOME").empty() ? "" : env("HOME") + "/.docker";
}

std::string read_or_empty(const std::string& path) {
  std::string text;
  if (!read_small_file(path, text, kMaxDaemonFile, "larger than 1 MiB")) return "";
  return text;
}

// The context the CLI would use when DOCKER_HOST is unset: DOCKER_CONTEXT,
// else config.json's currentContext; "" or "default" mean none.
std::string current_context() {
  std::string name = env("DOCKER_CONTEXT");
  if (!name.empty()) return name;
  std::string dir = docker_config_dir();
  if (dir.empty()) return "";
  std::string text = read_or_empty(dir + "/config.json");
  if (text.empty()) return "";
  nlohmann::json j = parse_json_bounded(text, dir + "/config.json");
  auto it = j.is_object() ? j.find("currentContext") : j.end();
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// TLS as the CLI sets it up for tcp:// (DOCKER_TLS_VERIFY, DOCKER_TLS and
// DOCKER_CERT_PATH, or a context's tls directory): ca.pem is the only CA
// trusted, cert.pem and key.pem the client's pair.
TlsOptions tls_from(const std::string& cert_dir, bool verify) {
  TlsOptions t;
  t.verify = verify;
  t.extra_ca_pem = read_or_empty(cert_dir + "/ca.pem");
  struct stat st;
  if (stat((cert_dir + "/cert.pem").c_str(), &st) == 0 && stat((cert_dir + "/key.pem").c_str(), &st) == 0) {
    t.client_cert = cert_dir + "/cert.pem";
    t.client_key = cert_dir + "/key.pem";
  }
  return t;
}

// "unix:///p", "tcp://h[:p]" into the endpoint; anything else is refused.
void parse_host(DaemonEndpoint& ep, bool use_tls) {
  const std::string& h = ep.host;
  if (h.rfind("unix://", 0) == 0) {
    ep.unix_socket = h.substr(7);
    if (ep.unix_socket.empty() || ep.unix_socket[0] != '/')
      throw Error(ep.from + " " + h + ": a unix socket is named by an absolute path (unix:///var/run/docker.sock)");
    ep.base_url = "http://docker";
  } else if (h.rfind("tcp://", 0) == 0) {
    std::string hostport = h.substr(6);
    hostport = hostport.substr(0, hostport.find('/'));
    if (hostport.empty()) throw Error(ep.from + " " + h + ": no host");
    bool has_port = hostport[0] == '[' ? hostport.find("]:") != std::string::npos
                                       : hostport.find(':') != std::string::npos;
    if (!has_port) hostport += use_tls ? ":2376" : ":2375";
    ep.base_url = (use_tls ? "https://" : "http://") + hostport;
  } else if (h.rfind("ssh://", 0) == 0) {
    throw Error(ep.from + " " + h + ": ssh:// is not read directly; forward the socket "
                "(ssh -nNT -L /tmp/docker.sock:/var/run/docker.sock HOST) and set DOCKER_HOST=unix:///tmp/docker.sock");
  } else {
    throw Error(ep.from + " " + h + ": not a daemon address memprofile reads (unix:///PATH or tcp://HOST[:PORT])");
  }
}

// connect(2) to the socket first: libcurl says only "could not connect",
// and the fix differs for a missing socket, a refusal and a permission.
void probe_socket(const DaemonEndpoint& ep, const std::string& source) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (ep.unix_socket.size() >= sizeof addr.sun_path)
    throw FileError(source, "the daemon's socket path is too long: " + ep.unix_socket);
  std::memcpy(addr.sun_path, ep.unix_socket.c_str(), ep.unix_socket.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) throw FileError(source, std::string("cannot make a socket: ") + std::strerror(errno));
  int rc;
  do rc = ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  while (rc != 0 && errno == EINTR);
  if (rc == 0) return;
  std::string where = ep.host + " (from " + ep.from + ")";
  switch (errno) {
    case ENOENT:
    case ENOTDIR:
      throw FileError(source, "no Docker daemon at " + where +
                                  ": the socket does not exist; start dockerd, or point DOCKER_HOST at a running one");
    case ECONNREFUSED:
      throw FileError(source, "no Docker daemon listens on " + where + "; start dockerd, or point DOCKER_HOST elsewhere");
    case EACCES:
    case EPERM:
      throw FileError(source, "permission denied on the Docker daemon's socket " + where +
                                  ": run as root, or as a member of the socket's group (usually docker)");
    default:
      throw FileError(source, "cannot connect to the Docker daemon at " + where + ": " + std::strerror(errno));
  }
}

long daemon_timeout() {
  long s = std::strtol(env("MEMPROFILE_DAEMON_TIMEOUT").c_str(), nullptr, 10);
  return s > 0 ? s : 120;
}

// The daemon's reason for a refusal: its JSON {"message": ...}, else the body.
std::string daemon_message(HttpGet& get) {
  std::string body;
  try {
    body = get.read_all(kMaxErrorBody, "");
  } catch (const std::exception&) {
  }
  try {
    nlohmann::json j = nlohmann::json::parse(body);
    if (j.is_object() && j.contains("message") && j["message"].is_string()) body = j["message"].get<std::string>();
  } catch (const std::exception&) {
  }
  while (!body.empty() && (body.back() == '\n' || body.back() == '\r')) body.pop_back();
  if (body.size() > 300) body = body.substr(0, 300) + "...";
  for (auto& c : body)
    if (c == '\n' || c == '\r') c = ' ';
  return body;
}

// The stream, with transfer failures said as the source's.
class DaemonStream : public Reader {
 public:
  DaemonStream(std::string source, const DaemonEndpoint& ep, const std::string& url)
      : source_(std::move(source)), client_(ep.tls, daemon_timeout()), get_(client_with(ep), url, {}) {
    // The export has no declared size: the archive's own limit bounds it
    // (and so its deadline: http.h).
    get_.limit_body(LayerLimits{}.max_tar_bytes, "the Docker daemon's export is larger than " +
                                                    std::to_string(LayerLimits{}.max_tar_bytes >> 30) +
                                                    " GiB, memprofile's limit for an image archive");
  }
  HttpGet& get() { return get_; }
  size_t read(void* buf, size_t n) override {
    try {
      return get_.read(buf, n);
    } catch (const HttpError& e) {
      throw FileError(source_, std::string("the Docker daemon's stream broke off: ") + e.what());
    }
  }

 private:
  HttpClient& client_with(const DaemonEndpoint& ep) {
    client_.set_unix_socket(ep.unix_socket);
    return client_;
  }
  std::string source_;
  HttpClient client_;
  HttpGet get_;
};

}  // namespace

DaemonEndpoint daemon_endpoint() {
  DaemonEndpoint ep;
  bool use_tls = !env("DOCKER_TLS_VERIFY").empty() || !env("DOCKER_TLS").empty();
  std::string cert_path = env("DOCKER_CERT_PATH").empty() ? docker_config_dir() : env("DOCKER_CERT_PATH");
  if (!env("DOCKER_HOST").empty()) {
    ep.host = env("DOCKER_HOST");
    ep.from = "DOCKER_HOST";
  } else if (std::string ctx = current_context(); !ctx.empty() && ctx != "default") {
    // A context's files sit under the hash of its name.
    std::string hash = sha256_hex(ctx);
    std::string meta_path = docker_config_dir() + "/contexts/meta/" + hash + "/meta.json";
    std::string text = read_or_empty(meta_path);
    if (text.empty())
      throw Error("docker context " + ctx + ": " + meta_path + " is missing (docker context ls lists the contexts)");
    nlohmann::json meta = parse_json_bounded(text, meta_path);
    const nlohmann::json* docker = nullptr;
    if (meta.is_object() && meta.contains("Endpoints") && meta["Endpoints"].is_object() &&
        meta["Endpoints"].contains("docker") && meta["Endpoints"]["docker"].is_object())
      docker = &meta["Endpoints"]["docker"];
    if (!docker || !docker->contains("Host") || !(*docker)["Host"].is_string())
      throw FileError(meta_path, "docker context " + ctx + " has no Endpoints.docker.Host");
    ep.host = (*docker)["Host"].get<std::string>();
    ep.from = "docker context " + ctx;
    std::string tls_dir = docker_config_dir() + "/contexts/tls/" + hash + "/docker";
    struct stat st;
    bool has_tls = stat(tls_dir.c_str(), &st) == 0;
    bool skip = docker->contains("SkipTLSVerify") && (*docker)["SkipTLSVerify"].is_boolean() &&
                (*docker)["SkipTLSVerify"].get<bool>();
    use_tls = has_tls || skip;
    cert_path = tls_dir;
    if (use_tls) ep.tls = tls_from(cert_path, !skip);
  } else {
    ep.host = kDefaultHost;
    ep.from = "the default";
  }
  if (ep.from == "DOCKER_HOST" && use_tls) ep.tls = tls_from(cert_path, !env("DOCKER_TLS_VERIFY").empty());
  parse_host(ep, use_tls);
  return ep;
}

std::string daemon_image_name(const std::string& name) {
  if (name.empty()) throw Error("docker-daemon: names no image (docker-daemon:NAME[:TAG])");
  for (unsigned char c : name)
    if (c <= ' ' || c == 0x7f) throw Error("docker-daemon:" + name + ": an image name has no spaces or control characters");
  // An image ID (sha256:HEX, as skopeo writes it) or a reference with a
  // digest or a tag (a ':' after the last '/') is asked for as it is.
  if (name.find('@') != std::string::npos) return name;
  size_t slash = name.rfind('/');
  if (name.find(':', slash == std::string::npos ? 0 : slash) != std::string::npos) return name;
  return name + ":latest";
}

std::unique_ptr<Reader> open_daemon_image(const std::string& source) {
  std::string name = daemon_image_name(source.substr(std::strlen("docker-daemon:")));
  DaemonEndpoint ep;
  try {
    ep = daemon_endpoint();
  } catch (const FileError&) {
    throw;
  } catch (const Error& e) {
    throw FileError(source, e.what());
  }
  if (!ep.unix_socket.empty()) probe_socket(ep, source);
  // Unversioned: the daemon answers with its own API version; /images/
  // {name}/get is the same in every version since 1.24.
  std::string url = ep.base_url + "/images/" + url_escape(name) + "/get";
  auto stream = std::make_unique<DaemonStream>(source, ep, url);
  long status;
  try {
    status = stream->get().status();
  } catch (const HttpError& e) {
    throw FileError(source, "cannot reach the Docker daemon at " + ep.host + " (from " + ep.from + "): " + e.what());
  }
  if (status == 200) return stream;
  std::string why = daemon_message(stream->get());
  if (status == 404)
    throw FileError(source, "no image " + name + " in the Docker daemon at " + ep.host + " (docker images lists what it has)" +
                                (why.empty() ? "" : ": " + why));
  throw FileError(source, "the Docker daemon at " + ep.host + " refused to export " + name + " (HTTP " +
                              std::to_string(status) + ")" + (why.empty() ? "" : ": " + why));
}

}  // namespace memprofile
