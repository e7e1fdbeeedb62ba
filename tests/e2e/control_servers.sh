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
PG_BIN=/usr/lib/postgresql/15/bin
[[ -x "${NGINX}" && -x "${PG_BIN}/postgres" ]] || fail "nginx or PostgreSQL 15 missing: run scripts/install-deps.sh"
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
mkdir -p "${pg}/out" "${pg}/sock" "${pg}/bin"
# What the postgres user runs must be its to read: the launcher and the
# libraries, copied beside the cluster (the caches are root's).
cp "${LAUNCHER}" "${pg}/bin/memprofile"
cp "${JEMALLOC}" "${CTL_LIBRARY}" "${pg}/bin/"
chown -R postgres:postgres "${pg}"
as_pg() { runuser -u postgres -- "$@"; }
as_pg "${PG_BIN}/initdb" -D "${pg}/data" -U postgres --auth=trust > "${SCRATCH}/initdb.log" 2>&1 ||
  fail "initdb: $(tail -5 "${SCRATCH}/initdb.log")"
port="$(free_port)"
runuser -u postgres -- env MEMPROFILE_CTL_LIBRARY="${pg}/bin/libmemprofile_ctl.so" "${pg}/bin/memprofile" exec \
  --output-dir "${pg}/out" --min-free-mb 1 --backend jemalloc --preload "${pg}/bin/libjemalloc.so.2" -- "${PG_BIN}/postgres" -D "${pg}/data" -p "${port}" \
  -k "${pg}/sock" -c listen_addresses=127.0.0.1 > "${SCRATCH}/pg.log" 2>&1 &
track $!
# Its socket is there before it accepts sessions ("the database system is
# starting up"): ready is when pg_isready says so.
pg_ready() { as_pg "${PG_BIN}/pg_isready" -q -h "${pg}/sock" -p "${port}"; }
wait_until 120 pg_ready || fail "PostgreSQL did not start: $(tail -20 "${SCRATCH}/pg.log")"
postmaster="$(head -1 "${pg}/data/postmaster.pid")"
grep -q "profiling ${PG_BIN}/postgres with jemalloc" "${SCRATCH}/pg.log" || fail "PostgreSQL is not profiled: $(head -3 "${SCRATCH}/pg.log")"
track "${postmaster}"
# One session, held open through a fifo: its backend lives as long.
mkfifo "${pg}/in"
chown postgres "${pg}/in"
as_pg /usr/bin/psql -X -q -At -h "${pg}/sock" -p "${port}" -U postgres -o "${pg}/session.out" -f "${pg}/in" &
session=$!
track "${session}"
# Opened for reading too, so that the open never waits for psql: a psql
# that ended at once fails the wait below, not hang the test.
exec 7<> "${pg}/in"
echo "SELECT pg_backend_pid();" >&7
wait_until 60 test -s "${pg}/session.out" || fail "the session did not start: $(tail -3 "${SCRATCH}/pg.log")"
backend="$(head -1 "${pg}/session.out")"
[[ "$(ps -o ppid= -p "${backend}" | tr -d ' ')" == "${postmaster}" ]] || fail "backend ${backend} is not the postmaster's child"
wait_until 60 test -S "${pg}/out/memprofile-ctl.${backend}.sock" || fail "the backend serves no socket"
"${MEMPROFILE}" snapshot "${postmaster}" --output-dir "${pg}/out" > "${SCRATCH}/pg-snap1" || fail "first snapshot"
for i in $(seq 1 20000); do echo "PREPARE s${i} AS SELECT ${i} + relpages FROM pg_class WHERE relname = 'x${i}';"; done >&7
echo "SELECT 'prepared';" >&7
wait_until 600 grep -q '^prepared$' "${pg}/session.out" || fail "the statements were not prepared"
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
echo "\\q" >&7
exec 7>&-
wait "${session}" || true
kill -TERM "${postmaster}"
wait_until 60 test ! -e "/proc/${postmaster}" || fail "PostgreSQL did not stop"
pass "PostgreSQL: the session's backend (RSS ${rss_kb} KiB) grew $(awk -v g="${growth}" 'BEGIN { printf "%d", g / 1048576 }') MiB between two snapshots of the postmaster's tree; report analyses it first, in postgres's code; status as postgres and the records say its heap grew"
