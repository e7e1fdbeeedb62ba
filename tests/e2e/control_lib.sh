# Helpers for the control tests (sourced after lib.sh): real processes under
# the static launcher, with a real jemalloc or heaptrack and the control
# library from this build.
# shellcheck shell=bash

LAUNCHER="${MEMPROFILE_STATIC:-${BUILD_DIR}/tool/memprofile-static}"
[[ -x "${LAUNCHER}" ]] || LAUNCHER="${MEMPROFILE}"  # sanitizer builds have only the dynamic one
CTL_LIBRARY="${BUILD_DIR}/ctl/libmemprofile_ctl.so"
[[ -f "${CTL_LIBRARY}" ]] || fail "${CTL_LIBRARY} missing: build the memprofile_ctl target"
export MEMPROFILE_CTL_LIBRARY="${CTL_LIBRARY}"

# Every service a test starts is killed when the test ends, pass or fail,
# with the children it forked (a worker the test never named): the last
# tracked first, so that a process's children are killed before it and
# are not left to init.
SERVICES=()
stop_services() {
  local i p
  for ((i = ${#SERVICES[@]} - 1; i >= 0; i--)); do
    p="${SERVICES[i]}"
    pkill -KILL -P "${p}" 2>/dev/null || true
    kill -KILL "${p}" 2>/dev/null || true
  done
}
trap 'stop_services; cleanup_scratch' EXIT
track() { SERVICES+=("$1"); }

# build_workloads: the example service (it leaks in leaky_function every tick)
# and the deterministic churn workload, with debug info.
build_workloads() {
  gcc -O1 -g -o "${SCRATCH}/leaky" "${E2E_ROOT}/examples/leaky/leaky.c"
  gcc -O2 -g -o "${SCRATCH}/churn" "${E2E_ROOT}/bench/src/alloc_churn.c"
}

# start_service OUT LOG [exec options] -- PROGRAM [ARGS]: memprofile exec in
# the background; sets SERVICE_PID (the program's, exec becomes it).
start_service() {
  local out="$1" log="$2"
  shift 2
  mkdir -p "${out}"
  "${LAUNCHER}" exec --output-dir "${out}" --min-free-mb 1 "$@" > "${log}" 2>&1 &
  SERVICE_PID=$!
  track "${SERVICE_PID}"
  wait_for_socket "${out}" "${SERVICE_PID}"
}

# wait_for_socket OUT PID: the control library serves within 60 s (seconds
# on an idle machine; a loaded CI machine is slower).
wait_for_socket() {
  local i
  for i in $(seq 1 600); do
    [[ -S "$1/memprofile-ctl.$2.sock" ]] && return 0
    kill -0 "$2" 2>/dev/null || fail "process $2 ended before its control socket appeared"
    sleep 0.1
    : "${i}"
  done
  fail "no control socket $1/memprofile-ctl.$2.sock after 60 s"
}

# The control sockets in DIR; sockets_are DIR N for wait_until, which runs
# its command again each time (a "$(...)" in its arguments is counted once).
# workers_of PID: its children's pids, ascending.
workers_of() { pgrep -P "$1" | sort -n; }

sockets() { find "$1" -maxdepth 1 -name 'memprofile-ctl.*.sock' | wc -l; }
sockets_are() { [[ "$(sockets "$1")" -eq "$2" ]]; }

# in_root CMD...: CMD in the root ${root} (a test's own, unpacked from a
# tarball), /proc mounted for it, in a mount namespace that ends with it
# (nothing is left mounted on the host), with the control library where the
# test put it.
in_root() {
  # shellcheck disable=SC2016,SC2154 # $0 and $@ are the inner sh's; root is the test's
  unshare --mount --propagation private -- sh -c 'mount --bind /proc "$0/proc" && exec chroot "$0" "$@"' "${root}" \
    env MEMPROFILE_CTL_LIBRARY=/opt/memprofile/libmemprofile_ctl.so "$@"
}

# arbiter_of PATTERN: the process matching PATTERN (name the test's own
# port in it: a test beside this one may run the same server) whose parent does not
# (a prefork server's master), or exit 1 when there is none.
arbiter_of() {
  local all p
  mapfile -t all < <(pgrep -f "$1")
  for p in "${all[@]}"; do
    [[ " ${all[*]} " == *" $(ps -o ppid= -p "${p}" | tr -d ' ') "* ]] || { echo "${p}"; return 0; }
  done
  return 1
}

# memray_root: the memray tests' own Debian trixie root in ${SCRATCH}/root
# (sets root), with this build's launcher, control library and bootstrap in
# /opt/memprofile and an /app; skips (77) where it cannot run: not root, or
# an ASan launcher (it would need the host's libasan in the root; the main
# build's run covers these tests).
memray_root() {
  [[ "${EUID}" == 0 ]] || { echo "skip: the trixie root needs root (a mount namespace and chroot)"; exit 77; }
  if sanitized "${LAUNCHER}"; then
    echo "skip: ${LAUNCHER} is an AddressSanitizer build (it needs libasan, which the trixie root has not)"
    exit 77
  fi
  root="${SCRATCH}/root"
  unpack_trixie_python_root "${root}"
  mkdir -p "${root}/opt/memprofile/python" "${root}/app"
  cp "${LAUNCHER}" "${root}/opt/memprofile/memprofile"
  cp "${CTL_LIBRARY}" "${root}/opt/memprofile/"
  cp -R "$(dirname "${CTL_LIBRARY}")/python/." "${root}/opt/memprofile/python/"
}

# leaky_wsgi_app: ${root}/app/leaky.py, a WSGI app whose workers keep 256
# KiB a request (gunicorn leaky:app); sets app_line, the line that keeps it.
leaky_wsgi_app() {
  cat > "${root}/app/leaky.py" <<'PY'
import os

kept = []


def app(environ, start_response):
    kept.append(os.urandom(256 << 10))  # 256 KiB a request, kept by the worker that served it
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [("%d\n" % os.getpid()).encode()]
PY
  # shellcheck disable=SC2034  # read by the test that called it
  app_line="$(grep -n 'kept.append(os.urandom' "${root}/app/leaky.py" | cut -d: -f1)"
}

# added_threads_block PID WHAT: each thread of PID but the main one blocks
# every signal but KILL, STOP, glibc's two internal ones (32, 33) and the
# synchronous ILL, TRAP, ABRT, BUS, FPE, SEGV and SYS; fails naming the
# thread and its SigBlk. Prints how many threads it checked.
added_threads_block() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import os, sys
pid, what = sys.argv[1], sys.argv[2]
free = {9, 19, 32, 33, 4, 5, 6, 7, 8, 11, 31}
must = sum(1 << (n - 1) for n in range(1, 65) if n not in free)
checked = 0
for tid in sorted(os.listdir("/proc/%s/task" % pid)):
    if tid == pid:
        continue
    with open("/proc/%s/task/%s/status" % (pid, tid)) as f:
        st = dict(l.rstrip("\n").split(":\t", 1) for l in f if ":\t" in l)
    blocked = int(st["SigBlk"], 16)
    if blocked & must != must:
        sys.exit("FAIL: %s: thread %s (%s) takes signals: SigBlk %s, unblocked %x" % (
            what, tid, st["Name"], st["SigBlk"], must & ~blocked))
    checked += 1
print(checked)
PY
}

# shellcheck source=tests/e2e/nginx_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/nginx_lib.sh"

# start_postgres DIR [exec options]: a PostgreSQL 15 cluster in DIR (data,
# sock, out), initdb'd and started under memprofile exec (profiles in
# DIR/out) as the postgres user, on a free loopback port, with the launcher
# and libraries copied where that user can read them (the caches are
# root's); log in SCRATCH/pg.log. Sets PG_BIN, port and postmaster;
# as_pg CMD runs CMD as postgres. The libraries named by --preload are
# copied too, and the option rewritten to the copy.
PG_BIN=/usr/lib/postgresql/15/bin
as_pg() { runuser -u postgres -- "$@"; }
start_postgres() {
  local pg="$1" arg
  shift
  [[ -x "${PG_BIN}/postgres" ]] || fail "PostgreSQL 15 missing: run scripts/install-deps.sh"
  mkdir -p "${pg}/out" "${pg}/sock" "${pg}/bin"
  chmod 0755 "${SCRATCH}"
  cp "${LAUNCHER}" "${pg}/bin/memprofile"
  cp "${CTL_LIBRARY}" "${pg}/bin/"
  local -a opts=()
  for arg in "$@"; do
    if [[ "${arg}" == /* && -f "${arg}" ]]; then
      cp "${arg}" "${pg}/bin/"
      arg="${pg}/bin/${arg##*/}"
    fi
    opts+=("${arg}")
  done
  chown -R postgres:postgres "${pg}"
  as_pg "${PG_BIN}/initdb" -D "${pg}/data" -U postgres --auth=trust > "${SCRATCH}/initdb.log" 2>&1 ||
    fail "initdb: $(tail -5 "${SCRATCH}/initdb.log")"
  port="$(free_port)"
  runuser -u postgres -- env MEMPROFILE_CTL_LIBRARY="${pg}/bin/libmemprofile_ctl.so" "${pg}/bin/memprofile" exec \
    --output-dir "${pg}/out" --min-free-mb 1 "${opts[@]}" -- "${PG_BIN}/postgres" -D "${pg}/data" -p "${port}" \
    -k "${pg}/sock" -c listen_addresses=127.0.0.1 > "${SCRATCH}/pg.log" 2>&1 &
  track $!
  # Its socket is there before it accepts sessions ("the database system
  # is starting up"): ready is when pg_isready says so.
  local -a ready=(as_pg "${PG_BIN}/pg_isready" -q -h "${pg}/sock" -p "${port}")
  wait_until 120 "${ready[@]}" || fail "PostgreSQL did not start: $(tail -20 "${SCRATCH}/pg.log")"
  postmaster="$(head -1 "${pg}/data/postmaster.pid")"
  track "${postmaster}"
}

# pg_session DIR: one psql session, held open through a fifo on fd 7 (its
# backend lives as long), its output in DIR/session.out; sets session (psql)
# and backend (its backend's pid), and waits for the backend's socket.
pg_session() {
  local pg="$1"
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
}

# pg_grow DIR N: the session prepares N statements (each keeps its plan in
# the backend's memory), and waits for them.
pg_grow() {
  local i
  for i in $(seq 1 "$2"); do echo "PREPARE s${i} AS SELECT ${i} + relpages FROM pg_class WHERE relname = 'x${i}';"; done >&7
  echo "SELECT 'prepared $2';" >&7
  wait_until 600 grep -q "^prepared $2\$" "$1/session.out" || fail "the statements were not prepared"
}

# stop_postgres: the session ends, then the postmaster (fast shutdown).
stop_postgres() {
  echo "\\q" >&7
  exec 7>&-
  wait "${session}" || true
  kill -TERM "${postmaster}"
  wait_until 60 test ! -e "/proc/${postmaster}" || fail "PostgreSQL did not stop"
}

# start_serve LOG [serve options] PID: memprofile serve in the background
# on a port the kernel chooses; sets SERVE_PID and SERVE_URL (http://ADDR:PORT)
# from its "listening on" line.
start_serve() {
  local log="$1" at i
  shift
  # The log exists before the loop below reads it: the shell that opens it
  # for serve runs in the background, maybe after the first read.
  : > "${log}"
  "${MEMPROFILE}" serve --listen 127.0.0.1:0 "$@" > "${log}" 2>&1 &
  SERVE_PID=$!
  track "${SERVE_PID}"
  for i in $(seq 1 600); do
    at="$(sed -n 's/^memprofile serve: listening on \([^ ]*\) .*/\1/p' "${log}")"
    # shellcheck disable=SC2034  # read by the test that called it
    [[ -n "${at}" ]] && { SERVE_URL="http://${at}"; return 0; }
    kill -0 "${SERVE_PID}" 2>/dev/null || fail "serve ended: $(cat "${log}")"
    sleep 0.1
    : "${i}"
  done
  fail "serve did not listen within 60 s: $(cat "${log}")"
}

# A jemalloc any user can load (the cache is under root's home) in
# ${SCRATCH}, as JEMALLOC, for a service run as nobody.
jemalloc_for_anyone() {
  chmod 0755 "${SCRATCH}"
  cp "$(preload_dist jemalloc amd64)/libjemalloc.so.2" "${SCRATCH}/"
  # shellcheck disable=SC2034  # read by the test that called it
  JEMALLOC="${SCRATCH}/libjemalloc.so.2"
}

# memprofile exec --backend memray in the trixie root (memray_root), from /app.
memray_exec() { in_root env -C /app /opt/memprofile/memprofile exec --backend memray --min-free-mb 1 "$@"; }
# memprofile itself in the trixie root, as kubectl exec would run it.
memray_ctl() { in_root /opt/memprofile/memprofile "$@"; }
# interpreter_of PID: the process memray_exec ... & started (PID is the
# shell's subshell): its child, which execs its way to the interpreter.
interpreter_of() {
  local p=""
  for _ in $(seq 1 600); do
    p="$(pgrep -P "$1" | head -1)"
    [[ -n "${p}" ]] && { echo "${p}"; return 0; }
    sleep 0.1
  done
  return 1
}

# /app/service.py in the trixie root: a script that keeps 64 KiB a round
# (its leak) beside a bounded cache; sets keep_line, the leak's line.
memray_service_app() {
cat > "${root}/app/service.py" <<'PY'
import functools
import sys

cache = []


def keep(n):
    cache.append(bytearray(n))  # the leak: kept for good


@functools.lru_cache(maxsize=16)
def lookup(i):
    return bytearray(4096)  # bounded: at most 16 kept


def main(rounds):
    for i in range(rounds):
        keep(64 * 1024)
        lookup(i)


if __name__ == "__main__":
    main(int(sys.argv[1]))
PY
  # shellcheck disable=SC2034  # read by the test that called it
  keep_line="$(grep -n 'cache.append(bytearray(n))' "${root}/app/service.py" | cut -d: -f1)"
}
