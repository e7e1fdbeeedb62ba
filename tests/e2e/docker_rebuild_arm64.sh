#!/usr/bin/env bash
# Way 2 on docker for arm64: buildx honours FROM --platform=$BUILDPLATFORM,
# so the Rust app is cross-compiled natively in the amd64 cross builder
# (make base-image BASE_VARIANT=cross: cargo, libstd-rust-dev:arm64,
# gcc-aarch64-linux-gnu) as a dynamic glibc program, packaged on the arm64
# slim base with the launcher and jemalloc; the verify step and `docker run`
# run under qemu, and the profile names the leaking function. The arm64
# image's launcher is a static aarch64 program, and its start line is said.
# (Way 1 on arm64 with buildx: the arm64 half of docker_multi.sh; with
# buildah: images_dormant_arm64.sh.)
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/docker_lib.sh
source "$(dirname "$0")/docker_lib.sh"

seed_dist jemalloc amd64  # its jeprof reads the profile
seed_dist jemalloc arm64
base_lists
image=localhost/leaky-rs:latest-memprofile
drop_at_exit "${image}"
# An amd64-only builder: were the stage run as linux/arm64, FROM would find
# no arm64 image of it and the build would stop.
[[ "$(docker image inspect --format '{{.Architecture}}' "localhost/memprofile-base:${SUITE}-cross-amd64")" == amd64 ]] ||
  fail "the cross builder is not amd64"
mk image-memprofile APP_SRC="${E2E_ROOT}/examples/leaky-rs" APP_BIN=leaky-rs BACKEND=jemalloc CARGO_PROFILE=dev \
  PLATFORM=linux/arm64 BASE_IMAGE="localhost/memprofile-base:${SUITE}-slim-arm64" \
  RUST_BUILDER_IMAGE="localhost/memprofile-base:${SUITE}-cross-amd64" ENGINE_BUILD_FLAGS=--no-cache \
  > "${SCRATCH}/build.log" 2>&1 || { cat "${SCRATCH}/build.log" >&2; fail "make image-memprofile APP_SRC=... PLATFORM=linux/arm64 (docker)"; }
grep -q "Compiling leaky-rs" "${SCRATCH}/build.log" || fail "cargo did not compile the app in the build"
grep -q "LOADER_TRACED" "${SCRATCH}/build.log" || fail "the verify step did not trace the arm64 loader"
"${MEMPROFILE}" preflight "${SCRATCH}/image/image.tar" > "${SCRATCH}/preflight" || fail "not READY"
grep -q "^${SCRATCH}/image/image.tar (docker-archive, linux/arm64" "${SCRATCH}/preflight" || fail "not judged as linux/arm64"
root="$(image_root "${image}" "${SCRATCH}/root")"
"${MEMPROFILE}" check "${root}/usr/local/bin/leaky-rs" > "${SCRATCH}/app" || true
grep -q "aarch64 ELF64 LSB ET_DYN, dynamic, interpreter /lib/ld-linux-aarch64.so.1" "${SCRATCH}/app" ||
  fail "the rebuilt app is not a dynamic aarch64 program: $(cat "${SCRATCH}/app")"
"${MEMPROFILE}" check "${root}/usr/bin/memprofile" > "${SCRATCH}/launcher" || true  # static: "not profilable"
grep -q "aarch64 ELF64 LSB ET_EXEC, static" "${SCRATCH}/launcher" || fail "the launcher in the image is not a static aarch64 program"
pass "the Rust app cross-compiled on the build platform, dynamic aarch64, packaged with a static aarch64 launcher and READY"

mkdir -p "${SCRATCH}/out"
chmod 1777 "${SCRATCH}/out"
# 2 MiB a tick: under qemu on a loaded machine a second may be a few ticks,
# and jemalloc samples about every 512 KiB.
docker run --rm --platform linux/arm64 -v "${SCRATCH}/out:/var/memprofile" "${image}" 1 2097152 > "${SCRATCH}/run.log" 2>&1 ||
  { cat "${SCRATCH}/run.log" >&2; fail "docker run (arm64)"; }
grep -q "profiling /usr/local/bin/leaky-rs with jemalloc" "${SCRATCH}/run.log" || fail "no start line: $(cat "${SCRATCH}/run.log")"
heap="$(find "${SCRATCH}/out" -name 'jeprof.*.heap' -print -quit)"
[[ -s "${heap}" ]] || fail "no profile: $(cat "${SCRATCH}/run.log")"
jeprof_names leaky_function "${root}" /usr/local/bin/leaky-rs "${heap}" arm64 || fail "the profile does not name leaky_function"
pass "the rebuilt arm64 image records a profile naming leaky_function under docker run (qemu)"
