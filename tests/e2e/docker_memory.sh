#!/usr/bin/env bash
# Where the memory goes, in a profilable image run by a real Docker engine:
# the memory-accounting fixture made profilable with jemalloc
# (CONTAINER_ENGINE=docker), one container per cause of growth (its own
# cgroup and pid namespace), status and snapshot by `docker exec` as
# kubectl exec would run them, report on the records (lib.sh
# memory_causes: the causes and tolerances).
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
