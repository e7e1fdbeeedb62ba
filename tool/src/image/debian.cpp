#include "image/debian.h"

#include "base/error.h"

namespace memprofile {

namespace {

constexpr size_t kStatusMax = 4 << 20;  // what a layer keeps of a config file (layer.cpp's kConfigMax)

// A field's value in one stanza: "Field: value" at the start of a line
// (continuation lines, which start with a space, are not needed here).
std::string field(const std::string& stanza, const std::string& name) {
  for (size_t at = 0; at < stanza.size();) {
    size_t nl = stanza.find('\n', at);
    size_t end = nl == std::string::npos ? stanza.size() : nl;
    if (end - at > name.size() && stanza.compare(at, name.size(), name) == 0 && stanza[at + name.size()] == ':') {
      size_t v = at + name.size() + 1;
      while (v < end && stanza[v] == ' ') ++v;
      return stanza.substr(v, end - v);
    }
    at = end + 1;
  }
  return "";
}

std::optional<std::string> read_text(const FileTree& tree, const std::string& path, bool* complete) {
  std::optional<std::string> text;
  try {
    text = tree.read(path, kStatusMax + 1);
  } catch (const Error&) {
    return std::nullopt;
  }
  // A file the layers did not keep (their budget for contents spent) is
  // there but unread: the database is then not whole.
  uint64_t size = tree.lstat(path).size;
  if ((text && (text->size() > kStatusMax || size > text->size())) || (!text && size > 0)) *complete = false;
  return text;
}

}  // namespace

const DebianPackage* DebianSystem::find(const std::string& name) const {
  for (const auto& p : installed)
    if (p.name == name) return &p;
  return nullptr;
}

std::vector<DebianPackage> parse_dpkg_status(const std::string& text) {
  std::vector<DebianPackage> out;
  for (size_t at = 0; at < text.size();) {
    size_t blank = text.find("\n\n", at);
    size_t end = blank == std::string::npos ? text.size() : blank;
    std::string stanza = text.substr(at, end - at);
    at = blank == std::string::npos ? text.size() : blank + 2;
    DebianPackage p{field(stanza, "Package"), field(stanza, "Version"), field(stanza, "Architecture"),
                    field(stanza, "Multi-Arch"), field(stanza, "Provides"), ""};
    // Distroless' status.d stanzas carry no Status: they are installed.
    // Otherwise dpkg's third word: the package's files are in the image in
    // every state but these two (held, half-configured, triggers-pending
    // and the rest count, and must stay what they are).
    std::string status = field(stanza, "Status");
    std::string state = status.substr(status.rfind(' ') == std::string::npos ? 0 : status.rfind(' ') + 1);
    if (p.name.empty() || state == "not-installed" || state == "config-files") continue;
    p.stanza = status.empty() ? "Status: install ok installed\n" + stanza : std::move(stanza);
    while (!p.stanza.empty() && p.stanza.back() == '\n') p.stanza.pop_back();
    out.push_back(std::move(p));
  }
  return out;
}

std::optional<DebianSystem> debian_system(const FileTree& tree) {
  DebianSystem sys;
  bool found = false;
  if (auto status = read_text(tree, "/var/lib/dpkg/status", &sys.complete)) {
    sys.installed = parse_dpkg_status(*status);
    found = true;
  }
  if (tree.lstat("/var/lib/dpkg/status.d").kind == FsNode::Kind::Directory) {
    std::vector<std::string> files;
    tree.walk("/var/lib/dpkg/status.d", [&](const std::string& f) {
      // status.d/<pkg>.md5sums lists files, not packages.
      if (f.size() < 8 || f.compare(f.size() - 8, 8, ".md5sums") != 0) files.push_back(f);
    });
    for (const auto& f : files)
      if (auto text = read_text(tree, f, &sys.complete)) {
        for (auto& p : parse_dpkg_status(*text)) sys.installed.push_back(std::move(p));
        found = true;
      }
  }
  if (!found) return std::nullopt;
  for (const char* path : {"/etc/os-release", "/usr/lib/os-release"}) {
    bool whole = true;
    auto text = read_text(tree, path, &whole);
    if (!text) continue;
    for (size_t at = 0; at < text->size();) {
      size_t nl = text->find('\n', at);
      std::string line = text->substr(at, nl == std::string::npos ? std::string::npos : nl - at);
      at = nl == std::string::npos ? text->size() : nl + 1;
      size_t eq = line.find('=');
      if (eq == std::string::npos) continue;
      std::string key = line.substr(0, eq), v = line.substr(eq + 1);
      if (!v.empty() && v.back() == '\r') v.pop_back();
      if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front()) v = v.substr(1, v.size() - 2);
      if (key == "VERSION_CODENAME") sys.codename = v;
      if (key == "ID") sys.id = v;
    }
    break;
  }
  return sys;
}

std::string debian_package_of(const FileTree& tree, const std::string& path) {
  std::optional<DebianSystem> sys;
  try {
    sys = debian_system(tree);
  } catch (const Error&) {
    return "";
  }
  if (!sys) return "";
  size_t read = 0;
  for (const auto& p : sys->installed) {
    for (const std::string& list : {p.name + ".list", p.name + ":" + p.architecture + ".list"}) {
      if (++read > 8192) return "";
      std::optional<std::string> text;
      try {
        text = tree.read("/var/lib/dpkg/info/" + list, 8u << 20);
      } catch (const Error&) {
        continue;
      }
      if (!text) continue;
      // One path per line: the whole line must be `path`.
      for (size_t at = text->find(path); at != std::string::npos; at = text->find(path, at + 1))
        if ((at == 0 || (*text)[at - 1] == '\n') &&
            (at + path.size() == text->size() || (*text)[at + path.size()] == '\n'))
          return p.name;
    }
  }
  return "";
}

}  // namespace memprofile
