#!/usr/bin/env bash
# memprofile exec --backend memray on gunicorn 23 in the trixie root, a
# console script (#!/usr/bin/python3) given with no --target: each forked
# worker writes its own capture (memray.ARBITER.bin.WORKER), each names the
# request handler's line, and --merge sums the workers; `attached` sees
# memray in a worker; `status` reaches the arbiter and both workers, each
# recording into its own capture.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

memray_root  # sets root: the trixie root with the launcher and the bootstrap in /opt/memprofile
leaky_wsgi_app  # /app/leaky.py; sets app_line

# 2. gunicorn, its console script given as it is: the arbiter forks two
# workers, each tracked in its own capture.
port="$(free_port)"
mkdir -p "${root}/out-gunicorn"
memray_exec --output-dir /out-gunicorn -- /usr/bin/gunicorn --chdir /app -w 2 --timeout 0 -b "127.0.0.1:${port}" leaky:app \
  > "${SCRATCH}/gunicorn.log" 2>&1 &
track $!
answers() { curl -fsS "http://127.0.0.1:${port}/" > /dev/null 2>&1; }
wait_until 120 answers || fail "gunicorn did not answer: $(tail -20 "${SCRATCH}/gunicorn.log")"
grep -q "profiling /usr/bin/python3 with memray" "${SCRATCH}/gunicorn.log" ||
  fail "gunicorn: not judged by its interpreter: $(head -5 "${SCRATCH}/gunicorn.log")"
arbiter="$(arbiter_of "/usr/bin/gunicorn --chdir /app .*-b 127\.0\.0\.1:${port} ")" || fail "gunicorn: no arbiter: $(pgrep -af gunicorn)"
track "${arbiter}"
# The first worker can answer before the second has booted.
two_workers() { (($(workers_of "${arbiter}" | wc -l) == 2)); }
wait_until 60 two_workers || fail "gunicorn: not 2 workers of ${arbiter}: $(workers_of "${arbiter}" | paste -sd' ')"
mapfile -t workers < <(workers_of "${arbiter}")
((${#workers[@]} == 2)) || fail "gunicorn: not 2 workers of ${arbiter}: ${workers[*]}"
serve_each "${port}" 40 "${workers[@]}"  # 256 KiB kept a request: 10 MiB or more each
# memray's own threads and the bootstrap's take none of the app's signals,
# in the arbiter and in the workers (whose memray thread its fork handler
# started from the forking thread).
for p in "${arbiter}" "${workers[@]}"; do added_threads_block "${p}" "gunicorn ${p} under memray" > /dev/null; done
"${MEMPROFILE}" attached "${workers[0]}" --output-dir "${root}/out-gunicorn" > "${SCRATCH}/attached.txt" ||
  fail "gunicorn: attached: $(cat "${SCRATCH}/attached.txt")"
grep -q "memray library mapped: yes (.*/_memray.cpython-3" "${SCRATCH}/attached.txt" ||
  fail "gunicorn: attached: $(cat "${SCRATCH}/attached.txt")"
# status in the pod (the root's own /proc view): the arbiter and both
# workers answer, each recording into its own capture.
in_root /opt/memprofile/memprofile status "${arbiter}" --output-dir /out-gunicorn --json > "${SCRATCH}/status.json" ||
  fail "gunicorn: status: $(cat "${SCRATCH}/status.json")"
jq -e --argjson a "${arbiter}" --argjson w0 "${workers[0]}" --argjson w1 "${workers[1]}" '
    .tree.served == 3 and ([.processes[] | select(.backend == "memray" and .recording)] | length) == 3 and
    ([.processes[] | select(.pid == $w0 or .pid == $w1) | .snapshots[0].path] ==
     ["/out-gunicorn/memray.\($a).bin.\($w0)", "/out-gunicorn/memray.\($a).bin.\($w1)"])' \
  "${SCRATCH}/status.json" > /dev/null || fail "gunicorn: status: $(jq -c '.processes' "${SCRATCH}/status.json")"
kill -TERM "${arbiter}"
wait_until 60 bash -c "! kill -0 ${arbiter} 2>/dev/null" || fail "gunicorn did not stop on SIGTERM"
total=0
for w in "${workers[@]}"; do
  capture="${root}/out-gunicorn/memray.${arbiter}.bin.${w}"
  [[ -s "${capture}" ]] || fail "gunicorn: no capture for worker ${w}: $(ls "${root}/out-gunicorn")"
  "${MEMPROFILE}" report --rootfs "${root}" --json "${capture}" > "${SCRATCH}/worker-${w}.json" ||
    fail "gunicorn: report of worker ${w}"
  [[ "$(top_site "${SCRATCH}/worker-${w}.json")" == "app (/app/leaky.py:${app_line}) "* ]] ||
    fail "gunicorn: worker ${w}'s top site: $(top_site "${SCRATCH}/worker-${w}.json")"
  total=$((total + $(jq '.in_use[0].bytes_in_use' "${SCRATCH}/worker-${w}.json")))
done
((total >= SERVED * 256 * 1024)) ||
  fail "gunicorn: the workers hold ${total} bytes at the handler, not the $((SERVED / 4)) MiB kept by ${SERVED} requests"
"${MEMPROFILE}" report --rootfs "${root}" --json --merge "${root}/out-gunicorn" > "${SCRATCH}/gunicorn-merged.json" ||
  fail "gunicorn: report --merge"
merged="$(jq '.in_use[0].bytes_in_use' "${SCRATCH}/gunicorn-merged.json")"
if [[ "$(top_site "${SCRATCH}/gunicorn-merged.json")" != "app (/app/leaky.py:${app_line}) "* ]] || ((merged < total)); then
  fail "gunicorn: --merge: $(top_site "${SCRATCH}/gunicorn-merged.json") against ${total} in the workers"
fi
pass "gunicorn: the arbiter's 2 forked workers each wrote a capture naming app (leaky.py:${app_line}) (${total} bytes together), --merge sums them (${merged}), attached sees memray mapped, status reaches all 3 processes, each recording"
