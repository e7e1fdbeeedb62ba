#!/usr/bin/env bash
# Dormant mode in a profilable image (amd64; images_dormant_arm64.sh runs it
# for arm64 under qemu): make image-memprofile DORMANT=true bakes it into the
# launcher config, the service starts with recording off, and memprofile
# start/snapshot/stop from a second container (as kubectl exec would run
# them) record the leak without a restart.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/images_lib.sh
source "$(dirname "$0")/images_lib.sh"

arch="${DORMANT_ARCH:-amd64}"
image="localhost/leaky:dormant-${arch}"
seed_dist jemalloc "${arch}"
example_app "${arch}"
drop_at_exit "${image}"

if [[ "${arch}" == amd64 ]]; then
  # heaptrack cannot start dormant: refused before anything is built.
  if mk image-memprofile APP_IMAGE=localhost/leaky:amd64 BACKEND=heaptrack DORMANT=true > "${SCRATCH}/ht.log" 2>&1; then
    fail "DORMANT=true with heaptrack was built"
  fi
  grep -q "heaptrack cannot start dormant" "${SCRATCH}/ht.log" || fail "heaptrack dormant: $(cat "${SCRATCH}/ht.log")"
  pass "DORMANT=true with heaptrack is refused in one line"
fi

mk image-memprofile APP_IMAGE="localhost/leaky:${arch}" BACKEND=jemalloc DORMANT=true MAX_PROFILE_MB=64 \
  MEMPROFILE_IMAGE_TAG="dormant-${arch}" > "${SCRATCH}/build.log" 2>&1 ||
  { cat "${SCRATCH}/build.log" >&2; fail "make image-memprofile DORMANT=true"; }
root="$(image_root "${image}")"
grep -qx "dormant = 1" "${root}/etc/memprofile/exec.conf" || fail "exec.conf: $(cat "${root}/etc/memprofile/exec.conf")"
grep -qx "max_profile_mb = 64" "${root}/etc/memprofile/exec.conf" || fail "exec.conf has no budget"
"${MEMPROFILE}" check "${root}/usr/lib/memprofile/libmemprofile_ctl.so" --json > "${SCRATCH}/ctl.json" || true
[[ "$(jq -r .arch "${SCRATCH}/ctl.json")" == "$([[ "${arch}" == arm64 ]] && echo aarch64 || echo x86_64)" ]] ||
  fail "the control library in the image is not for ${arch}: $(cat "${SCRATCH}/ctl.json")"
for file in sitecustomize.py _memprofile_memray/__init__.py _memprofile_memray/control.py; do
  cmp -s "${root}/usr/lib/memprofile/python/${file}" "${E2E_ROOT}/ctl/python/${file}" ||
    fail "memray's bootstrap (${file}) is not beside the control library in the image"
done
"${MEMPROFILE}" preflight "${SCRATCH}/image/image.tar" > "${SCRATCH}/preflight" ||
  fail "the dormant image is not READY: $(cat "${SCRATCH}/preflight")"
pass "${arch}: DORMANT=true is in the launcher config, the control library is in the image for ${arch} with memray's bootstrap beside it, READY"

dormant_round "${image}" "${arch}"
pass "${arch}: started dormant; start, two snapshots and stop from another container; the growth is leaky_function; status in the container gives RSS, jemalloc's view, the profile's bytes and the cgroup, and the records say the heap grew; exit code 0"
