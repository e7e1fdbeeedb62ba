#!/usr/bin/env bash
# preflight docker:// against Debian's docker-registry over TLS with a CA of
# the test's own and htpasswd (Basic) auth: the certificate named when it is
# not trusted, --cert-dir, --tls-verify=false, and credentials from --creds,
# --authfile, REGISTRY_AUTH_FILE, ${XDG_RUNTIME_DIR}/containers/auth.json and
# ~/.docker/config.json (auths and a credHelpers helper), each giving the
# verdicts of the image's archive; 401 without or with wrong credentials.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/registry_lib.sh
source "$(dirname "$0")/registry_lib.sh"
command -v htpasswd >/dev/null || fail "htpasswd missing (apache2-utils; scripts/install-deps.sh installs it)"

certs="${SCRATCH}/certs"
mkdir -p "${certs}"
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=memprofile test CA" \
  -keyout "${SCRATCH}/ca.key" -out "${certs}/ca.crt" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=memprofile test registry" \
  -keyout "${SCRATCH}/server.key" -out "${SCRATCH}/server.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > "${SCRATCH}/san.ext"
openssl x509 -req -in "${SCRATCH}/server.csr" -CA "${certs}/ca.crt" -CAkey "${SCRATCH}/ca.key" -CAcreateserial \
  -days 1 -extfile "${SCRATCH}/san.ext" -out "${SCRATCH}/server.crt" 2>/dev/null
htpasswd -Bbn alice 's3cret' > "${SCRATCH}/htpasswd"

port="$(free_port)"
start_registry tls "${port}" "  tls:
    certificate: ${SCRATCH}/server.crt
    key: ${SCRATCH}/server.key
auth:
  htpasswd:
    realm: memprofile-test
    path: ${SCRATCH}/htpasswd"
wait_http "https://127.0.0.1:${port}/v2/" --cacert "${certs}/ca.crt" ||
  fail "the registry did not start: $(cat "${SCRATCH}/tls.log")"
reg="127.0.0.1:${port}"
skopeo copy --quiet --all --dest-cert-dir "${certs}" --dest-creds alice:s3cret \
  "oci-archive:${IMAGES}/multi.oci.tar" "docker://${reg}/team/multi:v1" >/dev/null || fail "skopeo copy to ${reg}"
skopeo copy --quiet --dest-cert-dir "${certs}" --dest-creds alice:s3cret \
  "docker-archive:${IMAGES}/musl.docker.tar" "docker://${reg}/team/musl:v1" >/dev/null || fail "skopeo copy to ${reg}"
pass "a TLS registry with htpasswd auth, the multi-arch image and a small one pushed"

# No auth file of the machine's: a home of the test's own.
export HOME="${SCRATCH}/home"
unset XDG_RUNTIME_DIR REGISTRY_AUTH_FILE DOCKER_CONFIG
mkdir -p "${HOME}"
ref="docker://${reg}/team/multi:v1"

expect_error "TLS: .*certificate.*; the server's certificate: subject \"CN ?= ?memprofile test registry\", issuer \"CN ?= ?memprofile test CA\"; trust its CA with --cert-dir" "${ref}"
expect_error "${reg} requires credentials for manifest team/multi:v1 \(401 Unauthorized\).*log in with \`skopeo login ${reg}\`" \
  --cert-dir "${certs}" "${ref}"
expect_error "${reg} refused the credentials of alice from --creds for manifest team/multi:v1 \(401 Unauthorized\)" \
  --cert-dir "${certs}" --creds alice:wrong "${ref}"
pass "an unknown CA names the certificate; 401 without credentials says how to log in; wrong ones are refused"

same_verdicts "${IMAGES}/multi.oci.tar" "${ref}" --cert-dir "${certs}" --creds alice:s3cret
same_verdicts "${IMAGES}/multi.oci.tar" "${ref}" --tls-verify=false --creds alice:s3cret
pass "--creds with --cert-dir, and with --tls-verify=false"

# Below, where the credentials come from is the subject, not the image: the
# small one (each pull of the two-arch one took ~3.5 s under ASan).
small="docker://${reg}/team/musl:v1"

auth="$(printf 'alice:s3cret' | base64)"
printf '{"auths": {"%s": {"auth": "%s"}}}\n' "${reg}" "${auth}" > "${SCRATCH}/auth.json"
printf '{"auths": {"%s": {"auth": "%s"}}}\n' "${reg}" "$(printf 'alice:wrong' | base64)" > "${SCRATCH}/wrong.json"
same_verdicts "${IMAGES}/musl.docker.tar" "${small}" --cert-dir "${certs}" --authfile "${SCRATCH}/auth.json"
REGISTRY_AUTH_FILE="${SCRATCH}/auth.json" same_verdicts "${IMAGES}/musl.docker.tar" "${small}" --cert-dir "${certs}"
mkdir -p "${SCRATCH}/run/containers"
cp "${SCRATCH}/auth.json" "${SCRATCH}/run/containers/auth.json"
XDG_RUNTIME_DIR="${SCRATCH}/run" same_verdicts "${IMAGES}/musl.docker.tar" "${small}" --cert-dir "${certs}"
# --creds first, then --authfile, which REGISTRY_AUTH_FILE does not override.
REGISTRY_AUTH_FILE="${SCRATCH}/wrong.json" same_verdicts "${IMAGES}/musl.docker.tar" "${small}" --cert-dir "${certs}" \
  --authfile "${SCRATCH}/auth.json"
same_verdicts "${IMAGES}/musl.docker.tar" "${small}" --cert-dir "${certs}" --authfile "${SCRATCH}/wrong.json" --creds alice:s3cret
REGISTRY_AUTH_FILE="${SCRATCH}/wrong.json" expect_error "refused the credentials of alice from ${SCRATCH}/wrong.json" \
  --cert-dir "${certs}" "${small}"
pass "--authfile, REGISTRY_AUTH_FILE, \${XDG_RUNTIME_DIR}/containers/auth.json, in that order after --creds"

# ~/.docker/config.json: auths, then a credential helper (docker-credential-NAME get).
mkdir -p "${HOME}/.docker" "${SCRATCH}/bin"
printf '{"auths": {"https://%s": {"auth": "%s"}}}\n' "${reg}" "${auth}" > "${HOME}/.docker/config.json"
same_verdicts "${IMAGES}/musl.docker.tar" "${small}" --cert-dir "${certs}"
cat > "${SCRATCH}/bin/docker-credential-memtest" <<SH
#!/bin/sh
[ "\$1" = get ] || exit 1
read -r server
echo "\${server}" >> "${SCRATCH}/helper-asked"
[ "\${server}" = "${reg}" ] || { echo "credentials not found in native keychain"; exit 1; }
printf '{"ServerURL":"%s","Username":"alice","Secret":"s3cret"}\n' "\${server}"
SH
chmod +x "${SCRATCH}/bin/docker-credential-memtest"
printf '{"credHelpers": {"%s": "memtest"}}\n' "${reg}" > "${HOME}/.docker/config.json"
PATH="${SCRATCH}/bin:${PATH}" same_verdicts "${IMAGES}/musl.docker.tar" "${small}" --cert-dir "${certs}"
grep -qx "${reg}" "${SCRATCH}/helper-asked" || fail "the credential helper was not asked"
printf '{"credsStore": "memtest"}\n' > "${HOME}/.docker/config.json"
PATH="${SCRATCH}/bin:${PATH}" same_verdicts "${IMAGES}/musl.docker.tar" "${small}" --cert-dir "${certs}"
pass "the home's .docker/config.json: auths, credHelpers and credsStore through docker-credential-NAME get"

# A registry that wants a client certificate signed by the test CA.
openssl req -newkey rsa:2048 -nodes -subj "/CN=memprofile test client" \
  -keyout "${SCRATCH}/client.key" -out "${SCRATCH}/client.csr" 2>/dev/null
openssl x509 -req -in "${SCRATCH}/client.csr" -CA "${certs}/ca.crt" -CAkey "${SCRATCH}/ca.key" -CAcreateserial \
  -days 1 -out "${SCRATCH}/client.crt" 2>/dev/null
mtls_port="$(free_port)"
start_registry mtls "${mtls_port}" "  tls:
    certificate: ${SCRATCH}/server.crt
    key: ${SCRATCH}/server.key
    clientcas:
      - ${certs}/ca.crt"
client_certs="${SCRATCH}/client-certs"
mkdir -p "${client_certs}"
cp "${certs}/ca.crt" "${client_certs}/ca.crt"
cp "${SCRATCH}/client.crt" "${client_certs}/client.cert"
cp "${SCRATCH}/client.key" "${client_certs}/client.key"
wait_http "https://127.0.0.1:${mtls_port}/v2/" --cacert "${certs}/ca.crt" --cert "${SCRATCH}/client.crt" \
  --key "${SCRATCH}/client.key" || fail "the mTLS registry did not start: $(cat "${SCRATCH}/mtls.log")"
skopeo copy --quiet --dest-cert-dir "${client_certs}" "oci-archive:${IMAGES}/ready.oci.tar" \
  "docker://127.0.0.1:${mtls_port}/t/ready:v1" >/dev/null || fail "skopeo copy to the mTLS registry"
# The server's refusal reaches curl as an alert or a closed socket, by timing.
expect_error "docker://127.0.0.1:${mtls_port}/t/ready:v1: 127.0.0.1:${mtls_port}: " --cert-dir "${certs}" "docker://127.0.0.1:${mtls_port}/t/ready:v1"
same_verdicts "${IMAGES}/ready.oci.tar" "docker://127.0.0.1:${mtls_port}/t/ready:v1" --cert-dir "${client_certs}"
pass "a client certificate from --cert-dir (NAME.cert with NAME.key), refused without it"
