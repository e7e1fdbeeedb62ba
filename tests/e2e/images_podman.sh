#!/usr/bin/env bash
# make image-memprofile with CONTAINER_ENGINE=podman (podman build, podman
# save to an OCI archive): READY, and DOCKER_PUSH=true pushes the very
# archive preflight judged (skopeo copy --all --preserve-digests) to Debian's
# docker-registry on loopback, which then serves the judged digest. (The
# default backend's image: images_bytehound.sh; the engine makes no
# difference to what the preload library is.)
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/images_lib.sh
source "$(dirname "$0")/images_lib.sh"

command -v podman >/dev/null || fail "podman missing (scripts/install-deps.sh installs it)"
seed_dist jemalloc amd64
example_app amd64

start_local_registry
trap 'kill "${REGISTRY_PID}" 2>/dev/null || true; wait "${REGISTRY_PID}" 2>/dev/null || true; unmount_all' EXIT
ref="${REGISTRY}/team/leaky:amd64-memprofile"
drop_at_exit "${ref}"

make -C "${E2E_ROOT}" --no-print-directory SKIP_DEPS=true CONTAINER_ENGINE=podman PULL_POLICY=never DIST="${DIST}" \
  IMAGE_WORK_DIR="${SCRATCH}/image" image-memprofile APP_IMAGE=localhost/leaky:amd64 BACKEND=jemalloc \
  DOCKER_PUSH=true IMAGE_NAMESPACE="${REGISTRY}/team" TLS_VERIFY=false > "${SCRATCH}/build.log" 2>&1 ||
  { cat "${SCRATCH}/build.log" >&2; fail "make image-memprofile CONTAINER_ENGINE=podman DOCKER_PUSH=true"; }
"${MEMPROFILE}" preflight "${SCRATCH}/image/image.tar" > "${SCRATCH}/preflight" || fail "the podman-built image is not READY"
judged="$(cat "${SCRATCH}/image/judged.digest")"
served="$(skopeo inspect --tls-verify=false "docker://${ref}" | jq -r .Digest)"
[[ "${judged}" == sha256:* && "${served}" == "${judged}" ]] || fail "the registry serves ${served}, preflight judged ${judged}"
grep -q "^== pushed ${ref}@${judged} (the judged digest)" "${SCRATCH}/build.log" || fail "the push did not report the judged digest"
pass "podman: built, READY, and the registry serves the judged digest ${judged}"
