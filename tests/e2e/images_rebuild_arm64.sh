#!/usr/bin/env bash
# Way 2 for arm64, the way docker buildx does it: the Rust stage runs on the
# build platform (amd64) and cross-compiles for aarch64 with Debian's cargo,
# the target's std (libstd-rust-dev:arm64) and gcc-aarch64-linux-gnu (`make
# base-image BASE_VARIANT=cross`); the image is arm64, verified under qemu in
# its last step, READY, and its profile names the leaking function.
#
# buildah 1.28 ignores FROM --platform=$BUILDPLATFORM and would look for an
# arm64 builder. The test offers the amd64 cross builder under an arm64 label:
# its programs are amd64, so the stage runs natively, as on docker.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/images_lib.sh
source "$(dirname "$0")/images_lib.sh"

seed_dist jemalloc amd64  # its jeprof reads the profile
seed_dist jemalloc arm64
base_images arm64
mk base-image ARCH=amd64 SUITE="${SUITE}" BASE_VARIANT=cross >/dev/null
builder=localhost/memprofile-test-rust-build-platform:arm64
image=localhost/leaky-rs:arm64-memprofile
drop_at_exit "${builder}" "${image}"
ctr="$(buildah from --pull=never --quiet "localhost/memprofile-base:${SUITE}-cross-amd64")"
buildah config --arch arm64 "${ctr}"
buildah commit --quiet "${ctr}" "${builder}" >/dev/null
buildah rm "${ctr}" >/dev/null

mk image-memprofile APP_SRC="${E2E_ROOT}/examples/leaky-rs" APP_BIN=leaky-rs BACKEND=jemalloc CARGO_PROFILE=dev \
  PLATFORM=linux/arm64 MEMPROFILE_IMAGE_TAG=arm64-memprofile BASE_IMAGE="localhost/memprofile-base:${SUITE}-slim-arm64" \
  RUST_BUILDER_IMAGE="${builder}" > "${SCRATCH}/build.log" 2>&1 ||
  { cat "${SCRATCH}/build.log" >&2; fail "make image-memprofile APP_SRC=... PLATFORM=linux/arm64"; }
grep -q "target/aarch64-unknown-linux-gnu\|Compiling leaky-rs" "${SCRATCH}/build.log" || fail "cargo did not run"
[[ "$(buildah inspect --type image "${image}" | jq -r .OCIv1.architecture)" == arm64 ]] || fail "not an arm64 image"
grep -q "LOADER_TRACED" "${SCRATCH}/build.log" || fail "the verify step did not trace the arm64 loader"
"${MEMPROFILE}" preflight "${SCRATCH}/image/image.tar" > "${SCRATCH}/preflight" || fail "exported arm64 image is not READY"
root="$(image_root "${image}")"
"${MEMPROFILE}" check "${root}/usr/local/bin/leaky-rs" > "${SCRATCH}/app" || true
grep -q "aarch64 ELF64 LSB ET_DYN, dynamic, interpreter /lib/ld-linux-aarch64.so.1" "${SCRATCH}/app" ||
  fail "the rebuilt app is not a dynamic aarch64 program: $(cat "${SCRATCH}/app")"
pass "the Rust app cross-compiled for arm64 on the build platform, packaged, verified and READY"

run_entrypoint "${image}" "${SCRATCH}/out" 1 > "${SCRATCH}/run.log" 2>&1 || { cat "${SCRATCH}/run.log" >&2; fail "run"; }
heap="$(find "${SCRATCH}/out" -name 'jeprof.*.heap' -print -quit)"
[[ -s "${heap}" ]] || fail "no profile: $(cat "${SCRATCH}/run.log")"
jeprof_names leaky_function "${root}" /usr/local/bin/leaky-rs "${heap}" arm64 ||
  fail "the arm64 profile does not name leaky_function"
pass "the rebuilt arm64 image records a profile naming leaky_function (under qemu)"
