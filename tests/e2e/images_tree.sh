#!/usr/bin/env bash
# A process tree in a profilable image run by buildah: the prefork fixture
# (tests/fixtures/src/prefork.c: a parent and three workers that keep 256
# KiB every 100 ms) made profilable with jemalloc; status and snapshot of
# the parent from a second process in the container, as kubectl exec would
# run them, reach every worker; report analyses the workers that grew and
# --merge sums the program's processes.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/images_lib.sh
source "$(dirname "$0")/images_lib.sh"

seed_dist jemalloc amd64
example_app amd64 prefork "${E2E_ROOT}/tests/fixtures/src"
image=localhost/prefork:amd64-memprofile
drop_at_exit "${image}"
mk image-memprofile APP_IMAGE=localhost/prefork:amd64 BACKEND=jemalloc > "${SCRATCH}/build.log" 2>&1 ||
  { cat "${SCRATCH}/build.log" >&2; fail "make image-memprofile (prefork)"; }
out="${SCRATCH}/out"
mkdir -p "${out}"
chmod 1777 "${out}"
ctr="$(buildah from --pull=never --quiet "${image}")"
MOUNTED+=("${ctr}")
buildah run --isolation chroot -v "${out}:/var/memprofile" "${ctr}" -- \
  /usr/bin/memprofile exec --from-config -- 3 600 256 wait > "${SCRATCH}/service.log" 2>&1 &
service=$!
wait_sockets "${out}" 4 "${service}" "${SCRATCH}/service.log"
# The parent: the one process whose record names no parent.
parent="$(jq -r 'select(.parent == 0) | .pid' "${out}"/memprofile-proc.*.json)"
[[ "${parent}" =~ ^[0-9]+$ ]] || fail "no parent among the records: $(cat "${out}"/memprofile-proc.*.json)"
in_pod() { buildah run --isolation chroot -v "${out}:/var/memprofile" "${ctr}" -- /usr/bin/memprofile "$@"; }
in_pod status "${parent}" --json > "${SCRATCH}/status.json" 2> /dev/null || fail "status: $(cat "${SCRATCH}/status.json")"
[[ "$(jq -c '.tree | {failed, processes, served}' "${SCRATCH}/status.json")" == '{"failed":0,"processes":4,"served":4}' ]] ||
  fail "status of the tree: $(jq -c '.tree, [.processes[] | {pid, parent, served}]' "${SCRATCH}/status.json")"
[[ "$(jq --argjson p "${parent}" '[.processes[] | select(.parent == $p and .recording)] | length' "${SCRATCH}/status.json")" == 3 ]] ||
  fail "the workers in status: $(jq -c '[.processes[] | {pid, parent, recording}]' "${SCRATCH}/status.json")"
in_pod snapshot "${parent}" > "${SCRATCH}/snap1" 2> /dev/null || fail "the first snapshot"
sleep 3
in_pod snapshot "${parent}" > "${SCRATCH}/snap2" 2> /dev/null || fail "the second snapshot"
(($(wc -l < "${SCRATCH}/snap2") == 4)) || fail "the tree's snapshot: $(cat "${SCRATCH}/snap2")"
mapfile -t workers < <(jq -r --argjson p "${parent}" '.processes[] | select(.parent == $p) | .pid' "${SCRATCH}/status.json")
in_pod attached "${workers[0]}" --json > "${SCRATCH}/attached.json" 2> /dev/null || true
[[ "$(jq -r --argjson w "${workers[0]}" '[.profiles[].path | test("jeprof\\.\($w)\\.")] | all' "${SCRATCH}/attached.json")" == true &&
   "$(jq '.profiles | length' "${SCRATCH}/attached.json")" -ge 2 ]] ||
  fail "attached ${workers[0]}: $(jq -c .profiles "${SCRATCH}/attached.json")"
kill -KILL "${workers[@]}" "${parent}" 2> /dev/null || true
wait "${service}" 2> /dev/null || true
"${MEMPROFILE}" report --image "${SCRATCH}/image/image.tar" --json "${out}" > "${SCRATCH}/report.json" || fail "report"
grown="$(jq --argjson p "${parent}" '[.processes[] | select(.parent == $p and .growth > 262144)] | length' "${SCRATCH}/report.json")"
((grown == 3)) || fail "${grown} workers grew: $(jq -c '[.processes[] | {pid, parent, growth}]' "${SCRATCH}/report.json")"
[[ " ${workers[*]} " == *" $(jq -r .pid "${SCRATCH}/report.json") "* ]] || fail "the first view is not a worker's"
[[ "$(jq -r '.growth[0].site.function' "${SCRATCH}/report.json")" == worker_grow ]] ||
  fail "the growth is not worker_grow: $(jq -c '.growth[0].site' "${SCRATCH}/report.json")"
"${MEMPROFILE}" report --image "${SCRATCH}/image/image.tar" --json --merge "${out}" > "${SCRATCH}/merged.json" ||
  fail "report --merge"
[[ "$(jq -r .view "${SCRATCH}/merged.json")" == "/usr/local/bin/app: 4 processes merged" ]] ||
  fail "--merge: $(jq -c '{view, pids}' "${SCRATCH}/merged.json")"
pass "buildah: the parent and its 3 workers served and listed by status from another process; one snapshot reaches all 4; attached WORKER lists its own files; report analyses the 3 workers (worker_grow), --merge sums them"
