#!/usr/bin/env bash
# A service is a tree of processes: a prefork server (tests/fixtures/src/
# prefork.c) under memprofile exec, driven from outside by its parent's pid
# alone, as a user would. With jemalloc every forked worker records and
# serves its own socket: status lists them, snapshot reaches them, report
# finds the leak in the workers (and --merge sums them); workers that end
# with _exit leave their growth through --snapshot-every; a killed worker's
# socket is cleared; short-lived children leak no fd and leave no socket.
# With heaptrack, workers are not recorded, status says so, and workers that
# exit() never hang. What a command cannot reach it says: a grandchild under
# a child that exec'd another program, a stopped worker (exit 2).
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

# 3. A fork-heavy service: 300 short-lived children leak no fd in the parent
# and leave no socket or record behind.
fds_after_children() {  # SHORT: the parent's open fds once its children ran, into fb-SHORT.fds
  # Not in a "$(...)": a failure there would leave the service running.
  local o="${SCRATCH}/fb-$1"
  start_service "${o}" "${SCRATCH}/fb-$1.log" --backend jemalloc --preload "${JEMALLOC}" -- \
    "${SCRATCH}/prefork" 1 1 4 wait "$1"
  local p="${SERVICE_PID}"
  # The parent waits in wait() once the short children are done (it says
  # so: the socket count alone may pass while a short child's socket is
  # still there, and its TERM below would then kill a short child).
  if (($1 > 0)); then
    wait_until 120 grep -q "^prefork: $1 short children done$" "${SCRATCH}/fb-$1.log" ||
      fail "the $1 short children did not end: $(tail -3 "${SCRATCH}/fb-$1.log")"
  fi
  wait_until 120 sockets_are "${o}" 2 || fail "sockets after $1 children: $(find "${o}" | head)"
  find "/proc/${p}/fd" -mindepth 1 -maxdepth 1 | wc -l > "${o}.fds"
  # Every child: a short one the parent has not reaped yet is listed too.
  local kids
  mapfile -t kids < <(workers_of "${p}")
  kill -TERM "${kids[@]}" 2> /dev/null || true
  wait "${p}" || fail "exit code after $1 children"
}
fds_after_children 0
fds_after_children 300
base_fds="$(cat "${SCRATCH}/fb-0.fds")"
many_fds="$(cat "${SCRATCH}/fb-300.fds")"
[[ "${many_fds}" == "${base_fds}" ]] || fail "the parent holds ${many_fds} fds after 300 children, ${base_fds} after none"
(( $(find "${SCRATCH}/fb-300" -name 'memprofile-proc.*.json' | wc -l) <= 2 )) ||
  fail "records of short-lived children stayed: $(find "${SCRATCH}/fb-300" -name 'memprofile-proc.*' | wc -l)"
pass "300 short-lived children: the parent's fds unchanged (${base_fds}), no socket or record left"

# 4. heaptrack records the parent only; its workers that exit() never hang.
out4="${SCRATCH}/out4"
start_service "${out4}" "${SCRATCH}/ht.log" --backend heaptrack --preload "${HEAPTRACK}" -- \
  "${SCRATCH}/prefork" 2 600 64 wait
grep -q "forked children are not recorded: heaptrack does not record" "${SCRATCH}/ht.log" ||
  fail "the start line does not say heaptrack leaves children out: $(cat "${SCRATCH}/ht.log")"
workers_are() { [[ "$(workers_of "$1" | wc -l)" -eq "$2" ]]; }
wait_until 60 workers_are "${SERVICE_PID}" 2 || fail "no heaptrack workers"
"${MEMPROFILE}" status "${SERVICE_PID}" --output-dir "${out4}" > "${SCRATCH}/ht.status" 2> "${SCRATCH}/ht.err" ||
  fail "status: $(cat "${SCRATCH}/ht.err")"
[[ "$(grep -c "not profiled: a forked child; heaptrack does not record a child forked without exec" "${SCRATCH}/ht.err")" == 2 ]] ||
  fail "status is silent about the unrecorded workers: $(cat "${SCRATCH}/ht.err")"
mapfile -t ht_workers < <(workers_of "${SERVICE_PID}")
kill -TERM "${ht_workers[@]}"
wait "${SERVICE_PID}" || true
pass "heaptrack: status names each unrecorded worker in one line"
hangs=0
for i in $(seq 1 20); do
  rc=0
  mkdir -p "${SCRATCH}/ht-${i}"
  timeout -s KILL 120 "${LAUNCHER}" exec --output-dir "${SCRATCH}/ht-${i}" --min-free-mb 1 --backend heaptrack \
    --preload "${HEAPTRACK}" -- "${SCRATCH}/prefork" 3 3 64 exit > "${SCRATCH}/ht-${i}.log" 2>&1 || rc=$?
  ((rc != 137)) || hangs=$((hangs + 1))
  ((rc == 0 || rc == 137)) || fail "run ${i}: exit ${rc}: $(cat "${SCRATCH}/ht-${i}.log")"
done
((hangs == 0)) || fail "${hangs} of 20 heaptrack runs with exit()ing workers hung"
pass "heaptrack: 20 runs of 3 workers that exit(): none hung, every exit code 0"

# 5. What a tree command could not reach, it says: a grandchild under a
# child that exec'd another program (no profiler reaches it) is counted in
# the tree and its memory, and a served worker that does not answer (stopped)
# makes the command exit 2, as for one process, with the worker named.
out5="${SCRATCH}/out5"
start_service "${out5}" "${SCRATCH}/tree5.log" --backend none -- \
  bash -c '( sleep 600 & wait ) & sh -c "sleep 601 & wait" & wait'
root5="${SERVICE_PID}"
wait_until 60 sockets_are "${out5}" 2 || fail "not 2 sockets: $(ls "${out5}")"
children_are() { [[ "$(pgrep -P "$1" | wc -l)" -eq "$2" ]]; }
wait_until 60 children_are "${root5}" 2 || fail "not 2 children: $(pgrep -P "${root5}")"
sub="$(pgrep -P "${root5}" -x bash)" || fail "no subshell under ${root5}"
sh5="$(pgrep -P "${root5}" -x sh)" || fail "no sh under ${root5}"
track "${sub}"
track "${sh5}"
wait_until 60 children_are "${sh5}" 1 || fail "sh has no sleep"
grandchild="$(pgrep -P "${sh5}")"
ctl5() { "${MEMPROFILE}" "$@" --output-dir "${out5}"; }
ctl5 status "${root5}" > "${SCRATCH}/tree5.status" 2> "${SCRATCH}/tree5.err" || fail "status: $(cat "${SCRATCH}/tree5.err")"
grep -q "^tree of pid ${root5}: 5 processes, 2 served, 3 not reached (said above); RSS" "${SCRATCH}/tree5.status" ||
  fail "status does not count the whole tree: $(tail -2 "${SCRATCH}/tree5.status")"
grep -q "^memprofile: status: 1 more process of the tree, under processes that are not profiled .*: pid ${grandchild}$" \
  "${SCRATCH}/tree5.err" || fail "status is silent about the grandchild ${grandchild}: $(cat "${SCRATCH}/tree5.err")"
ctl5 status "${root5}" --json 2> /dev/null > "${SCRATCH}/tree5.json" || fail "status --json"
[[ "$(jq -c --argjson g "${grandchild}" '.tree | {processes, served, beyond: (.beyond == [$g]), counted: (.rss_beyond > 0 and .rss > .rss_profiled + .rss_beyond - 1)}' \
  "${SCRATCH}/tree5.json")" == '{"processes":5,"served":2,"beyond":true,"counted":true}' ]] ||
  fail "status --json: $(jq -c .tree "${SCRATCH}/tree5.json")"
pass "status: a grandchild under an exec'd child is counted in the tree and its RSS, and named in one line"

kill -STOP "${sub}"
rc=0
ctl5 snapshot "${root5}" --timeout 2 > "${SCRATCH}/stopped.out" 2> "${SCRATCH}/stopped.err" || rc=$?
kill -CONT "${sub}"
((rc == 2)) || fail "snapshot with a stopped worker: exit ${rc}, not 2: $(cat "${SCRATCH}/stopped.err")"
grep -q "^memprofile: snapshot: pid ${sub} (bash): .*no answer within 2 s" "${SCRATCH}/stopped.err" ||
  fail "the stopped worker is not named: $(cat "${SCRATCH}/stopped.err")"
[[ "$(wc -l < "${SCRATCH}/stopped.out")" == 1 ]] || fail "the root's snapshot: $(cat "${SCRATCH}/stopped.out")"
ctl5 snapshot "${root5}" > /dev/null 2>&1 || fail "snapshot once the worker runs again"
pass "snapshot: a stopped worker is named and the command exits 2; once it runs, 0"
