#!/usr/bin/env bash
# Dormant mode on docker: make image-memprofile CONTAINER_ENGINE=docker
# DORMANT=true; `docker run -d` starts the service with recording off, and
# `docker exec CONTAINER memprofile start|snapshot|stop` (what kubectl exec
# runs in a pod) drive PID 1 without a restart. The container's exit code is
# the service's, and report ranks the growth between the two snapshots to
# leaky_function.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/docker_lib.sh
source "$(dirname "$0")/docker_lib.sh"

seed_dist jemalloc amd64
example_app amd64
image=localhost/leaky:dormant
drop_at_exit "${image}"
mk image-memprofile APP_IMAGE=localhost/leaky:amd64 BACKEND=jemalloc DORMANT=true MEMPROFILE_IMAGE_TAG=dormant \
  > "${SCRATCH}/build.log" 2>&1 || { cat "${SCRATCH}/build.log" >&2; fail "make image-memprofile DORMANT=true (docker)"; }
root="$(image_root "${image}" "${SCRATCH}/root")"
grep -qx "dormant = 1" "${root}/etc/memprofile/exec.conf" || fail "exec.conf: $(cat "${root}/etc/memprofile/exec.conf")"
"${MEMPROFILE}" check "${root}/usr/lib/memprofile/libmemprofile_ctl.so" --json > "${SCRATCH}/ctl.json" || true
[[ "$(jq -r .arch "${SCRATCH}/ctl.json")" == x86_64 ]] ||
  fail "the control library in the image is not for amd64: $(cat "${SCRATCH}/ctl.json")"

out="${SCRATCH}/out"
mkdir -p "${out}"
chmod 1777 "${out}"
ctr="$(docker run -d -v "${out}:/var/memprofile" "${image}" 0 131072)"
at_exit "docker rm --force ${ctr} >/dev/null 2>&1"
for _ in $(seq 1 600); do
  [[ -S "${out}/memprofile-ctl.1.sock" ]] && break
  sleep 0.1
done
[[ -S "${out}/memprofile-ctl.1.sock" ]] || fail "no control socket for PID 1: $(docker logs "${ctr}" 2>&1)"
dormant_line() { [[ "$(docker logs "${ctr}" 2>&1)" == *"loaded dormant (recording off until memprofile start): /usr/local/bin/leaky"* ]]; }
wait_until 60 dormant_line || fail "not dormant: $(docker logs "${ctr}" 2>&1)"

in_pod() { docker exec "${ctr}" /usr/bin/memprofile "$@"; }
[[ "$(in_pod status | head -1)" == "pid 1: jemalloc, recording off" ]] || fail "status: $(in_pod status 2>&1)"
[[ "$(in_pod start)" == "pid 1: jemalloc, recording on" ]] || fail "start"
sleep 2
first="$(in_pod snapshot)" || fail "first snapshot"
sleep 3
second="$(in_pod snapshot)" || fail "second snapshot"
[[ "$(in_pod stop)" == "pid 1: jemalloc, recording off" ]] || fail "stop"
in_pod status --json > "${SCRATCH}/status.json"
[[ "$(jq '.snapshots | length' "${SCRATCH}/status.json")" == 2 ]] || fail "status: $(cat "${SCRATCH}/status.json")"
memory_seen "${SCRATCH}/status.json" "${out}/${second##*/}.mem.json" "docker exec"
[[ "$(docker inspect --format '{{.RestartCount}} {{.State.Running}}' "${ctr}")" == "0 true" ]] || fail "the container restarted or stopped"
pass "docker exec memprofile start, two snapshots, stop: PID 1 served without a restart"

docker stop --time 20 "${ctr}" > /dev/null
[[ "$(docker wait "${ctr}")" == 0 ]] || fail "the container's exit code changed: $(docker logs "${ctr}" 2>&1 | tail -3)"
[[ "$(docker logs "${ctr}" 2>&1)" == *"leaky: leaked"* ]] || fail "the service did not end cleanly"
"${MEMPROFILE}" report --image "${SCRATCH}/image/image.tar" --json "${out}/${first##*/}" "${out}/${second##*/}" \
  "${out}/${first##*/}.mem.json" "${out}/${second##*/}.mem.json" > "${SCRATCH}/growth.json" || fail "report"
[[ "$(jq -r '.growth[0].site.function' "${SCRATCH}/growth.json")" == leaky_function ]] ||
  fail "the growth is not leaky_function: $(jq -c '.growth[0]' "${SCRATCH}/growth.json")"
jq -e '.memory[0].verdict | startswith("the heap grew by")' "${SCRATCH}/growth.json" > /dev/null ||
  fail "the records beside the snapshots: $(jq -c .memory "${SCRATCH}/growth.json")"
pass "exit code 0 after docker stop; the growth between the snapshots is leaky_function; status in the container gave RSS, jemalloc's view, the profile's bytes and the cgroup, and the records say the heap grew"
