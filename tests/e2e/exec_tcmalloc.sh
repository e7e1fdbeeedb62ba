#!/usr/bin/env bash
# A program with gperftools' tcmalloc and its heap profiler linked in
# (tests/fixtures/allocators.sh tc-heapprof) defines malloc itself, so no
# preload sees its heap: check says HEAP_OWN_TCMALLOC (READY), and memprofile
# exec drives that profiler in place of the preload the user named. The
# oracle is gperftools' own dump read by go tool pprof: report ranks the same
# function first with the same bytes. A child forked without exec writes
# dumps of its own pid (not over its parent's), and snapshot reaches a
# program that exports HeapProfilerDump.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

command -v go > /dev/null || fail "go missing (golang-go): run scripts/install-deps.sh"
fx="$(allocator_fixtures)"
HEAPTRACK="$(preload_dist heaptrack amd64)/libheaptrack_preload.so"

verdict="$("${MEMPROFILE}" check --root / --preload "${HEAPTRACK}" "${fx}/tc-heapprof")"
grep -q "info HEAP_OWN_TCMALLOC: .* carries gperftools' tcmalloc with its heap profiler" <<< "${verdict}" ||
  fail "no HEAP_OWN_TCMALLOC: ${verdict}"
verdict_says tc-heapprof "${verdict}" yes
pass "check: tc-heapprof is READY with HEAP_OWN_TCMALLOC"

# 1. Driven in place of heaptrack: report and go tool pprof agree on the dump.
mkdir "${SCRATCH}/one"
"${LAUNCHER}" exec --backend heaptrack --preload "${HEAPTRACK}" --output-dir "${SCRATCH}/one" --min-free-mb 1 -- \
  "${fx}/tc-heapprof" > /dev/null 2> "${SCRATCH}/one.log" || fail "exec: $(cat "${SCRATCH}/one.log")"
grep -q "with tcmalloc (gperftools' heap profiler, linked into it, through HEAPPROFILE, in place of heaptrack" \
  "${SCRATCH}/one.log" || fail "start line: $(cat "${SCRATCH}/one.log")"
mapfile -t dumps < <(find "${SCRATCH}/one" -name 'tcmalloc.*.heap')
((${#dumps[@]} == 1)) || fail "not one dump: $(ls "${SCRATCH}/one")"
"${MEMPROFILE}" report --json --rootfs / "${SCRATCH}/one" > "${SCRATCH}/one.json" || fail "report: $(cat "${SCRATCH}/one.json")"
top="$(jq -r '.in_use[0] | "\(.site.function) \(.bytes_in_use)"' "${SCRATCH}/one.json")"
[[ "${top}" == "planted_growth 50331648" ]] || fail "report's top site: ${top}"
go tool pprof -top -inuse_space "${fx}/tc-heapprof" "${dumps[0]}" > "${SCRATCH}/one.top" 2> "${SCRATCH}/pprof.err" ||
  fail "go tool pprof: $(cat "${SCRATCH}/pprof.err")"
grep -Eq '^ +49152kB +[0-9.]+% +[0-9.]+% +49152kB +[0-9.]+% +planted_growth$' "${SCRATCH}/one.top" ||
  fail "go tool pprof does not rank planted_growth's 48 MiB: $(head -12 "${SCRATCH}/one.top")"
pass "exec drives gperftools' heap profiler in place of heaptrack: report and go tool pprof both give planted_growth 48 MiB"

# --backend tcmalloc, named: the control library alone is what must load;
# a program without the heap profiler runs unprofiled, said in one line.
mkdir "${SCRATCH}/named"
"${LAUNCHER}" exec --backend tcmalloc --output-dir "${SCRATCH}/named" --min-free-mb 1 -- "${fx}/tc-heapprof" \
  > /dev/null 2> "${SCRATCH}/named.log" || fail "exec --backend tcmalloc: $(cat "${SCRATCH}/named.log")"
[[ "$(find "${SCRATCH}/named" -name 'tcmalloc.*.heap' | wc -l)" == 1 ]] || fail "--backend tcmalloc: $(cat "${SCRATCH}/named.log")"
"${LAUNCHER}" exec --backend tcmalloc --output-dir "${SCRATCH}/named" --min-free-mb 1 -- "${fx}/plain" \
  > /dev/null 2> "${SCRATCH}/plain.log" || fail "plain under --backend tcmalloc did not run: $(cat "${SCRATCH}/plain.log")"
grep -q "running unprofiled: .*LAUNCHER_CONFIG: .*plain does not carry gperftools' heap profiler" "${SCRATCH}/plain.log" ||
  fail "--backend tcmalloc on a program without it: $(cat "${SCRATCH}/plain.log")"
pass "--backend tcmalloc named: driven where the program carries the profiler, refused in one line where not"

# Another program run by the service gets none of gperftools' settings: it
# would write into the output directory with no guard.
PLANTED_EXEC=/usr/bin/env "${LAUNCHER}" exec --backend heaptrack --preload "${HEAPTRACK}" --output-dir "${SCRATCH}/named" \
  --min-free-mb 1 -- "${fx}/tc-heapprof" > "${SCRATCH}/other.env" 2> "${SCRATCH}/other.log" ||
  fail "exec: $(cat "${SCRATCH}/other.log")"
grep -q "^PLANTED_EXEC=" "${SCRATCH}/other.env" || fail "the other program did not run: $(cat "${SCRATCH}/other.log")"
if grep -E "^(HEAPPROFILE|HEAP_PROFILE_[A-Z_]*)=" "${SCRATCH}/other.env"; then
  fail "another program got gperftools' settings"
fi
pass "another program the service runs gets no HEAPPROFILE"

# A process that becomes a user who cannot write the output directory: its
# dumps follow it to its own subdirectory (the prefix gperftools read at
# start names the top one).
mkdir "${SCRATCH}/setuid"
chmod 0755 "${SCRATCH}/setuid"
chmod 0755 "${SCRATCH}"  # nobody keeps gid 0: the group bits apply to it
PLANTED_SETUID=65534 "${LAUNCHER}" exec --backend heaptrack --preload "${HEAPTRACK}" --output-dir "${SCRATCH}/setuid" \
  --min-free-mb 1 -- "${fx}/tc-heapprof" > /dev/null 2> "${SCRATCH}/setuid.log" || fail "exec: $(cat "${SCRATCH}/setuid.log")"
mapfile -t dumps < <(find "${SCRATCH}/setuid" -name 'tcmalloc.*.heap')
if ((${#dumps[@]} != 1)) || [[ "${dumps[0]}" != "${SCRATCH}/setuid/proc."*/tcmalloc.*.heap ]]; then
  fail "setuid: not one dump in the process's subdirectory: $(find "${SCRATCH}/setuid") $(cat "${SCRATCH}/setuid.log")"
fi
[[ "$(stat -c %u "${dumps[0]}")" == 65534 ]] || fail "setuid: the dump is not the new user's: $(stat -c %u "${dumps[0]}")"
"${MEMPROFILE}" report --rootfs / "${SCRATCH}/setuid" > "${SCRATCH}/setuid.report" 2>&1 ||
  fail "report: $(cat "${SCRATCH}/setuid.report")"
grep -q "planted_growth" "${SCRATCH}/setuid.report" || fail "setuid: $(head -12 "${SCRATCH}/setuid.report")"
pass "a process that becomes nobody: its dumps follow it to its own subdirectory, and report reads them"

# 2. A child forked without exec: its dumps carry its pid, its parent's stay.
mkdir "${SCRATCH}/fork"
PLANTED_FORK=1 "${LAUNCHER}" exec --backend jemalloc --preload "$(preload_dist jemalloc amd64)/libjemalloc.so.2" \
  --output-dir "${SCRATCH}/fork" --min-free-mb 1 -- "${fx}/tc-heapprof" > /dev/null 2> "${SCRATCH}/fork.log" ||
  fail "exec: $(cat "${SCRATCH}/fork.log")"
mapfile -t dumps < <(find "${SCRATCH}/fork" -name 'tcmalloc.*.heap' | sort)
((${#dumps[@]} == 2)) || fail "not two dumps: $(ls "${SCRATCH}/fork")"
[[ "${dumps[0]%.*.heap}" != "${dumps[1]%.*.heap}" ]] || fail "one pid for both: ${dumps[*]}"
for dump in "${dumps[@]}"; do
  pid="${dump##*/tcmalloc.}" pid="${pid%%.*}"
  [[ -e "${SCRATCH}/fork/memprofile-proc.${pid}.json" ]] || fail "${dump}: no process ${pid} in the tree: $(ls "${SCRATCH}/fork")"
  "${MEMPROFILE}" report --json --rootfs / "${dump}" > "${SCRATCH}/fork.${pid}.json" ||
    fail "report ${dump}: $(cat "${SCRATCH}/fork.${pid}.json")"
  [[ "$(jq -r '.in_use[0] | "\(.site.function) \(.bytes_in_use)"' "${SCRATCH}/fork.${pid}.json")" == "planted_growth 50331648" ]] ||
    fail "pid ${pid}: $(head -c 600 "${SCRATCH}/fork.${pid}.json")"
done
pass "a child forked without exec: dumps of its own pid, planted_growth in both"

# 3. snapshot, where the program exports HeapProfilerDump.
mkdir "${SCRATCH}/live"
PLANTED_HOLD=120 "${LAUNCHER}" exec --backend heaptrack --preload "${HEAPTRACK}" --output-dir "${SCRATCH}/live" \
  --min-free-mb 1 -- "${fx}/tc-heapprof-export" > "${SCRATCH}/live.out" 2> "${SCRATCH}/live.log" &
pid=$!
track "${pid}"
printed() { grep -q kept "${SCRATCH}/live.out"; }
wait_until 60 printed || fail "the program did not start: $(cat "${SCRATCH}/live.log")"
wait_until 30 sockets_are "${SCRATCH}/live" 1 || fail "no control socket: $(ls "${SCRATCH}/live")"
"${MEMPROFILE}" snapshot "${pid}" --output-dir "${SCRATCH}/live" > "${SCRATCH}/snap.out" 2>&1 ||
  fail "snapshot: $(cat "${SCRATCH}/snap.out")"
[[ -s "${SCRATCH}/live/tcmalloc.${pid}.0001.heap" ]] || fail "no dump of pid ${pid}: $(ls "${SCRATCH}/live") $(cat "${SCRATCH}/snap.out")"
"${MEMPROFILE}" report --rootfs / "${SCRATCH}/live/tcmalloc.${pid}.0001.heap" > "${SCRATCH}/live.report" ||
  fail "report: $(cat "${SCRATCH}/live.report")"
grep -q "planted_growth" "${SCRATCH}/live.report" || fail "the live dump misses planted_growth: $(head -12 "${SCRATCH}/live.report")"
kill "${pid}"
pass "snapshot reaches gperftools' heap profiler through HeapProfilerDump while the program runs"
