#!/usr/bin/env bash
# memprofile exec --backend none: the control library alone, no heap
# profiler. A service carries it at no cost and still learns where its
# memory goes: status gives each process's RSS, the allocator's view and the
# gap by cause; a snapshot is a memory record (memprofile-mem.PID.SEQ.mem.json)
# that collect carries; report reads the records with no image and names
# the bucket that grew. Three services, each growing in one bucket, with
# the tolerance each check allows:
#   frag     100 MiB of small blocks, all but 1/64 freed: the allocator
#            keeps 80-110 MiB more than the app uses
#   threads  16 threads x 4 MiB of stack: 56-72 MiB anonymous outside the
#            allocator, the heap flat (< 1 MiB)
#   heap     64 MiB kept from malloc: the heap grew 60-68 MiB
# Then a prefork tree (every process served, start refused in one line),
# scheduled records and their --trend, and the refusals (--dormant).
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

gcc -O1 -g -pthread -o "${SCRATCH}/membuckets" "${E2E_ROOT}/tests/fixtures/src/membuckets.c"
gcc -O1 -g -o "${SCRATCH}/prefork" "${E2E_ROOT}/tests/fixtures/src/prefork.c"

# mib JSON FILTER: a jq number, in whole MiB.
mib() { jq "(${2}) / 1048576 | floor" "$1"; }
# within WHAT N LOW HIGH
within() { (($2 >= $3 && $2 <= $4)) || fail "$1: ${2} MiB, not within ${3}-${4} MiB"; }

for mode in frag threads heap; do
  out="${SCRATCH}/out-${mode}"
  start_service "${out}" "${SCRATCH}/${mode}.log" --backend none -- \
    "${SCRATCH}/membuckets" "${mode}" "${SCRATCH}/go-${mode}" "${SCRATCH}/ready-${mode}"
  pid="${SERVICE_PID}"
  # Only the control library is preloaded, and the start line says what it does.
  tr '\0' '\n' < "/proc/${pid}/environ" | grep -x "LD_PRELOAD=${CTL_LIBRARY}" > /dev/null ||
    fail "${mode}: LD_PRELOAD: $(tr '\0' '\n' < "/proc/${pid}/environ" | grep LD_PRELOAD)"
  grep -q "watching the memory of .*membuckets with the control library alone" "${SCRATCH}/${mode}.log" ||
    fail "${mode}: start line: $(cat "${SCRATCH}/${mode}.log")"
  first="$("${MEMPROFILE}" snapshot "${pid}" --output-dir "${out}")" || fail "${mode}: the first snapshot"
  [[ "${first}" == "${out}/memprofile-mem.${pid}.1.mem.json" ]] || fail "${mode}: the snapshot is ${first}"
  touch "${SCRATCH}/go-${mode}"
  wait_until 120 test -e "${SCRATCH}/ready-${mode}" || fail "${mode}: the memory did not grow"
  "${MEMPROFILE}" snapshot "${pid}" --output-dir "${out}" > /dev/null || fail "${mode}: the second snapshot"
  "${MEMPROFILE}" status "${pid}" --output-dir "${out}" --json > "${SCRATCH}/${mode}-status.json" || fail "${mode}: status"
  jq -e '.processes[0] | .backend == "none" and .allocator.name == "glibc" and .recording == false' \
    "${SCRATCH}/${mode}-status.json" > /dev/null || fail "${mode}: status: $(jq -c '.processes[0]' "${SCRATCH}/${mode}-status.json")"
  kill -KILL "${pid}"
  # No image: nothing is symbolised.
  "${MEMPROFILE}" report "${out}" > "${SCRATCH}/${mode}.txt" 2>&1 || fail "${mode}: report: $(cat "${SCRATCH}/${mode}.txt")"
  "${MEMPROFILE}" report --json "${out}" > "${SCRATCH}/${mode}.json" || fail "${mode}: report --json"
  grep -q "^memprofile report: memory records of 1 process, no heap profile" "${SCRATCH}/${mode}.txt" ||
    fail "${mode}: report: $(head -3 "${SCRATCH}/${mode}.txt")"
  first_rec='.processes[0].records[0]'
  last_rec='.processes[0].records[-1]'
  case "${mode}" in
    frag)
      kept=$(mib "${SCRATCH}/${mode}.json" "(${last_rec}.allocator.resident - ${last_rec}.allocator.allocated) - (${first_rec}.allocator.resident - ${first_rec}.allocator.allocated)")
      within "frag: the allocator's retention grew" "${kept}" 80 110
      grep -q "^  where it grew: .*the allocator holds .* more than the app uses (resident - allocated): fragmentation or retention; MALLOC_ARENA_MAX" \
        "${SCRATCH}/${mode}.txt" || fail "frag: verdict: $(grep -A1 '^memory of' "${SCRATCH}/${mode}.txt")"
      said="retention +${kept} MiB" ;;
    threads)
      heap=$(mib "${SCRATCH}/${mode}.json" "${last_rec}.allocator.allocated - ${first_rec}.allocator.allocated")
      anon=$(mib "${SCRATCH}/${mode}.json" "(${last_rec}.anon - ${last_rec}.allocator.resident) - (${first_rec}.anon - ${first_rec}.allocator.resident)")
      within "threads: the heap grew" "${heap}" 0 0
      within "threads: anonymous memory outside the allocator grew" "${anon}" 56 72
      grep -q "^  where it grew: the heap is flat (.*); RSS grew by .* outside the allocator: anonymous mappings (the app's own mmap, thread stacks" \
        "${SCRATCH}/${mode}.txt" || fail "threads: verdict: $(grep -A1 '^memory of' "${SCRATCH}/${mode}.txt")"
      said="anonymous outside the allocator +${anon} MiB, heap +${heap} MiB" ;;
    heap)
      heap=$(mib "${SCRATCH}/${mode}.json" "${last_rec}.allocator.allocated - ${first_rec}.allocator.allocated")
      within "heap: the heap grew" "${heap}" 60 68
      grep -q "^  where it grew: the heap grew by .*: a heap profile names the sites (memprofile exec --backend jemalloc or heaptrack)" \
        "${SCRATCH}/${mode}.txt" || fail "heap: verdict: $(grep -A1 '^memory of' "${SCRATCH}/${mode}.txt")"
      said="heap +${heap} MiB" ;;
  esac
  pass "none, ${mode}: ${said}; report names the bucket from the records alone"
done

# The records travel: collect carries them, report reads the archive.
"${LAUNCHER}" collect --backend none --output-dir "${SCRATCH}/out-threads" --out "${SCRATCH}/threads.tar" --settle 0 \
  --timeout 10 2> /dev/null || fail "collect"
"${MEMPROFILE}" report --json "${SCRATCH}/threads.tar" > "${SCRATCH}/archive.json" || fail "report of the archive"
jq -e '.processes[0].verdict | contains("outside the allocator")' "${SCRATCH}/archive.json" > /dev/null ||
  fail "the archive's report: $(jq -c '.processes[0].verdict' "${SCRATCH}/archive.json")"
report_refuses() {
  local out
  out="$("${MEMPROFILE}" report "$@" 2>&1)" && fail "report $* passed"
  grep -q "holds memory records only, no heap profile" <<<"${out}" || fail "report $*: ${out}"
}
report_refuses --pprof "${SCRATCH}/x.pb.gz" "${SCRATCH}/out-threads"
report_refuses --flamegraph "${SCRATCH}/x.svg" "${SCRATCH}/out-threads"
pass "collect carries the records and report reads the archive; --pprof and --flamegraph refused in one line"

# A tree: every forked worker is served with its own memory, and start
# says in one line that there is nothing to start.
out="${SCRATCH}/tree"
start_service "${out}" "${SCRATCH}/tree.log" --backend none --snapshot-every 1s -- "${SCRATCH}/prefork" 2 600 256 wait
parent="${SERVICE_PID}"
wait_until 60 sockets_are "${out}" 3 || fail "tree: not 3 sockets: $(ls "${out}")"
"${MEMPROFILE}" status "${parent}" --output-dir "${out}" --json > "${SCRATCH}/tree.json" || fail "tree: status"
[[ "$(jq -c '.tree | {failed, processes, served}' "${SCRATCH}/tree.json")" == '{"failed":0,"processes":3,"served":3}' ]] ||
  fail "tree: status: $(jq -c .tree "${SCRATCH}/tree.json")"
[[ "$(jq '[.processes[] | select(.allocator.name == "glibc" and .memory.rss > 0)] | length' "${SCRATCH}/tree.json")" == 3 ]] ||
  fail "tree: each process's memory: $(jq -c '[.processes[] | {pid, allocator, memory}]' "${SCRATCH}/tree.json")"
"${MEMPROFILE}" status "${parent}" --output-dir "${out}" > "${SCRATCH}/tree.txt" || fail "tree: status text"
[[ "$(grep -c "^pid [0-9]*: no heap profiler (--backend none): its memory only$" "${SCRATCH}/tree.txt")" == 3 ]] ||
  fail "tree: status text: $(cat "${SCRATCH}/tree.txt")"
rc=0
"${MEMPROFILE}" start "${parent}" --output-dir "${out}" > /dev/null 2> "${SCRATCH}/start.err" || rc=$?
((rc == 1)) || fail "tree: start exited ${rc}"
[[ "$(grep -c "no heap profiler is loaded (memprofile exec --backend none): there is nothing to start" "${SCRATCH}/start.err")" == 3 ]] ||
  fail "tree: start: $(cat "${SCRATCH}/start.err")"
# Scheduled records, in every process, without a command.
mapfile -t workers < <(workers_of "${parent}")
records_of() { find "${out}" -maxdepth 1 -name "memprofile-mem.$1.*.mem.json" | wc -l; }
has_records() { (($(records_of "$1") >= 3)); }
for p in "${parent}" "${workers[@]}"; do
  wait_until 60 has_records "${p}" || fail "tree: pid ${p} has $(records_of "${p}") records"
done
kill -KILL "${workers[@]}" "${parent}"
"${MEMPROFILE}" report "${out}" --trend "${SCRATCH}/trend.svg" > "${SCRATCH}/tree-report.txt" || fail "tree: report"
grep -q "^memprofile report: memory records of 3 processes" "${SCRATCH}/tree-report.txt" ||
  fail "tree: report: $(head -5 "${SCRATCH}/tree-report.txt")"
for w in "${workers[@]}"; do
  grep -Eq "^ +${w} +${parent} +[0-9]+ " "${SCRATCH}/tree-report.txt" || fail "tree: worker ${w} not in the table"
done
grep -q 'data-name="RSS (' "${SCRATCH}/trend.svg" || fail "tree: the trend has no RSS line"
grep -q 'data-name="allocated (the heap) (' "${SCRATCH}/trend.svg" || fail "tree: the trend has no heap line"
pass "tree: 3 processes served with their memory, start refused in one line each, scheduled records in each, report and --trend"

rc=0
"${LAUNCHER}" exec --strict --backend none --dormant --output-dir "${out}" -- /bin/true 2> "${SCRATCH}/dormant.err" || rc=$?
((rc == 3)) || fail "--dormant: exit ${rc}: $(cat "${SCRATCH}/dormant.err")"
grep -q "there is nothing to keep dormant" "${SCRATCH}/dormant.err" || fail "--dormant: $(cat "${SCRATCH}/dormant.err")"
pass "--backend none --dormant refused in one line"
