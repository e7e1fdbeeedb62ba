"""A hostile member of a process tree, for the control tests: it serves a
control socket in DIR the way memprofile's library does, and lies.

usage: hostile_peer.py DIR MODE [ARG] [LOG]
  squat PID        binds DIR/memprofile-ctl.PID.sock (another process's name)
                   and answers as that process, program /usr/sbin/forged-by-nobody
  liar-program     serves its own name, answers with that forged program
  liar-snapshot P  serves its own name, names P's memory record as its snapshot
  silent           serves its own name and never answers
  orphan           serves its own name, then ends, leaving a child that keeps
                   the listening socket and answers as the ended process
  forge-heap V     serves its own name and answers with a small dump of its
                   own, and beside it, under its record's name, a directory of
                   forged dumps named as process V's (987654321 bytes at a
                   mapping /forged/by/pid/ME), 5000 of them
  big-dump N       serves its own name and answers with a dump of its own of
                   N distinct stacks (a crafted file, about 50 bytes a stack)
Every request is logged to LOG when LOG is given, one line each:
"connected PID" (any connection), "request TEXT PID", and "closed PID" when
the client closes a connection that asked. It ends by itself after 300 s.
"""
import errno
import json
import os
import select
import socket
import sys
import time

out, mode = sys.argv[1], sys.argv[2]
arg = sys.argv[3] if len(sys.argv) > 3 else ""
log_path = sys.argv[4] if len(sys.argv) > 4 else ""
me = os.getpid()
name_pid = int(arg) if mode == "squat" else me  # orphan: the parent's, which the child keeps
path = os.path.join(out, "memprofile-ctl.%d.sock" % name_pid)


def log(line):
    if log_path:
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        os.write(fd, ("%s %d\n" % (line, me)).encode())
        os.close(fd)


def write_dump(path, stacks, nbytes, mapping):
    with open(path, "w") as f:
        f.write("heap_v2/524288\n  t*: %d: %d [0: 0]\n" % (stacks, stacks * nbytes))
        for i in range(stacks):
            f.write("@ 0x%x\n  t*: 1: %d [0: 0]\n" % (0x400000 + 16 * i, nbytes))
        f.write("MAPPED_LIBRARIES:\n00400000-7fffffff r-xp 00000000 08:01 4242 %s\n" % mapping)
    return path


def own_dump(stacks):
    return write_dump(os.path.join(out, "jeprof.%d.0.m0.heap" % me), stacks, 4096, "/usr/bin/python3")


own_snapshot = ""
if mode == "forge-heap":
    own_snapshot = own_dump(1)
    forged = own_snapshot + ".mem.json"
    os.mkdir(forged)
    for seq in range(5000):
        write_dump(os.path.join(forged, "jeprof.%s.%d.m%d.heap" % (arg, seq, seq)), 1, 987654321, "/forged/by/pid/%d" % me)
elif mode == "big-dump":
    own_snapshot = own_dump(int(arg))


def reply():
    program = "/usr/sbin/forged-by-nobody" if mode in ("squat", "liar-program") else os.readlink("/proc/self/exe")
    snapshots = []
    if mode == "liar-snapshot":
        snapshots = [{"path": os.path.join(out, "memprofile-mem.%s.1.mem.json" % arg), "bytes": 1, "seq": 1}]
    elif own_snapshot:
        snapshots = [{"path": own_snapshot, "bytes": os.path.getsize(own_snapshot), "seq": 0}]
    answer = {"ok": True, "pid": name_pid, "parent": 1, "program": program, "backend": "jemalloc",
              "recording": True, "output_dir": out, "snapshot": snapshots[0]["path"] if snapshots else "",
              "snapshots": snapshots, "own_files": len(snapshots)}
    if mode == "orphan":
        del answer["program"]  # nothing /proc could contradict: only the listener's life tells
    return json.dumps(answer) + "\n"


s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
# A forked child's socket stays under its name after it exec'd until the
# tree's first process reaps it (about a second): the name is free then.
for _ in range(600):
    try:
        s.bind(path)
        break
    except OSError as e:
        if e.errno != errno.EADDRINUSE:
            raise
        time.sleep(0.1)
else:
    sys.exit("%s stayed taken for 60 s" % path)
s.listen(64)
if mode == "orphan":
    if os.fork():
        print("serving %s" % path, flush=True)
        os._exit(0)
    os.setsid()
print("serving %s" % path, flush=True)
deadline = time.time() + 300
held, asked = [], []
while time.time() < deadline:
    ready, _, _ = select.select([s] + held, [], [], 1)
    for r in ready:
        if r is s:
            c, _ = s.accept()
            log("connected")
            held.append(c)
            continue
        data = r.recv(4096)
        if not data:
            # A connection without a request is the tree's reaper probing.
            if r in asked:
                log("closed")
                asked.remove(r)
            held.remove(r)
            r.close()
            continue
        asked.append(r)
        log("request " + data.decode("ascii", "replace").strip())
        if mode != "silent":
            r.sendall(reply().encode())
