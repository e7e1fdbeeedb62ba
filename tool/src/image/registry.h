// Images straight from a registry (`docker://HOST[:PORT]/REPO[:TAG|@DIGEST]`,
// skopeo's transport syntax), over the OCI distribution API: manifests and
// configs fetched whole under a cap, layer blobs streamed into the one-pass
// layer reader with their digests checked as the bytes arrive. Nothing is
// written to disk. The Store it returns is read by load_images like any
// archive (image.cpp).
#pragma once

#include <memory>
#include <string>

namespace memprofile {

class Store;

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

// A normalised reference: what `docker.io/library/debian:latest` is to `debian`.
struct RegistryRef {
  std::string registry;    // "docker.io", "quay.io", "127.0.0.1:5000"
  std::string repository;  // "library/debian"
  std::string tag;         // "latest" when neither tag nor digest is given
  std::string digest;      // "sha256:..." or ""
  // Where the API is: registry-1.docker.io for docker.io.
  std::string api_host() const;
  // "registry/repository:tag" or "registry/repository@digest".
  std::string str() const;
};

// Parses what follows "docker://". Throws Error naming the reference.
RegistryRef parse_registry_ref(const std::string& name);

// True when `source` names a registry image ("docker://...").
inline bool is_registry_source(const std::string& source) { return source.rfind("docker://", 0) == 0; }

// Connects, resolves the reference to its manifest (or index) and returns
// the image's blobs as a Store. registries.conf may block the reference,
// move it (location) or put mirrors before it: the first source that
// resolves the manifest serves every blob. Throws FileError naming `source`.
std::unique_ptr<Store> open_registry(const std::string& source, const RegistryOptions& opts);

}  // namespace memprofile
