#!/usr/bin/env bash
# Left on, in compressed time (#57): a prefork service with a slow leak
# (tests/fixtures/src/serve_app.c: two workers, each leaking 64 or 128 KiB
# every 100 ms) under jemalloc with a snapshot every second in every process
# (--snapshot-every 1s) into a 2 MiB disk budget, and memprofile serve
# scraped every second (heap and metrics), for SOAK_SECONDS (90 in make
# test; `make soak` runs it for 1200). Nothing grows but the app:
#   - the output directory stays within the budget at every look;
#   - each process's fds and threads (what the control library adds), and
#     serve's fds, threads and RSS, are at the end what they were after the
#     warm-up (serve's RSS within 4 MiB);
#   - status counts the rotations the budget made;
#   - report on what the budget kept (the first snapshot and the newest)
#     ranks slow_leak's growth first.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

soak="${SOAK_SECONDS:-90}"
((soak >= 30)) || fail "SOAK_SECONDS=${soak}: at least 30"
gcc -O1 -g -o "${SCRATCH}/serve_app" "${E2E_ROOT}/tests/fixtures/src/serve_app.c"
out="${SCRATCH}/out"
start_service "${out}" "${SCRATCH}/app.log" --backend jemalloc --preload "$(preload_dist jemalloc amd64)/libjemalloc.so.2" \
  --snapshot-every 1s --max-profile-mb 2 -- "${SCRATCH}/serve_app" 2 4
app="${SERVICE_PID}"
wait_until 60 sockets_are "${out}" 3 || fail "not 3 sockets: $(ls "${out}")"
mapfile -t procs < <(printf '%s\n' "${app}"; workers_of "${app}")
start_serve "${SCRATCH}/serve.log" --output-dir "${out}" --min-interval 1 "${app}"
scraper() {
  while kill -0 "${SERVE_PID}" 2> /dev/null; do
    curl -s -o /dev/null --max-time 30 "${SERVE_URL}/debug/pprof/heap" || true
    curl -s -o /dev/null --max-time 30 "${SERVE_URL}/metrics" || true
    sleep 1
  done
}
scraper &
SCRAPER=$!
track "${SCRAPER}"

# counts PID: its fds and threads, one line.
counts() { echo "$(find "/proc/$1/fd" -mindepth 1 -maxdepth 1 | wc -l) $(find "/proc/$1/task" -mindepth 1 -maxdepth 1 | wc -l)"; }
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
budget_kib=2048
within_budget() {
  local used
  # The budget removes dumps while du walks the directory: a file gone
  # between its listing and its stat is an error of du's, not a size.
  used="$({ du -sk --apparent-size "${out}" 2> /dev/null || true; } | cut -f1)"
  [[ -n "${used}" ]] || fail "du read nothing of ${out}"
  # A dump being written may pass it for a moment: one dump's size of slack.
  ((used <= budget_kib + 512)) ||
    fail "the profiles use ${used} KiB, past the ${budget_kib} KiB budget: $(find "${out}" -maxdepth 1 -type f -printf '%s %f\n' | sort -n | tail -20)"
}

warmup=15
sleep "${warmup}"
declare -A first
for p in "${procs[@]}" "${SERVE_PID}"; do first[${p}]="$(counts "${p}")"; done
serve_rss="$(rss_kib "${SERVE_PID}")"
end=$((SECONDS + soak - warmup))
looks=0
while ((SECONDS < end)); do
  sleep 10
  within_budget
  for p in "${procs[@]}" "${SERVE_PID}"; do kill -0 "${p}" 2> /dev/null || fail "process ${p} ended during the soak"; done
  looks=$((looks + 1))
done
# The scrapes stop; the snapshots every second go on. A descriptor a
# snapshot, a scrape still answered or the budget's scan holds for a moment
# is not a leak: the counts must come back to the warm-up's, within 30 s,
# at some look (a leaked one never goes).
kill "${SCRAPER}" 2> /dev/null || true
back_to_first() { [[ "$(counts "$1")" == "${first[$1]}" ]]; }
for p in "${procs[@]}" "${SERVE_PID}"; do
  wait_until 30 back_to_first "${p}" ||
    fail "process ${p}: fds and threads $(counts "${p}") at the end (for 30 s), ${first[${p}]} after the warm-up"
done
serve_end="$(rss_kib "${SERVE_PID}")"
((serve_end <= serve_rss + 4096)) || fail "serve's RSS grew from ${serve_rss} to ${serve_end} KiB"
"${MEMPROFILE}" status "${app}" --output-dir "${out}" --json > "${SCRATCH}/status.json" || fail "status"
rotated="$(jq '[.processes[].rotated // 0] | add' "${SCRATCH}/status.json")"
((rotated > 0)) || fail "status counts no rotation after ${soak} s of snapshots every second into 2 MiB: $(jq -c '[.processes[] | {pid, rotated}]' "${SCRATCH}/status.json")"
# report reads what the budget kept once the processes are gone: while
# they snapshot, the budget removes dumps report may have listed.
kill -KILL "${procs[@]}"
for p in "${procs[@]}"; do wait_until 60 test ! -e "/proc/${p}" || fail "process ${p} did not end on SIGKILL"; done
"${MEMPROFILE}" report --rootfs / --json "${out}" > "${SCRATCH}/report.json" 2> "${SCRATCH}/report.err" ||
  fail "report: $(cat "${SCRATCH}/report.err")"
[[ "$(jq -r '.growth[0].site.function' "${SCRATCH}/report.json")" == slow_leak ]] ||
  fail "the report's first growth is not slow_leak: $(jq -c '.growth[0]' "${SCRATCH}/report.json")"
pass "${soak} s left on (snapshots every second, serve scraped every second): the disk within its 2 MiB at ${looks} looks; fds and threads of the 3 processes and serve unchanged; serve's RSS ${serve_rss} -> ${serve_end} KiB; ${rotated} rotations counted; report ranks slow_leak's growth first"
