#!/usr/bin/env bash
# Real servers with real process trees, from Debian's archive, under
# memprofile exec with jemalloc, on loopback, driven from outside by the
# first process's pid alone:
#   nginx: a master and two workers (forked, then setuid nobody): status
#     lists them, snapshot reaches them, report tables them;
#   PostgreSQL 15: a backend per connection; a session that prepares 20,000
#     statements grows its backend, and a snapshot of the postmaster's tree
#     holds that memory: report analyses the backend first.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

NGINX=/usr/sbin/nginx
[[ -x "${NGINX}" ]] || fail "nginx missing: run scripts/install-deps.sh"
JEMALLOC="$(preload_dist jemalloc amd64)/libjemalloc.so.2"
# The scratch directory is root's (0700): the servers' users need to reach
# their files, the launcher and the libraries.
chmod 0755 "${SCRATCH}"

# --- nginx -------------------------------------------------------------------
port="$(free_port)"
prefix="${SCRATCH}/nginx"
nginx_conf "${prefix}" "${port}"
out="${SCRATCH}/nginx-out"
mkdir -p "${out}"
chmod 1777 "${out}"  # the workers run as nobody, as images make it
start_service "${out}" "${SCRATCH}/nginx.log" --backend jemalloc --preload "${JEMALLOC}" -- \
  "${NGINX}" -p "${prefix}" -c "${prefix}/nginx.conf"
master="${SERVICE_PID}"
wait_until 60 sockets_are "${out}" 3 || fail "nginx: not 3 sockets: $(ls "${out}"; cat "${SCRATCH}/nginx.log")"
for _ in $(seq 1 50); do curl -fsS --max-time 10 "http://127.0.0.1:${port}/" > /dev/null || fail "nginx does not answer"; done
"${MEMPROFILE}" status "${master}" --output-dir "${out}" --json > "${SCRATCH}/nginx-status.json" ||
  fail "status: $(cat "${SCRATCH}/nginx-status.json")"
jq -e '.tree | {failed, processes, served} == {"failed":0,"processes":3,"served":3}' "${SCRATCH}/nginx-status.json" > /dev/null ||
  fail "nginx tree: $(jq -c '.tree, [.processes[] | {pid, parent, program, served}]' "${SCRATCH}/nginx-status.json")"
jq -e --argjson m "${master}" '[.processes[] | select(.parent == $m and .program == "/usr/sbin/nginx" and .recording)] | length == 2' \
  "${SCRATCH}/nginx-status.json" > /dev/null || fail "nginx workers: $(jq -c .processes "${SCRATCH}/nginx-status.json")"
"${MEMPROFILE}" snapshot "${master}" --output-dir "${out}" > "${SCRATCH}/nginx-snap" || fail "snapshot: $(cat "${SCRATCH}/nginx-snap")"
[[ "$(wc -l < "${SCRATCH}/nginx-snap")" == 3 ]] || fail "not 3 snapshots: $(cat "${SCRATCH}/nginx-snap")"
while read -r f; do [[ -s "${f}" ]] || fail "empty snapshot ${f}"; done < "${SCRATCH}/nginx-snap"
# The workers' own dumps, written as nobody.
[[ "$(stat -c %U "$(grep -v "jeprof\.${master}\." "${SCRATCH}/nginx-snap" | head -1)")" == nobody ]] ||
  fail "a worker's snapshot is not the worker's own"
"${MEMPROFILE}" report --rootfs / --json "${out}" > "${SCRATCH}/nginx-report.json" || fail "report"
jq -e '.processes | length == 3' "${SCRATCH}/nginx-report.json" > /dev/null ||
  fail "report's processes: $(jq -c .processes "${SCRATCH}/nginx-report.json")"
kill -QUIT "${master}"
wait "${master}" || fail "nginx's exit code changed: $?"
wait_until 10 sockets_are "${out}" 0 || fail "sockets left after nginx ended: $(ls "${out}")"
pass "nginx: the master and its 2 workers (nobody) recorded, listed by status, snapshotted by one command; clean exit"

# --- PostgreSQL ----------------------------------------------------------------
pg="${SCRATCH}/pg"
start_postgres "${pg}" --backend jemalloc --preload "${JEMALLOC}"
grep -q "profiling ${PG_BIN}/postgres with jemalloc" "${SCRATCH}/pg.log" || fail "PostgreSQL is not profiled: $(head -3 "${SCRATCH}/pg.log")"
pg_session "${pg}"
wait_until 60 test -S "${pg}/out/memprofile-ctl.${backend}.sock" || fail "the backend serves no socket"
"${MEMPROFILE}" snapshot "${postmaster}" --output-dir "${pg}/out" > "${SCRATCH}/pg-snap1" || fail "first snapshot"
pg_grow "${pg}" 20000
"${MEMPROFILE}" snapshot "${postmaster}" --output-dir "${pg}/out" > "${SCRATCH}/pg-snap2" || fail "second snapshot"
grep -q "jeprof\.${backend}\." "${SCRATCH}/pg-snap2" || fail "the tree's snapshot misses the backend: $(cat "${SCRATCH}/pg-snap2")"
(( $(wc -l < "${SCRATCH}/pg-snap2") >= 5 )) || fail "the postmaster's tree is more than a backend: $(cat "${SCRATCH}/pg-snap2")"
rss_kb="$(awk '/^VmRSS/ { print $2 }' "/proc/${backend}/status")"
# Where the backend's memory is, asked as the postgres user (not root), with
# the static binary the images carry: RSS, jemalloc's view and the profile's
# bytes in use at its last snapshot, each past the 16 MiB it grew.
as_pg "${pg}/bin/memprofile" status "${postmaster}" --output-dir "${pg}/out" --json > "${SCRATCH}/pg-status.json" ||
  fail "status as postgres: $(head -c 400 "${SCRATCH}/pg-status.json")"
jq -e --argjson b "${backend}" '.processes[] | select(.pid == $b) |
    .memory.rss > 16777216 and .allocator.name == "jemalloc" and .allocator.allocated > 16777216 and
    .profile.bytes_in_use > 16777216' "${SCRATCH}/pg-status.json" > /dev/null ||
  fail "status of the backend as postgres: $(jq -c --argjson b "${backend}" '.processes[] | select(.pid == $b) | {memory, allocator, profile}' "${SCRATCH}/pg-status.json")"
jq -e '.cgroup | has("current") or has("error")' "${SCRATCH}/pg-status.json" > /dev/null || fail "status as postgres: no cgroup"
"${MEMPROFILE}" report --rootfs / --json "${pg}/out" > "${SCRATCH}/pg-report.json" || fail "report"
[[ "$(jq -r .pid "${SCRATCH}/pg-report.json")" == "${backend}" ]] ||
  fail "the backend is not analysed first: $(jq -c '.processes, .pid' "${SCRATCH}/pg-report.json")"
growth="$(jq -r --argjson b "${backend}" '.processes[] | select(.pid == $b) | .growth' "${SCRATCH}/pg-report.json")"
awk -v g="${growth}" 'BEGIN { exit !(g > 16 * 1024 * 1024) }' || fail "the backend grew only ${growth} bytes"
[[ "$(jq -r '.growth[0].site.module' "${SCRATCH}/pg-report.json")" == "${PG_BIN}/postgres" ]] ||
  fail "the growth is not in postgres's code: $(jq -c '.growth[0].site' "${SCRATCH}/pg-report.json")"
# The records beside the two snapshots say the backend's heap grew.
jq -e --argjson b "${backend}" '.memory[] | select(.pid == $b) | .verdict | startswith("the heap grew by")' \
  "${SCRATCH}/pg-report.json" > /dev/null || fail "the backend's memory verdict: $(jq -c .memory "${SCRATCH}/pg-report.json")"
stop_postgres
pass "PostgreSQL: the session's backend (RSS ${rss_kb} KiB) grew $(awk -v g="${growth}" 'BEGIN { printf "%d", g / 1048576 }') MiB between two snapshots of the postmaster's tree; report analyses it first, in postgres's code; status as postgres and the records say its heap grew"
