# Helpers for the docker end-to-end tests (sourced after lib.sh): a real
# Docker engine (scripts/docker-engine.sh: trixie's dockerd 26, buildx 0.13,
# the containerd image store) started for the test and stopped when it ends,
# whatever happens; local Debian bases imported into it by `make base-image`;
# the example app image. One docker test at a time (a lock under the cache):
# each starts and stops the one engine. Its images stay in the engine's root
# between runs (bases, the example app); what a test builds for itself goes.
# shellcheck shell=bash
# A library, not a test: run by itself (a glob over tests/e2e/*.sh), it
# says so and passes.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  echo "skip: ${BASH_SOURCE[0]##*/} is sourced by the docker_*.sh tests"
  exit 0
fi
# shellcheck source=scripts/host.sh
source "${E2E_ROOT}/scripts/host.sh"

CACHE="$(memprofile_cache)"
ENGINE_SCRIPT="${E2E_ROOT}/scripts/docker-engine.sh"
# Host-built artifacts of the docker tests' own: the buildah image tests
# write theirs next door, maybe at the same time.
export DIST="${CACHE}/image-dist-docker"
SUITE=bookworm
mkdir -p "${CACHE}/docker-engine"

# One docker test at a time, bounded: ctest's timeout ends a test that waits
# too long anyway, this says why.
exec {DOCKER_TEST_LOCK}>"${CACHE}/docker-engine/tests.lock"
flock -w "${DOCKER_TEST_LOCK_WAIT:-1800}" "${DOCKER_TEST_LOCK}" ||
  fail "another docker test held ${CACHE}/docker-engine/tests.lock for too long"

DROPPED=()
drop_at_exit() { DROPPED+=("$@"); }
# at_exit CMD: run CMD (a string) when the test ends, before the engine stops.
AT_EXIT=()
at_exit() { AT_EXIT+=("$1"); }

docker_cleanup() {
  local cmd
  for cmd in "${AT_EXIT[@]}"; do eval "${cmd}" || true; done
  if "${ENGINE_SCRIPT}" status; then
    ((${#DROPPED[@]} == 0)) || docker rmi --force "${DROPPED[@]}" >/dev/null 2>&1 || true
    # BuildKit's cache grows with every --no-cache build (--keep-storage
    # frees nothing here): drop it; the bases and app images stay.
    docker builder prune --all --force >/dev/null 2>&1 || true
  fi
  "${ENGINE_SCRIPT}" stop >/dev/null 2>&1 || "${ENGINE_SCRIPT}" stop || true
  rm -rf "${SCRATCH}"
}
trap docker_cleanup EXIT

"${ENGINE_SCRIPT}" start 2> "${SCRATCH}/engine.log" || { cat "${SCRATCH}/engine.log" >&2; fail "the docker engine did not start"; }
eval "$("${ENGINE_SCRIPT}" env)"

mk() {  # make in the repo with docker and the test's caches
  make -C "${E2E_ROOT}" --no-print-directory SKIP_DEPS=true CONTAINER_ENGINE=docker \
    DIST="${DIST}" IMAGE_WORK_DIR="${SCRATCH}/image" "$@"
}


# base_images ARCH: the slim and builder bases in docker's store (the same
# ones `make example` asks for), made or reused by make base-image.
base_images() {
  mk base-image ARCH="$1" SUITE="${SUITE}" >/dev/null
  mk base-image ARCH="$1" SUITE="${SUITE}" BASE_VARIANT=builder >/dev/null
}

image_id() { docker image inspect --format '{{.Id}}' "$1"; }

# base_lists: arm64 and amd64 slim bases, the list of both
# (localhost/memprofile-base:SUITE-slim), and the amd64 cross builder
# (buildx runs builder stages on the build platform: gcc-aarch64-linux-gnu).
base_lists() {
  mk base-image ARCH=arm64 SUITE="${SUITE}" >/dev/null
  mk base-image ARCH=amd64 SUITE="${SUITE}" >/dev/null
  mk base-image ARCH=amd64 SUITE="${SUITE}" BASE_VARIANT=cross >/dev/null
}

# example_app ARCH|multi [NAME DIR]: localhost/NAME:ARCH (default leaky, from examples/leaky) (multi:
# linux/amd64 and linux/arm64 in one image), rebuilt only when its sources
# or bases change (a label holds their key). Its builder stage runs on the
# build platform: the default builder for amd64, the cross one otherwise.
example_app() {
  local arch="$1" name="${2:-leaky}" dir="${3:-${E2E_ROOT}/examples/leaky}" key f builder base platforms
  local -a sources=() app_arg=()
  # Another app than the example: one of the sources in DIR (its Dockerfile's APP).
  [[ "${name}" == leaky ]] || app_arg=(--build-arg "APP=${name}")
  if [[ "${arch}" == amd64 ]]; then
    base_images amd64
    builder="localhost/memprofile-base:${SUITE}-builder-amd64" base="localhost/memprofile-base:${SUITE}-slim-amd64"
    platforms=linux/amd64
  else
    base_lists
    builder="localhost/memprofile-base:${SUITE}-cross-amd64" base="localhost/memprofile-base:${SUITE}-slim-${arch}"
    platforms="linux/${arch}"
    if [[ "${arch}" == multi ]]; then base="localhost/memprofile-base:${SUITE}-slim" platforms=linux/amd64,linux/arm64; fi
  fi
  for f in "${dir}"/*; do sources+=("@${f}"); done
  key="$(cache_key "${sources[@]}" "${platforms}" "$(image_id "${builder}")" "$(image_id "${base}")")"
  [[ "$(docker image inspect --format '{{index .Config.Labels "io.memprofile.test.source"}}' \
    "localhost/${name}:${arch}" 2>/dev/null)" != "${key}" ]] || return 0
  docker buildx build --quiet --load --platform "${platforms}" \
    --build-arg "BUILDER_IMAGE=${builder}" --build-arg "BASE_IMAGE=${base}" \
    --label "io.memprofile.test.source=${key}" "${app_arg[@]}" \
    -t "localhost/${name}:${arch}" "${dir}" >/dev/null
}

# start_registry: start_local_registry (lib.sh), stopped when the test ends
# (before the engine); sets REGISTRY (host:port).
start_registry() {
  start_local_registry
  at_exit "kill ${REGISTRY_PID} 2>/dev/null; wait ${REGISTRY_PID} 2>/dev/null"
}


heaptrack_names() {  # FUNCTION ROOT RAW
  local fn="$1" root="$2" raw="$3"
  "${E2E_ROOT}/scripts/reroot-profile.sh" heaptrack "${root}" "${raw}" "${raw}.rooted"
  /usr/lib/heaptrack/libexec/heaptrack_interpret < "${raw}.rooted" > "${raw}.trace" 2>/dev/null
  heaptrack_print "${raw}.trace" > "${raw}.printed" 2>/dev/null
  grep -q "${fn}" "${raw}.printed"
}

# image_root IMAGE DIR: the image's file tree in DIR (docker export).
image_root() {
  local ctr
  ctr="$(docker create --platform "$(docker image inspect --format '{{.Os}}/{{.Architecture}}' "$1")" "$1")"
  mkdir -p "$2"
  docker export "${ctr}" | tar -C "$2" -xf - 2>/dev/null || true
  docker rm "${ctr}" >/dev/null
  echo "$2"
}
