#!/usr/bin/env bash
# The control socket on real processes: it refuses a peer with another uid
# (the socket's mode, then the library's own check of the peer's
# credentials); a child that execs another program never gets the control
# library, and a forked one serves its own socket; a process that is gone, or was never
# started with the library, gets one clear line.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

build_workloads
# The service runs as nobody: the library and the output directory must be
# reachable (the cache is under root's home).
chmod 0755 "${SCRATCH}"
cp "$(preload_dist jemalloc amd64)/libjemalloc.so.2" "${SCRATCH}/"
JEMALLOC="${SCRATCH}/libjemalloc.so.2"
out="${SCRATCH}/out"
mkdir -p "${out}"
chmod 1777 "${out}"

as_uid() { local uid="$1"; shift; setpriv --reuid="${uid}" --regid="${uid}" --clear-groups "$@"; }
# setpriv itself in the background (not a function: $! would be a subshell).
setpriv --reuid=65534 --regid=65534 --clear-groups "${LAUNCHER}" exec --dormant --backend jemalloc --preload "${JEMALLOC}" --output-dir "${out}" \
  --min-free-mb 1 -- "${SCRATCH}/leaky" 0 > "${SCRATCH}/run.log" 2>&1 &
pid=$!
track "${pid}"
wait_for_socket "${out}" "${pid}"
sock="${out}/memprofile-ctl.${pid}.sock"
[[ "$(stat -c '%a %u' "${sock}")" == "600 65534" ]] || fail "socket mode/owner: $(stat -c '%a %u' "${sock}")"

rc=0
as_uid 65533 "${MEMPROFILE}" start "${pid}" --output-dir "${out}" > "${SCRATCH}/other" 2>&1 || rc=$?
((rc == 2)) || fail "another uid: exit ${rc}, not 2: $(cat "${SCRATCH}/other")"
grep -q "memprofile: ${sock}: permission denied: run as the profiled process's user" "${SCRATCH}/other" ||
  fail "another uid: $(cat "${SCRATCH}/other")"
# With the file's mode out of the way, the library checks the peer itself.
chmod 0666 "${sock}"
rc=0
as_uid 65533 "${MEMPROFILE}" start "${pid}" --output-dir "${out}" > "${SCRATCH}/other" 2>&1 || rc=$?
((rc == 1)) || fail "another uid past the mode: exit ${rc}, not 1: $(cat "${SCRATCH}/other")"
grep -q "permission denied: uid 65533 is neither the process's uid 65534 nor root" "${SCRATCH}/other" ||
  fail "another uid past the mode: $(cat "${SCRATCH}/other")"
grep -q "refused a request from uid 65533" "${SCRATCH}/run.log" || fail "the refusal is not logged"
# A refused peer gets the refusal and nothing else (no paths, no state), at
# once, without a request line; 20 of them are logged once, then counted.
# Meanwhile 17 silent connections of another uid and 8 of the process's own
# are held open: the owner's status is still answered (the thread reads no
# peer it refused, and reads each connection in its own short window).
cat > "${SCRATCH}/peers.py" <<'PY'
import socket, sys, time
sock, mode = sys.argv[1], sys.argv[2]
if mode == "refused":
    replies = []
    for _ in range(20):
        s = socket.socket(socket.AF_UNIX)
        s.connect(sock)
        replies.append(s.makefile().read())
        s.close()
    print(replies[0], end="")
    print(len(set(replies)))
else:
    held = []
    for _ in range(int(mode)):
        s = socket.socket(socket.AF_UNIX)
        s.connect(sock)
        held.append(s)
    open(sys.argv[3], "w").close()  # all connected: the test may ask now
    time.sleep(60)
PY
as_uid 65533 /usr/bin/python3 "${SCRATCH}/peers.py" "${sock}" refused > "${SCRATCH}/refused"
[[ "$(head -1 "${SCRATCH}/refused")" == '{"ok":false,"error":"permission denied: uid 65533 is neither the process'"'"'s uid 65534 nor root"}' ]] ||
  fail "a refused peer got more than the refusal: $(cat "${SCRATCH}/refused")"
[[ "$(tail -1 "${SCRATCH}/refused")" == 1 ]] || fail "the refusals differ: $(cat "${SCRATCH}/refused")"
(($(grep -c "refused a request from uid 65533" "${SCRATCH}/run.log") <= 2)) ||
  fail "every refusal logged: $(grep -c "refused a request" "${SCRATCH}/run.log") lines"
held="${SCRATCH}/held"
mkdir -p "${held}"
chmod 1777 "${held}"
setpriv --reuid=65533 --regid=65533 --clear-groups timeout 120 /usr/bin/python3 "${SCRATCH}/peers.py" "${sock}" 17 \
  "${held}/other" &
silent_other=$!
setpriv --reuid=65534 --regid=65534 --clear-groups timeout 120 /usr/bin/python3 "${SCRATCH}/peers.py" "${sock}" 8 \
  "${held}/own" &
silent_own=$!
wait_until 60 test -e "${held}/other" -a -e "${held}/own" || fail "the 25 silent connections were not made"
as_uid 65534 "${MEMPROFILE}" status "${pid}" --output-dir "${out}" > "${SCRATCH}/busy-status" 2>&1 ||
  fail "status not answered beside 25 silent connections: $(cat "${SCRATCH}/busy-status")"
kill "${silent_other}" "${silent_own}" 2>/dev/null || true
wait "${silent_other}" "${silent_own}" 2>/dev/null || true
[[ "$(as_uid 65534 "${MEMPROFILE}" status "${pid}" --output-dir "${out}" | head -1)" == \
   "pid ${pid}: jemalloc, recording off" ]] || fail "the process's own uid was refused, or start went through"
"${MEMPROFILE}" status "${pid}" --output-dir "${out}" > /dev/null || fail "root was refused"
kill -TERM "${pid}"
wait "${pid}" || fail "the service did not exit cleanly on SIGTERM"
pass "a peer with another uid is refused (socket mode 0600, then the peer's credentials) with nothing but the refusal, logged once in 10 s; its own uid and root are served, beside 25 silent connections"

# A forking service: python3, profiled, forks a child that stays in python
# and execs others: the exec'd children never load the control library, and
# the forked one, which jemalloc records, serves its own socket from its own
# thread; the socket it leaves at _exit is cleared.
cat > "${SCRATCH}/forker.py" <<'PY'
import os, subprocess, sys, time
out = sys.argv[1]
pid = os.fork()
if pid == 0:
    import socket
    fds = [f for f in os.listdir("/proc/self/fd") if f.isdigit()]
    socks = 0
    # Listening sockets only: a connection the tree's first process or a
    # tree command has open to this child at that moment is not one.
    for f in fds:
        try:
            if os.readlink("/proc/self/fd/" + f).startswith("socket:"):
                s = socket.socket(fileno=os.dup(int(f)))
                socks += s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
                s.close()
        except OSError:
            pass
    maps = open("/proc/self/maps").read()
    with open(out + "/forked", "w") as w:
        w.write("%d %d %d\n" % (len(os.listdir("/proc/self/task")), socks, "libmemprofile_ctl" in maps))
    os._exit(0)
os.waitpid(pid, 0)
with open(out + "/exec-maps", "w") as w:
    subprocess.run(["/bin/cat", "/proc/self/maps"], stdout=w, check=True)
with open(out + "/exec-env", "w") as w:
    subprocess.run(["/usr/bin/env"], stdout=w, check=True)
with open(out + "/parent", "w") as w:
    w.write("%d %d\n" % (len(os.listdir("/proc/self/task")), "libmemprofile_ctl" in open("/proc/self/maps").read()))
# Served until the test has asked (a cap of 60 s, not a measure).
for _ in range(600):
    if os.path.exists(out + "/asked"):
        break
    time.sleep(0.1)
PY
kids="${SCRATCH}/kids"
start_service "${kids}" "${SCRATCH}/forker.log" --backend jemalloc --preload "${JEMALLOC}" -- \
  /usr/bin/python3 "${SCRATCH}/forker.py" "${kids}"
"${MEMPROFILE}" status "${SERVICE_PID}" --output-dir "${kids}" > /dev/null || fail "the python service is not served"
touch "${kids}/asked"
wait "${SERVICE_PID}" || fail "the python service failed: $(cat "${SCRATCH}/forker.log")"
[[ "$(cat "${kids}/parent")" == "2 1" ]] || fail "the service itself: threads and library: $(cat "${kids}/parent")"
# A forked child is a process of the service: its own control thread and socket.
[[ "$(cut -d' ' -f1,2 "${kids}/forked")" == "2 1" ]] || fail "the forked child: threads, sockets: $(cat "${kids}/forked")"
if grep -Eq "libmemprofile_ctl|${JEMALLOC##*/}" "${kids}/exec-maps"; then fail "an exec'd child loaded the control library or jemalloc"; fi
# Another program starts without the profiler and its settings (ctl/spawn.c).
if grep -E "^(LD_PRELOAD|MALLOC_CONF)=" "${kids}/exec-env"; then fail "the children's environment keeps the profiler"; fi
[[ -z "$(find "${kids}" -name 'memprofile-ctl.*.sock')" ]] || fail "a socket was left behind"
pass "exec'd children (another program) get neither the control library nor the profiler; a forked one serves its own socket, cleared after its _exit"

# An output directory deeper than a unix socket path can name (107 bytes: a
# volume mounted deep, a CI scratch dir) is still served, through the
# directory's fd on both sides.
deep="${SCRATCH}/$(printf 'a-deep-volume-mount-%02d/' $(seq 1 8))out"
((${#deep} > 160)) || fail "the deep directory is only ${#deep} bytes"
start_service "${deep}" "${SCRATCH}/deep.log" --dormant --backend jemalloc --preload "${JEMALLOC}" -- "${SCRATCH}/leaky" 0
"${MEMPROFILE}" start "${SERVICE_PID}" --output-dir "${deep}" > /dev/null || fail "start under a deep directory"
snap="$("${MEMPROFILE}" snapshot "${SERVICE_PID}" --output-dir "${deep}")" || fail "snapshot under a deep directory"
[[ -s "${snap}" && "${snap}" == "${deep}"/* ]] || fail "the deep snapshot: '${snap}'"
[[ "$("${MEMPROFILE}" status "${SERVICE_PID}" --output-dir "${deep}" | head -1)" == "pid ${SERVICE_PID}: jemalloc, recording on" ]] ||
  fail "status under a deep directory"
kill -TERM "${SERVICE_PID}"
wait "${SERVICE_PID}" || fail "the deep service did not exit cleanly: $(cat "${SCRATCH}/deep.log")"
complaints="$(grep "memprofile-ctl" "${SCRATCH}/deep.log" | grep -v "recording started on request" || true)"
[[ -z "${complaints}" ]] || fail "the library complained: ${complaints}"
pass "an output directory of ${#deep} bytes is served: start, snapshot and status, no complaint"

# One line for a process that is not served.
rc=0
"${MEMPROFILE}" status 999999 --output-dir "${kids}" > "${SCRATCH}/none" 2>&1 || rc=$?
if ((rc != 2)) || ! grep -q "no control socket: process 999999 was not started by memprofile exec with the control library (none in ${kids}); there is no process 999999 here" \
  "${SCRATCH}/none"; then
  fail "no socket: exit ${rc}: $(cat "${SCRATCH}/none")"
fi
# Without --output-dir the directory is the config's, which may not exist:
# the line still says the process does not.
rc=0
"${MEMPROFILE}" status 999999 --config /dev/null > "${SCRATCH}/none-dir" 2>&1 || rc=$?
if ((rc != 2)) ||
  ! grep -q "; there is no process 999999 here (it ended, or runs in another pid namespace)$" "${SCRATCH}/none-dir"; then
  fail "no process, no --output-dir: exit ${rc}: $(cat "${SCRATCH}/none-dir")"
fi
# A stale socket: the process was killed before it could remove it.
"${LAUNCHER}" exec --backend jemalloc --preload "${JEMALLOC}" --output-dir "${kids}" --min-free-mb 1 -- \
  "${SCRATCH}/leaky" 0 > /dev/null 2>&1 &
pid=$!
track "${pid}"
wait_for_socket "${kids}" "${pid}"
kill -KILL "${pid}"
wait "${pid}" || true
rc=0
"${MEMPROFILE}" snapshot "${pid}" --output-dir "${kids}" > "${SCRATCH}/stale" 2>&1 || rc=$?
if ((rc != 2)) || ! grep -q "nobody answers: the process is gone (a stale socket)" "${SCRATCH}/stale"; then
  fail "stale socket: exit ${rc}: $(cat "${SCRATCH}/stale")"
fi
pass "no socket, and a stale one: one line each, exit 2"

# The application's own use of the process must not change: a single-
# threaded program may unshare a user namespace (EINVAL with a second
# thread: the control thread steps aside for the call), and a daemon may
# close every fd it did not open (the library stops serving and never
# touches the numbers again).
cat > "${SCRATCH}/hostile.c" <<'C'
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <linux/close_range.h>
#include <sys/syscall.h>
int main(int argc, char** argv) {
  sleep(1);
  if (strcmp(argv[1], "unshare") == 0) {
    if (unshare(CLONE_NEWUSER) != 0) { perror("unshare"); return 1; }
  } else if (syscall(SYS_close_range, 3, ~0U, 0) != 0) {
    perror("close_range");
    return 1;
  }
  puts("hostile: done");
  fflush(stdout);
  // argv[2]: a file whose appearance says the test has looked (a cap of
  // 60 s, not a measure: no sleep decides how long it lives).
  for (int i = 0; argc > 2 && i < 600 && access(argv[2], F_OK) != 0; ++i) usleep(100000);
  return 0;
}
C
gcc -O1 -o "${SCRATCH}/hostile" "${SCRATCH}/hostile.c"
start_service "${SCRATCH}/h1" "${SCRATCH}/h1.log" --dormant --backend jemalloc --preload "${JEMALLOC}" -- \
  "${SCRATCH}/hostile" unshare
wait "${SERVICE_PID}" || fail "unshare(CLONE_NEWUSER) failed under the control library: $(cat "${SCRATCH}/h1.log")"
start_service "${SCRATCH}/h2" "${SCRATCH}/h2.log" --dormant --backend jemalloc --preload "${JEMALLOC}" -- \
  "${SCRATCH}/hostile" close "${SCRATCH}/h2.looked"
log_says "${SCRATCH}/h2.log" "hostile: done" || fail "the daemon-like program did not close its fds: $(cat "${SCRATCH}/h2.log")"
# Its log fd went too: what is left to see is that nobody answers, in one line.
rc=0
"${MEMPROFILE}" status "${SERVICE_PID}" --output-dir "${SCRATCH}/h2" --timeout 3 > "${SCRATCH}/h2.status" 2>&1 || rc=$?
((rc == 2)) || fail "status after the fds were closed: exit ${rc}: $(cat "${SCRATCH}/h2.status")"
# CPU time over a second after that, not since the start: what the
# launcher (an ASan build's startup, on a busy machine) took before it
# exec'd counts in the process's own, and a spin takes a core's share.
ticks_now() { awk '{ print $14 + $15 }' "/proc/${SERVICE_PID}/stat"; }
before="$(ticks_now)"
sleep 1
ticks=$(($(ticks_now) - before))
((ticks < 20)) || fail "the process spun after its fds were closed: ${ticks} ticks in a second"
touch "${SCRATCH}/h2.looked"
wait "${SERVICE_PID}" || fail "the daemon-like program failed: $(cat "${SCRATCH}/h2.log")"
pass "unshare(CLONE_NEWUSER) still works in a single-threaded program; closing every fd stops serving, no spin"
