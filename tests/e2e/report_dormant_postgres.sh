#!/usr/bin/env bash
# In a dormant recording, memprofile start is the baseline: PostgreSQL 15
# starts dormant under jemalloc, `memprofile start` reaches its tree, a
# session's backend then prepares 20,000 statements, and only after that are
# two snapshots taken, with nothing allocated between them. The backend's
# two dumps are equal, yet it grew from start: report analyses it first,
# its growth past 16 MiB in postgres's own code, named by a function (the
# debug symbols' package named in a note), and says it counts from start. When no process grew, report shows the one holding the most.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

pg="${SCRATCH}/pg"
start_postgres "${pg}" --dormant --backend jemalloc --preload "$(preload_dist jemalloc amd64)/libjemalloc.so.2"
pg_session "${pg}"
wait_until 60 test -S "${pg}/out/memprofile-ctl.${backend}.sock" || fail "the backend serves no socket"
"${MEMPROFILE}" start "${postmaster}" --output-dir "${pg}/out" > /dev/null || fail "start"
pg_grow "${pg}" 20000
for n in 1 2; do
  "${MEMPROFILE}" snapshot "${postmaster}" --output-dir "${pg}/out" > "${SCRATCH}/snap${n}" || fail "snapshot ${n}"
done
"${MEMPROFILE}" report --rootfs / --json "${pg}/out" > "${SCRATCH}/report.json" 2> "${SCRATCH}/report.err" ||
  fail "report: $(cat "${SCRATCH}/report.err")"
[[ "$(jq -r .pid "${SCRATCH}/report.json")" == "${backend}" ]] ||
  fail "the backend is not analysed first: $(jq -c '.processes, .pid, .notes' "${SCRATCH}/report.json")"
growth="$(jq -r --argjson b "${backend}" '.processes[] | select(.pid == $b) | .growth' "${SCRATCH}/report.json")"
awk -v g="${growth}" 'BEGIN { exit !(g > 16 * 1024 * 1024) }' || fail "the backend grew only ${growth} bytes from start"
[[ "$(jq -r '.growth[0].site.module' "${SCRATCH}/report.json")" == "${PG_BIN}/postgres" ]] ||
  fail "the growth is not in postgres's code: $(jq -c '.growth[0].site' "${SCRATCH}/report.json")"
jq -e '[.notes[] | select(startswith("recorded from memprofile start"))] | length == 1' "${SCRATCH}/report.json" > /dev/null ||
  fail "the report does not say growth counts from start: $(jq -c .notes "${SCRATCH}/report.json")"
# Debian's postgres has only dynamic symbols (its allocator, AllocSetAlloc,
# is static): the site is named by a caller that has a name, and the note
# names the package that holds its debug symbols.
[[ -n "$(jq -r '.growth[0].site.function' "${SCRATCH}/report.json")" ]] ||
  fail "the top growing site has no name: $(jq -c '.growth[0]' "${SCRATCH}/report.json")"
jq -e --arg pg "${PG_BIN}/postgres" '[.notes[] | select(startswith($pg + " has no symbol") and contains("postgresql-15-dbgsym"))] | length == 1' \
  "${SCRATCH}/report.json" > /dev/null || fail "no note on postgres's missing symbols: $(jq -c .notes "${SCRATCH}/report.json")"
pass "dormant PostgreSQL: the backend's $(awk -v g="${growth}" 'BEGIN { printf "%d", g / 1048576 }') MiB since start, with equal snapshots, analysed first, in postgres's code"

# The same two snapshots named alone (no records: not known to be dormant):
# nothing grew between them, and the one shown holds the most.
mapfile -t dumps < <(grep -h "jeprof\." "${SCRATCH}/snap1" "${SCRATCH}/snap2")
"${MEMPROFILE}" report --rootfs / --json "${dumps[@]}" > "${SCRATCH}/alone.json" 2> /dev/null || fail "report of the dumps alone"
[[ "$(jq -r .pid "${SCRATCH}/alone.json")" == "${backend}" ]] ||
  fail "not the process holding the most: $(jq -c '.processes, .pid, .notes' "${SCRATCH}/alone.json")"
jq -e '[.notes[] | select(contains("the one holding the most"))] | length == 1' "${SCRATCH}/alone.json" > /dev/null ||
  fail "the note: $(jq -c .notes "${SCRATCH}/alone.json")"
stop_postgres
pass "when no process grew, report shows the one holding the most (the backend)"
