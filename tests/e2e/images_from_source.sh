#!/usr/bin/env bash
# ARTIFACTS=source: the launcher and the preload library are built inside the
# image build, in a builder stage, with the same entries as on the host
# (make image-artifacts); the image is READY and records a profile.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/images_lib.sh
source "$(dirname "$0")/images_lib.sh"

example_app amd64
drop_at_exit localhost/leaky:from-source
mk base-image ARCH=amd64 SUITE="${SUITE}" BASE_VARIANT=toolchain >/dev/null
mk static ARCH=amd64 >/dev/null  # the host's own memprofile judges the result
mk image-memprofile APP_IMAGE=localhost/leaky:amd64 BACKEND=heaptrack ARTIFACTS=source MEMPROFILE_IMAGE_TAG=from-source \
  BUILDER_IMAGE="localhost/memprofile-base:${SUITE}-toolchain-amd64" > "${SCRATCH}/build.log" 2>&1 ||
  { tail -40 "${SCRATCH}/build.log" >&2; fail "make image-memprofile ARTIFACTS=source"; }
grep -q "artifacts-source" "${SCRATCH}/build.log" || fail "the builder stage did not run"
grep -q "install-deps: ok (image build)" "${SCRATCH}/build.log" || fail "the builder stage did not check its packages"
! grep "install-deps: installing" "${SCRATCH}/build.log" || fail "the toolchain builder lacks packages its build needs"
if grep -q "host-built" "${SCRATCH}/build.log"; then fail "host-built artifacts were used"; fi
grep -q "preload: building heaptrack" "${SCRATCH}/build.log" || fail "heaptrack was not built in the builder stage"
"${MEMPROFILE}" preflight "${SCRATCH}/image/image.tar" > "${SCRATCH}/preflight" || fail "not READY"
pass "launcher and library built in the builder stage; READY"

run_entrypoint localhost/leaky:from-source "${SCRATCH}/out" 1 > "${SCRATCH}/run.log" 2>&1 || { cat "${SCRATCH}/run.log" >&2; fail "run"; }
raw="$(find "${SCRATCH}/out" -name 'heaptrack.*.raw' -print -quit)"
[[ -s "${raw}" ]] || fail "no heaptrack output"
heaptrack_names leaky_function "$(image_root localhost/leaky:from-source)" "${raw}" || fail "the trace does not name leaky_function"
pass "the image built from source records a trace naming leaky_function"
