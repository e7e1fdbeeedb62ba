#include "network/auth.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/json_text.h"
#include "base/stream.h"
#include "base/unique_fd.h"

namespace memprofile {

using nlohmann::json;

namespace {

constexpr size_t kMaxAuthFile = 1 << 20;
constexpr size_t kMaxHelperOutput = 64 << 10;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// The registry a key of "auths" names: "https://index.docker.io/v1/" is
// docker.io, "quay.io/ns" stays a namespace key.
std::string normalize_key(std::string key) {
  bool had_scheme = false;
  for (const char* scheme : {"https://", "http://"})
    if (key.rfind(scheme, 0) == 0) {
      key = key.substr(std::strlen(scheme));
      had_scheme = true;
    }
  if (had_scheme) key = key.substr(0, key.find('/'));  // a URL: only its host counts
  while (!key.empty() && key.back() == '/') key.pop_back();
  if (key == "index.docker.io" || key == "registry-1.docker.io") key = "docker.io";
  else if (key.rfind("index.docker.io/", 0) == 0) key = "docker.io" + key.substr(15);
  return key;
}

// Runs `docker-credential-NAME get` with the server on standard input.
// Returns false when the helper has no credentials for it.
bool run_helper(const std::string& helper, const std::string& server, Credentials& out) {
  std::string prog = "docker-credential-" + helper;
  int in[2], outp[2];
  if (pipe2(in, O_CLOEXEC) != 0) throw Error(prog + ": pipe: " + std::strerror(errno));
  if (pipe2(outp, O_CLOEXEC) != 0) {
    close(in[0]);
    close(in[1]);
    throw Error(prog + ": pipe: " + std::strerror(errno));
  }
  pid_t pid = fork();
  if (pid < 0) throw Error(prog + ": fork: " + std::strerror(errno));
  if (pid == 0) {
    dup2(in[0], STDIN_FILENO);
    dup2(outp[1], STDOUT_FILENO);
    int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, STDERR_FILENO);
    const char* argv[] = {prog.c_str(), "get", nullptr};
    execvp(prog.c_str(), const_cast<char* const*>(argv));
    _exit(127);
  }
  close(in[0]);
  close(outp[1]);
  // The server name is short: it fits the pipe, so writing cannot block.
  struct sigaction ign {}, old {};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ign, &old);
  ssize_t w = ::write(in[1], server.data(), server.size());
  (void)w;
  close(in[1]);
  sigaction(SIGPIPE, &old, nullptr);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(outp[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    if (text.size() < kMaxHelperOutput) text.append(buf, static_cast<size_t>(n));
  }
  close(outp[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
    throw Error(prog + ": not found on PATH (named by an auth file's credHelpers or credsStore)");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return false;  // "credentials not found"
  try {
    json j = json::parse(text);
    out.user = j.value("Username", "");
    out.password = j.value("Secret", "");
    if (out.user == "<token>") {  // the helpers' convention for an identity token
      out.identity_token = out.password;
      out.user.clear();
      out.password.clear();
    }
  } catch (const json::exception&) {
    throw Error(prog + " get: its answer is not the credential helpers' JSON");
  }
  out.from = prog;
  return !out.empty();
}

// One auth file: true when it has credentials for the reference.
bool from_file(const std::string& path, const RegistryRef& ref, Credentials& out) {
  std::string text;
  if (!read_small_file(path, text, kMaxAuthFile, "larger than 1 MiB; not an auth file")) return false;
  json j = parse_json_bounded(text, path);  // FileError naming the file
  if (!j.is_object()) throw FileError(path, "an auth file is a JSON object");
  std::string server = ref.registry == "docker.io" ? "https://index.docker.io/v1/" : ref.registry;
  if (auto h = j.find("credHelpers"); h != j.end() && h->is_object()) {
    for (const auto& [key, helper] : h->items())
      if (normalize_key(key) == ref.registry && helper.is_string())
        if (run_helper(helper.get<std::string>(), server, out)) return true;
  }
  if (auto s = j.find("credsStore"); s != j.end() && s->is_string() && !s->get<std::string>().empty())
    if (run_helper(s->get<std::string>(), server, out)) return true;
  auto auths = j.find("auths");
  if (auths == j.end() || !auths->is_object()) return false;
  // The longest key that names the registry or a namespace of the repository.
  std::string full = ref.registry + "/" + ref.repository;
  const json* best = nullptr;
  size_t best_len = 0;
  for (const auto& [key, entry] : auths->items()) {
    std::string k = normalize_key(key);
    bool match = k == ref.registry || (full.rfind(k + "/", 0) == 0 && k.size() > ref.registry.size()) || k == full;
    if (match && entry.is_object() && (!best || k.size() > best_len)) {
      best = &entry;
      best_len = k.size();
    }
  }
  if (!best) return false;
  if (auto t = best->find("identitytoken"); t != best->end() && t->is_string() && !t->get<std::string>().empty()) {
    out.identity_token = t->get<std::string>();
    out.from = path;
    return true;
  }
  std::string auth = best->value("auth", "");
  if (auth.empty()) return false;
  std::string decoded = base64_decode(auth);
  size_t colon = decoded.find(':');
  if (decoded.empty() || colon == std::string::npos)
    throw FileError(path, "the \"auth\" entry for " + ref.registry + " is not base64 of USER:PASSWORD");
  out.user = decoded.substr(0, colon);
  out.password = decoded.substr(colon + 1);
  out.from = path;
  return true;
}

}  // namespace

Credentials find_credentials(const RegistryRef& ref, const RegistryOptions& opts) {
  Credentials c;
  if (!opts.creds.empty()) {
    size_t colon = opts.creds.find(':');
    c.user = opts.creds.substr(0, colon);
    c.password = colon == std::string::npos ? "" : opts.creds.substr(colon + 1);
    c.from = "--creds";
    if (c.user.empty()) throw Error("--creds: expected USER[:PASSWORD]");
    return c;
  }
  std::vector<std::string> files;
  if (!opts.authfile.empty()) {
    struct stat st;
    if (stat(opts.authfile.c_str(), &st) != 0)
      throw FileError(opts.authfile, std::string("--authfile: ") + std::strerror(errno));
    files.push_back(opts.authfile);
  } else if (!env("REGISTRY_AUTH_FILE").empty()) {
    files.push_back(env("REGISTRY_AUTH_FILE"));
  } else if (!env("XDG_RUNTIME_DIR").empty()) {
    files.push_back(env("XDG_RUNTIME_DIR") + "/containers/auth.json");
  }
  std::string docker_config = env("DOCKER_CONFIG");
  if (!docker_config.empty()) files.push_back(docker_config + "/config.json");
  else if (!env("HOME").empty()) files.push_back(env("HOME") + "/.docker/config.json");
  for (const auto& f : files)
    if (from_file(f, ref, c)) return c;
  return {};
}

std::vector<Challenge> parse_challenges(const std::string& h) {
  std::vector<Challenge> out;
  size_t i = 0, n = h.size();
  auto skip_ws = [&] {
    while (i < n && (h[i] == ' ' || h[i] == '\t' || h[i] == ',')) ++i;
  };
  auto token = [&] {
    size_t b = i;
    while (i < n && h[i] != ' ' && h[i] != '\t' && h[i] != ',' && h[i] != '=') ++i;
    return h.substr(b, i - b);
  };
  skip_ws();
  while (i < n) {
    Challenge c;
    c.scheme = token();
    for (auto& ch : c.scheme) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (c.scheme.empty()) break;
    // Parameters: key=value or key="quoted, value", until the next scheme.
    while (true) {
      while (i < n && (h[i] == ' ' || h[i] == '\t')) ++i;
      size_t save = i;
      if (i < n && h[i] == ',') ++i;
      while (i < n && (h[i] == ' ' || h[i] == '\t')) ++i;
      std::string key = token();
      if (key.empty() || i >= n || h[i] != '=') {
        i = save;
        break;
      }
      ++i;
      std::string value;
      if (i < n && h[i] == '"') {
        for (++i; i < n && h[i] != '"'; ++i) {
          if (h[i] == '\\' && i + 1 < n) ++i;
          value += h[i];
        }
        if (i < n) ++i;
      } else {
        size_t b = i;
        while (i < n && h[i] != ',' && h[i] != ' ') ++i;
        value = h.substr(b, i - b);
      }
      for (auto& ch : key) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      c.params[key] = value;
    }
    out.push_back(std::move(c));
    skip_ws();
  }
  return out;
}

std::string base64_encode(const std::string& s) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < s.size(); i += 3) {
    unsigned v = (static_cast<unsigned char>(s[i]) << 16) | (static_cast<unsigned char>(s[i + 1]) << 8) |
                 static_cast<unsigned char>(s[i + 2]);
    out += t[v >> 18];
    out += t[(v >> 12) & 63];
    out += t[(v >> 6) & 63];
    out += t[v & 63];
  }
  if (i + 1 == s.size()) {
    unsigned v = static_cast<unsigned char>(s[i]) << 16;
    out += t[v >> 18];
    out += t[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == s.size()) {
    unsigned v = (static_cast<unsigned char>(s[i]) << 16) | (static_cast<unsigned char>(s[i + 1]) << 8);
    out += t[v >> 18];
    out += t[(v >> 12) & 63];
    out += t[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

std::string base64_decode(const std::string& s) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
  };
  std::string out;
  unsigned acc = 0;
  int bits = 0;
  for (char c : s) {
    if (c == '=' || c == '\n' || c == '\r') continue;
    int v = val(c);
    if (v < 0) return "";
    acc = (acc << 6) | static_cast<unsigned>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

}  // namespace memprofile
