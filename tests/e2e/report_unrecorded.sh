#!/usr/bin/env bash
# The report says which processes of the tree it cannot see: under
# heaptrack (and bytehound) a worker forked without exec is not recorded,
# yet it leaves a record, "recorded":false, and `report DIR` names each such
# worker, its program and parent, and why, instead of showing the parent
# alone. A forked child that execs another program takes its record back
# (it is no process of the profiled program), and a service that forks many
# short-lived children keeps at most 512 records of the ended ones.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

gcc -O1 -g -o "${SCRATCH}/prefork" "${E2E_ROOT}/tests/fixtures/src/prefork.c"
HEAPTRACK="$(preload_dist heaptrack amd64)/libheaptrack_preload.so"
out="${SCRATCH}/out"
mkdir -p "${out}"
# Three workers that keep memory for 4 s and _exit, 600 short children besides.
"${LAUNCHER}" exec --backend heaptrack --preload "${HEAPTRACK}" --output-dir "${out}" --min-free-mb 1 -- \
  "${SCRATCH}/prefork" 3 40 64 _exit 600 > "${SCRATCH}/run.log" 2>&1 || fail "the service: $(cat "${SCRATCH}/run.log")"
mapfile -t workers < <(sed -n 's/^prefork: worker \([0-9]*\)$/\1/p' "${SCRATCH}/run.log")
((${#workers[@]} == 3)) || fail "not 3 workers: $(cat "${SCRATCH}/run.log")"
for w in "${workers[@]}"; do
  jq -e '.recorded == false and .backend == "heaptrack"' "${out}/memprofile-proc.${w}.json" > /dev/null ||
    fail "worker ${w}: no record that says it was not recorded: $(ls "${out}")"
done
records="$(find "${out}" -name 'memprofile-proc.*.json' | wc -l)"
((records <= 1 + 512 + 3)) || fail "${records} records kept of 604 processes"
"${MEMPROFILE}" report --rootfs / "${out}" > "${SCRATCH}/report" 2>&1 || fail "report: $(cat "${SCRATCH}/report")"
for w in "${workers[@]}"; do
  grep -qF "pid ${w} (${SCRATCH}/prefork, forked from" "${SCRATCH}/report" ||
    fail "worker ${w} is not named: $(cat "${SCRATCH}/report")"
done
[[ "$(grep -c "is a process of the tree this report cannot see: not recorded (heaptrack does not record a child forked without exec" "${SCRATCH}/report")" -ge 3 ]] ||
  fail "the report does not say why: $(cat "${SCRATCH}/report")"
pass "heaptrack: 3 unrecorded workers each named in the report with why; ${records} records kept of 604 processes"

# A forked child that execs another program leaves no record.
rm -rf "${out}" && mkdir -p "${out}"
# shellcheck disable=SC2016 # perl's variables
fork_exec='my $p = fork(); if (!$p) { exec("/bin/true"); } waitpid($p, 0); print "child $p\n";'
"${LAUNCHER}" exec --backend heaptrack --preload "${HEAPTRACK}" --output-dir "${out}" --min-free-mb 1 -- \
  /usr/bin/perl -e "${fork_exec}" \
  > "${SCRATCH}/exec.log" 2>&1 || fail "the perl service: $(cat "${SCRATCH}/exec.log")"
child="$(sed -n 's/^child //p' "${SCRATCH}/exec.log")"
[[ -n "${child}" && ! -e "${out}/memprofile-proc.${child}.json" ]] || fail "the exec'd child ${child} left a record: $(ls "${out}")"
pass "a forked child that execs another program takes its record back"
