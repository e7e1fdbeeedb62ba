#!/usr/bin/env bash
# The arm64 image from an amd64 host, way 1, dormant: the example app image
# built for arm64 (its builder stage cross-compiles), the arm64 launcher and
# jemalloc built on the host (cross) and layered on with DORMANT=true and a
# budget. The build's verify step traces the arm64 loader under qemu; the
# image is arm64, READY, its launcher a static aarch64 program, its control
# library aarch64 with memray's bootstrap beside it. The service starts with
# recording off under qemu, and memprofile start/snapshot/stop from a second
# container (as kubectl exec would run them) record the leak without a
# restart: the snapshot names leaky_function, and report ranks the growth
# there. (The amd64 dormant image: docker_dormant.sh.)
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/images_lib.sh
source "$(dirname "$0")/images_lib.sh"

image="localhost/leaky:dormant-arm64"
seed_dist jemalloc amd64  # its jeprof reads the profile
seed_dist jemalloc arm64
example_app arm64
drop_at_exit "${image}"

# No PLATFORM given: the app image's own platform (linux/arm64) is used.
mk image-memprofile APP_IMAGE=localhost/leaky:arm64 BACKEND=jemalloc DORMANT=true MAX_PROFILE_MB=64 \
  MEMPROFILE_IMAGE_TAG=dormant-arm64 > "${SCRATCH}/build.log" 2>&1 ||
  { cat "${SCRATCH}/build.log" >&2; fail "make image-memprofile (arm64) DORMANT=true"; }
[[ "$(buildah inspect --type image "${image}" | jq -r .OCIv1.architecture)" == arm64 ]] || fail "not an arm64 image"
grep -q "LOADER_TRACED" "${SCRATCH}/build.log" || fail "the verify step did not trace the arm64 loader"
root="$(image_root "${image}")"
grep -qx "dormant = 1" "${root}/etc/memprofile/exec.conf" || fail "exec.conf: $(cat "${root}/etc/memprofile/exec.conf")"
grep -qx "max_profile_mb = 64" "${root}/etc/memprofile/exec.conf" || fail "exec.conf has no budget"
"${MEMPROFILE}" check "${root}/usr/bin/memprofile" > "${SCRATCH}/launcher" || true  # static: "not profilable"
grep -q "aarch64 ELF64 LSB ET_EXEC, static" "${SCRATCH}/launcher" || fail "the launcher in the image is not a static aarch64 program"
"${MEMPROFILE}" check "${root}/usr/lib/memprofile/libmemprofile_ctl.so" --json > "${SCRATCH}/ctl.json" || true
[[ "$(jq -r .arch "${SCRATCH}/ctl.json")" == aarch64 ]] ||
  fail "the control library in the image is not for arm64: $(cat "${SCRATCH}/ctl.json")"
for file in sitecustomize.py _memprofile_memray/__init__.py _memprofile_memray/control.py; do
  cmp -s "${root}/usr/lib/memprofile/python/${file}" "${E2E_ROOT}/ctl/python/${file}" ||
    fail "memray's bootstrap (${file}) is not beside the control library in the image"
done
"${MEMPROFILE}" preflight "${SCRATCH}/image/image.tar" > "${SCRATCH}/preflight" ||
  fail "the arm64 image is not READY: $(cat "${SCRATCH}/preflight")"
pass "arm64 image built, verified under qemu, READY; DORMANT=true in the launcher config; a static aarch64 launcher, an aarch64 control library with memray's bootstrap beside it"

dormant_round "${image}" arm64
jeprof_names leaky_function "${root}" /usr/local/bin/leaky "${DORMANT_SNAPSHOT}" arm64 ||
  fail "the arm64 snapshot does not name leaky_function"
pass "arm64: started dormant under qemu; start, two snapshots and stop from another container; the snapshot names leaky_function and the growth is there; status in the container gives RSS, jemalloc's view, the profile's bytes and the cgroup, and the records say the heap grew; exit code 0"
