#!/usr/bin/env bash
# Way 1 on docker for arm64 from an amd64 host: the example app built for
# linux/arm64 by buildx (its builder stage cross-compiles on the build
# platform), the arm64 launcher and jemalloc built on the host and layered
# on; the build's verify step and `docker run --platform linux/arm64` run
# under qemu-aarch64 (binfmt), and the profile names the leaking function.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/docker_lib.sh
source "$(dirname "$0")/docker_lib.sh"

seed_dist jemalloc amd64  # its jeprof reads the profile
seed_dist jemalloc arm64
example_app arm64
image=localhost/leaky:arm64-memprofile
drop_at_exit "${image}"

# No PLATFORM: the app image's own (linux/arm64). --no-cache: the verify step
# runs (and says so) even when BuildKit ran it before with the same inputs.
mk image-memprofile APP_IMAGE=localhost/leaky:arm64 BACKEND=jemalloc ENGINE_BUILD_FLAGS=--no-cache \
  > "${SCRATCH}/build.log" 2>&1 || { cat "${SCRATCH}/build.log" >&2; fail "make image-memprofile CONTAINER_ENGINE=docker (arm64)"; }
[[ "$(docker image inspect --format '{{.Os}}/{{.Architecture}}' "${image}")" == linux/arm64 ]] || fail "not a linux/arm64 image"
grep -q "LOADER_TRACED" "${SCRATCH}/build.log" || fail "the verify step did not trace the arm64 loader"
"${MEMPROFILE}" preflight "${SCRATCH}/image/image.tar" > "${SCRATCH}/preflight" || fail "the exported arm64 image is not READY"
grep -q "^${SCRATCH}/image/image.tar (docker-archive, linux/arm64" "${SCRATCH}/preflight" || fail "not judged as linux/arm64"
root="$(image_root "${image}" "${SCRATCH}/root")"
"${MEMPROFILE}" check "${root}/usr/bin/memprofile" > "${SCRATCH}/launcher" || true  # static: "not profilable"
grep -q "aarch64 ELF64 LSB ET_EXEC, static" "${SCRATCH}/launcher" || fail "the launcher in the image is not a static aarch64 program"
pass "arm64 image built with buildx, verified under qemu, READY when exported"

mkdir -p "${SCRATCH}/out"
chmod 1777 "${SCRATCH}/out"
# 1 MiB a tick: under qemu on a loaded machine a second may be few ticks,
# and jemalloc samples about every 512 KiB.
docker run --rm --platform linux/arm64 -v "${SCRATCH}/out:/var/memprofile" "${image}" 1 1048576 > "${SCRATCH}/run.log" 2>&1 ||
  { cat "${SCRATCH}/run.log" >&2; fail "docker run (arm64)"; }
grep -q "profiling /usr/local/bin/leaky with jemalloc" "${SCRATCH}/run.log" || fail "no start line: $(cat "${SCRATCH}/run.log")"
heap="$(find "${SCRATCH}/out" -name 'jeprof.*.heap' -print -quit)"
[[ -s "${heap}" ]] || fail "no jemalloc profile from the arm64 container"
jeprof_names leaky_function "${root}" /usr/local/bin/leaky "${heap}" arm64 || fail "the arm64 profile does not name leaky_function"
pass "docker run of the arm64 image (qemu) records a profile naming leaky_function"
