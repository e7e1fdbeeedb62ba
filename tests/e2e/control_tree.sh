#!/usr/bin/env bash
# A service is a tree of processes: a prefork server (tests/fixtures/src/
# prefork.c) under memprofile exec, driven from outside by its parent's pid
# alone, as a user would. preflight says what each backend does with a
# forked child. With jemalloc every forked worker records and serves its own
# socket: status lists them, snapshot reaches them, report finds the leak in
# the workers (and --merge sums them); a killed worker's socket is cleared;
# workers that end with _exit leave their growth through --snapshot-every.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

gcc -O1 -g -o "${SCRATCH}/prefork" "${E2E_ROOT}/tests/fixtures/src/prefork.c"
JEMALLOC="$(preload_dist jemalloc amd64)/libjemalloc.so.2"
HEAPTRACK="$(preload_dist heaptrack amd64)/libheaptrack_preload.so"

# 0. preflight says before anything runs what each backend does with a
# forked child.
"${MEMPROFILE}" preflight --json --rootfs / --entrypoint '["/bin/sleep"]' --preload "${JEMALLOC}" |
  jq -e '.preload.forked_children | startswith("recorded")' > /dev/null || fail "preflight: jemalloc's children"
"${MEMPROFILE}" preflight --rootfs / --entrypoint '["/bin/sleep"]' --preload "${HEAPTRACK}" |
  grep -q "^forked children: not recorded: heaptrack does not record a child forked without exec" ||
  fail "preflight is silent about heaptrack's children"
pass "preflight: forked children recorded with jemalloc, and said not to be with heaptrack"

# 1. jemalloc, three workers that keep 256 KiB every 100 ms, then wait.
out="${SCRATCH}/out"
start_service "${out}" "${SCRATCH}/run.log" --backend jemalloc --preload "${JEMALLOC}" -- \
  "${SCRATCH}/prefork" 3 600 256 wait
parent="${SERVICE_PID}"
wait_until 60 sockets_are "${out}" 4 || fail "not 4 sockets: $(ls "${out}")"
grep -q "forked children are recorded too" "${SCRATCH}/run.log" || fail "the start line does not say what happens to children"
mapfile -t workers < <(workers_of "${parent}")
((${#workers[@]} == 3)) || fail "not 3 workers: ${workers[*]}"
ctl() { "${MEMPROFILE}" "$@" --output-dir "${out}"; }
ctl status "${parent}" --json > "${SCRATCH}/status.json" || fail "status: $(cat "${SCRATCH}/status.json")"
[[ "$(jq -c '.tree | {failed, processes, served, all: (.rss_profiled == .rss and .rss > 0)}' "${SCRATCH}/status.json")" == \
   '{"failed":0,"processes":4,"served":4,"all":true}' ]] ||
  fail "status of the tree: $(jq -c .tree "${SCRATCH}/status.json")"
for w in "${workers[@]}"; do
  [[ "$(jq -r --argjson w "${w}" '.processes[] | select(.pid == $w) | "\(.parent) \(.recording)"' "${SCRATCH}/status.json")" == \
    "${parent} true" ]] || fail "worker ${w} in status: $(jq -c .processes "${SCRATCH}/status.json")"
done
ctl status "${parent}" > "${SCRATCH}/status.txt"
grep -q "^tree of pid ${parent}: 4 processes, 4 served; RSS [0-9.]* MiB, 100 % of it in the profiled processes$" "${SCRATCH}/status.txt" || fail "status text: $(cat "${SCRATCH}/status.txt")"
pass "status PARENT lists the parent and its 3 forked workers, each recording, with its parent"

ctl snapshot "${parent}" > "${SCRATCH}/snap1" || fail "snapshot: $(cat "${SCRATCH}/snap1")"
sleep 1
ctl snapshot "${parent}" > "${SCRATCH}/snap2" || fail "second snapshot"
for w in "${parent}" "${workers[@]}"; do
  [[ "$(grep -c "/jeprof\.${w}\.[0-9]*\.m[0-9]*\.heap$" "${SCRATCH}/snap1" "${SCRATCH}/snap2" | awk -F: '{ s += $2 } END { print s }')" == 2 ]] ||
    fail "pid ${w}: not one snapshot each time: $(cat "${SCRATCH}/snap1" "${SCRATCH}/snap2")"
done
[[ "$(ctl snapshot "${workers[0]}" --only | wc -l)" == 1 ]] || fail "snapshot --only is not one process"
"${MEMPROFILE}" attached "${workers[1]}" --output-dir "${out}" --json > "${SCRATCH}/attached.json" || true
[[ "$(jq -r --argjson w "${workers[1]}" '[.profiles[].path | test("jeprof\\.\($w)\\.")] | all' "${SCRATCH}/attached.json")" == true &&
   "$(jq '.profiles | length' "${SCRATCH}/attached.json")" -ge 2 ]] ||
  fail "attached WORKER lists files not its own: $(jq -c .profiles "${SCRATCH}/attached.json")"
pass "snapshot PARENT writes one dump in each of the 4 processes; --only one; attached WORKER lists its own files"

kill -KILL "${workers[2]}"
wait_until 30 test ! -e "${out}/memprofile-ctl.${workers[2]}.sock" || fail "the killed worker's socket stayed"
ctl status "${parent}" --json | jq -e '.tree.served == 3' > /dev/null || fail "status after the kill"
pass "a killed worker's socket is cleared, and status lists the 3 that remain"

"${MEMPROFILE}" report --rootfs / "${out}" > "${SCRATCH}/report.txt" || fail "report: $(cat "${SCRATCH}/report.txt")"
grep -q "^Processes (4)" "${SCRATCH}/report.txt" || fail "no table of 4 processes: $(head -8 "${SCRATCH}/report.txt")"
grep -q "^== pid ${workers[0]} (${SCRATCH}/prefork, forked from ${parent})" "${SCRATCH}/report.txt" ||
  fail "the first worker is not analysed: $(head -12 "${SCRATCH}/report.txt")"
grep -q "worker_grow (src/prefork.c:[0-9]*)  LEAK SUSPECT" "${SCRATCH}/report.txt" ||
  fail "the workers' leak is not named: $(cat "${SCRATCH}/report.txt")"
if grep -q "^== pid ${parent} " "${SCRATCH}/report.txt"; then fail "the parent, which did not grow, is analysed"; fi
"${MEMPROFILE}" report --rootfs / --merge --json "${out}" > "${SCRATCH}/merge.json" || fail "report --merge"
merged="$(jq '[.growth[] | select(.site.function == "worker_grow")][0].growth' "${SCRATCH}/merge.json")"
alone="$("${MEMPROFILE}" report --rootfs / --json --pid "${workers[0]}" "${out}" |
  jq '[.growth[] | select(.site.function == "worker_grow")][0].growth')"
awk -v m="${merged}" -v a="${alone}" 'BEGIN { exit !(m > 1.5 * a) }' ||
  fail "--merge does not sum the workers: ${merged} merged against ${alone} for one"
pass "report: a table of 4 processes, the workers analysed (worker_grow, leak suspect), --merge sums them"
for w in "${workers[@]::2}"; do kill -TERM "${w}"; done
wait "${parent}" || fail "the parent's exit code changed: $?"
wait_until 10 sockets_are "${out}" 0 || fail "sockets left after the tree ended: $(ls "${out}")"
pass "the parent ends with its own exit code, and no socket stays"

# 2. Workers that _exit (no exit dump): --snapshot-every shows their growth.
out2="${SCRATCH}/out2"
mkdir -p "${out2}"
"${LAUNCHER}" exec --output-dir "${out2}" --min-free-mb 1 --backend jemalloc --preload "${JEMALLOC}" \
  --snapshot-every 1s -- "${SCRATCH}/prefork" 2 40 256 _exit > "${SCRATCH}/run2.log" 2>&1 || fail "exit code: $(cat "${SCRATCH}/run2.log")"
grep -q "a snapshot every 1 s while recording" "${SCRATCH}/run2.log" || fail "the schedule is not said"
"${MEMPROFILE}" report --rootfs / --json "${out2}" > "${SCRATCH}/report2.json" || fail "report of the _exit workers"
[[ "$(jq -r '.growth[0].site.function' "${SCRATCH}/report2.json")" == worker_grow &&
   "$(jq -r '.growth[0].leak_suspect' "${SCRATCH}/report2.json")" == true ]] ||
  fail "no growth seen in _exit workers: $(jq -c '.processes, .growth[0].site' "${SCRATCH}/report2.json")"
[[ "$(jq '[.processes[] | select(.parent > 0)] | length' "${SCRATCH}/report2.json")" == 2 ]] ||
  fail "the workers' records: $(jq -c .processes "${SCRATCH}/report2.json")"
pass "--snapshot-every: workers that _exit leave snapshots on the schedule; report names worker_grow"
