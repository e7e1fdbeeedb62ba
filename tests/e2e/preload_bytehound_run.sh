#!/usr/bin/env bash
# bytehound built offline for amd64 (where the bundle is, see
# preload/README.md), run for real: LD_PRELOAD and exec record a .dat; a
# prefork server ends as without it; a dispatcher keeps the target with
# exec --target; an output it cannot open is only logged; report reads its
# .dat (and --base); dormant bytehound is driven by start and stop.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=preload/recipes.sh
source "${E2E_ROOT}/preload/recipes.sh"
# shellcheck source=preload/bytehound/recipe.sh
source "${E2E_ROOT}/preload/bytehound/recipe.sh"

bundle="$(find_bundle)"
if [[ -z "${bundle}" ]]; then
  echo "skip: no offline bundle (${BUNDLE_NAME} in $(preload_cache)/sources or ../shared/vendor/bytehound beside the clone): the offline build and its runs are not tested here"
  exit 77
fi

amd64="$(preload_dist bytehound amd64)"
grep -q '"build_path": "offline: ' "${amd64}/manifest.json" || fail "the manifest does not say the offline path built it"
grep -q '"source_pin": "git tree fff5177' "${amd64}/manifest.json" || fail "source pin"
"${MEMPROFILE}" check --preload "${amd64}/libbytehound.so" "${FIXTURES}/leak" > /dev/null || fail "check refuses the built library"
pass "built offline for amd64 ($(jq -r .build_flags "${amd64}/manifest.json"))"

# It records: LD_PRELOAD alone, and through exec with the control library
# (one .dat per process, the program's output and exit code unchanged).
mkdir -p "${SCRATCH}/plain"
want="$("${FIXTURES}/leak" leak 8)"
got="$(LD_PRELOAD="${amd64}/libbytehound.so" MEMORY_PROFILER_OUTPUT="${SCRATCH}/plain/p_%p.dat" "${FIXTURES}/leak" leak 8)" ||
  fail "the program fails under bytehound"
[[ "${got}" == "${want}" ]] || fail "bytehound changed the program's output: ${got}"
dat="$(find "${SCRATCH}/plain" -name 'p_*.dat' -size +1k -print -quit)"
[[ -n "${dat}" ]] || fail "LD_PRELOAD of bytehound wrote no .dat"
# A prefork server (tests/fixtures/src/prefork.c): workers forked without
# exec, ending with exit() and with _exit(), and short-lived children. The
# parent's profiler heap must not be shared with them (unpatched, the parent
# crashed at exit after its first fork: memfd-map-private.patch).
gcc -O1 -g -o "${SCRATCH}/prefork" "${E2E_ROOT}/tests/fixtures/src/prefork.c"
for mode in exit _exit; do
  mkdir -p "${SCRATCH}/prefork-${mode}"
  LD_PRELOAD="${amd64}/libbytehound.so" MEMORY_PROFILER_OUTPUT="${SCRATCH}/prefork-${mode}/p_%p.dat" \
    "${SCRATCH}/prefork" 2 5 64 "${mode}" 20 > "${SCRATCH}/prefork-${mode}.log" 2>&1 ||
    fail "a prefork server (workers end with ${mode}) fails under bytehound: exit $?: $(tail -3 "${SCRATCH}/prefork-${mode}.log")"
done
for mode in exit _exit; do
  find "${SCRATCH}/prefork-${mode}" -name 'p_*.dat' -size +1k | grep . > /dev/null || fail "the prefork server's parent wrote no .dat (${mode})"
done
pass "a prefork server under bytehound ends as it does without it (workers ending with exit and _exit, 20 short-lived children)"

out="${SCRATCH}/exec"
mkdir -p "${out}"
MEMPROFILE_CTL_LIBRARY="${BUILD_DIR}/ctl/libmemprofile_ctl.so" "${MEMPROFILE}" exec --backend bytehound \
  --preload "${amd64}/libbytehound.so" --output-dir "${out}" --min-free-mb 1 -- "${FIXTURES}/leak" leak 8 \
  > "${SCRATCH}/exec.log" 2>&1 || fail "exec --backend bytehound failed: $(cat "${SCRATCH}/exec.log")"
record="$(find "${out}" -name 'memprofile-proc.*.json' -print -quit)"
pid="${record##*memprofile-proc.}"
pid="${pid%.json}"
find "${out}" -name "memory-profiling_*_${pid}.dat" -size +1k | grep . > /dev/null || fail "exec wrote no .dat for process ${pid}: $(ls "${out}")"
pass "it records: LD_PRELOAD and exec --backend bytehound each wrote a .dat ($(stat -c %s "${dat}") bytes)"

# Through a dispatcher (a copy of the test program that execs the real
# one): alone, bytehound unsets LD_PRELOAD in the first process it loads
# into and the target is lost; exec --target sets
# MEMORY_PROFILER_TRACK_CHILD_PROCESSES=1 and the target records too.
cp "${FIXTURES}/leak" "${SCRATCH}/dispatcher"
mkdir -p "${SCRATCH}/lost" "${SCRATCH}/dispatched"
LD_PRELOAD="${amd64}/libbytehound.so" MEMORY_PROFILER_OUTPUT="${SCRATCH}/lost/memory-profiling_%e_%p.dat" \
  "${SCRATCH}/dispatcher" exec "${FIXTURES}/leak" leak 4 > /dev/null || fail "the dispatcher fails under bytehound"
# (The dispatcher's own .dat may never be opened: bytehound opens it from
# its event thread, and the dispatcher may exec first.)
! find "${SCRATCH}/lost" -name 'memory-profiling_leak_*.dat' | grep . > /dev/null ||
  fail "the target recorded without TRACK_CHILD_PROCESSES: the premise of the launcher's setting is gone"
MEMPROFILE_CTL_LIBRARY="${BUILD_DIR}/ctl/libmemprofile_ctl.so" "${MEMPROFILE}" exec --backend bytehound \
  --preload "${amd64}/libbytehound.so" --output-dir "${SCRATCH}/dispatched" --min-free-mb 1 --target "${FIXTURES}/leak" \
  -- "${SCRATCH}/dispatcher" exec "${FIXTURES}/leak" leak 4 > "${SCRATCH}/dispatched.log" 2>&1 ||
  fail "exec --target through a dispatcher: $(cat "${SCRATCH}/dispatched.log")"
target_dat="$(find "${SCRATCH}/dispatched" -name 'memory-profiling_leak_*.dat' -print -quit)"
[[ -n "${target_dat}" ]] || fail "exec --target: the target wrote no .dat: $(ls "${SCRATCH}/dispatched")"
"${MEMPROFILE}" report --json --rootfs / "${target_dat}" > "${SCRATCH}/dispatched.json" || fail "report of the target"
jq -e '.in_use[0].site.function == "leaky_function" and .in_use[0].bytes_in_use >= 4194304' "${SCRATCH}/dispatched.json" > /dev/null ||
  fail "the target's .dat: $(jq -c '.in_use[0]' "${SCRATCH}/dispatched.json")"
pass "a dispatcher: alone, bytehound loses the exec'd target; exec --target keeps it (TRACK_CHILD_PROCESSES), whose .dat names leaky_function"

# An output bytehound cannot open is only logged, never an error of the
# program: the log file the launcher names is where it is said.
mkdir -p "${SCRATCH}/logged"
LD_PRELOAD="${amd64}/libbytehound.so" MEMORY_PROFILER_OUTPUT="${SCRATCH}/no/such/dir/p_%p.dat" MEMORY_PROFILER_LOG=info \
  MEMORY_PROFILER_LOGFILE="${SCRATCH}/logged/bytehound_%e_%p.log" "${FIXTURES}/leak" leak 1 > /dev/null 2> "${SCRATCH}/logged.err" ||
  fail "an output bytehound cannot open failed the program"
log="$(find "${SCRATCH}/logged" -name 'bytehound_leak_*.log' -print -quit)"
grep -q "ERR Couldn't open '${SCRATCH}/no/such/dir/p_[0-9]*.dat' for writing" "${log:-/dev/null}" ||
  fail "the log does not say the output could not be opened: $(grep ERR "${log:-/dev/null}" | tail -3)"
pass "an output bytehound cannot open: the program runs on, and the log file says so ($(grep -m1 -o "ERR Couldn't open .*" "${log}" | sed "s|${SCRATCH}|SCRATCH|"))"

# report reads the .dat: the leak's 8 MiB are leaky_function's, in the
# plain run and in exec's output directory (the process record beside it).
for where in "${SCRATCH}/plain" "${out}"; do
  "${MEMPROFILE}" report --json --rootfs / "${where}" > "${SCRATCH}/report.json" ||
    fail "report ${where}: $(cat "${SCRATCH}/report.json")"
  jq -e '.in_use[0].site.function == "leaky_function" and .in_use[0].bytes_in_use >= 8388608' "${SCRATCH}/report.json" > /dev/null ||
    fail "report ${where}: $(jq -c '{top: .in_use[0], warnings}' "${SCRATCH}/report.json")"
done
"${MEMPROFILE}" report --rootfs / "${out}" > "${SCRATCH}/report.txt"
grep -q "^memprofile report: bytehound profile memory-profiling_leak_.*_${pid}.dat (pid ${pid})" "${SCRATCH}/report.txt" ||
  fail "report's header: $(head -2 "${SCRATCH}/report.txt")"
pass "report reads bytehound's .dat: leaky_function holds the leak's 8 MiB, plain and through exec"
# --base: the end of an earlier run (2 MiB kept) is what the later run's
# growth (8 MiB kept) is measured from.
mkdir -p "${SCRATCH}/early"
LD_PRELOAD="${amd64}/libbytehound.so" MEMORY_PROFILER_OUTPUT="${SCRATCH}/early/p_%p.dat" "${FIXTURES}/leak" leak 2 > /dev/null ||
  fail "the earlier run fails under bytehound"
early="$(find "${SCRATCH}/early" -name 'p_*.dat' -print -quit)"
"${MEMPROFILE}" report --json --rootfs / --base "${early}" "${dat}" > "${SCRATCH}/base.json" ||
  fail "report --base: $(cat "${SCRATCH}/base.json")"
jq -e --arg early "${early}" '.growth[0].site.function == "leaky_function" and .growth[0].growth == 6291456
    and .snapshots[0].file == $early' "${SCRATCH}/base.json" > /dev/null ||
  fail "report --base: $(jq -c '{g: .growth[0], s: [.snapshots[].file]}' "${SCRATCH}/base.json")"
[[ "$("${MEMPROFILE}" report --rootfs / --base "${early}" "${dat}" | sed -n 1p)" == *"the first is --base $(basename "${early}")'s last"* ]] ||
  fail "the header does not name the base"
pass "report --base EARLIER.dat LATER.dat: leaky_function gained 6 MiB (2 MiB kept, then 8)"

# Dormant, then driven: the launcher says it started dormant; attached says
# recording off, then on; start and stop are bytehound's SIGUSR1 toggle,
# sent to the control thread alone, so the service's own sleeps are never
# cut short (EINTR); a snapshot says in one line that bytehound writes one
# file; status says off after stop; what was kept while recording is in the
# .dat (part of what the service kept, never all of it), and report reads it.
gcc -O1 -g -o "${SCRATCH}/ticker" "${E2E_ROOT}/tests/fixtures/src/ticker.c"
dormant="${SCRATCH}/dormant"
mkdir -p "${dormant}"
MEMPROFILE_CTL_LIBRARY="${BUILD_DIR}/ctl/libmemprofile_ctl.so" "${MEMPROFILE}" exec --dormant --backend bytehound \
  --preload "${amd64}/libbytehound.so" --output-dir "${dormant}" --min-free-mb 1 -- "${SCRATCH}/ticker" 600 "${SCRATCH}/ticker.stop" \
  > "${SCRATCH}/dormant.log" 2>&1 &
service=$!
for _ in $(seq 600); do
  record="$(find "${dormant}" -name 'memprofile-proc.*.json' -print -quit)"
  [[ -n "${record}" ]] && find "${dormant}" -name 'memprofile-ctl.*.sock' | grep . > /dev/null && break
  kill -0 "${service}" 2> /dev/null || fail "the dormant service ended: $(cat "${SCRATCH}/dormant.log")"
  sleep 0.1
done
pid="$(jq -r .pid "${record}")"
log_says "${SCRATCH}/dormant.log" "loaded dormant (recording off until memprofile start): ${SCRATCH}/ticker with bytehound" ||
  fail "not dormant: $(cat "${SCRATCH}/dormant.log")"
"${MEMPROFILE}" attached "${pid}" --window 0 --json > "${SCRATCH}/attached0.json" 2> /dev/null || true
jq -e '.mapped and .backend == "bytehound" and .recording == false' "${SCRATCH}/attached0.json" > /dev/null ||
  fail "attached while dormant: $(cat "${SCRATCH}/attached0.json")"
"${MEMPROFILE}" status "${pid}" | grep "^pid ${pid}: bytehound, recording off" > /dev/null || fail "dormant status: $("${MEMPROFILE}" status "${pid}")"
"${MEMPROFILE}" start "${pid}" > /dev/null || fail "start"
"${MEMPROFILE}" attached "${pid}" --window 0 --json > "${SCRATCH}/attached1.json" 2> /dev/null || true
jq -e '.mapped and .recording == true' "${SCRATCH}/attached1.json" > /dev/null || fail "attached after start: $(cat "${SCRATCH}/attached1.json")"
"${MEMPROFILE}" status "${pid}" | grep "^pid ${pid}: bytehound, recording on" > /dev/null || fail "status after start"
rc=0
"${MEMPROFILE}" snapshot "${pid}" > /dev/null 2> "${SCRATCH}/snap.err" || rc=$?
[[ "${rc}" == 1 && "$(grep -c '^memprofile: ' "${SCRATCH}/snap.err")" == 1 &&
   "$(cat "${SCRATCH}/snap.err")" == *"bytehound writes one continuous file, not snapshots"* ]] ||
  fail "snapshot: exit ${rc}: $(cat "${SCRATCH}/snap.err")"
"${MEMPROFILE}" stop "${pid}" > /dev/null || fail "stop"
"${MEMPROFILE}" status "${pid}" | grep "^pid ${pid}: bytehound, recording off" > /dev/null || fail "status after stop: $("${MEMPROFILE}" status "${pid}")"
"${MEMPROFILE}" start "${pid}" > /dev/null || fail "start again"
sleep 1  # a second recorded after the second start (at least: more is as good)
touch "${SCRATCH}/ticker.stop"
wait "${service}" || fail "the service failed: $(cat "${SCRATCH}/dormant.log")"
grep -q "ticker: interrupted 0 times" "${SCRATCH}/dormant.log" || fail "start/stop cut the service's sleeps short: $(grep ticker: "${SCRATCH}/dormant.log")"
"${MEMPROFILE}" report --json --rootfs / "${dormant}" > "${SCRATCH}/dormant.json" || fail "report of the dormant run"
jq -e '.in_use[0].site.function == "ticker_keep"' "${SCRATCH}/dormant.json" > /dev/null ||
  fail "the dormant run's report: $(jq -c '{top: .in_use[0].site, warnings}' "${SCRATCH}/dormant.json")"
# Recording was off before the first start and between stop and the second
# start: the .dat holds part of what ticker_keep kept (64 KiB a block), never all.
blocks="$(sed -n 's/^ticker: .* kept \([0-9]*\) blocks$/\1/p' "${SCRATCH}/dormant.log")"
held="$(jq '.in_use[0].bytes_in_use' "${SCRATCH}/dormant.json")"
if [[ -z "${blocks}" ]] || ! ((held > 0 && held < blocks * 65536)); then
  fail "the .dat holds ${held} bytes of ticker_keep's ${blocks} blocks of 64 KiB: not the recording windows alone"
fi
pass "dormant bytehound: the start line, attached, status, start, a snapshot refused in one line, stop, start again; the service's sleeps never cut short; the .dat holds ${held} bytes of the $((blocks * 64)) KiB kept (the recording windows); report names ticker_keep"
