#!/usr/bin/env bash
# memprofile start|stop|snapshot|status for memray, served by memprofile's
# bootstrap from a thread of each tracked interpreter, in a Debian trixie
# root of the test's own (python3-memray 1.17, Python 3.13, gunicorn 23):
# gunicorn started --dormant: the arbiter and both forked workers serve,
# nothing records; `start`, from another process in the root (as kubectl
# exec would be), starts a capture in all three without a restart;
# requests then show up in each worker's capture at the handler's line, and
# the requests before it in none; `stop` closes them; a second `start`
# writes memray.PID.2.bin; `snapshot` marks the moment in it
# (memray-marks.*), and report ends a span at each mark; the processes not
# recording say so.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

memray_root  # sets root: the trixie root with the launcher and the bootstrap in /opt/memprofile
leaky_wsgi_app  # /app/leaky.py; sets app_line

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
memray_ctl status "${arbiter}" --output-dir /out-dormant --json > "${SCRATCH}/status0.json" ||
  fail "dormant: status: $(cat "${SCRATCH}/status0.json")"
jq -e '.tree.served == 3 and ([.processes[] | select(.backend == "memray" and (.recording | not))] | length) == 3' \
  "${SCRATCH}/status0.json" > /dev/null || fail "dormant: status: $(jq -c '.processes' "${SCRATCH}/status0.json")"
[[ -z "$(cd "${out}" && find . -name 'memray.*')" ]] || fail "dormant: something was captured: $(ls "${out}")"
pass "dormant gunicorn: the arbiter and its 2 workers serve memprofile status, none records"

memray_ctl start "${arbiter}" --output-dir /out-dormant > "${SCRATCH}/start.txt" 2>&1 || fail "start: $(cat "${SCRATCH}/start.txt")"
[[ "$(grep -c ': memray, recording on$' "${SCRATCH}/start.txt")" == 3 ]] || fail "start: $(cat "${SCRATCH}/start.txt")"
serve_each "${port}" 30 "${workers[@]}"
for p in "${arbiter}" "${workers[@]}"; do added_threads_block "${p}" "dormant gunicorn ${p} after start" > /dev/null; done
memray_ctl status "${arbiter}" --output-dir /out-dormant > "${SCRATCH}/status1.txt" 2>&1 || fail "status: $(cat "${SCRATCH}/status1.txt")"
for p in "${arbiter}" "${workers[@]}"; do
  grep -q "^pid ${p}: memray, recording on" "${SCRATCH}/status1.txt" || fail "status after start: $(cat "${SCRATCH}/status1.txt")"
  grep -q "^  /out-dormant/memray.${p}.bin " "${SCRATCH}/status1.txt" || fail "status: no capture of ${p}: $(cat "${SCRATCH}/status1.txt")"
done
memray_ctl stop "${arbiter}" --output-dir /out-dormant > "${SCRATCH}/stop.txt" 2>&1 || fail "stop: $(cat "${SCRATCH}/stop.txt")"
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

memray_ctl start "${workers[0]}" --only --output-dir /out-dormant > "${SCRATCH}/start2.txt" 2>&1 ||
  fail "second start: $(cat "${SCRATCH}/start2.txt")"
[[ -f "${out}/memray.${workers[0]}.2.bin" ]] || fail "second start: no memray.${workers[0]}.2.bin: $(ls "${out}")"
# snapshot: a mark in the capture being written; the two processes not
# recording say so on stderr (exit 1). The pause on each side is memray's
# clock: an allocation is dated by the RSS record before it, every 10 ms.
mark() {
  local rc=0
  sleep 0.5
  memray_ctl snapshot "${arbiter}" --output-dir /out-dormant > "${SCRATCH}/snapshot$1.txt" 2> "${SCRATCH}/snapshot$1.err" || rc=$?
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
memray_ctl status "${workers[0]}" --only --output-dir /out-dormant > "${SCRATCH}/status2.txt" 2>&1 ||
  fail "second status: $(cat "${SCRATCH}/status2.txt")"
grep -q "profile: memray writes one continuous file (/out-dormant/memray.${workers[0]}.2.bin)" "${SCRATCH}/status2.txt" ||
  fail "second status: not the newest capture: $(cat "${SCRATCH}/status2.txt")"
memray_ctl stop "${workers[0]}" --only --output-dir /out-dormant > /dev/null 2>&1 || fail "second stop"
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

# A capture removed (collected, then deleted) frees its name: the next start
# takes it again, and its marks start afresh, not after the old capture's.
w="${workers[0]}"
rm "${out}/memray.${w}.2.bin"
memray_ctl start "${w}" --only --output-dir /out-dormant > "${SCRATCH}/start3.txt" 2>&1 ||
  fail "third start: $(cat "${SCRATCH}/start3.txt")"
[[ -f "${out}/memray.${w}.2.bin" ]] || fail "third start: memray.${w}.2.bin not taken again: $(ls "${out}")"
memray_ctl snapshot "${w}" --only --output-dir /out-dormant > "${SCRATCH}/snapshot3.txt" 2>&1 ||
  fail "snapshot of the new capture: $(cat "${SCRATCH}/snapshot3.txt")"
if ! grep -q "(mark 1 in /out-dormant/memray-marks\.${w}\.2\.bin;" "${SCRATCH}/snapshot3.txt" ||
  [[ "$(wc -l < "${out}/memray-marks.${w}.2.bin")" != 1 ]]; then
  fail "the new capture's marks go on from the old one's: $(cat "${SCRATCH}/snapshot3.txt" "${out}/memray-marks.${w}.2.bin")"
fi
memray_ctl stop "${w}" --only --output-dir /out-dormant > /dev/null 2>&1 || fail "third stop"
pass "memray.${w}.2.bin removed: the next start takes the name again, and its first snapshot is mark 1 of a marks file begun anew"

kill -TERM "${arbiter}"
wait_until 60 bash -c "! kill -0 ${arbiter} 2>/dev/null" || fail "gunicorn did not stop on SIGTERM"
wait_until 30 sockets_are "${out}" 0 || fail "sockets left after the service ended: $(ls "${out}")"
pass "gunicorn ended: its 3 sockets are gone"
