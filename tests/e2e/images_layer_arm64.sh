#!/usr/bin/env bash
# Way 1 on arm64 from an amd64 host: the example app image built for arm64
# (its builder stage under qemu), the arm64 launcher and jemalloc built on the
# host (cross) and layered on; the build's verify step and the container run
# under qemu-aarch64, and the profile names the leaking function.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/images_lib.sh
source "$(dirname "$0")/images_lib.sh"

seed_dist jemalloc amd64  # its jeprof reads the profile
seed_dist jemalloc arm64
example_app arm64
drop_at_exit localhost/leaky:arm64-memprofile

# No PLATFORM given: the app image's own platform (linux/arm64) is used.
mk image-memprofile APP_IMAGE=localhost/leaky:arm64 BACKEND=jemalloc > "${SCRATCH}/build.log" 2>&1 ||
  { cat "${SCRATCH}/build.log" >&2; fail "make image-memprofile (arm64)"; }
image=localhost/leaky:arm64-memprofile
[[ "$(buildah inspect --type image "${image}" | jq -r .OCIv1.architecture)" == arm64 ]] || fail "not an arm64 image"
grep -q "LOADER_TRACED" "${SCRATCH}/build.log" || fail "the verify step did not trace the arm64 loader"
"${MEMPROFILE}" preflight "${SCRATCH}/image/image.tar" > "${SCRATCH}/preflight" || fail "exported arm64 image is not READY"
root="$(image_root "${image}")"
"${MEMPROFILE}" check "${root}/usr/bin/memprofile" > "${SCRATCH}/launcher" || true  # static: "not profilable"
grep -q "aarch64 ELF64 LSB ET_EXEC, static" "${SCRATCH}/launcher" || fail "the launcher in the image is not a static aarch64 program"
pass "arm64 image built, verified under qemu and READY"

run_entrypoint "${image}" "${SCRATCH}/out" 1 > "${SCRATCH}/run.log" 2>&1 || { cat "${SCRATCH}/run.log" >&2; fail "run"; }
grep -q "profiling /usr/local/bin/leaky with jemalloc" "${SCRATCH}/run.log" || fail "no start line: $(cat "${SCRATCH}/run.log")"
heap="$(find "${SCRATCH}/out" -name 'jeprof.*.heap' -print -quit)"
[[ -s "${heap}" ]] || fail "no jemalloc profile from the arm64 container"
jeprof_names leaky_function "${root}" /usr/local/bin/leaky "${heap}" arm64 || fail "the arm64 profile does not name leaky_function"
pass "the arm64 image records a profile naming leaky_function (under qemu)"
