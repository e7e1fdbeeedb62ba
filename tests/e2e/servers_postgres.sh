#!/usr/bin/env bash
# No backend takes PostgreSQL down (#57). Debian's PostgreSQL 15, with its
# default configuration (huge_pages=try among it), under memprofile exec
# with each backend that applies: the control library alone, jemalloc
# dormant and recording, heaptrack (memprofile's build), bytehound (where
# its offline bundle is). gperftools' tcmalloc does not apply: its heap
# profiler must be linked into the program. Each one:
#   - starts (bytehound once aborted here: "Failed to mmap over a dummy
#     mapping!", on huge_pages=try);
#   - serves pgbench, then 1,000 short connections (pgbench -C: a backend
#     forked and ended for each; heaptrack once left about 1 in 200 waiting
#     for ever in exit());
#   - reloads (SIGHUP), and no backend is left behind;
#   - stops with a fast shutdown within pg_ctl's own 60 s.
# A heaptrack without memprofile's fork fix (Debian's) is refused for
# postgres, which forks, by check and by exec (PRELOAD_FORK_HANG), and
# PostgreSQL runs unprofiled; so is a bytehound without its fork fix, by
# check (bytehound once left 2 to 4 backends in 1,000 waiting for ever).
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

[[ "${EUID}" == 0 ]] || { echo "skip: PostgreSQL runs as its own user (runuser needs root)"; exit 77; }
PGBENCH=/usr/lib/postgresql/15/bin/pgbench
[[ -x "${PGBENCH}" ]] || fail "pgbench missing: run scripts/install-deps.sh (postgresql-15)"
JEMALLOC="$(preload_dist jemalloc amd64)/libjemalloc.so.2"
HEAPTRACK="$(preload_dist heaptrack amd64)/libheaptrack_preload.so"
DEBIAN_HEAPTRACK=/usr/lib/heaptrack/libheaptrack_preload.so

# Debian's heaptrack, for a program that forks: refused, naming why.
rc=0
"${MEMPROFILE}" check --preload "${DEBIAN_HEAPTRACK}" "${PG_BIN}/postgres" > "${SCRATCH}/check.txt" 2>&1 || rc=$?
if ((rc != 1)) || ! grep -q "PRELOAD_FORK_HANG" "${SCRATCH}/check.txt"; then
  fail "check of Debian's heaptrack for postgres: exit ${rc}: $(cat "${SCRATCH}/check.txt")"
fi
"${MEMPROFILE}" check --preload "${HEAPTRACK}" "${PG_BIN}/postgres" > "${SCRATCH}/check-ours.txt" 2>&1 || true
! grep -q "PRELOAD_FORK_HANG" "${SCRATCH}/check-ours.txt" || fail "memprofile's heaptrack is refused: $(cat "${SCRATCH}/check-ours.txt")"
"${MEMPROFILE}" check --preload "${DEBIAN_HEAPTRACK}" "${FIXTURES}/leak" > "${SCRATCH}/check-leak.txt" 2>&1 || true
! grep -q "PRELOAD_FORK_HANG" "${SCRATCH}/check-leak.txt" || fail "a program that never forks is refused: $(cat "${SCRATCH}/check-leak.txt")"
pass "check: Debian's heaptrack is PRELOAD_FORK_HANG for postgres, which forks; memprofile's build is not, nor a program that never forks"

# backends_of_postmaster: the client backends alive now (children of the
# postmaster that serve a connection: "postgres: USER DB ...").
client_backends() { pgrep -P "${postmaster}" -f '^postgres: postgres postgres ' | wc -l; }
no_client_backend() { [[ "$(client_backends)" == 0 ]]; }

# round NAME EXEC_OPTIONS...: the whole life of one server under them.
round() {
  local name="$1" pg="${SCRATCH}/pg-$1"
  shift
  start_postgres "${pg}" --max-profile-mb 64 "$@"
  as_pg "${PGBENCH}" -i -s 1 -q -h "${pg}/sock" -p "${port}" postgres > "${SCRATCH}/${name}-init.log" 2>&1 ||
    fail "${name}: pgbench -i: $(tail -3 "${SCRATCH}/${name}-init.log")"
  as_pg "${PGBENCH}" -c 4 -j 2 -t 100 -h "${pg}/sock" -p "${port}" postgres > "${SCRATCH}/${name}-bench.log" 2>&1 ||
    fail "${name}: pgbench: $(tail -5 "${SCRATCH}/${name}-bench.log")"
  grep -q "number of transactions actually processed: 400/400" "${SCRATCH}/${name}-bench.log" ||
    fail "${name}: pgbench: $(grep transactions "${SCRATCH}/${name}-bench.log")"
  # 1,000 short connections, each a backend forked and ended.
  as_pg "${PGBENCH}" -C -S -c 4 -j 2 -t 250 -h "${pg}/sock" -p "${port}" postgres > "${SCRATCH}/${name}-short.log" 2>&1 ||
    fail "${name}: pgbench -C: $(tail -5 "${SCRATCH}/${name}-short.log")"
  grep -q "number of transactions actually processed: 1000/1000" "${SCRATCH}/${name}-short.log" ||
    fail "${name}: pgbench -C: $(grep transactions "${SCRATCH}/${name}-short.log")"
  as_pg "${PG_BIN}/pg_ctl" reload -D "${pg}/data" > /dev/null || fail "${name}: pg_ctl reload"
  log_says "${SCRATCH}/pg.log" "received SIGHUP, reloading configuration files" || fail "${name}: no reload: $(tail -5 "${SCRATCH}/pg.log")"
  # Every backend of the 1,000 has ended: none waits in exit().
  wait_until 60 no_client_backend ||
    fail "${name}: $(client_backends) backends left after 1,000 short connections: $(pgrep -a -P "${postmaster}")"
  as_pg "${PG_BIN}/pg_ctl" stop -D "${pg}/data" -m fast -t 60 > "${SCRATCH}/${name}-stop.log" 2>&1 ||
    fail "${name}: the fast shutdown did not end within 60 s: $(cat "${SCRATCH}/${name}-stop.log"; pgrep -a -P "${postmaster}")"
  wait_until 60 test ! -e "/proc/${postmaster}" || fail "${name}: the postmaster is still there"
  pass "${name}: PostgreSQL started, served pgbench and 1,000 short connections, reloaded, left no backend, and stopped fast"
}

round none --backend none
grep -q "watching the memory of ${PG_BIN}/postgres with the control library alone" "${SCRATCH}/pg.log" ||
  fail "none: not under the control library: $(head -3 "${SCRATCH}/pg.log")"
round jemalloc-dormant --backend jemalloc --dormant --preload "${JEMALLOC}"
round jemalloc --backend jemalloc --preload "${JEMALLOC}"
round heaptrack --backend heaptrack --preload "${HEAPTRACK}"
grep -q "profiling ${PG_BIN}/postgres with heaptrack" "${SCRATCH}/pg.log" || fail "heaptrack: not profiled: $(head -3 "${SCRATCH}/pg.log")"
# Debian's heaptrack: exec refuses it for postgres, which then runs unprofiled.
round debian-heaptrack --backend heaptrack --preload "${DEBIAN_HEAPTRACK}"
grep -q "running unprofiled: .*PRELOAD_FORK_HANG" "${SCRATCH}/pg.log" ||
  fail "exec did not refuse Debian's heaptrack for postgres: $(head -5 "${SCRATCH}/pg.log")"
need_bytehound_bundle 0
BYTEHOUND="$(preload_dist bytehound amd64)/libbytehound.so"
# bytehound as released: the same library without the export that names
# the fork fix (its name changed in place, the code as it is). check reads
# the symbol, and refuses it for postgres.
python3 - "${BYTEHOUND}" "${SCRATCH}/libbytehound.so" <<'PY'
import sys
data = open(sys.argv[1], "rb").read()
assert data.count(b"memprofile_bytehound_fork_safe\0") >= 1  # .dynstr, and .strtab unless stripped
open(sys.argv[2], "wb").write(data.replace(b"memprofile_bytehound_fork_safe\0", b"memprofile_bytehound_fork_XXXX\0"))
PY
rc=0
"${MEMPROFILE}" check --preload "${SCRATCH}/libbytehound.so" "${PG_BIN}/postgres" > "${SCRATCH}/check-bh.txt" 2>&1 || rc=$?
if ((rc != 1)) || ! grep -q "PRELOAD_FORK_HANG.*bytehound without memprofile's fork fix" "${SCRATCH}/check-bh.txt"; then
  fail "check of a bytehound without the fork fix for postgres: exit ${rc}: $(cat "${SCRATCH}/check-bh.txt")"
fi
"${MEMPROFILE}" check --preload "${BYTEHOUND}" "${PG_BIN}/postgres" > "${SCRATCH}/check-bh-ours.txt" 2>&1 || true
! grep -q "PRELOAD_FORK_HANG" "${SCRATCH}/check-bh-ours.txt" || fail "memprofile's bytehound is refused: $(cat "${SCRATCH}/check-bh-ours.txt")"
pass "check: a bytehound without the fork fix is PRELOAD_FORK_HANG for postgres; memprofile's build is not"
# memprofile's bytehound: once 2 to 4 backends in 1,000 short connections
# waited for ever in bytehound_jemalloc_raw_mmap.
round bytehound --backend bytehound --preload "${BYTEHOUND}"
grep -q "profiling ${PG_BIN}/postgres with bytehound" "${SCRATCH}/pg.log" || fail "bytehound: not profiled: $(head -3 "${SCRATCH}/pg.log")"
