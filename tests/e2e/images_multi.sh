#!/usr/bin/env bash
# make image-memprofile-multi: a multi-arch app image (amd64 + arm64) made
# profilable for both platforms in one manifest list, judged READY per
# platform, and pushed to a registry (Debian's docker-registry on loopback);
# what the registry serves has both platforms and is READY for each.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/images_lib.sh
source "$(dirname "$0")/images_lib.sh"

command -v docker-registry >/dev/null || fail "docker-registry missing (scripts/install-deps.sh installs it)"
seed_dist jemalloc amd64
seed_dist jemalloc arm64
# The multi-arch app: a list of the example app's two images (example_app
# builds each once per store, by its sources' key, as the other tests use them).
example_app amd64
example_app arm64
buildah manifest rm localhost/leaky:multi >/dev/null 2>&1 || true
drop_at_exit localhost/leaky:multi
buildah manifest create localhost/leaky:multi >/dev/null
for arch in amd64 arm64; do
  buildah manifest add localhost/leaky:multi "containers-storage:localhost/leaky:${arch}" >/dev/null
done

# A registry of the test's own, on a free loopback port.
start_local_registry
trap 'kill "${REGISTRY_PID}" 2>/dev/null || true; unmount_all' EXIT
port="${REGISTRY##*:}"

ns="127.0.0.1:${port}/memprofile"
drop_at_exit "${ns}/leaky:multi-memprofile"
mk image-memprofile-multi APP_IMAGE=localhost/leaky:multi BACKEND=jemalloc DOCKER_PUSH=true IMAGE_NAMESPACE="${ns}" \
  TLS_VERIFY=false > "${SCRATCH}/build.log" 2>&1 || { cat "${SCRATCH}/build.log" >&2; fail "make image-memprofile-multi"; }
[[ "$(grep -c "LOADER_TRACED" "${SCRATCH}/build.log")" -ge 2 ]] || fail "not every platform was verified in the build"
pass "built for both platforms, each verified in its build"

ref="${ns}/leaky:multi-memprofile"
skopeo inspect --raw --tls-verify=false "docker://${ref}" > "${SCRATCH}/index.json" || fail "nothing at ${ref}"
platforms="$(jq -r '[.manifests[] | .platform.os + "/" + .platform.architecture] | sort | join(",")' "${SCRATCH}/index.json")"
[[ "${platforms}" == "linux/amd64,linux/arm64" ]] || fail "the pushed manifest list has ${platforms}"
# The image pushed is the image judged: the list's digest in the registry is
# the one in the archive preflight judged.
judged="$(tar -xOf "${SCRATCH}/image/image-multi.tar" index.json | jq -r '.manifests[0].digest')"
[[ "sha256:$(skopeo inspect --raw --tls-verify=false "docker://${ref}" | sha256sum | cut -d' ' -f1)" == "${judged}" ]] ||
  fail "the registry does not serve the judged list ${judged}"
[[ "$(cat "${SCRATCH}/image/judged.digest")" == "${judged}" ]] || fail "judged.digest is not the judged archive's"
pass "the registry serves the judged archive's digest, ${judged}"
skopeo copy --quiet --all --src-tls-verify=false "docker://${ref}" "oci-archive:${SCRATCH}/pulled.tar" >/dev/null
"${MEMPROFILE}" preflight --all-platforms "${SCRATCH}/pulled.tar" > "${SCRATCH}/preflight" || fail "pulled image not READY"
[[ "$(grep -c "^READY" "${SCRATCH}/preflight")" == 2 ]] || fail "not READY for both platforms"
pass "the registry serves a manifest list with linux/amd64 and linux/arm64, READY for each"
