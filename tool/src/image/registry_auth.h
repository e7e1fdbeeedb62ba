// Registry credentials, found as skopeo and docker find them, and the
// WWW-Authenticate challenges they answer.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "image/registry.h"

namespace memprofile {

struct Credentials {
  std::string user, password;
  std::string from;  // "--creds", a file, or "docker-credential-NAME"
  bool empty() const { return user.empty() && password.empty(); }
};

// In order: --creds USER[:PASSWORD]; then the first auth file that has an
// entry for the registry: --authfile FILE, else REGISTRY_AUTH_FILE, else
// ${XDG_RUNTIME_DIR}/containers/auth.json; then ~/.docker/config.json. In a
// file: credHelpers for the registry, then credsStore, then auths (keys with
// or without a scheme, and registry/namespace keys, the longest first),
// helpers run with the `docker-credential-NAME get` protocol. Empty
// credentials when none is found. Throws FileError on a malformed file.
Credentials find_credentials(const RegistryRef& ref, const RegistryOptions& opts);

struct Challenge {
  std::string scheme;  // lower case: "basic", "bearer"
  std::map<std::string, std::string> params;  // realm, service, scope (keys lower case)
};
// Parses a WWW-Authenticate header value (one or several challenges).
std::vector<Challenge> parse_challenges(const std::string& header);

std::string base64_encode(const std::string& s);
std::string base64_decode(const std::string& s);  // "" on malformed input

}  // namespace memprofile
