// containers-registries.conf(5), read as containers/image reads it for a
// docker:// pull: which [[registry]] table a reference falls under (the
// longest prefix), whether pulls from it are blocked, where it really is
// (location), insecure endpoints, and the mirrors to try before it. Short
// names, aliases and unqualified-search registries do not apply: a docker://
// reference is always fully qualified (docker.io when it names no host).
#pragma once

#include <string>
#include <vector>

#include "network/reference.h"

namespace memprofile {

struct RegistryEndpoint {
  std::string location;          // host[:port][/namespace...]; "" only under a *.example.com prefix
  bool insecure = false;         // plain HTTP, or TLS with any certificate
  std::string pull_from_mirror;  // mirrors only: "", "all", "digest-only", "tag-only"
};

struct RegistryEntry {
  std::string prefix;  // defaults to the location
  RegistryEndpoint primary;
  std::vector<RegistryEndpoint> mirrors;
  bool blocked = false;
  bool mirror_by_digest_only = false;
  std::string file;  // where it was read, for messages
};

struct RegistriesConf {
  std::vector<RegistryEntry> registries;  // one per prefix: a later file's replaces an earlier one's
  std::string files;                      // what was read, for messages ("none" when nothing)
};

// One file's text. `drop_in`: the version-1 format is refused (as upstream).
// Throws FileError naming `path` for malformed TOML, a file nested deeper
// than any registries.conf, wrong types, or what upstream refuses (an unset
// location under a plain prefix, a URI scheme, a mirror setting on the
// registry itself, mixed v1/v2).
RegistriesConf parse_registries_conf(const std::string& text, const std::string& path, bool drop_in);

// The files, in upstream's order: `explicit_path` (--registries-conf, else
// CONTAINERS_REGISTRIES_CONF; it must exist), else
// ~/.config/containers/registries.conf when it exists (then only the user's
// drop-in directory), else /etc/containers/registries.conf (missing is
// fine); then each *.conf in /etc/containers/registries.conf.d and
// ~/.config/containers/registries.conf.d, by name, each replacing the
// entries with the same prefix.
RegistriesConf load_registries_conf(const std::string& explicit_path);

struct PullSource {
  RegistryRef ref;  // the reference rewritten to this endpoint's location
  bool insecure = false;
  bool mirror = false;
};

// Where to pull `ref` from, in order: the mirrors that apply (by digest or
// by tag), then the primary location. Just `ref` when no entry matches.
// Throws Error naming the entry's file when the entry blocks pulls.
std::vector<PullSource> pull_sources(const RegistriesConf& conf, const RegistryRef& ref);

}  // namespace memprofile
