#!/usr/bin/env bash
# memprofile serve for each backend but jemalloc (serve_pprof.sh) and
# memray (serve_memray.sh), read by go tool pprof over HTTP: a program that
# keeps 48 MiB in planted_growth (tests/fixtures/src/planted.c) under
# heaptrack (its trace read as it stands: no snapshot to take), under
# gperftools' heap profiler linked into it (exec's tcmalloc backend,
# HeapProfilerDump on each scrape), and under bytehound; -top names
# planted_growth with its file and line. Under --backend none the heap
# answers 503 saying why, and /metrics has the process's memory. Without
# bytehound's offline bundle its part is skipped (exit 77, after the rest).
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

command -v go > /dev/null || fail "go missing: run scripts/install-deps.sh (golang-go)"
export GOCACHE="${SCRATCH}/gocache" GOPATH="${SCRATCH}/gopath" PPROF_TMPDIR="${SCRATCH}/pprof"
fx="$(allocator_fixtures)"
gcc -O1 -g -o "${SCRATCH}/planted" "${E2E_ROOT}/tests/fixtures/src/planted.c"

# planted_top NAME PROGRAM [exec options]: PROGRAM under memprofile exec,
# serve beside it; go tool pprof -top -lines ranks planted_growth first
# (within 120 s: bytehound writes its file about every 30 s).
planted_top() {
  local name="$1" program="$2" out="${SCRATCH}/$1"
  shift 2
  PLANTED_HOLD=300 start_service "${out}" "${SCRATCH}/${name}.log" "$@" -- "${program}"
  local app="${SERVICE_PID}"
  wait_until 60 grep -q "^kept " "${SCRATCH}/${name}.log" || fail "${name}: the program did not allocate"
  start_serve "${SCRATCH}/${name}-serve.log" --output-dir "${out}" --min-interval 2 "${app}"
  ranked() {
    go tool pprof -top -lines "${SERVE_URL}/debug/pprof/heap" > "${SCRATCH}/${name}.top" 2> "${SCRATCH}/${name}.err" ||
      fail "${name}: go tool pprof: $(cat "${SCRATCH}/${name}.err" "${SCRATCH}/${name}-serve.log")"
    grep -Eq "^ +4[0-9.]+MB .* planted_growth [^ ]*planted.c:[0-9]+$" <<< "$(sed -n '/flat%/{n;p;q}' "${SCRATCH}/${name}.top")"
  }
  wait_until 120 ranked ||
    fail "${name}: -top does not rank planted_growth first with its line: $(head -14 "${SCRATCH}/${name}.top")"
  kill -TERM "${SERVE_PID}" "${app}"
  wait "${SERVE_PID}" || fail "${name}: serve did not exit 0 on SIGTERM"
}

planted_top heaptrack "${SCRATCH}/planted" --backend heaptrack --preload "$(preload_dist heaptrack amd64)/libheaptrack_preload.so"
pass "heaptrack: go tool pprof -top over HTTP ranks planted_growth first, with its line (the trace as it stands)"
planted_top tcmalloc "${fx}/tc-heapprof-export" --backend tcmalloc
pass "gperftools' heap profiler (exec --backend tcmalloc): planted_growth first, with its line"

# --backend none: no heap to serve, said; the memory is in /metrics.
out="${SCRATCH}/none"
PLANTED_HOLD=300 start_service "${out}" "${SCRATCH}/none.log" --backend none -- "${SCRATCH}/planted"
app="${SERVICE_PID}"
start_serve "${SCRATCH}/none-serve.log" --output-dir "${out}" "${app}"
code="$(curl -s -o "${SCRATCH}/none.body" -w '%{http_code}' "${SERVE_URL}/debug/pprof/heap")"
if [[ "${code}" != 503 ]] || ! grep -q "no heap profiler (--backend none)" "${SCRATCH}/none.body"; then
  fail "--backend none: heap gave ${code}: $(cat "${SCRATCH}/none.body")"
fi
curl -fsS "${SERVE_URL}/metrics" > "${SCRATCH}/none.metrics" || fail "--backend none: /metrics"
grep -Eq "^memprofile_process_resident_memory_bytes\{pid=\"${app}\",program=\"[^\"]*planted\",backend=\"none\"\} [0-9]{8,}$" \
  "${SCRATCH}/none.metrics" || fail "--backend none: no RSS of 48 MiB or more: $(grep resident "${SCRATCH}/none.metrics")"
kill -TERM "${SERVE_PID}" "${app}"
pass "--backend none: /debug/pprof/heap answers 503 saying why; /metrics has the process's memory"

need_bytehound_bundle 77
planted_top bytehound "${SCRATCH}/planted" --backend bytehound --preload "$(preload_dist bytehound amd64)/libbytehound.so"
pass "bytehound: planted_growth first, with its line"
