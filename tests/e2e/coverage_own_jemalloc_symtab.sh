#!/usr/bin/env bash
# A Rust service on a jemalloc that exports nothing (tikv-jemallocator's
# build: prefix _rjem_, --without-export, a #[global_allocator] over it;
# tests/fixtures/allocators.sh rust-rjem): its _rjem_mallctl is a local
# symbol of the executable. The control library finds it in the program's
# symbol table (ctl/symtab.c), checks it answers mallctl("version") as
# jemalloc, and drives it: a snapshot of the live process names
# planted_growth, stop and start reach it, --dormant starts it with recording
# off, and serve's scrape reads its heap. Stripped, with no debug file, exec
# and check say in one line that start, stop and snapshot cannot reach it,
# --dormant is refused, and the interval and exit dumps stay: the interval
# is exec's --dump-every-mb, and its dumps hold the planted heap.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

command -v go > /dev/null || fail "go missing: run scripts/install-deps.sh (golang-go)"
export GOCACHE="${SCRATCH}/gocache" GOPATH="${SCRATCH}/gopath" PPROF_TMPDIR="${SCRATCH}/pprof"
fx="$(allocator_fixtures)"
JEMALLOC="$(preload_dist jemalloc amd64)/libjemalloc.so.2"
program="${fx}/rust-rjem"
symbols="$(nm "${program}")"
grep -qx "[0-9a-f]* t _rjem_mallctl" <<< "${symbols}" || fail "the fixture's _rjem_mallctl is not a local symbol: $(grep mallctl <<< "${symbols}")"

# run NAME [exec options]: the program under exec, holding its heap for 2 minutes.
run() {
  local name="$1"
  shift
  mkdir -p "${SCRATCH}/${name}"
  PLANTED_HOLD=120 "${LAUNCHER}" exec --backend jemalloc --preload "${JEMALLOC}" --output-dir "${SCRATCH}/${name}" \
    --min-free-mb 1 "$@" -- "${PROGRAM:-${program}}" > "${SCRATCH}/${name}.out" 2> "${SCRATCH}/${name}.log" &
  APP=$!
  track "${APP}"
  wait_until 60 test -S "${SCRATCH}/${name}/memprofile-ctl.${APP}.sock" || fail "${name}: no socket: $(cat "${SCRATCH}/${name}.log")"
}
ctl() { "${MEMPROFILE}" "$1" "${APP}" --output-dir "${SCRATCH}/${name}" "${@:2}"; }
recording() { ctl status --json | jq -e --argjson on "$1" '.processes[0].recording == $on' > /dev/null; }

# 1. Recording from the start: the start line, a snapshot naming
# planted_growth, stop and start.
name=live
run live
grep -q "its _rjem_mallctl is not exported: the control library finds it in the program's symbol table" \
  "${SCRATCH}/live.log" || fail "start line: $(cat "${SCRATCH}/live.log")"
wait_until 60 grep -q kept "${SCRATCH}/live.out" || fail "the program did not plant its heap"
ctl snapshot > "${SCRATCH}/snap" 2>&1 || fail "snapshot: $(cat "${SCRATCH}/snap")"
"${MEMPROFILE}" report --rootfs / --json "${SCRATCH}/live" > "${SCRATCH}/live.json" 2> "${SCRATCH}/report.err" ||
  fail "report: $(cat "${SCRATCH}/report.err")"
jq -e '.in_use[0].site.function | test("planted_growth")' "${SCRATCH}/live.json" > /dev/null ||
  fail "the snapshot's first site is not planted_growth: $(jq -c '.in_use[0].site' "${SCRATCH}/live.json")"
ctl stop > /dev/null 2>&1 || fail "stop"
recording false || fail "not stopped: $(ctl status 2>&1)"
ctl start > /dev/null 2>&1 || fail "start"
recording true || fail "not started: $(ctl status 2>&1)"
pass "the jemalloc a Rust program carries without exporting anything: found in its symbol table; a snapshot names planted_growth; stop and start reach it"

# 2. serve reads its heap: go tool pprof names planted_growth.
start_serve "${SCRATCH}/serve.log" --output-dir "${SCRATCH}/live" --min-interval 1 "${APP}"
go tool pprof -top "${SERVE_URL}/debug/pprof/heap" > "${SCRATCH}/top.txt" 2> "${SCRATCH}/pprof.err" ||
  fail "go tool pprof: $(cat "${SCRATCH}/pprof.err")"
grep -q "planted_growth" "${SCRATCH}/top.txt" || fail "serve's profile misses planted_growth: $(head -12 "${SCRATCH}/top.txt")"
kill -KILL "${APP}" "${SERVE_PID}"
pass "serve: go tool pprof -top over HTTP names planted_growth"

# 3. Dormant: recording off until start.
name=dormant
run dormant --dormant
recording false || fail "dormant: recording at start: $(ctl status 2>&1)"
ctl start > /dev/null 2>&1 || fail "dormant: start"
recording true || fail "dormant: not started: $(ctl status 2>&1)"
kill -KILL "${APP}"
pass "--dormant: started with recording off, and start reaches it"

# 4. Stripped, no debug file: said in one line by check and exec; snapshot
# refused with the reason; --dormant refused.
cp "${program}" "${SCRATCH}/rust-rjem-stripped"
strip "${SCRATCH}/rust-rjem-stripped"
"${MEMPROFILE}" check --preload "${JEMALLOC}" "${SCRATCH}/rust-rjem-stripped" > "${SCRATCH}/check.txt" 2>&1 || true
grep -q "the program is stripped and does not export its _rjem_mallctl" "${SCRATCH}/check.txt" ||
  fail "check: $(cat "${SCRATCH}/check.txt")"
name=stripped
PROGRAM="${SCRATCH}/rust-rjem-stripped" run stripped --dump-every-mb 16
grep -q "the program is stripped and does not export its _rjem_mallctl" "${SCRATCH}/stripped.log" ||
  fail "exec's start line: $(cat "${SCRATCH}/stripped.log")"
grep -q "here it dumps at exit and every 16 MiB allocated (--dump-every-mb)" "${SCRATCH}/stripped.log" ||
  fail "exec's start line does not say the interval: $(cat "${SCRATCH}/stripped.log")"
# 48 MiB planted: jemalloc's own interval dumps (PREFIX.PID.SEQ.iN.heap),
# which the control library had no part in.
wait_until 60 grep -q kept "${SCRATCH}/stripped.out" || fail "stripped: the program did not plant its heap"
interval="$(find "${SCRATCH}/stripped" -name "jeprof.${APP}.*.i*.heap" | wc -l)"
((interval >= 2)) || fail "--dump-every-mb 16: ${interval} interval dumps for 48 MiB: $(ls "${SCRATCH}/stripped")"
"${MEMPROFILE}" report --rootfs / --json "${SCRATCH}/stripped" > "${SCRATCH}/stripped.json" 2> "${SCRATCH}/report.err" ||
  fail "report of the interval dumps: $(cat "${SCRATCH}/report.err")"
# Stripped: the site is an address in the program, holding what it planted.
jq -e '.in_use[0] | (.site.module | endswith("/rust-rjem-stripped")) and .bytes_in_use >= 32 * 1048576' \
  "${SCRATCH}/stripped.json" > /dev/null ||
  fail "the interval dumps' first site is not the program's 32 MiB or more: $(jq -c '.in_use[0]' "${SCRATCH}/stripped.json")"
rc=0
ctl snapshot > "${SCRATCH}/snap-stripped" 2>&1 || rc=$?
if ((rc == 0)) || ! grep -q "neither its symbol table nor a debug file (by build-id or debuglink) names it" "${SCRATCH}/snap-stripped"; then
  fail "snapshot of the stripped program: exit ${rc}: $(cat "${SCRATCH}/snap-stripped")"
fi
kill -KILL "${APP}"
mkdir -p "${SCRATCH}/stripped-dormant"
PLANTED_HOLD=0 "${LAUNCHER}" exec --backend jemalloc --preload "${JEMALLOC}" --output-dir "${SCRATCH}/stripped-dormant" \
  --min-free-mb 1 --dormant -- "${SCRATCH}/rust-rjem-stripped" > /dev/null 2> "${SCRATCH}/stripped-dormant.log" || true
grep -q "running unprofiled: .*LAUNCHER_CONFIG: .*is stripped and does not export its _rjem_mallctl" \
  "${SCRATCH}/stripped-dormant.log" || fail "dormant, stripped: $(cat "${SCRATCH}/stripped-dormant.log")"
pass "stripped with no debug file: check and exec say start, stop and snapshot cannot reach it; --dump-every-mb 16 gave ${interval} interval dumps holding the planted heap; snapshot refused naming why; --dormant refused"
