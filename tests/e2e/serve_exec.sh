#!/usr/bin/env bash
# memprofile exec --serve ADDR:PORT: the static launcher starts serve as a
# child of the program it becomes, as an image's entrypoint would. go tool
# pprof reads the tree's heap from it; /metrics counts the program and its
# two workers, not serve itself; serve ends with the program, whose parent
# waits for every child as it exits (serve is not waited for). A --serve
# that cannot serve (an open address without a token) is said in one line
# and the program runs anyway.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

command -v go > /dev/null || fail "go missing: run scripts/install-deps.sh (golang-go)"
export GOCACHE="${SCRATCH}/gocache" GOPATH="${SCRATCH}/gopath" PPROF_TMPDIR="${SCRATCH}/pprof"
gcc -O1 -g -o "${SCRATCH}/serve_app" "${E2E_ROOT}/tests/fixtures/src/serve_app.c"
JEMALLOC="$(preload_dist jemalloc amd64)/libjemalloc.so.2"
port="$(free_port)"
out="${SCRATCH}/out"
start_service "${out}" "${SCRATCH}/app.log" --backend jemalloc --preload "${JEMALLOC}" --serve "127.0.0.1:${port}" -- \
  "${SCRATCH}/serve_app" 2 16
app="${SERVICE_PID}"
wait_until 60 sockets_are "${out}" 3 || fail "not 3 sockets: $(ls "${out}")"
serving() { curl -fsS -o /dev/null "http://127.0.0.1:${port}/debug/pprof/"; }
wait_until 60 serving || fail "exec --serve does not answer: $(cat "${SCRATCH}/app.log")"
server="$(pgrep -P "${app}" -f "exec .*--serve")" || fail "no serve child of ${app}: $(pgrep -aP "${app}")"
go tool pprof -top "http://127.0.0.1:${port}/debug/pprof/heap" > "${SCRATCH}/top.txt" 2> "${SCRATCH}/pprof.err" ||
  fail "go tool pprof: $(cat "${SCRATCH}/pprof.err")"
grep -q " steady_cache$" "${SCRATCH}/top.txt" || fail "-top: $(head -12 "${SCRATCH}/top.txt")"
curl -fsS "http://127.0.0.1:${port}/metrics" > "${SCRATCH}/metrics.txt" || fail "/metrics"
[[ "$(grep -c '^memprofile_process_served{.*} 1$' "${SCRATCH}/metrics.txt")" == 3 ]] ||
  fail "not the program and its 2 workers: $(grep '^memprofile_process_served' "${SCRATCH}/metrics.txt")"
if grep -q "pid=\"${server}\"" "${SCRATCH}/metrics.txt"; then fail "serve (${server}) counts itself a member"; fi
pass "exec --serve: go tool pprof reads the heap; /metrics has the program and its 2 workers, not serve (${server})"

kill -TERM "${app}"
wait "${app}" || fail "the program's exit code changed"
gone() { ! kill -0 "$1" 2> /dev/null; }
wait_until 30 gone "${server}" || fail "serve ${server} outlived the program"
pass "serve ends with the program"

# An open address without a token: one line, and the program runs.
out2="${SCRATCH}/out2"
start_service "${out2}" "${SCRATCH}/open.log" --backend jemalloc --preload "${JEMALLOC}" --serve "0.0.0.0:${port}" -- \
  "${SCRATCH}/serve_app" 1 1
grep -q "error.*--serve 0.0.0.0:${port}: not serving: .*needs a bearer token" "${SCRATCH}/open.log" ||
  fail "no line for the refused --serve: $(cat "${SCRATCH}/open.log")"
kill -0 "${SERVICE_PID}" || fail "the program did not run"
if pgrep -P "${SERVICE_PID}" -f "exec .*--serve" > /dev/null; then fail "serve started without a token"; fi
pass "exec --serve on an open address without a token: one line, the program runs, nothing listens"
