#!/usr/bin/env bash
# Where the memory goes, in a profilable image run by buildah: the
# memory-accounting fixture (tests/fixtures/src/membuckets.c) made profilable with
# jemalloc, one container per cause of growth, status and snapshot from a
# second process in the same container as kubectl exec would run them, and
# report on the records (lib.sh memory_causes: the causes and tolerances).
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/images_lib.sh
source "$(dirname "$0")/images_lib.sh"

seed_dist jemalloc amd64
example_app amd64 membuckets "${E2E_ROOT}/tests/fixtures/src"
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
pass "buildah: $(causes_said); status in the container agrees with /proc"

# The control library alone in the same image, chosen from the pod spec
# (MEMPROFILE_BACKEND=none): every profilable image carries it.
dir="${SCRATCH}/none"
mkdir -p "${dir}"
chmod 1777 "${dir}"
buildah run --isolation chroot --env MEMPROFILE_BACKEND=none -v "${dir}:/var/memprofile" "${ctr}" -- \
  /usr/bin/memprofile exec --from-config -- mmap /var/memprofile/go /var/memprofile/ready > "${dir}.log" 2>&1 &
for _ in $(seq 1 600); do
  [[ -n "$(find "${dir}" -maxdepth 1 -name 'memprofile-ctl.*.sock' -print -quit)" ]] && break
  sleep 0.1
done
log_says "${dir}.log" "watching the memory of /usr/local/bin/app with the control library alone" ||
  fail "none: start line: $(cat "${dir}.log")"
causes_ctl "${dir}" snapshot > /dev/null || fail "none: the first snapshot"
touch "${dir}/go"
wait_ready() { test -e "${dir}/ready"; }
for _ in $(seq 1 1200); do wait_ready && break; sleep 0.1; done
wait_ready || fail "none: the memory did not grow"
causes_ctl "${dir}" snapshot > /dev/null || fail "none: the second snapshot"
causes_ctl "${dir}" status > "${dir}.status" || fail "none: status"
grep -q "^pid [0-9]*: no heap profiler (--backend none): its memory only$" "${dir}.status" || fail "none: status: $(cat "${dir}.status")"
sock="$(find "${dir}" -maxdepth 1 -name 'memprofile-ctl.*.sock' -print -quit)"
sock="${sock##*memprofile-ctl.}"
kill -KILL "${sock%.sock}"
"${MEMPROFILE}" report "${dir}" > "${dir}.report" || fail "none: report"
grep -q "^  where it grew: the heap is flat (.*); RSS grew by .* outside the allocator" "${dir}.report" ||
  fail "none: report: $(cat "${dir}.report")"
pass "MEMPROFILE_BACKEND=none in the same image: the control library alone, its records, report without an image"
