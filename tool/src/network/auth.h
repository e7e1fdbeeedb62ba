// Registry credentials, found as skopeo and docker find them, and the
// WWW-Authenticate challenges they answer.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "network/reference.h"
#include "source/kinds.h"

namespace memprofile {

struct Credentials {
  std::string user, password;
  // An OAuth2 refresh token ("identitytoken" in an auth file, or a helper's
  // Secret when its Username is "<token>"): `docker login` stores one for
  // registries whose token server issues them. It is traded for an access
  // token with a POST (grant_type=refresh_token), never sent as Basic.
  std::string identity_token;
  std::string from;  // "--creds", a file, or "docker-credential-NAME"
  bool empty() const { return user.empty() && password.empty() && identity_token.empty(); }
  // How an error names them: "alice from FILE", "the identity token from FILE".
  std::string who() const {
    return (identity_token.empty() ? "the credentials of " + user : std::string("the identity token")) + " from " + from;
  }
};

// In order: --creds USER[:PASSWORD]; then the first auth file that has an
// entry for the registry: --authfile FILE, else REGISTRY_AUTH_FILE, else
// ${XDG_RUNTIME_DIR}/containers/auth.json; then ~/.docker/config.json. In a
// file: credHelpers for the registry, then credsStore, then auths (keys with
// or without a scheme, and registry/namespace keys, the longest first),
// helpers run with the `docker-credential-NAME get` protocol; an entry's
// "identitytoken" comes before its "auth", as in containers/image. Empty
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
