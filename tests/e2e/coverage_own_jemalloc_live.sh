#!/usr/bin/env bash
# A program's own jemalloc that exports its mallctl (-rdynamic, as Redis
# links): exec drives it with the control library alone, and the control
# verbs reach it by that name. A snapshot of the live process is the
# program's own jemalloc's dump, naming planted_growth; stop and start
# toggle its prof.active, as status shows.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

fx="$(allocator_fixtures)"
JEMALLOC="$(preload_dist jemalloc amd64)/libjemalloc.so.2"
out="${SCRATCH}/out"
mkdir "${out}"
PLANTED_HOLD=120 "${LAUNCHER}" exec --backend jemalloc --preload "${JEMALLOC}" --output-dir "${out}" --min-free-mb 1 \
  -- "${fx}/je-static-export" > "${SCRATCH}/app.out" 2> "${SCRATCH}/exec.log" &
app=$!
track "${app}"
wait_until 60 grep -q kept "${SCRATCH}/app.out" || fail "the program did not start: $(cat "${SCRATCH}/exec.log")"
grep -q "its own jemalloc, linked into it, through MALLOC_CONF; snapshot, start and stop reach it through mallctl" \
  "${SCRATCH}/exec.log" || fail "start line: $(cat "${SCRATCH}/exec.log")"
! grep -q "libjemalloc" "/proc/${app}/maps" || fail "the preloaded jemalloc was loaded too"
"${MEMPROFILE}" snapshot "${app}" --output-dir "${out}" > "${SCRATCH}/snap" 2>&1 || fail "snapshot: $(cat "${SCRATCH}/snap")"
"${MEMPROFILE}" report --rootfs / "${out}" > "${SCRATCH}/report.txt" 2>&1 || fail "report: $(cat "${SCRATCH}/report.txt")"
grep -q "planted_growth" "${SCRATCH}/report.txt" || fail "the snapshot misses planted_growth: $(head -12 "${SCRATCH}/report.txt")"
"${MEMPROFILE}" stop "${app}" --output-dir "${out}" > /dev/null 2>&1 || fail "stop"
"${MEMPROFILE}" status "${app}" --output-dir "${out}" --json > "${SCRATCH}/status.json" || fail "status"
jq -e '.processes[0].recording == false' "${SCRATCH}/status.json" > /dev/null ||
  fail "not stopped: $(jq -c '.processes[0]' "${SCRATCH}/status.json")"
"${MEMPROFILE}" start "${app}" --output-dir "${out}" > /dev/null 2>&1 || fail "start"
"${MEMPROFILE}" status "${app}" --output-dir "${out}" --json > "${SCRATCH}/status.json" || fail "status"
jq -e '.processes[0].recording == true' "${SCRATCH}/status.json" > /dev/null ||
  fail "not started: $(jq -c '.processes[0]' "${SCRATCH}/status.json")"
kill -KILL "${app}"
wait "${app}" 2> /dev/null || true
pass "the program's own jemalloc, driven with the control library alone: snapshot names planted_growth, stop and start reach it"
