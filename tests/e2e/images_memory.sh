#!/usr/bin/env bash
# Where the memory goes, in a profilable image run by buildah: the
# memory-accounting fixture (tests/fixtures/membuckets) made profilable with
# jemalloc, one container per cause of growth, status and snapshot from a
# second process in the same container as kubectl exec would run them, and
# report on the records (lib.sh memory_causes: the causes and tolerances).
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/images_lib.sh
source "$(dirname "$0")/images_lib.sh"

seed_dist jemalloc amd64
example_app amd64 membuckets "${E2E_ROOT}/tests/fixtures/membuckets"
image=localhost/membuckets:amd64-memprofile
drop_at_exit "${image}"
mk image-memprofile APP_IMAGE=localhost/membuckets:amd64 BACKEND=jemalloc > "${SCRATCH}/build.log" 2>&1 ||
  { cat "${SCRATCH}/build.log" >&2; fail "make image-memprofile (membuckets)"; }
ctr="$(buildah from --pull=never --quiet "${image}")"
MOUNTED+=("${ctr}")
causes_start() {
  buildah run --isolation chroot -v "$2:/var/memprofile" "${ctr}" -- \
    /usr/bin/memprofile exec --from-config -- "$1" /var/memprofile/go /var/memprofile/ready > "$2.log" 2>&1 &
}
causes_ctl() {
  local dir="$1"
  shift
  buildah run --isolation chroot -v "${dir}:/var/memprofile" "${ctr}" -- /usr/bin/memprofile "$@" 2> /dev/null
}
memory_causes buildah --image "${SCRATCH}/image/image.tar"
pass "buildah: heap, fragmentation, mmap, thread stacks and tmpfs each in its own bucket, within tolerance; status in the container agrees with /proc"
