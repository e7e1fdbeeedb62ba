#!/usr/bin/env bash
# Where the memory goes, in a profilable image run by a real Docker engine:
# the memory-accounting fixture made profilable with jemalloc
# (CONTAINER_ENGINE=docker), one container per cause of growth (its own
# cgroup and pid namespace), status and snapshot by `docker exec` as
# kubectl exec would run them, report on the records (lib.sh
# memory_causes: the causes and tolerances). Then the control library
# alone in the same image, chosen from the pod spec (MEMPROFILE_BACKEND=none):
# its start line, two snapshots, status, and report on its records without
# an image.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/docker_lib.sh
source "$(dirname "$0")/docker_lib.sh"

seed_dist jemalloc amd64
example_app amd64 membuckets "${E2E_ROOT}/tests/fixtures/src"
image=localhost/membuckets:amd64-memprofile
drop_at_exit "${image}"
mk image-memprofile APP_IMAGE=localhost/membuckets:amd64 BACKEND=jemalloc > "${SCRATCH}/build.log" 2>&1 ||
  { cat "${SCRATCH}/build.log" >&2; fail "make image-memprofile (membuckets, docker)"; }
CTR=""
causes_start() {
  CTR="$(docker run -d -v "$2:/var/memprofile" "${image}" "$1" /var/memprofile/go /var/memprofile/ready)"
  at_exit "docker rm --force ${CTR} >/dev/null 2>&1"
}
# The container has a pid namespace of its own (the service is its PID 1),
# and the engine another.
causes_proc_status() { docker exec "${CTR}" cat /proc/1/status; }
causes_own_cgroup() { :; }  # the container's
causes_stop() { docker rm --force "${CTR}" > /dev/null 2>&1 || true; }
# The container's own cgroup, quiet: its charge as the files say (v2, or
# v1's memory controller), for status's to agree with.
causes_cgroup_current() {
  docker exec "${CTR}" sh -c 'cat /sys/fs/cgroup/memory.current 2>/dev/null || cat /sys/fs/cgroup/memory/memory.usage_in_bytes'
}
causes_ctl() {
  shift
  docker exec "${CTR}" /usr/bin/memprofile "$@"
}
memory_causes docker --image "${SCRATCH}/image/image.tar"
((CAUSES_CGROUP_CHECKED == 5)) || fail "the container's cgroup was compared for ${CAUSES_CGROUP_CHECKED} of 5 causes"
pass "docker: heap, fragmentation, mmap, thread stacks and tmpfs each in its own bucket, within tolerance; status by docker exec agrees with /proc (RSS, 2 MiB) and the container's cgroup files (8 MiB)"

# The control library alone in the same image (MEMPROFILE_BACKEND=none):
# every profilable image carries it.
dir="${SCRATCH}/none"
mkdir -p "${dir}"
chmod 1777 "${dir}"
CTR="$(docker run -d -e MEMPROFILE_BACKEND=none -v "${dir}:/var/memprofile" "${image}" mmap /var/memprofile/go /var/memprofile/ready)"
at_exit "docker rm --force ${CTR} >/dev/null 2>&1"
wait_until 60 test -S "${dir}/memprofile-ctl.1.sock" || fail "none: no control socket: $(docker logs "${CTR}" 2>&1)"
none_line() { [[ "$(docker logs "${CTR}" 2>&1)" == *"watching the memory of /usr/local/bin/app with the control library alone"* ]]; }
wait_until 60 none_line || fail "none: start line: $(docker logs "${CTR}" 2>&1)"
docker exec "${CTR}" /usr/bin/memprofile snapshot > /dev/null || fail "none: the first snapshot"
touch "${dir}/go"
wait_until 120 test -e "${dir}/ready" || fail "none: the memory did not grow"
docker exec "${CTR}" /usr/bin/memprofile snapshot > /dev/null || fail "none: the second snapshot"
docker exec "${CTR}" /usr/bin/memprofile status > "${dir}.status" 2> /dev/null || fail "none: status"
grep -q "^pid 1: no heap profiler (--backend none): its memory only$" "${dir}.status" || fail "none: status: $(cat "${dir}.status")"
docker rm --force "${CTR}" > /dev/null 2>&1
"${MEMPROFILE}" report "${dir}" > "${dir}.report" || fail "none: report"
grep -q "^  where it grew: the heap is flat (.*); RSS grew by .* outside the allocator" "${dir}.report" ||
  fail "none: report: $(cat "${dir}.report")"
pass "MEMPROFILE_BACKEND=none in the same image under docker: the control library alone, its records, report without an image"
