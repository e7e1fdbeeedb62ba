#!/usr/bin/env bash
# preflight docker:// through the Bearer token flow: Debian's docker-registry
# with `auth: token` and a token server of the test's own (python3-jwt,
# registry_servers.py). Anonymous tokens for public/ only; credentials go to
# the token server; an identity token (what `docker login` stores for token
# servers that issue refresh tokens) goes as an OAuth2 refresh_token grant;
# blobs redirected to a second server on another host name, which must never
# see the registry's Authorization header.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/registry_lib.sh
source "$(dirname "$0")/registry_lib.sh"
/usr/bin/python3 -c 'import jwt, cryptography' 2>/dev/null || fail "python3-jwt missing (scripts/install-deps.sh installs it)"

openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=memprofile token issuer" \
  -keyout "${SCRATCH}/token.key" -out "${SCRATCH}/token.crt" 2>/dev/null
refresh="refresh-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
start_server token token "${SCRATCH}/token.key" "${SCRATCH}/token.crt" memprofile-issuer alice s3cret \
  "${refresh}" "${SCRATCH}/token-requests"
token_port="${SERVED_PORT}"
port="$(free_port)"
start_registry tokreg "${port}" "auth:
  token:
    realm: http://127.0.0.1:${token_port}/token
    service: memprofile-registry
    issuer: memprofile-issuer
    rootcertbundle: ${SCRATCH}/token.crt"
wait_http "http://127.0.0.1:${port}/v2/" || fail "the registry did not start: $(cat "${SCRATCH}/tokreg.log")"
wait_http "http://127.0.0.1:${token_port}/token" || fail "the token server did not start: $(cat "${SCRATCH}/token.log")"
reg="127.0.0.1:${port}"
for repo in team/multi public/ready; do
  archive="${IMAGES}/${repo#*/}.oci.tar"
  skopeo copy --quiet --all --dest-tls-verify=false --dest-creds alice:s3cret \
    "oci-archive:${archive}" "docker://${reg}/${repo}:v1" >/dev/null || fail "skopeo copy ${repo}"
done
pass "a registry with token auth, images pushed through the token flow"

export HOME="${SCRATCH}/home"
unset XDG_RUNTIME_DIR REGISTRY_AUTH_FILE DOCKER_CONFIG
mkdir -p "${HOME}"

expect_error "127.0.0.1:${token_port} gives no anonymous token for team/multi \(401 Unauthorized\); log in with \`skopeo login ${reg}\`" \
  --tls-verify=false "docker://${reg}/team/multi:v1"
expect_error "the token server 127.0.0.1:${token_port} refused the credentials of alice from --creds \(401 Unauthorized\)" \
  --tls-verify=false --creds alice:wrong "docker://${reg}/team/multi:v1"
same_verdicts "${IMAGES}/multi.oci.tar" "docker://${reg}/team/multi:v1" --tls-verify=false --creds alice:s3cret
same_verdicts "${IMAGES}/ready.oci.tar" "docker://${reg}/public/ready:v1" --tls-verify=false
pass "Bearer tokens: anonymous where the token server allows it, with credentials, refused without"

# A CI gate on untrusted references: with --registry-same-host the realm on
# another host:port is refused, and the token server hears nothing.
before="$(wc -l < "${SCRATCH}/token-requests")"
expect_error "${reg} names the token realm http://127.0.0.1:${token_port}/token on another host \(--registry-same-host allows only ${reg}; memprofile sent it nothing\)" \
  --tls-verify=false --registry-same-host --creds alice:s3cret "docker://${reg}/team/multi:v1"
[[ "$(wc -l < "${SCRATCH}/token-requests")" == "${before}" ]] || fail "--registry-same-host: the token server was asked"
pass "--registry-same-host: a realm on another host is refused before any request to it"

# Identity tokens: from an auth file's "identitytoken", and from a credential
# helper that answers Username "<token>". Both are traded with a POST
# (grant_type=refresh_token), never sent as Basic; a wrong one is refused in
# one line that says which.
: > "${SCRATCH}/token-requests"
printf '{"auths": {"%s": {"identitytoken": "%s"}}}\n' "${reg}" "${refresh}" > "${SCRATCH}/idt.json"
same_verdicts "${IMAGES}/multi.oci.tar" "docker://${reg}/team/multi:v1" --tls-verify=false --authfile "${SCRATCH}/idt.json"
grep -q "^POST refresh_token none$" "${SCRATCH}/token-requests" || fail "no refresh_token grant: $(cat "${SCRATCH}/token-requests")"
if grep -q "basic" "${SCRATCH}/token-requests"; then fail "an identity token went as Basic: $(cat "${SCRATCH}/token-requests")"; fi
mkdir -p "${HOME}/.docker" "${SCRATCH}/bin"
cat > "${SCRATCH}/bin/docker-credential-idt" <<SH
#!/bin/sh
[ "\$1" = get ] || exit 1
read -r server
printf '{"ServerURL":"%s","Username":"<token>","Secret":"${refresh}"}\n' "\${server}"
SH
chmod +x "${SCRATCH}/bin/docker-credential-idt"
printf '{"credHelpers": {"%s": "idt"}}\n' "${reg}" > "${HOME}/.docker/config.json"
PATH="${SCRATCH}/bin:${PATH}" same_verdicts "${IMAGES}/multi.oci.tar" "docker://${reg}/team/multi:v1" --tls-verify=false
rm "${HOME}/.docker/config.json"
printf '{"auths": {"%s": {"identitytoken": "expired"}}}\n' "${reg}" > "${SCRATCH}/idt-bad.json"
expect_error "the token server 127.0.0.1:${token_port} refused the identity token from ${SCRATCH}/idt-bad.json \(400 Bad Request\)" \
  --tls-verify=false --authfile "${SCRATCH}/idt-bad.json" "docker://${reg}/team/multi:v1"
pass "identity tokens, from an auth file and from a credential helper, as OAuth2 refresh_token grants; a bad one refused"

# Blobs redirected to another host: they come, without the Authorization header.
start_redirect "${reg}" "${SCRATCH}/tokreg"
proxy_port="${PROXY##*:}"
same_verdicts "${IMAGES}/multi.oci.tar" "docker://127.0.0.1:${proxy_port}/redirect/team/multi:v1" \
  --tls-verify=false --creds alice:s3cret
[[ "$(grep -c "^/blob/sha256:" "${SCRATCH}/blob-requests")" -ge 4 ]] || fail "the blobs did not come through the redirect"
if grep -v " Authorization: none$" "${SCRATCH}/blob-requests"; then
  fail "the blob host got an Authorization header"
fi
pass "$(wc -l < "${SCRATCH}/blob-requests") blob requests redirected to another host, none with the Authorization header"
