#!/usr/bin/env bash
# memprofile serve, read by go tool pprof (Debian's golang-go) over HTTP as
# it reads a Go service's /debug/pprof/heap: a prefork service under
# jemalloc (tests/fixtures/src/serve_app.c: three forked workers, each with
# a steady cache and a leak at its own rate). -top names the leaking
# function with its file and line; the pid label tells the three workers
# apart; ?seconds=N shows the growth in those N seconds, not the steady
# cache; /debug/pprof/allocs is the same profile.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

command -v go > /dev/null || fail "go missing: run scripts/install-deps.sh (golang-go)"
export GOCACHE="${SCRATCH}/gocache" GOPATH="${SCRATCH}/gopath" PPROF_TMPDIR="${SCRATCH}/pprof"
gcc -O1 -g -o "${SCRATCH}/serve_app" "${E2E_ROOT}/tests/fixtures/src/serve_app.c"
JEMALLOC="$(preload_dist jemalloc amd64)/libjemalloc.so.2"
out="${SCRATCH}/out"
start_service "${out}" "${SCRATCH}/app.log" --backend jemalloc --preload "${JEMALLOC}" -- "${SCRATCH}/serve_app" 3 32
app="${SERVICE_PID}"
wait_until 60 sockets_are "${out}" 4 || fail "not 4 sockets: $(ls "${out}")"
mapfile -t workers < <(workers_of "${app}")
((${#workers[@]} == 3)) || fail "not 3 workers: ${workers[*]}"
start_serve "${SCRATCH}/serve.log" --output-dir "${out}" --min-interval 1 "${app}"
pprof() { go tool pprof "$@" 2> "${SCRATCH}/pprof.err" || fail "go tool pprof $*: $(cat "${SCRATCH}/pprof.err")"; }

# 1. The heap now: -top's first line is the steady cache (32 MiB a worker),
# then the leak, each with its file and line (once jemalloc has sampled it:
# a scrape a second, at most 60).
has_leak() {
  pprof -top -lines "${SERVE_URL}/debug/pprof/heap" > "${SCRATCH}/top.txt"
  grep -q " slow_leak [^ ]*tests/fixtures/src/serve_app.c:[0-9]*$" "${SCRATCH}/top.txt"
}
wait_until 60 has_leak || fail "no slow_leak: $(cat "${SCRATCH}/top.txt")"
grep -q "^Type: inuse_space$" "${SCRATCH}/top.txt" || fail "not inuse_space: $(head -12 "${SCRATCH}/top.txt")"
grep -q "steady_cache [^ ]*tests/fixtures/src/serve_app.c:3[0-9]$" <<< "$(sed -n '/flat%/{n;p;q}' "${SCRATCH}/top.txt")" ||
  fail "-top does not start with steady_cache and its line: $(head -14 "${SCRATCH}/top.txt")"
pass "go tool pprof -top over HTTP names steady_cache and slow_leak with their files and lines"

# 2. The pid label: each worker's own bytes; the parent's are not a worker's.
pprof -tags "${SERVE_URL}/debug/pprof/heap" > "${SCRATCH}/tags.txt"
for w in "${workers[@]}"; do
  grep -Eq "^ +[0-9.]+MB \([ 0-9.]+%\): ${w}$" "${SCRATCH}/tags.txt" || fail "no pid ${w} label: $(cat "${SCRATCH}/tags.txt")"
done
grep -q "): ${SCRATCH}/serve_app$" "${SCRATCH}/tags.txt" || fail "no program label: $(cat "${SCRATCH}/tags.txt")"
grep -q "): jemalloc$" "${SCRATCH}/tags.txt" || fail "no backend label: $(cat "${SCRATCH}/tags.txt")"
pprof -top -tagfocus "pid=${workers[0]}" "${SERVE_URL}/debug/pprof/heap" > "${SCRATCH}/one.txt"
grep -q "of [0-9.]*MB total" "${SCRATCH}/one.txt" || fail "-tagfocus pid: $(head -8 "${SCRATCH}/one.txt")"
pass "each sample is labelled with its pid, program and backend; -tagfocus pid=${workers[0]} shows one worker"

# 3. ?seconds=4: only what grew, each worker's under its pid.
pprof -top "${SERVE_URL}/debug/pprof/heap?seconds=4" > "${SCRATCH}/growth.txt"
grep -q " slow_leak$" "${SCRATCH}/growth.txt" || fail "the growth does not show slow_leak: $(cat "${SCRATCH}/growth.txt")"
if grep -q "steady_cache" "${SCRATCH}/growth.txt"; then fail "the growth shows the steady cache: $(cat "${SCRATCH}/growth.txt")"; fi
pprof -tags "${SERVE_URL}/debug/pprof/heap?seconds=4" > "${SCRATCH}/growth-tags.txt"
for w in "${workers[@]}"; do
  grep -Eq "\): ${w}$" "${SCRATCH}/growth-tags.txt" || fail "no growth of worker ${w}: $(cat "${SCRATCH}/growth-tags.txt")"
done
pass "?seconds=4 shows slow_leak's growth in each worker, not steady_cache"

# 4. /debug/pprof/allocs is the heap (the path Alloy's pyroscope.scrape
# fetches for memory).
pprof -top "${SERVE_URL}/debug/pprof/allocs" > "${SCRATCH}/allocs.txt"
grep -q " steady_cache$" "${SCRATCH}/allocs.txt" || fail "allocs: $(head -12 "${SCRATCH}/allocs.txt")"
pass "/debug/pprof/allocs serves the same heap profile"

kill -TERM "${SERVE_PID}"
wait "${SERVE_PID}" || fail "serve did not exit 0 on SIGTERM"
kill -TERM "${app}"
wait "${app}" || fail "the service's exit code changed"
pass "serve and the service end cleanly on SIGTERM"
