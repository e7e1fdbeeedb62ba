#!/usr/bin/env bash
# memprofile serve for a Python pool under memray: gunicorn 23 with two
# forked workers in a Debian trixie root of the test's own (python3-memray
# 1.17), every interpreter tracked (exec --backend memray), serve run from
# outside the root as a sidecar would be. Each scrape marks every capture
# being written; go tool pprof over HTTP names the handler's Python line
# (app, /app/leaky.py), and the pid label gives each worker its own bytes.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

command -v go > /dev/null || fail "go missing: run scripts/install-deps.sh (golang-go)"
export GOCACHE="${SCRATCH}/gocache" GOPATH="${SCRATCH}/gopath" PPROF_TMPDIR="${SCRATCH}/pprof"
memray_root
leaky_wsgi_app
port="$(free_port)"
out="${root}/out"
mkdir -p "${out}"
in_root env -C /app /opt/memprofile/memprofile exec --backend memray --min-free-mb 1 --output-dir /out -- \
  /usr/bin/gunicorn --chdir /app -w 2 --timeout 0 -b "127.0.0.1:${port}" leaky:app > "${SCRATCH}/gunicorn.log" 2>&1 &
track $!
answers() { curl -fsS "http://127.0.0.1:${port}/" > /dev/null 2>&1; }
wait_until 120 answers || fail "gunicorn did not answer: $(tail -20 "${SCRATCH}/gunicorn.log")"
arbiter="$(arbiter_of "/usr/bin/gunicorn --chdir /app .*-b 127\.0\.0\.1:${port} ")" || fail "no arbiter: $(pgrep -af gunicorn)"
track "${arbiter}"
two_workers() { (($(workers_of "${arbiter}" | wc -l) == 2)); }
wait_until 60 two_workers || fail "not 2 workers of ${arbiter}"
mapfile -t workers < <(workers_of "${arbiter}")
wait_until 60 sockets_are "${out}" 3 || fail "not 3 sockets: $(ls "${out}")"
serve_each "${port}" 20 "${workers[@]}"

start_serve "${SCRATCH}/serve.log" --output-dir "${out}" "${arbiter}"
go tool pprof -top -lines "${SERVE_URL}/debug/pprof/heap" > "${SCRATCH}/top.txt" 2> "${SCRATCH}/pprof.err" ||
  fail "go tool pprof: $(cat "${SCRATCH}/pprof.err" "${SCRATCH}/serve.log")"
grep -Eq " app /app/leaky.py:${app_line}$" <<< "$(sed -n '/flat%/{n;p;q}' "${SCRATCH}/top.txt")" ||
  fail "-top does not rank the handler's line first: $(head -16 "${SCRATCH}/top.txt")"
pass "go tool pprof -top over HTTP ranks app (/app/leaky.py:${app_line}) first: memray's Python frames"

go tool pprof -tags "${SERVE_URL}/debug/pprof/heap" > "${SCRATCH}/tags.txt" 2> "${SCRATCH}/pprof.err" ||
  fail "go tool pprof -tags: $(cat "${SCRATCH}/pprof.err")"
for w in "${workers[@]}"; do
  grep -Eq "^ +[0-9.]+MB \([ 0-9.]+%\): ${w}$" "${SCRATCH}/tags.txt" || fail "no MB under pid ${w}: $(cat "${SCRATCH}/tags.txt")"
done
grep -q "): memray$" "${SCRATCH}/tags.txt" || fail "no backend label memray: $(cat "${SCRATCH}/tags.txt")"
pass "each gunicorn worker's bytes under its own pid label"
for _ in $(seq 1 10); do answers || fail "gunicorn stopped answering after the scrapes"; done
kill -TERM "${SERVE_PID}"
wait "${SERVE_PID}" || fail "serve did not exit 0"
pass "gunicorn goes on answering; serve ends on SIGTERM"
