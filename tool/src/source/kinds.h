// Where an image comes from, by the name the user gives it: a table of
// source kinds. The network kinds (`docker://`, `docker-daemon:`) are a
// table of their own, which the caller hands in: network/network_kinds.cpp in
// the memprofile binary, source/offline.cpp in the static one, whose entries
// say in one line why it cannot read them. "-" is standard input; anything
// else is a path.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "image/layer.h"
#include "source/store.h"

namespace memprofile {

// How to reach a registry: preflight's --creds, --authfile, --cert-dir and
// --tls-verify, as skopeo reads them.
struct RegistryOptions {
  std::string creds;     // USER[:PASSWORD]; "" = look in the auth files
  std::string authfile;  // "" = REGISTRY_AUTH_FILE, then the default files
  std::string cert_dir;  // "" = /etc/containers/certs.d/HOST, /etc/docker/certs.d/HOST
  bool tls_verify = true;  // false: plain HTTP, or HTTPS with any certificate
  // containers-registries.conf(5): "" = CONTAINERS_REGISTRIES_CONF, else the
  // user's or the system's file, with their drop-in directories.
  std::string registries_conf;
  // A token realm or a redirect to any host but the registry's own is
  // refused: for a CI gate that checks untrusted references, where a
  // registry must not make memprofile send requests (and Basic
  // credentials, to a realm) to another host, a private or a link-local
  // address among them. Off by default: Docker Hub and most cloud
  // registries redirect blobs to a CDN and name a token server elsewhere.
  bool same_host_only = false;
};

struct SourceKind;

struct SourceOptions {
  LayerLimits limits;
  RegistryOptions registry;  // docker://REF sources
  // The network kinds this binary has; none when null.
  const std::vector<SourceKind>* network = nullptr;
};

// An opened source: its blobs, and its format when the source alone tells
// it ("registry", "oci-layout"); "" = as its manifests say.
struct OpenedSource {
  std::unique_ptr<Store> store;
  std::string format;
};

// A kind of source that claims the names that begin with `prefix`.
struct SourceKind {
  std::string_view prefix;
  OpenedSource (*open)(const std::string& name, const SourceOptions& opts);
};

constexpr std::string_view kRegistryPrefix = "docker://";
constexpr std::string_view kDaemonPrefix = "docker-daemon:";

// The network kinds of this binary: see the top of this file.
const std::vector<SourceKind>& network_sources();

// Opens `name` by the first kind that claims it: a network kind, "-", else
// a path (an OCI layout directory, a tar file, a compressed archive).
// Throws FileError naming `name`.
OpenedSource open_source(const std::string& name, const SourceOptions& opts);

}  // namespace memprofile
