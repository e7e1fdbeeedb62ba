#!/usr/bin/env bash
# Dormant mode on real processes: a service starts with jemalloc loaded and
# recording off; without a restart, memprofile start, two snapshots with
# growth in between, stop. The snapshots differ by the growing site, and
# the service's exit code and memory are its own.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

build_workloads
JEMALLOC="$(preload_dist jemalloc amd64)/libjemalloc.so.2"
out="${SCRATCH}/out"

# It runs until the test ends it (0: until SIGTERM): a service of a fixed
# length ends before the commands on a machine busy enough.
start_service "${out}" "${SCRATCH}/run.log" --dormant --backend jemalloc --preload "${JEMALLOC}" -- \
  "${SCRATCH}/leaky" 0 131072
grep -q "memprofile: info: loaded dormant (recording off until memprofile start): ${SCRATCH}/leaky with jemalloc" \
  "${SCRATCH}/run.log" || fail "no dormant start line: $(cat "${SCRATCH}/run.log")"
ctl() { "${MEMPROFILE}" "$@" "${SERVICE_PID}" --output-dir "${out}"; }
ctl status > "${SCRATCH}/status0" || fail "status: $(cat "${SCRATCH}/status0")"
grep -q "^pid ${SERVICE_PID}: jemalloc, recording off$" "${SCRATCH}/status0" || fail "not dormant: $(cat "${SCRATCH}/status0")"
sleep 1
dormant_heap="$(ctl snapshot)" || fail "snapshot while dormant"
pass "dormant: loaded, recording off, answering"

[[ "$(ctl start)" == "pid ${SERVICE_PID}: jemalloc, recording on" ]] || fail "start"
sleep 1
first="$(ctl snapshot)" || fail "first snapshot"
sleep 2
second="$(ctl snapshot)" || fail "second snapshot"
[[ "$(ctl stop)" == "pid ${SERVICE_PID}: jemalloc, recording off" ]] || fail "stop"
ctl status --json > "${SCRATCH}/status.json"
[[ "$(jq -r .recording "${SCRATCH}/status.json")" == false ]] || fail "status after stop: recording"
[[ "$(jq '.snapshots | length' "${SCRATCH}/status.json")" == 3 ]] || fail "status lists $(jq -c .snapshots "${SCRATCH}/status.json")"
for f in "${dormant_heap}" "${first}" "${second}"; do
  [[ "${f}" == "${out}"/jeprof."${SERVICE_PID}".*.m*.heap && -s "${f}" ]] || fail "snapshot path ${f}"
done
kill -TERM "${SERVICE_PID}"
wait "${SERVICE_PID}" || fail "the service's exit code changed: $?"
grep -q "leaky: leaked" "${SCRATCH}/run.log" || fail "the service did not run to its end"
[[ ! -e "${out}/memprofile-ctl.${SERVICE_PID}.sock" ]] || fail "the socket stayed after the process ended"
pass "start, two snapshots, stop, status; the service ran to its end with exit code 0"

# Nothing was sampled while dormant; between the two snapshots the leak grew.
"${MEMPROFILE}" report --rootfs / "${dormant_heap}" > "${SCRATCH}/dormant.txt"
if grep -q leaky_function "${SCRATCH}/dormant.txt"; then fail "sampled while dormant: $(cat "${SCRATCH}/dormant.txt")"; fi
"${MEMPROFILE}" report --rootfs / --json "${first}" "${second}" > "${SCRATCH}/growth.json"
[[ "$(jq -r '.growth[0].site.function' "${SCRATCH}/growth.json")" == leaky_function ]] ||
  fail "the growth between the snapshots is not leaky_function: $(jq -c '.growth[0]' "${SCRATCH}/growth.json")"
[[ "$(jq -r '.growth[0].leak_suspect' "${SCRATCH}/growth.json")" == true ]] || fail "not a leak suspect"
pass "the two snapshots differ by the growing site (leaky_function), and nothing was sampled while dormant"

# Memory: the same deterministic workload under plain jemalloc and under
# dormant jemalloc with the control library: the peak RSS is the same but
# for the control thread's stack.
if sanitized "${LAUNCHER}"; then
  pass "peak RSS not compared under AddressSanitizer (the launcher's shadow memory counts before it execs)"
  exit 0
fi
rss() { /usr/bin/time -f %M -o "${SCRATCH}/rss" "$@" > /dev/null 2>&1 || fail "$* failed"; cat "${SCRATCH}/rss"; }
plain="$(rss env LD_PRELOAD="${JEMALLOC}" MALLOC_CONF=prof:true,prof_active:false "${SCRATCH}/churn" 3000000)"
dormant="$(rss "${LAUNCHER}" exec --dormant --backend jemalloc --preload "${JEMALLOC}" --output-dir "${out}" \
  --min-free-mb 1 -- "${SCRATCH}/churn" 3000000)"
((dormant <= plain + 2048)) || fail "dormant with the control library: peak RSS ${dormant} KiB, plain jemalloc ${plain} KiB"
pass "peak RSS: ${dormant} KiB dormant with the control library, ${plain} KiB plain jemalloc"
