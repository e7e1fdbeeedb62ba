#!/usr/bin/env bash
# memprofile start|stop|snapshot|status for memray, served by memprofile's
# bootstrap from a thread of each tracked interpreter, in a Debian trixie
# root of the test's own (python3-memray 1.17, Python 3.13, gunicorn 23):
#   gunicorn started --dormant: the arbiter and both forked workers serve,
#     nothing records; `start`, from another process in the root (as
#     kubectl exec would be), starts a capture in all three without a
#     restart; requests then show up in each worker's capture at the
#     handler's line, and the requests before it in none; `stop` closes
#     them; a second `start` writes memray.PID.2.bin; `snapshot` marks the
#     moment in it (memray-marks.*), and report ends a span at each mark;
#     the processes not recording say so;
#   --snapshot-every: a process and its forked child each mark their own
#     capture on schedule; status counts them; collect carries the marks,
#     and the report of the archive ends its spans there as the directory's;
#   the disk budget: a process and its forked child that allocate without
#     end stop recording at --max-profile-mb, each says why (in status
#     too), both keep running, and a `start` makes a new capture, which
#     the budget stops again; a directory already past the budget: the
#     tracker does not start, and `start` is refused until room is made;
#   an app with its own memray tracker: `start` is refused in one line
#     with memray's reason, and leaves no capture behind.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

memray_root  # sets root: the trixie root with the launcher and the bootstrap in /opt/memprofile
leaky_wsgi_app  # /app/leaky.py; sets app_line
cat > "${root}/app/churn.py" <<'PY'
import os
import time

# Allocates and frees without end (every allocation is a record in memray's
# capture), in this process and in one forked child.
os.fork()
held = []
while True:
    held.append(bytearray(512))
    if len(held) > 2000:
        held.clear()
        time.sleep(0.001)
PY
ctl() { in_root /opt/memprofile/memprofile "$@"; }
# interpreter_of PID: the process memray_exec ... & started (PID is the
# shell's subshell): its child, which execs its way to the interpreter.
interpreter_of() {
  local p=""
  for _ in $(seq 1 600); do
    p="$(pgrep -P "$1" | head -1)"
    [[ -n "${p}" ]] && { echo "${p}"; return 0; }
    sleep 0.1
  done
  return 1
}

# 1. gunicorn, dormant.
port="$(free_port)"
out="${root}/out-dormant"
mkdir -p "${out}"
memray_exec --dormant --output-dir /out-dormant -- /usr/bin/gunicorn --chdir /app -w 2 --timeout 0 \
  -b "127.0.0.1:${port}" leaky:app > "${SCRATCH}/gunicorn.log" 2>&1 &
track $!
answers() { curl -fsS "http://127.0.0.1:${port}/" > /dev/null 2>&1; }
wait_until 120 answers || fail "gunicorn did not answer: $(tail -20 "${SCRATCH}/gunicorn.log")"
grep -q "loaded dormant (memray's tracker off until memprofile start): /usr/bin/python3 with memray" \
  "${SCRATCH}/gunicorn.log" || fail "dormant: no start line: $(head -5 "${SCRATCH}/gunicorn.log")"
arbiter="$(arbiter_of "/usr/bin/gunicorn --chdir /app .*-b 127\.0\.0\.1:${port} ")" || fail "gunicorn: no arbiter: $(pgrep -af gunicorn)"
track "${arbiter}"
two_workers() { (($(workers_of "${arbiter}" | wc -l) == 2)); }
wait_until 60 two_workers || fail "gunicorn: not 2 workers of ${arbiter}: $(workers_of "${arbiter}" | paste -sd' ')"
mapfile -t workers < <(workers_of "${arbiter}")
wait_until 60 sockets_are "${out}" 3 || fail "dormant: not 3 sockets: $(ls "${out}")"
for _ in $(seq 1 20); do answers || fail "gunicorn: a request failed"; done
ctl status "${arbiter}" --output-dir /out-dormant --json > "${SCRATCH}/status0.json" ||
  fail "dormant: status: $(cat "${SCRATCH}/status0.json")"
jq -e '.tree.served == 3 and ([.processes[] | select(.backend == "memray" and (.recording | not))] | length) == 3' \
  "${SCRATCH}/status0.json" > /dev/null || fail "dormant: status: $(jq -c '.processes' "${SCRATCH}/status0.json")"
[[ -z "$(cd "${out}" && find . -name 'memray.*')" ]] || fail "dormant: something was captured: $(ls "${out}")"
pass "dormant gunicorn: the arbiter and its 2 workers serve memprofile status, none records"

ctl start "${arbiter}" --output-dir /out-dormant > "${SCRATCH}/start.txt" 2>&1 || fail "start: $(cat "${SCRATCH}/start.txt")"
[[ "$(grep -c ': memray, recording on$' "${SCRATCH}/start.txt")" == 3 ]] || fail "start: $(cat "${SCRATCH}/start.txt")"
serve_each "${port}" 30 "${workers[@]}"
for p in "${arbiter}" "${workers[@]}"; do added_threads_block "${p}" "dormant gunicorn ${p} after start" > /dev/null; done
ctl status "${arbiter}" --output-dir /out-dormant > "${SCRATCH}/status1.txt" 2>&1 || fail "status: $(cat "${SCRATCH}/status1.txt")"
for p in "${arbiter}" "${workers[@]}"; do
  grep -q "^pid ${p}: memray, recording on" "${SCRATCH}/status1.txt" || fail "status after start: $(cat "${SCRATCH}/status1.txt")"
  grep -q "^  /out-dormant/memray.${p}.bin " "${SCRATCH}/status1.txt" || fail "status: no capture of ${p}: $(cat "${SCRATCH}/status1.txt")"
done
ctl stop "${arbiter}" --output-dir /out-dormant > "${SCRATCH}/stop.txt" 2>&1 || fail "stop: $(cat "${SCRATCH}/stop.txt")"
[[ "$(grep -c ': memray, recording off$' "${SCRATCH}/stop.txt")" == 3 ]] || fail "stop: $(cat "${SCRATCH}/stop.txt")"
total=0
for w in "${workers[@]}"; do
  "${MEMPROFILE}" report --rootfs "${root}" --json "${out}/memray.${w}.bin" > "${SCRATCH}/worker-${w}.json" ||
    fail "report of worker ${w}: $(cat "${SCRATCH}/worker-${w}.json")"
  [[ "$(top_site "${SCRATCH}/worker-${w}.json")" == "app (/app/leaky.py:${app_line}) "* ]] ||
    fail "worker ${w}'s top site: $(top_site "${SCRATCH}/worker-${w}.json")"
  total=$((total + $(jq '.in_use[0].bytes_in_use' "${SCRATCH}/worker-${w}.json")))
done
# The requests after start, not the 20 before it.
((total >= SERVED * 256 * 1024 && total < (SERVED + 20) * 256 * 1024)) ||
  fail "the workers' captures hold ${total} bytes at the handler, not the 256 KiB each of the ${SERVED} requests recorded"
pass "start on the arbiter's tree: 3 captures; the workers' name app (leaky.py:${app_line}) with ${total} bytes (the ${SERVED} requests after start alone); stop closed them"

ctl start "${workers[0]}" --only --output-dir /out-dormant > "${SCRATCH}/start2.txt" 2>&1 ||
  fail "second start: $(cat "${SCRATCH}/start2.txt")"
[[ -f "${out}/memray.${workers[0]}.2.bin" ]] || fail "second start: no memray.${workers[0]}.2.bin: $(ls "${out}")"
# snapshot: a mark in the capture being written; the two processes not
# recording say so on stderr (exit 1). The pause on each side is memray's
# clock: an allocation is dated by the RSS record before it, every 10 ms.
mark() {
  local rc=0
  sleep 0.5
  ctl snapshot "${arbiter}" --output-dir /out-dormant > "${SCRATCH}/snapshot$1.txt" 2> "${SCRATCH}/snapshot$1.err" || rc=$?
  sleep 0.5
  if ((rc != 1)) || [[ "$(grep -c 'not recording: memprofile start first' "${SCRATCH}/snapshot$1.err")" != 2 ]] ||
    ! grep -q "^/out-dormant/memray\.${workers[0]}\.2\.bin at [0-9.]* s (mark $1 in /out-dormant/memray-marks\.${workers[0]}\.2\.bin; memprofile report ends a span there)$" \
      "${SCRATCH}/snapshot$1.txt"; then
    fail "snapshot $1: exit ${rc}: $(cat "${SCRATCH}/snapshot$1.txt" "${SCRATCH}/snapshot$1.err")"
  fi
}
serve_each "${port}" 4 "${workers[0]}"  # worker 0 is the one recording
mark 1
serve_each "${port}" 6 "${workers[0]}"
mark 2
# status names the capture being written, the newest.
ctl status "${workers[0]}" --only --output-dir /out-dormant > "${SCRATCH}/status2.txt" 2>&1 ||
  fail "second status: $(cat "${SCRATCH}/status2.txt")"
grep -q "profile: memray writes one continuous file (/out-dormant/memray.${workers[0]}.2.bin)" "${SCRATCH}/status2.txt" ||
  fail "second status: not the newest capture: $(cat "${SCRATCH}/status2.txt")"
ctl stop "${workers[0]}" --only --output-dir /out-dormant > /dev/null 2>&1 || fail "second stop"
# The report ends a span at each mark: the handler's line holds the 4
# requests' 1 MiB at the first, the 10's 2.5 MiB at the second and at the end.
"${MEMPROFILE}" report --rootfs "${root}" --json "${out}/memray.${workers[0]}.2.bin" > "${SCRATCH}/marked.json" ||
  fail "report of the marked capture: $(cat "${SCRATCH}/marked.json")"
jq -e --argjson line "${app_line}" '
  [.snapshots[].trigger] == ["m", "m", ""] and
  (.in_use[0].site.line == $line) and
  ([.in_use[0].bytes_per_snapshot[] / 262144 | floor] == [4, 10, 10])' "${SCRATCH}/marked.json" > /dev/null ||
  fail "the marked capture's spans: $(jq -c '{snapshots, top: .in_use[0] | {site, bytes_per_snapshot}}' "${SCRATCH}/marked.json")"
"${MEMPROFILE}" report --rootfs "${root}" "${out}/memray.${workers[0]}.2.bin" > "${SCRATCH}/marked.txt" 2>&1 ||
  fail "report: $(cat "${SCRATCH}/marked.txt")"
grep -q "memray capture memray.${workers[0]}.2.bin (pid ${workers[0]}), 3 snapshots (2 at memprofile snapshot) over" \
  "${SCRATCH}/marked.txt" || fail "report: the marks are not said: $(head -3 "${SCRATCH}/marked.txt")"
# The report's table: the worker recorded twice is two rows, each naming its capture.
"${MEMPROFILE}" report --rootfs "${root}" "${out}" > "${SCRATCH}/report2.txt" 2>&1 || fail "report: $(cat "${SCRATCH}/report2.txt")"
for c in "memray.${workers[0]}.bin" "memray.${workers[0]}.2.bin"; do
  grep -qE "^ +${workers[0]} .*/usr/bin/python3\.[0-9]+  \(${c//./\\.}\)$" "${SCRATCH}/report2.txt" ||
    fail "report: no row for ${c}: $(head -8 "${SCRATCH}/report2.txt")"
done
pass "a second start writes memray.${workers[0]}.2.bin, which status names; two snapshots of the tree mark it (the 2 processes not recording say so, exit 1), and its report ends spans there: 4, 10, 10 requests' bytes at the handler; the report's table names each capture of the worker"

kill -TERM "${arbiter}"
wait_until 60 bash -c "! kill -0 ${arbiter} 2>/dev/null" || fail "gunicorn did not stop on SIGTERM"
wait_until 30 sockets_are "${out}" 0 || fail "sockets left after the service ended: $(ls "${out}")"
pass "gunicorn ended: its 3 sockets are gone"

# 1b. --snapshot-every: each process marks its own capture on schedule.
out="${root}/out-every"
mkdir -p "${out}"
cat > "${root}/app/every.py" <<'PY'
import os
import sys
import time

# 64 KiB kept every 100 ms, in this process and in one forked child, until
# the file /app/every.stop appears (at most 60 s).
child = os.fork()
kept = []
for _ in range(600):
    kept.append(bytearray(64 << 10))
    if os.path.exists("/app/every.stop"):
        break
    time.sleep(0.1)
if child:
    os.waitpid(child, 0)
PY
rm -f "${root}/app/every.stop"
memray_exec --snapshot-every 1s --output-dir /out-every -- python3 every.py > "${SCRATCH}/every.log" 2>&1 &
every_launcher=$!
track "${every_launcher}"
every="$(interpreter_of "${every_launcher}")" || fail "every: the launcher started nothing"
track "${every}"
wait_for_socket "${out}" "${every}"
grep -q "a snapshot mark every 1 s while recording" "${SCRATCH}/every.log" ||
  fail "every: the start line does not say the schedule: $(head -3 "${SCRATCH}/every.log")"
# scheduled N: status answers for both processes, each with N marks made.
scheduled() {
  ctl status "${every}" --output-dir /out-every --json > "${SCRATCH}/every.json" 2>/dev/null &&
    jq -e --argjson n "$1" '.tree.served == 2 and
      ([.processes[] | select(.snapshot_every_ms == 1000 and .snapshots_scheduled >= $n)] | length) == 2' \
      "${SCRATCH}/every.json" > /dev/null
}
wait_until 120 scheduled 3 || fail "every: not 3 marks in each process: $(jq -c '.processes' "${SCRATCH}/every.json")"
touch "${root}/app/every.stop"
wait "${every_launcher}" || fail "every: the app failed: $(cat "${SCRATCH}/every.log")"
every_child="$(jq -r --argjson p "${every}" '.processes[] | select(.pid != $p) | .pid' "${SCRATCH}/every.json")"
for c in "memray.${every}.bin" "memray.${every}.bin.${every_child}"; do
  m="${out}/memray-marks.${c#memray.}"
  (($(grep -c '^[0-9]* i$' "${m}") >= 3)) || fail "every: ${m}: $(cat "${m}" 2>&1)"
  "${MEMPROFILE}" report --rootfs "${root}" --json "${out}/${c}" > "${SCRATCH}/every-${c}.json" ||
    fail "every: report of ${c}: $(cat "${SCRATCH}/every-${c}.json")"
  # Each of the first 3 scheduled marks holds more at the kept line than the
  # one before (64 KiB every 100 ms, a mark every second): all 3 came before
  # every.stop. Marks after it (the parent waits for its child, longer on a
  # busy machine) may hold the same, and the span after the last mark ends
  # where the capture does.
  jq -e '[.snapshots | to_entries[] | select(.value.trigger == "i") | .key] as $i |
    .in_use[0].bytes_per_snapshot as $b |
    ($i | length) >= 3 and ([range(1; 3)] | all($b[$i[.]] > $b[$i[. - 1]]))' \
    "${SCRATCH}/every-${c}.json" > /dev/null ||
    fail "every: ${c}: $(jq -c '{snapshots, top: .in_use[0] | {site, bytes_per_snapshot}}' "${SCRATCH}/every-${c}.json")"
done
# collect carries the marks (they sort before their captures), and the
# report of the archive ends its spans where the directory's does.
"${MEMPROFILE}" collect --backend memray --output-dir "${out}" --settle 0.5 --out "${SCRATCH}/every.tar" \
  > "${SCRATCH}/collect.log" 2>&1 || fail "every: collect: $(cat "${SCRATCH}/collect.log")"
tar -tf "${SCRATCH}/every.tar" | grep -x "memray-marks.${every}.bin" > /dev/null || fail "every: the archive: $(tar -tf "${SCRATCH}/every.tar")"
"${MEMPROFILE}" report --rootfs "${root}" --json "${SCRATCH}/every.tar" > "${SCRATCH}/every-tar.json" ||
  fail "every: report of the archive: $(cat "${SCRATCH}/every-tar.json")"
"${MEMPROFILE}" report --rootfs "${root}" --json "${out}" > "${SCRATCH}/every-dir.json" ||
  fail "every: report of the directory: $(cat "${SCRATCH}/every-dir.json")"
spans() { jq -c '[.views[].snapshots[] | [.time_ms, .trigger, .bytes_in_use]]' "$1"; }
if [[ "$(spans "${SCRATCH}/every-tar.json")" != "$(spans "${SCRATCH}/every-dir.json")" ]] ||
  (($(spans "${SCRATCH}/every-tar.json" | grep -o '"i"' | wc -l) < 6)); then
  fail "every: the archive's spans are not the directory's: $(spans "${SCRATCH}/every-tar.json") against $(spans "${SCRATCH}/every-dir.json")"
fi
pass "--snapshot-every 1s: the process and its forked child each marked their own capture (status counted them), each report's spans end there, the kept line growing at each; collect carried the marks"

# 2. The disk budget, over a process and its forked child.
out="${root}/out-budget"
mkdir -p "${out}"
memray_exec --max-profile-mb 2 --output-dir /out-budget -- python3 churn.py > "${SCRATCH}/churn.log" 2>&1 &
track $!
churn="$(interpreter_of $!)" || fail "budget: the launcher started nothing"
track "${churn}"
wait_for_socket "${out}" "${churn}"
child_of() { [[ -n "$(workers_of "${churn}")" ]]; }
wait_until 60 child_of || fail "budget: no forked child: $(cat "${SCRATCH}/churn.log")"
child="$(workers_of "${churn}")"
track "${child}"
# stopped N: status answers for both processes, N of them not recording.
stopped() {
  ctl status "${churn}" --output-dir /out-budget --json > "${SCRATCH}/budget.json" 2>/dev/null &&
    jq -e --argjson n "$1" '.tree.served == 2 and ([.processes[] | select(.recording | not)] | length) == $n' \
      "${SCRATCH}/budget.json" > /dev/null
}
wait_until 300 stopped 2 || fail "budget: not both stopped: $(jq -c '.processes' "${SCRATCH}/budget.json"): $(cat "${SCRATCH}/churn.log")"
for p in "${churn}" "${child}"; do
  kill -0 "${p}" || fail "budget: process ${p} ended"
  grep -q "memprofile-ctl\[${p}\]: memray: recording stopped: the captures in /out-budget (.* MiB) reached the 2.0 MiB budget" \
    "${SCRATCH}/churn.log" || fail "budget: ${p} did not say why it stopped: $(cat "${SCRATCH}/churn.log")"
  jq -e --argjson p "${p}" '.processes[] | select(.pid == $p) | .stopped_reason | test("reached the 2.0 MiB budget")' \
    "${SCRATCH}/budget.json" > /dev/null || fail "budget: status of ${p}: $(jq -c '.processes' "${SCRATCH}/budget.json")"
done
# Checked every 100 ms: what memray writes meanwhile is all that may pass
# the budget (memray then compresses each capture it closes).
used="$(du -cb --apparent-size "${out}"/memray.* | tail -1 | cut -f1)"
((used < 6 * 1024 * 1024)) || fail "budget: the captures hold ${used} bytes against a 2 MiB budget: $(ls -l "${out}")"
pass "budget: the process and its forked child stopped at the 2 MiB budget, said why (status too), and run on (${used} bytes of captures)"

# memray compressed the captures it closed: there is room again, and a
# start makes a new capture, which the budget stops again.
ctl start "${churn}" --only --output-dir /out-budget > "${SCRATCH}/restart.txt" 2>&1 ||
  fail "budget: start after the stop: $(cat "${SCRATCH}/restart.txt")"
[[ -f "${out}/memray.${churn}.2.bin" ]] || fail "budget: no memray.${churn}.2.bin: $(ls "${out}")"
wait_until 300 stopped 2 || fail "budget: the new capture did not stop: $(jq -c '.processes' "${SCRATCH}/budget.json")"
pass "budget: start after it made memray.${churn}.2.bin, which the budget stopped again"

# A directory already past the budget (an earlier process's capture): the
# tracker does not start, says why, and start is refused until room is made.
out="${root}/out-full"
mkdir -p "${out}"
head -c $((3 << 20)) /dev/urandom > "${out}/memray.1.bin"
memray_exec --max-profile-mb 2 --output-dir /out-full -- python3 churn.py > "${SCRATCH}/full.log" 2>&1 &
track $!
full="$(interpreter_of $!)" || fail "full: the launcher started nothing"
track "${full}"
wait_for_socket "${out}" "${full}"
grep -q "memprofile: memray: the captures in /out-full (3.0 MiB) reached the 2.0 MiB budget (--max-profile-mb): not tracked (memprofile start tries again)" \
  "${SCRATCH}/full.log" || fail "full: the refusal is not said: $(cat "${SCRATCH}/full.log")"
rc=0
ctl start "${full}" --only --output-dir /out-full > "${SCRATCH}/refused.txt" 2>&1 || rc=$?
if ((rc != 1)) || ! grep -q "reached the 2.0 MiB budget" "${SCRATCH}/refused.txt"; then
  fail "full: start was not refused: exit ${rc}: $(cat "${SCRATCH}/refused.txt")"
fi
rm "${out}/memray.1.bin"
ctl start "${full}" --only --output-dir /out-full > "${SCRATCH}/made-room.txt" 2>&1 ||
  fail "full: start after room was made: $(cat "${SCRATCH}/made-room.txt")"
[[ -f "${out}/memray.${full}.bin" ]] || fail "full: no capture after start: $(ls "${out}")"
pass "a directory past the budget: the tracker did not start and said why, start was refused (exit 1), then started once room was made"

# An app that runs its own memray tracker: memray allows one a process.
out="${root}/out-own"
mkdir -p "${out}"
cat > "${root}/app/own.py" <<'PY'
import time

import memray

with memray.Tracker("/out-own/own.bin"):
    while True:
        time.sleep(1)
PY
memray_exec --dormant --output-dir /out-own -- python3 own.py > "${SCRATCH}/own.log" 2>&1 &
track $!
own="$(interpreter_of $!)" || fail "own: the launcher started nothing"
track "${own}"
wait_for_socket "${out}" "${own}"
wait_until 60 test -s "${out}/own.bin" || fail "own: the app's tracker did not start: $(cat "${SCRATCH}/own.log")"
rc=0
ctl start "${own}" --only --output-dir /out-own > "${SCRATCH}/own-start.txt" 2>&1 || rc=$?
if ((rc != 1)) || ! grep -q "start ${own}: cannot start the tracker into /out-own/memray.${own}.bin (RuntimeError: No more than one Tracker" \
  "${SCRATCH}/own-start.txt"; then
  fail "own: start was not refused with memray's reason: exit ${rc}: $(cat "${SCRATCH}/own-start.txt")"
fi
compgen -G "${out}/memray.*" > /dev/null && fail "own: the refused start left a capture: $(ls "${out}")"
pass "an app with its own memray tracker: start refused (exit 1) with memray's reason, no capture left"
