#!/usr/bin/env bash
# The container store the tests, the example and the benchmarks build in:
# overlay where the kernel lets root mount it, vfs when forced, a clear
# refusal for anything else; `make clean-cache` removes a store even with a
# container still mounted in it (an interrupted test), and nothing else.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=scripts/host.sh
source "${E2E_ROOT}/scripts/host.sh"

cache="${SCRATCH}/cache"
# A failed step may leave the container mounted: unmount before removing.
trap 'MEMPROFILE_CACHE="${cache}" "${E2E_ROOT}/scripts/clean-cache.sh" --all >/dev/null 2>&1; rm -rf "${SCRATCH}"' EXIT

# Forced vfs, and a driver name that is neither.
(MEMPROFILE_STORAGE_DRIVER=vfs use_container_storage "${cache}/containers" && storage_driver) > "${SCRATCH}/forced"
[[ "$(cat "${SCRATCH}/forced")" == vfs ]] || fail "MEMPROFILE_STORAGE_DRIVER=vfs gave $(cat "${SCRATCH}/forced")"
grep -q "graphroot = \"${cache}/containers/graph-vfs\"" "${cache}/containers/storage.conf" || fail "vfs graph root"
rc=0
(MEMPROFILE_STORAGE_DRIVER=btrfs use_container_storage "${cache}/containers") 2> "${SCRATCH}/bad" || rc=$?
[[ "${rc}" == 2 ]] || fail "an unknown driver was not refused (rc ${rc})"
grep -q "MEMPROFILE_STORAGE_DRIVER=btrfs: expected vfs or overlay" "${SCRATCH}/bad" || fail "message: $(cat "${SCRATCH}/bad")"
pass "a forced driver is used; an unknown one is refused"

# Detected: root on ext4 or xfs (this kind of machine, and CI) gets overlay,
# and a real image with a RUN step builds and runs in it.
fstype="$(findmnt -no FSTYPE --target "${SCRATCH}")"
use_container_storage "${cache}/containers"
if ((EUID == 0)) && [[ "${fstype}" == ext4 || "${fstype}" == xfs ]]; then
  [[ "$(storage_driver)" == overlay ]] || fail "root on ${fstype} should get overlay, got $(storage_driver)"
fi
podman import --quiet --arch amd64 "$("${E2E_ROOT}/scripts/make-rootfs.sh" amd64)" localhost/storage-test-base >/dev/null
printf 'FROM localhost/storage-test-base\nRUN echo built-here > /marker\n' > "${SCRATCH}/Dockerfile"
buildah bud --isolation chroot --pull=never --quiet -t localhost/storage-test "${SCRATCH}" >/dev/null
ctr="$(buildah from --pull=never --quiet localhost/storage-test)"
[[ "$(buildah run --isolation chroot "${ctr}" -- cat /marker)" == built-here ]] || fail "the built image does not run"
pass "$(storage_driver) store chosen on ${fstype}; a RUN step builds and runs in it"

# An interrupted test leaves a container mounted; clean-cache still removes
# the store, and keeps the rest of the cache.
root="$(buildah mount "${ctr}")"
[[ -e "${root}/marker" ]] || fail "mount"
mkdir -p "${cache}/rootfs" && touch "${cache}/rootfs/keep.tar"
MEMPROFILE_CACHE="${cache}" "${E2E_ROOT}/scripts/clean-cache.sh" > "${SCRATCH}/clean" || fail "clean-cache failed"
[[ ! -e "${cache}/containers" ]] || fail "the container store is still there"
[[ -e "${cache}/rootfs/keep.tar" ]] || fail "clean-cache removed more than the stores"
! grep -q " ${cache}/" /proc/self/mounts || fail "mounts left under the cache: $(grep " ${cache}/" /proc/self/mounts)"
MEMPROFILE_CACHE="${cache}" "${E2E_ROOT}/scripts/clean-cache.sh" --all > "${SCRATCH}/clean-all" || fail "clean-cache --all"
[[ ! -e "${cache}" ]] || fail "--all left the cache"
rc=0
"${E2E_ROOT}/scripts/clean-cache.sh" --everything 2> "${SCRATCH}/clean-bad" || rc=$?
[[ "${rc}" == 2 ]] || fail "an unknown option was not refused"
pass "clean-cache removes a store with a mounted container, and only what it says"
