#include "network/reference.h"

#include <cctype>

#include "base/error.h"

namespace memprofile {

namespace {

bool valid_repository(const std::string& r) {
  if (r.empty() || r.size() > 255) return false;
  size_t start = 0;
  while (start <= r.size()) {
    size_t end = r.find('/', start);
    if (end == std::string::npos) end = r.size();
    std::string part = r.substr(start, end - start);
    if (part.empty()) return false;
    for (char c : part)
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-')) return false;
    if (!std::isalnum(static_cast<unsigned char>(part.front())) || !std::isalnum(static_cast<unsigned char>(part.back())))
      return false;
    start = end + 1;
  }
  return true;
}

bool valid_tag(const std::string& t) {
  if (t.empty() || t.size() > 128 || t[0] == '.' || t[0] == '-') return false;
  for (char c : t)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-') return false;
  return true;
}

}  // namespace

bool valid_digest(const std::string& d) {
  return d.size() == 71 && d.rfind("sha256:", 0) == 0 &&
         d.find_first_not_of("0123456789abcdef", 7) == std::string::npos;
}

std::string RegistryRef::api_host() const { return registry == "docker.io" ? "registry-1.docker.io" : registry; }

std::string RegistryRef::str() const {
  return registry + "/" + repository + (digest.empty() ? ":" + tag : "@" + digest);
}

RegistryRef parse_registry_ref(const std::string& name) {
  auto bad = [&](const std::string& why) -> Error {
    return Error("docker://" + name + ": " + why +
                 " (expected docker://[HOST[:PORT]/]REPOSITORY[:TAG|@sha256:DIGEST])");
  };
  if (name.empty()) throw bad("no image named");
  RegistryRef r;
  std::string rest = name;
  // A digest, then a tag in the last component.
  if (size_t at = rest.find('@'); at != std::string::npos) {
    r.digest = rest.substr(at + 1);
    rest = rest.substr(0, at);
    if (!valid_digest(r.digest)) throw bad("malformed digest \"" + r.digest + "\"");
  }
  size_t slash = rest.rfind('/');
  size_t colon = rest.rfind(':');
  if (colon != std::string::npos && (slash == std::string::npos || colon > slash)) {
    r.tag = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
    if (!valid_tag(r.tag)) throw bad("malformed tag \"" + r.tag + "\"");
  }
  if (!r.tag.empty() && !r.digest.empty()) throw bad("both a tag and a digest");
  // The first component is a registry when it looks like a host: it has a
  // dot or a port, or is localhost. Otherwise the image is on docker.io.
  size_t first = rest.find('/');
  std::string head = rest.substr(0, first);
  if (first != std::string::npos &&
      (head.find('.') != std::string::npos || head.find(':') != std::string::npos || head == "localhost")) {
    r.registry = head;
    r.repository = rest.substr(first + 1);
  } else {
    r.registry = "docker.io";
    r.repository = rest;
  }
  for (auto& c : r.registry) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (r.registry == "index.docker.io" || r.registry == "registry-1.docker.io") r.registry = "docker.io";
  if (r.registry.empty() || r.registry.find_first_of("/@ ") != std::string::npos) throw bad("malformed registry");
  if (r.registry == "docker.io" && r.repository.find('/') == std::string::npos) r.repository = "library/" + r.repository;
  if (!valid_repository(r.repository))
    throw bad("malformed repository \"" + r.repository + "\" (lower case letters, digits, . _ - and /)");
  if (r.tag.empty() && r.digest.empty()) r.tag = "latest";
  return r;
}

}  // namespace memprofile
