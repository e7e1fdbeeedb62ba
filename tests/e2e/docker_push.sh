#!/usr/bin/env bash
# The image pushed is the image judged: make image-memprofile
# CONTAINER_ENGINE=docker DOCKER_PUSH=true pushes the very archive memprofile
# preflight judged READY (skopeo copy --all --preserve-digests), not a
# rebuild and not the daemon's copy; the registry (Debian's docker-registry
# on loopback) serves the judged digest, and what it serves is READY.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/docker_lib.sh
source "$(dirname "$0")/docker_lib.sh"

seed_dist jemalloc amd64
example_app amd64
start_registry
ns="${REGISTRY}/memprofile"
ref="${ns}/leaky:amd64-memprofile"
drop_at_exit "${ref}"

mk image-memprofile APP_IMAGE=localhost/leaky:amd64 BACKEND=jemalloc DOCKER_PUSH=true IMAGE_NAMESPACE="${ns}" \
  TLS_VERIFY=false > "${SCRATCH}/build.log" 2>&1 || { cat "${SCRATCH}/build.log" >&2; fail "make image-memprofile DOCKER_PUSH=true"; }
[[ "$(grep -c '^== building ' "${SCRATCH}/build.log")" == 1 ]] || fail "built more than once"
archive="${SCRATCH}/image/image.tar"
judged="$(tar -xOf "${archive}" index.json | jq -r '.manifests[0].digest')"
[[ "${judged}" == sha256:* && "$(cat "${SCRATCH}/image/judged.digest")" == "${judged}" ]] ||
  fail "judged.digest is not the judged archive's index digest (${judged})"
grep -q "^== pushed ${ref}@${judged} (the judged digest)" "${SCRATCH}/build.log" || fail "the push did not report the judged digest"
pass "pushed ${ref}@${judged}, the digest of the archive preflight judged"

# What the registry serves under the tag is that digest, byte for byte.
served="$(curl -fsSI -H 'Accept: application/vnd.oci.image.index.v1+json' \
  -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
  -H 'Accept: application/vnd.docker.distribution.manifest.list.v2+json' \
  -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
  "http://${REGISTRY}/v2/memprofile/leaky/manifests/amd64-memprofile" | tr -d '\r' |
  awk 'tolower($1) == "docker-content-digest:" { print $2 }')"
[[ "${served}" == "${judged}" ]] || fail "the registry serves ${served}, preflight judged ${judged}"
[[ "sha256:$(skopeo inspect --raw --tls-verify=false "docker://${ref}" | sha256sum | cut -d' ' -f1)" == "${judged}" ]] ||
  fail "the manifest the registry serves does not hash to the judged digest"
# Each of the judged archive's blobs is in the registry unchanged (manifests
# and indexes are served as manifests, layers and configs as blobs).
accept="application/vnd.oci.image.index.v1+json,application/vnd.oci.image.manifest.v1+json"
mapfile -t blobs < <(tar -tf "${archive}" | sed -n 's#^blobs/sha256/\([0-9a-f]\{64\}\)$#sha256:\1#p')
# A manifest, a config and a layer at the least: an archive listing none
# would pass the loop below without checking anything.
((${#blobs[@]} >= 3)) || fail "the judged archive lists ${#blobs[@]} blobs: $(tar -tf "${archive}" | head -20)"
for blob in "${blobs[@]}"; do
  curl -fsS -o /dev/null "http://${REGISTRY}/v2/memprofile/leaky/blobs/${blob}" 2>/dev/null ||
    curl -fsS -o /dev/null -H "Accept: ${accept}" "http://${REGISTRY}/v2/memprofile/leaky/manifests/${blob}" ||
    fail "blob ${blob} of the judged archive is not in the registry"
done
pass "the registry serves the judged digest and all ${#blobs[@]} blobs of the judged archive"

# Pulled back by digest: READY.
skopeo copy --quiet --all --src-tls-verify=false "docker://${ns}/leaky@${judged}" "oci-archive:${SCRATCH}/pulled.tar" >/dev/null
"${MEMPROFILE}" preflight "${SCRATCH}/pulled.tar" > "${SCRATCH}/preflight" || fail "the pulled image is not READY"
grep -q "^READY: a preload profiler will attach to /usr/local/bin/leaky" "${SCRATCH}/preflight" || fail "pulled: READY for the wrong program"
pass "pulled back by digest: READY"
