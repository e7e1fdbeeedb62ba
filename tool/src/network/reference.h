// Registry references, as `docker://` names them (skopeo's transport
// syntax): parsed and normalised in one unit that everything else in
// network/ stands on, as go-containerregistry's pkg/name.
#pragma once

#include <string>

namespace memprofile {

// A normalised reference: what `docker.io/library/debian:latest` is to `debian`.
struct RegistryRef {
  std::string registry;    // "docker.io", "quay.io", "127.0.0.1:5000"
  std::string repository;  // "library/debian"
  std::string tag;         // "latest" when neither tag nor digest is given
  std::string digest;      // "sha256:..." or ""
  // Where the API is: registry-1.docker.io for docker.io.
  std::string api_host() const;
  // "network/repository:tag" or "network/repository@digest".
  std::string str() const;
};

// Parses what follows "docker://". Throws Error naming the reference.
RegistryRef parse_registry_ref(const std::string& name);

// True for "sha256:" and 64 lower-case hex digits: the one digest memprofile reads.
bool valid_digest(const std::string& digest);

}  // namespace memprofile
