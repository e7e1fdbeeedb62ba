#!/usr/bin/env bash
# What make image-memprofile refuses, and how: a static FROM-scratch app (the
# preflight's findings and the pointer to way 2), a preload library of the
# wrong arch (the Dockerfile's verify step fails the build), bytehound with no
# network and no vendored source (stops at the fetch, naming what to
# download), and missing or contradictory variables ($(error) guards).
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/images_lib.sh
source "$(dirname "$0")/images_lib.sh"

expect_fail() {  # LOG PATTERN DESCRIPTION -- command...
  local log="$1" pattern="$2" what="$3"
  shift 4
  if "$@" > "${log}" 2>&1; then fail "${what}: succeeded"; fi
  grep -q -e "${pattern}" "${log}" || { cat "${log}" >&2; fail "${what}: no '${pattern}' in the output"; }
  pass "${what}"
}

drop_at_exit localhost/static-app:1 localhost/wrong-arch:test

# A static program in a scratch image: LD_PRELOAD can never work there.
ctr="$(buildah from scratch)"
buildah copy --quiet "${ctr}" "${FIXTURES}/leak-static" /app >/dev/null
buildah config --entrypoint '["/app"]' --cmd '["leak","8"]' --arch amd64 "${ctr}"
buildah commit --quiet "${ctr}" localhost/static-app:1 >/dev/null
buildah rm "${ctr}" >/dev/null
expect_fail "${SCRATCH}/static.log" "STATIC_BINARY" "a static scratch app stops at the preflight with its findings" -- \
  mk image-memprofile APP_IMAGE=localhost/static-app:1 BACKEND=jemalloc
grep -q "way 2): make image-memprofile APP_SRC=" "${SCRATCH}/static.log" || fail "no pointer to way 2"
grep -q "INTERPRETER_MISSING\|LIBC_MISSING\|STATIC_BINARY" "${SCRATCH}/static.log" || fail "findings not shown"
if buildah inspect --type image localhost/static-app:1-memprofile >/dev/null 2>&1; then fail "an image was built anyway"; fi

# An arm64 preload library staged for an amd64 image: the build's last step fails.
seed_dist jemalloc amd64
seed_dist jemalloc arm64
example_app amd64
mk static ARCH=amd64 >/dev/null
scripts_dir="${E2E_ROOT}/scripts"
"${scripts_dir}/stage-artifacts.sh" "${DIST}/memprofile/amd64/memprofile" "${DIST}/preload/jemalloc/arm64" \
  "${SCRATCH}/ctx/artifacts/amd64"
expect_fail "${SCRATCH}/wrong-arch.log" "PRELOAD_WRONG_ARCH" "a wrong-arch preload library fails the build's verify step" -- \
  buildah bud --isolation chroot --pull=never --platform linux/amd64 -f "${E2E_ROOT}/images/layer.Dockerfile" \
  --build-arg ARTIFACTS=dist --build-arg APP_IMAGE=localhost/leaky:amd64 --build-arg BACKEND=jemalloc --build-arg 'APP_ENTRYPOINT=["/usr/local/bin/leaky"]' \
  --build-arg 'APP_CMD=["0"]' --build-arg APP_USER=nobody -t localhost/wrong-arch:test "${SCRATCH}/ctx"
grep -q 'preflight --rootfs / --trace-loader' "${SCRATCH}/wrong-arch.log" || fail "not the verify step that failed"

# bytehound with no offline bundle (BYTEHOUND_BUNDLE=none), no network and
# no vendored source: the default backend's path stops at the fetch, naming
# what to put where.
vendored="$(find "${CACHE}/preload/sources" -maxdepth 1 -name "bytehound-*-vendored.tar.gz" -print -quit 2>/dev/null || true)"
if [[ -z "${vendored}" ]]; then
  rm -rf "${DIST}/preload/bytehound"
  expect_fail "${SCRATCH}/bytehound.log" "cannot fetch bytehound 0.11.0: put the offline bundle" \
    "bytehound without bundle, network or vendored source stops at the fetch, naming what to download" -- \
    env BYTEHOUND_BUNDLE=none PRELOAD_CACHE="${CACHE}/preload" make -C "${E2E_ROOT}" --no-print-directory SKIP_DEPS=true CONTAINER_ENGINE=buildah \
    PULL_POLICY=never DIST="${DIST}" IMAGE_WORK_DIR="${SCRATCH}/image" image-memprofile APP_IMAGE=localhost/leaky:amd64
  grep -q "preflight of the app image" "${SCRATCH}/bytehound.log" || fail "bytehound is not the default backend's path"
else
  echo "skip: a vendored bytehound source is cached (${vendored}); tests/e2e/preload_bytehound.sh builds it"
fi

# The Makefile's guards.
expect_fail "${SCRATCH}/g1" "name the app: APP_IMAGE=" "no app named" -- mk image-memprofile
expect_fail "${SCRATCH}/g2" "give APP_IMAGE or APP_SRC, not both" "both ways at once" -- \
  mk image-memprofile APP_IMAGE=x APP_SRC=y APP_BIN=z
expect_fail "${SCRATCH}/g3" "APP_SRC needs APP_BIN" "way 2 without APP_BIN" -- mk image-memprofile APP_SRC=y
expect_fail "${SCRATCH}/g4" "DOCKER_PUSH=true needs IMAGE_NAMESPACE" "push without a namespace" -- \
  mk image-memprofile APP_IMAGE=x DOCKER_PUSH=true
expect_fail "${SCRATCH}/g5" "BACKEND must be one of" "unknown backend" -- mk image-memprofile APP_IMAGE=x BACKEND=valgrind
expect_fail "${SCRATCH}/g6" "CONTAINER_ENGINE must be docker, podman or buildah" "unknown engine" -- \
  mk image-memprofile APP_IMAGE=x CONTAINER_ENGINE=rkt
expect_fail "${SCRATCH}/g7" "name the image" "preflight without an image" -- mk preflight
expect_fail "${SCRATCH}/g8" "heaptrack cannot start dormant" "DORMANT=true with heaptrack" -- \
  mk image-memprofile APP_IMAGE=x BACKEND=heaptrack DORMANT=true
