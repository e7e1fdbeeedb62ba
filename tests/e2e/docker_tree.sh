#!/usr/bin/env bash
# A process tree in a profilable image run by a real Docker engine: the
# prefork fixture made profilable with jemalloc (CONTAINER_ENGINE=docker);
# the parent is the container's PID 1, so `docker exec CONTAINER memprofile
# status|snapshot` with no PID (what kubectl exec runs) reach the whole
# container: every worker listed and snapshotted, and `attached WORKER`
# lists that worker's own files; report analyses the workers that grew, and
# --merge sums the program's processes. The container's exit code is the
# service's.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/docker_lib.sh
source "$(dirname "$0")/docker_lib.sh"

seed_dist jemalloc amd64
example_app amd64 prefork "${E2E_ROOT}/tests/fixtures/src"
image=localhost/prefork:amd64-memprofile
drop_at_exit "${image}"
mk image-memprofile APP_IMAGE=localhost/prefork:amd64 BACKEND=jemalloc > "${SCRATCH}/build.log" 2>&1 ||
  { cat "${SCRATCH}/build.log" >&2; fail "make image-memprofile (prefork, docker)"; }
out="${SCRATCH}/out"
mkdir -p "${out}"
chmod 1777 "${out}"
ctr="$(docker run -d -v "${out}:/var/memprofile" "${image}" 3 600 256 wait)"
at_exit "docker rm --force ${ctr} >/dev/null 2>&1"
wait_sockets "${out}" 4
in_pod() { docker exec "${ctr}" /usr/bin/memprofile "$@"; }
in_pod status --json > "${SCRATCH}/status.json" || fail "status: $(cat "${SCRATCH}/status.json")"
[[ "$(jq -c '.tree | {failed, processes, served}' "${SCRATCH}/status.json")" == '{"failed":0,"processes":4,"served":4}' ]] ||
  fail "status of the container: $(jq -c '.tree, [.processes[] | {pid, parent, served}]' "${SCRATCH}/status.json")"
[[ "$(jq '[.processes[] | select(.parent == 1 and .recording)] | length' "${SCRATCH}/status.json")" == 3 ]] ||
  fail "the workers of PID 1: $(jq -c '[.processes[] | {pid, parent, recording}]' "${SCRATCH}/status.json")"
in_pod snapshot > "${SCRATCH}/snap1" || fail "the first snapshot"
sleep 3
in_pod snapshot > "${SCRATCH}/snap2" || fail "the second snapshot"
(($(wc -l < "${SCRATCH}/snap2") == 4)) || fail "the container's snapshot: $(cat "${SCRATCH}/snap2")"
mapfile -t workers < <(jq -r '.processes[] | select(.parent == 1) | .pid' "${SCRATCH}/status.json")
in_pod attached "${workers[0]}" --json > "${SCRATCH}/attached.json" 2> /dev/null || true
[[ "$(jq -r --argjson w "${workers[0]}" '[.profiles[].path | test("jeprof\\.\($w)\\.")] | all' "${SCRATCH}/attached.json")" == true &&
   "$(jq '.profiles | length' "${SCRATCH}/attached.json")" -ge 2 ]] ||
  fail "attached ${workers[0]}: $(jq -c .profiles "${SCRATCH}/attached.json")"
# The workers end as asked (TERM), then the parent with its own exit code, 0.
docker exec "${ctr}" sh -c 'kill -TERM $(cat /proc/1/task/1/children)' || fail "the workers could not be stopped"
[[ "$(timeout 60 docker wait "${ctr}")" == 0 ]] || fail "the container's exit code: $(docker logs "${ctr}" 2>&1 | tail -3)"
"${MEMPROFILE}" report --image "${SCRATCH}/image/image.tar" --json "${out}" > "${SCRATCH}/report.json" || fail "report"
grown="$(jq '[.processes[] | select(.parent == 1 and .growth > 262144)] | length' "${SCRATCH}/report.json")"
((grown == 3)) || fail "${grown} workers grew: $(jq -c '[.processes[] | {pid, parent, growth}]' "${SCRATCH}/report.json")"
[[ " ${workers[*]} " == *" $(jq -r .pid "${SCRATCH}/report.json") "* ]] || fail "the first view is not a worker's"
[[ "$(jq -r '.growth[0].site.function' "${SCRATCH}/report.json")" == worker_grow ]] ||
  fail "the growth is not worker_grow: $(jq -c '.growth[0].site' "${SCRATCH}/report.json")"
"${MEMPROFILE}" report --image "${SCRATCH}/image/image.tar" --json --merge "${out}" > "${SCRATCH}/merged.json" ||
  fail "report --merge"
[[ "$(jq -r .view "${SCRATCH}/merged.json")" == "/usr/local/bin/app: 4 processes merged" ]] ||
  fail "--merge: $(jq -c '{view, pids}' "${SCRATCH}/merged.json")"
pass "docker: PID 1 and its 3 workers served, listed and snapshotted by docker exec with no PID; attached WORKER lists its own files; report analyses the 3 workers (worker_grow), --merge sums them; exit code 0"
