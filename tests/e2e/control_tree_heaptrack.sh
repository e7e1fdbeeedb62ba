#!/usr/bin/env bash
# A prefork server (tests/fixtures/src/prefork.c) under heaptrack, which
# records the parent only: status names each unrecorded worker in one line,
# and workers that exit() never hang.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

gcc -O1 -g -o "${SCRATCH}/prefork" "${E2E_ROOT}/tests/fixtures/src/prefork.c"
HEAPTRACK="$(preload_dist heaptrack amd64)/libheaptrack_preload.so"

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
