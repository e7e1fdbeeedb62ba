#include "network/registries_conf.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <map>
#include <unordered_map>
#include <sstream>
#include <toml.hpp>

#include "base/error.h"
#include "base/stream.h"

namespace memprofile {

namespace {

constexpr size_t kMaxConfFile = 1 << 20;
constexpr size_t kMaxDropIns = 256;
// The TOML parser recurses per nesting level and per dotted-key part, and
// frees its tree recursively: a crafted file must not reach the stack's end.
// A registries.conf nests three levels.
constexpr int kMaxNesting = 32;
// Its time also grows with the square of a line's values: a registries.conf
// line is short.
constexpr size_t kMaxLine = 8 << 10;
// Entries in all the files together (a real one has a handful).
constexpr size_t kMaxEntries = 10000;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

bool exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// A TOML file is UTF-8 (the spec), and toml11 3.7 reads past the end of
// its buffer on some invalid sequences (found by fuzz_registries_conf): the
// bytes are checked first.
void check_utf8(const std::string& text, const std::string& path) {
  size_t line = 1;
  for (size_t i = 0; i < text.size();) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\n') ++line;
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    bool ok = n != 0 && i + n <= text.size() && !(n == 2 && c < 0xc2) && !(n == 4 && c > 0xf4);
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
    if (ok && n == 3) {  // no overlong forms, no surrogates
      unsigned char d = static_cast<unsigned char>(text[i + 1]);
      ok = !(c == 0xe0 && d < 0xa0) && !(c == 0xed && d >= 0xa0);
    }
    if (ok && n == 4) {
      unsigned char d = static_cast<unsigned char>(text[i + 1]);
      ok = !(c == 0xf0 && d < 0x90) && !(c == 0xf4 && d >= 0x90);
    }
    if (!ok) throw FileError(path, "line " + std::to_string(line) + ": not UTF-8 (a TOML file is)");
    i += n;
  }
}

// Brackets and dots outside strings and comments, in one pass: a bound on how
// deep the parser will go, checked before it runs.
void check_nesting(const std::string& text, const std::string& path) {
  int depth = 0, dots = 0, line = 1;
  size_t line_start = 0;
  auto new_line = [&](size_t at) {
    if (at - line_start > kMaxLine)
      throw FileError(path, "line " + std::to_string(line) + ": longer than " + std::to_string(kMaxLine >> 10) +
                                " KiB; not a registries.conf");
    ++line;
    line_start = at + 1;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '\n') {
      new_line(i);
      dots = 0;
    } else if (c == '#') {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
    } else if (c == '"' || c == '\'') {
      bool triple = text.compare(i, 3, std::string(3, c)) == 0;
      size_t j = i + (triple ? 3 : 1);
      for (; j < text.size(); ++j) {
        if (c == '"' && text[j] == '\\' && j + 1 < text.size() && text[j + 1] != '\n') {
          ++j;  // an escaped character (a line-ending backslash is a newline below)
          continue;
        }
        if (text[j] == '\n') {
          if (!triple) break;  // the outer loop counts it; the parser reports the unterminated string
          new_line(j);
        }
        if (text[j] == c && (!triple || text.compare(j, 3, std::string(3, c)) == 0)) {
          if (triple) {
            j += 2;
            // TOML: one or two more quotes before the delimiter belong to
            // the string (""""x"""" is "x\"" and a quote).
            for (int extra = 0; extra < 2 && j + 1 < text.size() && text[j + 1] == c; ++extra) ++j;
          }
          break;
        }
      }
      if (j < text.size() && text[j] == '\n') --j;  // a one-line string cut by the newline: counted outside
      i = j;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxNesting)
        throw FileError(path, "line " + std::to_string(line) + ": nested deeper than " + std::to_string(kMaxNesting) +
                                  " levels; not a registries.conf");
    } else if (c == ']' || c == '}') {
      depth = std::max(0, depth - 1);
    } else if (c == '.' && ++dots > kMaxNesting) {
      throw FileError(path, "line " + std::to_string(line) + ": a key of more than " + std::to_string(kMaxNesting) +
                                " parts; not a registries.conf");
    }
  }
  new_line(text.size());  // the last line, without its newline
}

// One line from toml11's multi-line report: its first line, and where.
std::string toml_message(const toml::exception& e) {
  std::string what = e.what();
  std::string first = what.substr(0, what.find('\n'));
  if (first.rfind("[error] ", 0) == 0) first = first.substr(8);
  if (first.rfind("toml::", 0) == 0 && first.find(": ") != std::string::npos) first = first.substr(first.find(": ") + 2);
  // The caret line says what was expected there ("   |   ^--- expected ...").
  std::string hint;
  size_t caret = what.find("^--- ");
  if (caret == std::string::npos) caret = what.find("^-- ");
  if (caret != std::string::npos) {
    size_t b = what.find(' ', caret) + 1;
    hint = what.substr(b, what.find('\n', b) - b);
  }
  std::string where = "line " + std::to_string(e.location().line());
  return where + ": " + first + (hint.empty() ? "" : " (" + hint + ")");
}

// parseLocation upstream: trailing slashes go, URI schemes are refused.
std::string parse_location(std::string s, const std::string& path) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  if (s.rfind("http://", 0) == 0 || s.rfind("https://", 0) == 0)
    throw FileError(path, "invalid location '" + s + "': URI schemes are not supported");
  return s;
}

class Table {
 public:
  Table(const toml::value& v, std::string where, std::string path)
      : v_(v), where_(std::move(where)), path_(std::move(path)) {}
  std::string str(const char* key) const {
    const toml::value* x = find(key);
    if (!x) return "";
    if (!x->is_string()) bad(key, "a string");
    return x->as_string().str;
  }
  bool boolean(const char* key) const {
    const toml::value* x = find(key);
    if (!x) return false;
    if (!x->is_boolean()) bad(key, "true or false");
    return x->as_boolean();
  }
  std::vector<toml::value> tables(const char* key) const {
    const toml::value* x = find(key);
    if (!x) return {};
    if (!x->is_array()) bad(key, "an array of tables ([[...]])");
    for (const auto& e : x->as_array())
      if (!e.is_table()) bad(key, "an array of tables ([[...]])");
    return x->as_array();
  }
  std::vector<std::string> strings(const char* key) const {
    std::vector<std::string> out;
    const toml::value* x = find(key);
    if (!x) return out;
    if (!x->is_array()) bad(key, "an array of strings");
    for (const auto& e : x->as_array()) {
      if (!e.is_string()) bad(key, "an array of strings");
      out.push_back(e.as_string().str);
    }
    return out;
  }
  // A table under `key` (nullptr when absent); anything else is refused.
  const toml::value* table(const char* key) const {
    const toml::value* x = find(key);
    if (x && !x->is_table()) bad(key, "a table");
    return x;
  }
  const toml::value* find(const char* key) const {
    if (!v_.is_table()) return nullptr;
    const auto& t = v_.as_table();
    auto it = t.find(key);
    return it == t.end() ? nullptr : &it->second;
  }

 private:
  [[noreturn]] void bad(const char* key, const char* want) const {
    throw FileError(path_, where_ + (where_.empty() ? "" : ": ") + "\"" + key + "\" must be " + want);
  }
  const toml::value& v_;
  std::string where_, path_;
};

RegistryEndpoint endpoint(const Table& t, const std::string& path) {
  RegistryEndpoint e;
  e.location = parse_location(t.str("location"), path);
  e.insecure = t.boolean("insecure");
  e.pull_from_mirror = t.str("pull-from-mirror");
  return e;
}

// postProcessRegistries upstream: prefixes, and what may not be combined.
std::string lower_host(std::string s) {
  for (size_t i = 0; i < s.size() && s[i] != '/'; ++i) s[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[i])));
  return s;
}

void post_process(RegistryEntry& r, const std::string& path) {
  if (r.prefix.empty()) {
    if (r.primary.location.empty()) throw FileError(path, "invalid condition: both location and prefix are unset");
    r.prefix = r.primary.location;
  } else {
    r.prefix = parse_location(r.prefix, path);
    if (r.prefix.rfind("*.", 0) != 0 && r.primary.location.empty())
      throw FileError(path, "invalid condition: location is unset and prefix \"" + r.prefix +
                                "\" is not in the format *.example.com");
    if (r.prefix.rfind("*.", 0) == 0 && r.prefix.find_first_of("/@:") != std::string::npos)
      throw FileError(path, "wildcarded prefix should be in the format *.example.com; \"" + r.prefix +
                                "\" is incorrectly formatted");
  }
  // References are matched with their host in lower case (DNS names are).
  r.prefix = lower_host(r.prefix);
  if (!r.primary.pull_from_mirror.empty())
    throw FileError(path, "pull-from-mirror must not be set for a non-mirror registry \"" + r.prefix + "\"");
  for (auto& m : r.mirrors) {
    if (m.location.empty()) throw FileError(path, "invalid condition: a mirror of \"" + r.prefix + "\" has no location");
    if (r.mirror_by_digest_only && !m.pull_from_mirror.empty())
      throw FileError(path, "cannot set mirror-by-digest-only for the registry \"" + r.prefix +
                                "\" and pull-from-mirror for its mirror \"" + m.location + "\" at the same time");
    const std::string& p = m.pull_from_mirror;
    if (!p.empty() && p != "all" && p != "digest-only" && p != "tag-only")
      throw FileError(path, "unsupported pull-from-mirror value \"" + p + "\" for mirror \"" + m.location +
                                "\" (all, digest-only or tag-only)");
  }
}

// refMatchingPrefix upstream: the length of `ref` the prefix covers, -1 when
// it does not match. A prefix matches at a component boundary; *.example.com
// matches the hosts under example.com.
long matching_prefix(const std::string& ref, const std::string& prefix) {
  if (prefix.rfind("*.", 0) == 0) {
    std::string tail = prefix.substr(1);
    size_t at = ref.find(tail);
    if (at == std::string::npos || ref.substr(0, at).find('/') != std::string::npos) return -1;
    size_t end = at + tail.size();
    if (end == ref.size() || ref[end] == ':' || ref[end] == '/' || ref[end] == '@') return static_cast<long>(end);
    return -1;
  }
  if (ref.size() < prefix.size() || ref.compare(0, prefix.size(), prefix) != 0) return -1;
  if (ref.size() == prefix.size()) return static_cast<long>(prefix.size());
  char c = ref[prefix.size()];
  return c == ':' || c == '/' || c == '@' ? static_cast<long>(prefix.size()) : -1;
}

void merge(RegistriesConf& into, RegistriesConf&& from) {
  std::unordered_map<std::string, size_t> at;
  for (size_t i = 0; i < into.registries.size(); ++i) at[into.registries[i].prefix] = i;
  for (auto& r : from.registries) {
    auto same = at.find(r.prefix);
    if (same != at.end()) {
      into.registries[same->second] = std::move(r);
    } else {
      if (into.registries.size() >= kMaxEntries)
        throw FileError(r.file, "more than " + std::to_string(kMaxEntries) + " [[registry]] entries in all the files");
      at[r.prefix] = into.registries.size();
      into.registries.push_back(std::move(r));
    }
  }
}

RegistriesConf load_file(const std::string& path, bool drop_in) {
  // A FIFO would block the open: only a regular file is read.
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) throw FileError(path, "not a regular file");
  std::string text;
  if (!read_small_file(path, text, kMaxConfFile, "larger than 1 MiB; not a registries.conf"))
    throw FileError(path, "does not exist");
  return parse_registries_conf(text, path, drop_in);
}

std::vector<std::string> drop_ins(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;  // most machines have none
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.size() > 5 && n.compare(n.size() - 5, 5, ".conf") == 0) {
      struct stat st;
      std::string p = dir + "/" + n;
      if (stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode)) out.push_back(p);
    }
    if (out.size() > kMaxDropIns) {
      closedir(d);
      throw FileError(dir, "more than " + std::to_string(kMaxDropIns) + " drop-in files");
    }
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

RegistriesConf parse_registries_conf(const std::string& text, const std::string& path, bool drop_in) {
  check_utf8(text, path);
  check_nesting(text, path);
  toml::value data;
  try {
    std::istringstream in(text);
    data = toml::parse(in, path);
  } catch (const toml::exception& e) {
    // toml11 says what is malformed with its own exceptions; anything else
    // it throws is a fault of the parser, not of the file, and is left to
    // surface as one (fuzz_registries_conf finds it).
    throw FileError(path, "malformed TOML: " + toml_message(e));
  }
  RegistriesConf conf;
  conf.files = path;
  Table top(data, "", path);
  bool v2 = top.find("registry") || top.find("unqualified-search-registries");
  if (const toml::value* v1 = top.find("registries")) {
    // Version 1: lists of hosts under [registries.insecure] and [registries.block].
    if (drop_in) throw FileError(path, "a drop-in file must be in the version 2 format ([[registry]]), not version 1");
    if (v2) throw FileError(path, "mixing the version 1 ([registries.*]) and version 2 ([[registry]]) formats is not supported");
    if (!v1->is_table()) throw FileError(path, "\"registries\" must be a table ([registries.insecure] ...)");
    Table t1(*v1, "[registries]", path);
    std::map<std::string, RegistryEntry> by_host;
    std::vector<std::string> order;
    auto entry = [&](const std::string& host) -> RegistryEntry& {
      std::string loc = parse_location(host, path);
      if (!by_host.count(loc)) {
        order.push_back(loc);
        by_host[loc].prefix = loc;
        by_host[loc].primary.location = loc;
        by_host[loc].file = path;
      }
      return by_host[loc];
    };
    for (const char* list : {"block", "insecure"}) {
      const toml::value* sub = t1.table(list);
      if (!sub) continue;
      for (const auto& host : Table(*sub, std::string("[registries.") + list + "]", path).strings("registries")) {
        if (std::strcmp(list, "block") == 0) entry(host).blocked = true;
        else entry(host).primary.insecure = true;
      }
    }
    for (const auto& h : order) conf.registries.push_back(by_host[h]);
    return conf;
  }
  size_t n = 0;
  std::unordered_map<std::string, size_t> by_prefix;
  // Upstream: one location (or wildcard prefix) named twice must agree on
  // insecure and blocked.
  std::unordered_map<std::string, std::pair<bool, bool>> settings;
  std::vector<toml::value> tables = top.tables("registry");
  if (tables.size() > kMaxEntries)
    throw FileError(path, "more than " + std::to_string(kMaxEntries) + " [[registry]] entries");
  for (const auto& rv : tables) {
    std::string where = "[[registry]] " + std::to_string(++n);
    Table t(rv, where, path);
    RegistryEntry r;
    r.file = path;
    r.prefix = t.str("prefix");
    r.primary = endpoint(t, path);
    r.blocked = t.boolean("blocked");
    r.mirror_by_digest_only = t.boolean("mirror-by-digest-only");
    for (const auto& mv : t.tables("mirror")) r.mirrors.push_back(endpoint(Table(mv, where + " mirror", path), path));
    post_process(r, path);
    std::string key = r.primary.location.empty() ? r.prefix : r.primary.location;
    auto [it, fresh] = settings.emplace(key, std::make_pair(r.primary.insecure, r.blocked));
    if (!fresh && it->second.first != r.primary.insecure)
      throw FileError(path, "registry '" + key + "' is defined multiple times with conflicting 'insecure' setting");
    if (!fresh && it->second.second != r.blocked)
      throw FileError(path, "registry '" + key + "' is defined multiple times with conflicting 'blocked' setting");
    // The first of the same prefix wins within a file.
    if (by_prefix.emplace(r.prefix, conf.registries.size()).second) conf.registries.push_back(std::move(r));
  }
  return conf;
}

RegistriesConf load_registries_conf(const std::string& explicit_path) {
  std::string main = explicit_path.empty() ? env("CONTAINERS_REGISTRIES_CONF") : explicit_path;
  std::string home = env("HOME");
  std::string user_file = home.empty() ? "" : home + "/.config/containers/registries.conf";
  std::string user_dir = home.empty() ? "" : home + "/.config/containers/registries.conf.d";
  std::vector<std::string> dirs;
  RegistriesConf conf;
  if (!main.empty()) {
    conf = load_file(main, false);  // named, so it must be there
    dirs = {"/etc/containers/registries.conf.d", user_dir};
  } else if (!user_file.empty() && exists(user_file)) {
    conf = load_file(user_file, false);
    dirs = {user_dir};
  } else {
    if (exists("/etc/containers/registries.conf")) conf = load_file("/etc/containers/registries.conf", false);
    dirs = {"/etc/containers/registries.conf.d", user_dir};
  }
  std::string files = conf.files;
  for (const auto& dir : dirs) {
    if (dir.empty()) continue;
    for (const auto& f : drop_ins(dir)) {
      merge(conf, load_file(f, true));
      files += (files.empty() ? "" : ", ") + f;
    }
  }
  conf.files = files.empty() ? "none" : files;
  return conf;
}

std::vector<PullSource> pull_sources(const RegistriesConf& conf, const RegistryRef& ref) {
  std::string name = ref.registry + "/" + ref.repository;
  const RegistryEntry* best = nullptr;
  for (const auto& r : conf.registries)
    if (matching_prefix(name, r.prefix) >= 0 && (!best || r.prefix.size() > best->prefix.size())) best = &r;
  if (!best) return {PullSource{ref, false, false}};
  if (best->blocked)
    throw FileError(best->file, "pulls of " + name + " are blocked (blocked = true under the prefix \"" + best->prefix + "\")");
  bool digested = !ref.digest.empty();
  std::vector<std::pair<const RegistryEndpoint*, bool>> endpoints;
  for (const auto& m : best->mirrors) {
    bool use = best->mirror_by_digest_only ? digested
               : m.pull_from_mirror == "digest-only" ? digested
               : m.pull_from_mirror == "tag-only"    ? !digested
                                                     : true;
    if (use) endpoints.push_back({&m, true});
  }
  endpoints.push_back({&best->primary, false});
  std::string full = ref.str();
  // The prefix matched the name, so it matches the name with its tag or digest.
  size_t covered = static_cast<size_t>(matching_prefix(full, best->prefix));
  std::vector<PullSource> out;
  for (const auto& [ep, mirror] : endpoints) {
    PullSource s;
    s.insecure = ep->insecure;
    s.mirror = mirror;
    if (ep->location.empty()) {
      s.ref = ref;  // a *.example.com entry without a location: the host itself
    } else {
      std::string rewritten = ep->location + full.substr(covered);
      try {
        s.ref = parse_registry_ref(rewritten);
      } catch (const Error& e) {
        throw FileError(best->file, "the location \"" + ep->location + "\" makes " + rewritten +
                                        " of " + full + ", not an image reference");
      }
      // Upstream parses the result as a canonical name: written out again,
      // it must be what the rewrite made (no docker.io/library/ added, no
      // first component that is not a host).
      std::string canonical = s.ref.str(), made = lower_host(rewritten);
      if (canonical != made)
        throw FileError(best->file, "the location \"" + ep->location + "\" makes " + rewritten + " of " + full +
                                        ", not a canonical image reference (it would be " + canonical + ")");
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace memprofile
