#!/usr/bin/env bash
# preflight docker:// through the Bearer token flow: Debian's docker-registry
# with `auth: token` and a token server of the test's own (python3-jwt,
# registry_servers.py). Anonymous tokens for public/ only; credentials go to
# the token server; blobs redirected to a second server on another host name,
# which must never see the registry's Authorization header.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/registry_lib.sh
source "$(dirname "$0")/registry_lib.sh"
/usr/bin/python3 -c 'import jwt, cryptography' 2>/dev/null || fail "python3-jwt missing (scripts/install-deps.sh installs it)"

openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=memprofile token issuer" \
  -keyout "${SCRATCH}/token.key" -out "${SCRATCH}/token.crt" 2>/dev/null
token_port="$(free_port)"
start_server token token "${token_port}" "${SCRATCH}/token.key" "${SCRATCH}/token.crt" memprofile-issuer alice s3cret
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
