#!/usr/bin/env bash
# The control library in a service's children: a child that execs another
# program never gets it (nor the profiler), and a forked one serves its own
# socket, cleared after its _exit.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

build_workloads
jemalloc_for_anyone
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
