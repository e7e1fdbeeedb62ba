#!/usr/bin/env bash
# preflight docker://: Debian's docker-registry on loopback over plain HTTP,
# anonymous. The test images, pushed with skopeo (a multi-arch index with
# --all), get the same verdicts as their archives; platforms are picked as
# for archives; and each failure (404, 403, refused, TLS, a cut or corrupt
# blob, a redirect loop, an oversized or malformed manifest, a timeout) is one
# line and exit 2, through a fault proxy of the test's own.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/registry_lib.sh
source "$(dirname "$0")/registry_lib.sh"

port="$(free_port)"
start_registry plain "${port}"
wait_http "http://127.0.0.1:${port}/v2/" || fail "the registry did not start: $(cat "${SCRATCH}/plain.log")"
reg="127.0.0.1:${port}"

push() {  # TRANSPORT:ARCHIVE REPO:TAG
  skopeo copy --quiet --all --dest-tls-verify=false "$1" "docker://${reg}/$2" >/dev/null || fail "skopeo copy $1"
}
push "oci-archive:${IMAGES}/multi.oci.tar" t/multi:v1
push "oci-archive:${IMAGES}/ready.oci.tar" t/ready:v1
push "docker-archive:${IMAGES}/musl.docker.tar" t/musl:v1
push "oci-archive:${IMAGES}/whiteout.oci.tar" t/whiteout:v1
push "docker-archive:${IMAGES}/scratch-dispatcher.docker.tar" t/dispatcher:v1
push "oci-archive:${IMAGES}/setuid-nobody.oci.tar" t/setuid:v1
push "docker-archive:${IMAGES}/wrong-arch.docker.tar" t/wrong-arch:v1
pass "pushed the test images, one of them a multi-arch index"

same_verdicts "${IMAGES}/multi.oci.tar" "docker://${reg}/t/multi:v1" --tls-verify=false
same_verdicts "${IMAGES}/ready.oci.tar" "docker://${reg}/t/ready:v1" --tls-verify=false
same_verdicts "${IMAGES}/musl.docker.tar" "docker://${reg}/t/musl:v1" --tls-verify=false
same_verdicts "${IMAGES}/whiteout.oci.tar" "docker://${reg}/t/whiteout:v1" --tls-verify=false
same_verdicts "${IMAGES}/scratch-dispatcher.docker.tar" "docker://${reg}/t/dispatcher:v1" --tls-verify=false
same_verdicts "${IMAGES}/setuid-nobody.oci.tar" "docker://${reg}/t/setuid:v1" --tls-verify=false
same_verdicts "${IMAGES}/wrong-arch.docker.tar" "docker://${reg}/t/wrong-arch:v1" --tls-verify=false
pass "every image gets the verdicts its archive gets"

# Platform selection, as for archives; by digest as by tag.
"${MEMPROFILE}" preflight --json --platform linux/arm64 --tls-verify=false "docker://${reg}/t/multi:v1" > "${SCRATCH}/arm64.json" ||
  fail "linux/arm64 of the index"
[[ "$(jq -r .platform "${SCRATCH}/arm64.json")" == linux/arm64 ]] || fail "--platform linux/arm64 gave $(jq -r .platform "${SCRATCH}/arm64.json")"
digest="sha256:$(skopeo inspect --raw --tls-verify=false "docker://${reg}/t/multi:v1" | sha256sum | cut -d' ' -f1)"
"${MEMPROFILE}" preflight --json --platform linux/arm64 --tls-verify=false "docker://${reg}/t/multi@${digest}" |
  verdicts > "${SCRATCH}/by-digest" || fail "by digest"
[[ "$(cat "${SCRATCH}/by-digest")" == "$(verdicts < "${SCRATCH}/arm64.json")" ]] || fail "by digest differs from by tag"
expect_error "no image for platform linux/s390x \(it has: linux/amd64, linux/arm64\)" \
  --platform linux/s390x --tls-verify=false "docker://${reg}/t/multi:v1"
pass "platforms picked as for archives (--platform, by digest, the list when none matches)"

# Peak memory of a pull: bounded as for archives.
/usr/bin/time -f %M -o "${SCRATCH}/rss" "${MEMPROFILE}" preflight --all-platforms --tls-verify=false \
  "docker://${reg}/t/multi:v1" > /dev/null || fail "multi for the RSS"
# Under AddressSanitizer its shadow memory and quarantine are not
# memprofile's: the bound holds for the real binary.
if sanitized "${MEMPROFILE}"; then
  pass "peak RSS not bounded under AddressSanitizer ($(($(cat "${SCRATCH}/rss") / 1024)) MiB)"
else
  (($(cat "${SCRATCH}/rss") < 64 * 1024)) || fail "peak RSS $(cat "${SCRATCH}/rss") KiB for two platforms"
  pass "peak RSS $(($(cat "${SCRATCH}/rss") / 1024)) MiB for two platforms of 170 MB each"
fi

# Failures: one line each, exit 2.
expect_error "${reg} has no manifest t/ready:nope \(404 Not Found\) \(MANIFEST_UNKNOWN" --tls-verify=false "docker://${reg}/t/ready:nope"
expect_error "${reg} has no manifest nothing/here:latest \(404" --tls-verify=false "docker://${reg}/nothing/here"
expect_error "${reg}: TLS: " "docker://${reg}/t/ready:v1"
closed="$(free_port)"
expect_error "^memprofile: docker://127.0.0.1:${closed}/t/ready:v1: 127.0.0.1:${closed}: cannot connect: .*(refused|Couldn't connect)" \
  --tls-verify=false "docker://127.0.0.1:${closed}/t/ready:v1"
expect_error "malformed repository" "docker://${reg}/t/ready:a:b"
expect_error "both a tag and a digest" "docker://${reg}/t/ready:v1@${digest}"
pass "404 for a tag and a repository, TLS to a plain HTTP registry, connection refused, malformed references"

# Faults between preflight and the registry: a proxy of the test's own that
# takes the fault from the repository's first component; blobs redirected
# to a second server, on another host name.
start_redirect "${reg}" "${SCRATCH}/plain"
proxy_port="${PROXY##*:}"
px="127.0.0.1:${proxy_port}"

same_verdicts "${IMAGES}/ready.oci.tar" "docker://${px}/ok/t/ready:v1" --tls-verify=false
same_verdicts "${IMAGES}/multi.oci.tar" "docker://${px}/redirect/t/multi:v1" --tls-verify=false
grep -q "^/blob/sha256:" "${SCRATCH}/blob-requests" || fail "no blob came through the redirect"
same_verdicts "${IMAGES}/ready.oci.tar" "docker://${px}/busy/t/ready:v1" --tls-verify=false
pass "through a proxy, redirected blobs from another host, and a 503 with Retry-After tried again"
expect_error "blob sha256:[0-9a-f]{64}: ${px} redirects to localhost:${BLOB_PORT}, another host \(--registry-same-host allows only ${px}\)" \
  --tls-verify=false --registry-same-host "docker://${px}/redirect/t/multi:v1"
pass "--registry-same-host: a redirect to another host is refused"

expect_error "@sha256:[0-9a-f]{64}: truncated" --tls-verify=false "docker://${px}/cut/t/ready:v1"
expect_error "@sha256:[0-9a-f]{64}: digest mismatch" --tls-verify=false "docker://${px}/corrupt/t/ready:v1"
expect_error "blob sha256:[0-9a-f]{64}: redirect loop" --tls-verify=false "docker://${px}/loop/t/ready:v1"
expect_error "blob sha256:[0-9a-f]{64}: too many redirects \(10, the last to http://.*\?n10; memprofile follows at most 9\)" \
  --tls-verify=false "docker://${px}/chain/t/ready:v1"
expect_error "localhost:${proxy_port} answered 401 Unauthorized for blob sha256:[0-9a-f]{64} \(a redirect from ${px}; memprofile sends no credentials to another host\)" \
  --tls-verify=false --creds alice:s3cret "docker://${px}/elsewhere401/t/ready:v1"
expect_error "manifest big/t/ready:v1: larger than 4 MiB" --tls-verify=false "docker://${px}/big/t/ready:v1"
expect_error "malformed JSON" --tls-verify=false "docker://${px}/badjson/t/ready:v1"
expect_error "${px} denies access to manifest forbidden/t/ready:v1 \(403 Forbidden\) \(DENIED" \
  --tls-verify=false "docker://${px}/forbidden/t/ready:v1"
expect_error "${px} has no blob sha256:[0-9a-f]{64} \(404 Not Found\)" --tls-verify=false "docker://${px}/noblob/t/ready:v1"
MEMPROFILE_REGISTRY_TIMEOUT=2 expect_error "timed out: under 1024 bytes a second for 2 s" --tls-verify=false "docker://${px}/hang/t/ready:v1"
pass "a cut blob, a corrupt blob, a redirect loop, a 5 MiB manifest, malformed JSON, 403, a missing blob, a timeout"

# A server that does not stop: a config sent without end, or announced as a
# terabyte, is cut at its descriptor's size (before the digest could be
# checked); a manifest at 2 bytes a second fails the low-speed floor.
expect_error "blob sha256:[0-9a-f]{64}: the server sends more than the [0-9]+ bytes its descriptor declares" \
  --tls-verify=false "docker://${px}/endless/t/ready:v1"
expect_error "blob sha256:[0-9a-f]{64}: the server sends more than the [0-9]+ bytes its descriptor declares" \
  --tls-verify=false "docker://${px}/huge/t/ready:v1"
MEMPROFILE_REGISTRY_TIMEOUT=3 expect_error "manifest trickle/t/ready:v1: .*timed out: under 1024 bytes a second for 3 s" \
  --tls-verify=false "docker://${px}/trickle/t/ready:v1"
pass "an endless config, a terabyte Content-Length, a manifest at 2 B/s"
