# memprofile's bootstrap for the memray backend (memprofile exec --backend
# memray puts this directory first on PYTHONPATH). Python's site module
# imports it at startup, in every interpreter that inherits the variable:
# the program exec started, its spawned workers (multiprocessing spawn and
# forkserver, subprocess running the same interpreter), and any other
# Python program a child runs. It tracks only the interpreter memprofile
# exec judged (MEMPROFILE_MEMRAY_TARGET), so a child that runs another
# program is never tracked; forked children follow (follow_fork), each in
# its own capture. Then it hands over to the application's own
# sitecustomize, if it has one, as ddtrace-run's does.
#
# Where exec gave the control settings (MEMPROFILE_CTL_*), each tracked
# interpreter also serves memprofile start|stop|snapshot|status on the
# control library's socket (DIR/memprofile-ctl.PID.sock, the same protocol
# as ctl/ctl.c), from a thread of its own, and keeps the captures within
# the directory's disk budget. A forked child serves in its own right.
#
# It never stops the application: anything that goes wrong is one line on
# stderr, and the program runs untracked (or unserved).
import os
import sys


def _say(message):
    # A program started with fd 2 closed has no sys.stderr: it gets nothing.
    try:
        if sys.stderr is not None:
            sys.stderr.write("memprofile: memray: %s\n" % message)
    except Exception:
        pass


def _tracked_here():
    target = os.environ.get("MEMPROFILE_MEMRAY_TARGET", "")
    if not target or not os.environ.get("MEMPROFILE_MEMRAY_DIR"):
        return False
    try:
        return os.path.realpath(sys.executable) == target
    except (OSError, ValueError):
        return False


def _capture_owner(name):
    # The pid whose capture `name` is, or -1: memray.PID.bin, memray.PID.N.bin
    # (the Nth start in that process), and NAME.CHILD for a child forked
    # under follow_fork (memray appends the child's pid to the first
    # capture's name).
    if not name.startswith("memray."):
        return -1
    parts = name[7:].split(".")
    if len(parts) > 4 or "bin" not in parts or not all(p.isdigit() and p.isascii() for p in parts if p != "bin"):
        return -1
    at = parts.index("bin")
    if at not in (1, 2) or len(parts) - at > 2:
        return -1
    return int(parts[-1] if at + 1 < len(parts) else parts[0])


def _capture_number(name):
    # Which start of its process made capture `name`: N of memray.PID.N.bin
    # (and of NAME.CHILD), 1 for memray.PID.bin.
    parts = name[7:].split(".")
    return int(parts[1]) if len(parts) > 2 and parts[2] == "bin" and parts[1].isdigit() else 1


def _mib(n):
    return "%.1f MiB" % (n / 1048576.0)


# Most marks one capture takes (a mark a second for a day): each is a
# line of at most 16 bytes, well within what report reads of a marks file.
MAX_MARKS = 100000


class _Control:
    """The tracker of one interpreter, and memprofile's control of it."""

    def __init__(self, memray, out, native):
        # Every module the control thread needs is imported here, on the
        # main thread: that thread may hold import locks (site's, this
        # module's) while the control thread runs.
        import errno
        import json
        import select
        import signal
        import socket
        import stat
        import struct
        import threading
        import time

        self.memray, self.socket, self.threading, self.time = memray, socket, threading, time
        self.errno, self.json, self.signal, self.stat, self.struct = errno, json, signal, stat, struct
        self.select = select
        self.dir, self.native = out, native
        env = os.environ
        self.served = bool(env.get("MEMPROFILE_CTL_DIR"))
        self.max_bytes = self._number("MEMPROFILE_CTL_MAX_BYTES")
        self.min_free = self._number("MEMPROFILE_CTL_MIN_FREE_BYTES")
        self.every_ms = self._number("MEMPROFILE_CTL_SNAPSHOT_EVERY_MS")  # --snapshot-every (0: none)
        self.scheduled = 0  # the marks --snapshot-every made in this process
        self.schedule_said = False
        self.marks = 0  # in the current capture's marks file
        self.lock = threading.Lock()
        self.pid, self.parent = os.getpid(), 0
        self.started = time.time()
        self.tracker, self.capture, self.stem = None, "", ""
        self.capture_started = 0.0
        self.recording, self.stopped_reason = False, ""
        self.listener, self.sock_path, self.sock_ino, self.listen_id = None, "", None, None
        self.conn = None  # the connection being answered (a forked child closes its copy)
        self.exiting = False  # at_exit ran: nothing starts any more
        self.fork_held = False
        self.scan_cost = self.reap_cost = 0.0

    @staticmethod
    def _number(name):
        try:
            return max(0, int(os.environ.get(name, "0")))
        except ValueError:
            return 0

    def log(self, message):
        # As the control library's lines: "memprofile-ctl[PID]: ...".
        try:
            os.write(2, ("memprofile-ctl[%d]: memray: %s\n" % (os.getpid(), message)).encode("utf-8", "replace"))
        except OSError:
            pass

    # --- the captures ------------------------------------------------------

    def _free_name(self):
        # memray never overwrites, and neither does memprofile: the first
        # capture is memray.PID.bin, a later start's memray.PID.N.bin.
        for n in range(1, 10000):
            name = "memray.%d.bin" % self.pid if n == 1 else "memray.%d.%d.bin" % (self.pid, n)
            if not os.path.lexists(os.path.join(self.dir, name)):
                return os.path.join(self.dir, name)
        raise FileExistsError("no free capture name for pid %d in %s" % (self.pid, self.dir))

    def begin(self, on_main):
        # A new capture. On the main thread at startup the tracker is made
        # here, where imports may run (this thread holds the import locks of
        # site and sitecustomize: a helper thread importing would wait on
        # them for ever), and entered on a short-lived helper: memray hides
        # the frames below Tracker.__enter__ on the thread that enters it
        # (skipped_frames_on_main_tid), and on the main thread those would be
        # the app's own outermost frames. Returns "" or why it did not start.
        path = self._free_name()
        if self.served:
            room = self._room()
            if room:
                return room
        # What failed is kept as text: an exception's traceback would hold
        # the failed tracker (and memray's open file) alive in a cycle, and
        # its late destructor would compress whichever capture has the name
        # by then.
        failed = []
        tracker = None
        try:
            tracker = self.memray.Tracker(path, native_traces=self.native, follow_fork=True)
        except BaseException as e:  # OSError: memray cannot create the file; a broken one may even exit
            failed.append("%s: %s" % (type(e).__name__, e))
        if tracker is not None and on_main:
            gave_up = []

            def enter():
                # A thread memray starts inherits this one's mask: the
                # app's signals stay the app's there too.
                self._block_signals()
                try:
                    tracker.__enter__()
                except BaseException as e:
                    failed.append("%s: %s" % (type(e).__name__, e))
                    return
                if gave_up:  # too late: nobody would ever close it
                    tracker.__exit__(None, None, None)

            helper = self.threading.Thread(target=enter, name="memprofile-memray-start", daemon=True)
            helper.start()
            helper.join(60)
            if helper.is_alive():
                gave_up.append(True)
                return "the tracker did not start within 60 s"
        elif tracker is not None:
            try:
                tracker.__enter__()
            except BaseException as e:
                failed.append("%s: %s" % (type(e).__name__, e))
        if failed:
            # memray made the file before it failed (an empty LZ4 frame when
            # another tracker runs); the name was free, so the file is its.
            # The tracker goes first: its file's destructor runs now.
            tracker = None
            try:
                os.unlink(path)
            except OSError:
                pass
            return "cannot start the tracker into %s (%s)" % (path, failed[0])
        self.tracker, self.capture, self.stem = tracker, path, path
        self.marks, self.capture_started = 0, self.time.time()
        self.recording, self.stopped_reason = True, ""
        self._tell_children()
        return ""

    def end(self, why=""):
        # Closes the capture (memray compresses it) and keeps what it holds.
        tracker, self.tracker, self.recording = self.tracker, None, False
        self.stopped_reason = why
        self._tell_children()
        if tracker is not None:
            try:
                tracker.__exit__(None, None, None)
            except BaseException as e:
                self.log("closing %s: %s: %s" % (self.capture, type(e).__name__, e))

    def _tell_children(self):
        # An interpreter this one spawns later (a multiprocessing spawn
        # worker, a subprocess) starts in the state this one is in now.
        # Written only when it changes (the launcher always sets it, so
        # this replaces a value and never grows the environment).
        value = "1" if self.recording else "0"
        if os.environ.get("MEMPROFILE_CTL_RECORDING") != value:
            os.environ["MEMPROFILE_CTL_RECORDING"] = value

    # --- the marks ----------------------------------------------------------

    def marks_path(self):
        # memray-marks. and the rest of the capture's name: report reads
        # it before the capture it marks (it sorts first, also in collect's
        # archive) and ends a span of the run at each mark.
        name = os.path.basename(self.capture)
        return os.path.join(os.path.dirname(self.capture), "memray-marks." + name[len("memray."):])

    def mark(self, kind):
        # A snapshot of a continuous capture: the moment, appended to the
        # capture's marks file in one write. Returns (seconds since the
        # capture began, "") or (None, why not).
        if not self.recording:
            return None, "not recording: memprofile start first (a snapshot marks the capture being written)"
        if self.marks >= MAX_MARKS:
            return None, "%s holds %d marks, memprofile's limit for one capture" % (self.marks_path(), MAX_MARKS)
        why = self._room()
        if why:
            return None, why
        now = self.time.time()
        line = ("%d %s\n" % (int(now * 1000), kind)).encode()
        # Never through a link, never blocking on a fifo (ENXIO without a
        # reader); the first mark of a capture replaces what an earlier
        # process of this name left.
        flags = (os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) |
                 (os.O_TRUNC if self.marks == 0 else 0))
        fd = os.open(self.marks_path(), flags, 0o644)
        try:
            if not self.stat.S_ISREG(os.fstat(fd).st_mode):
                return None, "%s is not a regular file" % self.marks_path()
            size = os.lseek(fd, 0, os.SEEK_END)
            if os.write(fd, line) != len(line):
                os.ftruncate(fd, size)  # a line cut short (the disk filled) is taken back, not left to join the next
                return None, "cannot write %s (a short write: the filesystem is full?)" % self.marks_path()
        finally:
            os.close(fd)
        self.marks += 1
        return now - self.capture_started, ""

    # --- the disk budget ---------------------------------------------------

    def _usage(self):
        # (all memray captures in the directory, this process's [(path,
        # bytes)]), bounded by the directory's size. A file counts by the
        # blocks it holds: memray grows its capture ahead of its writes.
        total, own = 0, []
        start = self.time.monotonic()
        try:
            entries = os.scandir(self.dir)
        except OSError:
            return total, own  # the directory went away: nothing of it counts
        with entries:
            for e in entries:
                marks = e.name.startswith("memray-marks.")  # counted in the directory's total, never a capture
                if not (marks or e.name.startswith("memray.")) or not e.name[13 if marks else 7:][:1].isdigit():
                    continue
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if not self.stat.S_ISREG(st.st_mode):
                    continue
                used = min(st.st_size, st.st_blocks * 512)
                total += used
                if not marks and _capture_owner(e.name) == self.pid and st.st_mtime >= self.started - 1:
                    own.append((e.path, used))
        self.scan_cost = self.time.monotonic() - start
        own.sort(key=lambda pb: (_capture_number(os.path.basename(pb[0])), pb[0]))  # oldest first
        return total, own

    def _free_bytes(self):
        try:
            v = os.statvfs(self.dir)
            return v.f_bavail * v.f_frsize
        except OSError:
            return None

    def _room(self, total=None):
        # "" while the captures are within the budget and the filesystem
        # above its floor; else why recording cannot go on.
        if total is None:
            total = self._usage()[0]
        if self.max_bytes and total >= self.max_bytes:
            return "the captures in %s (%s) reached the %s budget (--max-profile-mb)" % (
                self.dir, _mib(total), _mib(self.max_bytes))
        free = self._free_bytes()
        if self.min_free and free is not None and free <= self.min_free:
            return "%s free on the filesystem of %s, at the %s floor (--min-free-mb)" % (
                _mib(free), self.dir, _mib(self.min_free))
        return ""

    def _check(self):
        why = self._room()
        if why and self.recording:
            self.end(why)
            self.log("recording stopped: %s" % why)

    def _interval(self):
        # Every 100 ms: memray writes a few MB a second at most; a directory
        # that takes long to read is read at most 2 % of the time.
        return min(10.0, max(0.1, self.scan_cost * 50))

    # --- the socket --------------------------------------------------------

    def _at_dir(self, sock, name, op):
        # A directory path too long for sun_path is reached through its fd,
        # as the control library does (ctl.c, at_dir).
        path = os.path.join(self.dir, name)
        if len(path.encode()) < 108:
            return op(sock, path)
        fd = os.open(self.dir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            return op(sock, "/proc/self/fd/%d/%s" % (fd, name))
        finally:
            os.close(fd)

    def _listen(self):
        # Restricted on the fd before bind (the bound file takes the socket
        # inode's mode; a chmod by name would follow a link another user put
        # there, in a directory without the sticky bit), bound under a
        # temporary name, listening, then renamed:
        # a socket under its final name always answers while its process
        # lives (the reaper relies on it). Non-blocking once, here: serve
        # waits in poll, and never changes the fd's flags again (an fd the
        # app closed and reused would be the app's by then).
        name = "memprofile-ctl.%d.sock" % self.pid
        path = os.path.join(self.dir, name)
        s = self.socket.socket(self.socket.AF_UNIX, self.socket.SOCK_STREAM)
        try:
            try:
                os.unlink(path + ".new")
            except FileNotFoundError:
                pass
            os.fchmod(s.fileno(), 0o600)
            self._at_dir(s, name + ".new", lambda k, a: k.bind(a))
            s.listen(16)
            s.setblocking(False)
            os.rename(path + ".new", path)
            self.sock_ino = os.lstat(path).st_ino
            st = os.fstat(s.fileno())
            self.listen_id = (st.st_dev, st.st_ino)
        except OSError as e:
            s.close()
            try:
                os.unlink(path + ".new")
            except OSError:
                pass
            self.log("cannot serve %s: %s; start/stop/snapshot/status are not available" % (path, e.strerror or e))
            return False
        self.listener, self.sock_path = s, path
        return True

    def _ours(self):
        # The listener's fd is still the socket made in _listen: an app that
        # closes fds it did not open (a daemon's closerange) may have reused
        # the number for a file or a socket of its own.
        if self.listener is None:
            return False
        try:
            st = os.fstat(self.listener.fileno())
        except (OSError, ValueError):
            return False
        return (st.st_dev, st.st_ino) == self.listen_id

    def _drop_listener(self):
        # Closes the listener if the fd is still its own; else forgets the
        # number without closing it (it is the app's now).
        ours = self._ours()
        listener, self.listener = self.listener, None
        if listener is None:
            return
        try:
            if ours:
                listener.close()
            else:
                listener.detach()
        except OSError:
            pass

    def _unlink_socket(self):
        # Only the socket this process made: the name may be another's by now.
        try:
            if self.sock_path and os.lstat(self.sock_path).st_ino == self.sock_ino:
                os.unlink(self.sock_path)
        except OSError:
            pass

    def _record(self):
        # memprofile-proc.PID.json: who this process is in the tree, which
        # collect carries and report reads (as ctl.c writes it).
        try:
            exe = os.readlink("/proc/self/exe")
        except OSError:
            exe = ""
        body = self.json.dumps({"pid": self.pid, "parent": self.parent, "program": exe, "backend": "memray",
                           "started": int(self.started)}) + "\n"
        name = os.path.join(self.dir, "memprofile-proc.%d.json" % self.pid)
        try:
            try:
                os.unlink(name + ".new")
            except FileNotFoundError:
                pass
            fd = os.open(name + ".new", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, body.encode())
            finally:
                os.close(fd)
            os.rename(name + ".new", name)
        except OSError:
            pass

    def _reap(self):
        # Sockets nobody serves any more: a worker that ended with _exit or
        # was killed. Stale when a connect is refused; at most 1024 a pass.
        # A socket's or a record's NAME.new of a pid that no longer runs is
        # a child that ended between its write and its rename.
        errno, stat = self.errno, self.stat
        start = self.time.monotonic()
        stale = []
        with os.scandir(self.dir) as entries:
            for e in entries:
                n = e.name
                if len(stale) >= 1024:
                    continue
                if n.startswith("memprofile-proc.") and n.endswith(".json.new"):
                    pending, pid = True, n[16:-9]
                elif n.startswith("memprofile-ctl.") and n.endswith(".sock.new"):
                    pending, pid = True, n[15:-9]
                elif n.startswith("memprofile-ctl.") and n.endswith(".sock"):
                    pending, pid = False, n[15:-5]
                else:
                    continue
                if not (pid.isdigit() and pid.isascii()) or int(pid) == self.pid:
                    continue
                if pending:
                    try:
                        os.kill(int(pid), 0)
                        continue
                    except ProcessLookupError:
                        pass
                    except OSError:
                        continue
                    try:
                        if os.lstat(e.path).st_uid == os.geteuid():
                            os.unlink(e.path)
                    except OSError:
                        pass
                    continue
                s = self.socket.socket(self.socket.AF_UNIX, self.socket.SOCK_STREAM)
                s.setblocking(False)
                try:
                    rc = self._at_dir(s, n, lambda k, a: k.connect_ex(a))
                finally:
                    s.close()
                try:
                    st = os.lstat(e.path)
                except OSError:
                    continue
                if rc == errno.ECONNREFUSED and stat.S_ISSOCK(st.st_mode) and st.st_uid == os.geteuid():
                    try:
                        os.unlink(e.path)
                        stale.append(int(pid))
                    except OSError:
                        pass
        if stale:
            owners = set()
            with os.scandir(self.dir) as entries:
                for e in entries:
                    owners.add(_capture_owner(e.name))
            for pid in stale:
                if pid not in owners:
                    try:
                        os.unlink(os.path.join(self.dir, "memprofile-proc.%d.json" % pid))
                    except OSError:
                        pass
        self.reap_cost = self.time.monotonic() - start

    # --- the requests ------------------------------------------------------

    def reply(self, ok, error=""):
        total, own = self._usage()
        free = self._free_bytes()
        try:
            exe = os.readlink("/proc/self/exe")
        except OSError:
            exe = ""
        return {"ok": ok, "pid": self.pid, "parent": self.parent, "program": exe, "backend": "memray",
                "forked_children": "recorded", "snapshot_every_ms": self.every_ms, "snapshots_scheduled": self.scheduled,
                "recording": self.recording, "stopped_reason": self.stopped_reason, "error": error, "snapshot": "",
                "output_dir": self.dir, "disk_bytes": total, "own_bytes": sum(b for _, b in own),
                "own_files": len(own), "max_bytes": self.max_bytes, "free_bytes": free if free is not None else 0,
                "min_free_bytes": self.min_free, "rotated": 0,
                "snapshots": [{"path": p, "bytes": b, "seq": i + 1} for i, (p, b) in enumerate(own[-64:])]}

    def handle(self, request):
        if request == "status":
            return self.reply(True)
        if request == "start":
            if self.recording:
                return self.reply(True)
            if self.exiting:
                return self.reply(False, "the process is exiting")
            why = self.begin(on_main=False)
            if why:
                return self.reply(False, why)
            self.log("recording started on request, into %s" % self.capture)
            return self.reply(True)
        if request == "stop":
            if self.recording:
                self.end()
                self.log("recording stopped on request; %s is closed" % self.capture)
            return self.reply(True)
        if request == "snapshot":
            try:
                at, why = self.mark("m")
            except OSError as e:
                at, why = None, "cannot write %s (%s)" % (self.marks_path(), e.strerror or e)
            if why:
                return self.reply(False, why)
            self.log("snapshot marked in %s at %.1f s" % (self.capture, at))
            answer = self.reply(True)
            answer.update({"snapshot": self.capture, "marks": self.marks_path(), "mark": self.marks,
                           "mark_at_ms": int(at * 1000)})
            return answer
        return self.reply(False, "unknown request '%s' (start, stop, snapshot or status)" % request[:40])

    def _answer(self, conn):
        conn.settimeout(1.0)  # a peer that says nothing for a second is dropped unanswered
        pid, uid, gid = self.struct.unpack("iII", conn.getsockopt(self.socket.SOL_SOCKET, self.socket.SO_PEERCRED, 12))
        if uid not in (0, os.geteuid()):
            conn.sendall(('{"ok":false,"error":"permission denied: uid %d is neither the process\'s uid %d nor '
                          'root"}\n' % (uid, os.geteuid())).encode())
            return
        line = b""
        deadline = self.time.monotonic() + 1.0
        while b"\n" not in line and len(line) < 256 and self.time.monotonic() < deadline:
            chunk = conn.recv(256)
            if not chunk:
                break
            line += chunk
        if not line.strip():
            return  # a probe (the reaper's connect), or a peer that said nothing: no answer, no work
        request = "".join(c if c.isalnum() or c in "-_" else "?" for c in line.split(b"\n")[0].decode("ascii", "replace"))
        with self.lock:
            try:
                answer = self.handle(request)
            except BaseException as e:
                answer = {"ok": False, "pid": self.pid, "backend": "memray", "recording": self.recording,
                          "error": "the request failed in the bootstrap (%s: %s)" % (type(e).__name__, e)}
        conn.sendall((self.json.dumps(answer) + "\n").encode())

    def _scheduled_mark(self):
        # --snapshot-every: a mark while recording; a failure is said once.
        if not self.recording:
            return
        try:
            _, why = self.mark("i")
        except OSError as e:
            why = "cannot write %s (%s)" % (self.marks_path(), e.strerror or e)
        if why:
            if not self.schedule_said:
                self.log("scheduled snapshot skipped: %s" % why)
                self.schedule_said = True
            return
        self.scheduled += 1
        self.schedule_said = False  # a later failure is said again

    def _block_signals(self):
        _block_app_signals()

    def _stop_serving(self, why):
        if why:
            self.log("%s; start/stop/status are no longer served" % why)
        self._unlink_socket()
        self._drop_listener()

    def serve(self):
        # The control thread: requests one at a time, and between them the
        # budget's check while recording and, in the first process, the
        # reaper. It wakes at least once a second to see that its fd is
        # still its own and the process is not exiting.
        errno = self.errno
        self._block_signals()
        listening = self._listen()
        # Written here, not before the thread starts: a child that ends
        # at once (a fork worker's os._exit) leaves no record behind, and
        # one that ends later leaves its socket, which the reaper takes
        # with the record.
        self._record()
        if not listening:
            return
        poller = self.select.poll()
        poller.register(self.listener.fileno(), self.select.POLLIN)
        next_check = next_reap = self.time.monotonic()
        next_mark = next_check + self.every_ms / 1000.0
        said_emfile = False
        while True:
            if self.exiting:
                return self._stop_serving("")
            if not self._ours():
                return self._stop_serving("the control socket's fd was closed by the application")
            now = self.time.monotonic()
            wake = now + 1.0
            if self.recording and (self.max_bytes or self.min_free):
                wake = min(wake, next_check)
            if not self.parent:
                wake = min(wake, next_reap)
            if self.every_ms:
                wake = min(wake, next_mark)
            try:
                ready = poller.poll(max(1, int((wake - now) * 1000)))
            except InterruptedError:
                ready = []
            conn = None
            if ready and self._ours():  # looked at again: the fd may be the app's since poll began
                try:
                    conn, _ = self.listener.accept()
                except (BlockingIOError, InterruptedError):
                    pass  # another look took it, or the peer gave up
                except OSError as e:
                    if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                        # Out of fds: the peer waits in the backlog; try again soon.
                        if not said_emfile:
                            self.log("accept: %s; requests wait until fds are free" % e.strerror)
                            said_emfile = True
                        self.time.sleep(0.5)
                    elif e.errno != errno.ECONNABORTED:
                        return self._stop_serving("accept on the control socket failed (%s)" % (e.strerror or e))
            if conn is not None:
                self.conn = conn
                try:
                    self._answer(conn)
                except (OSError, ValueError):
                    pass  # the peer went away, or said nothing in time
                finally:
                    self.conn = None
                    conn.close()
            now = self.time.monotonic()
            with self.lock:
                # A directory that cannot be read now is read again next time.
                if self.recording and (self.max_bytes or self.min_free) and now >= next_check:
                    try:
                        self._check()
                    except OSError:
                        pass
                    next_check = self.time.monotonic() + self._interval()
                if self.every_ms and now >= next_mark:
                    self._scheduled_mark()
                    next_mark = self.time.monotonic() + self.every_ms / 1000.0
                if not self.parent and now >= next_reap:
                    try:
                        self._reap()
                    except OSError:
                        pass
                    # Every 2 s, and at most 2 % of the time in a directory slow to read.
                    next_reap = self.time.monotonic() + min(60.0, max(2.0, self.reap_cost * 50))

    def run_thread(self):
        def body():
            try:
                self.serve()
            except BaseException as e:
                self._stop_serving("the control thread failed (%s: %s)" % (type(e).__name__, e))

        # A bare thread, not a threading.Thread: with memray 1.17 recording
        # under follow_fork, a fork while a threading.Thread lives damages
        # the parent's capture (memray's own parser stops there too: an
        # unknown record where the fork was). With a threading.Thread here,
        # a gunicorn arbiter's capture was damaged at a worker's fork in 2
        # runs of 3; with this bare thread, in none of 6. Nothing here may
        # call threading.current_thread(), which would register it after
        # all.
        import _thread

        _thread.start_new_thread(body, ())

    # --- fork and exit -----------------------------------------------------

    def before_fork(self):
        # Held across fork, so that the child never copies a request or a
        # budget check half done. Bounded: a signal handler that forks while
        # this thread holds the lock (in at_exit) would wait for ever.
        self.fork_held = self.lock.acquire(timeout=10)

    def after_fork_parent(self):
        if self.fork_held:
            self.fork_held = False
            self.lock.release()

    def after_fork_child(self):
        # The parent's socket and thread are not this process's: its own are
        # made here. A capture the parent was writing goes on in this child
        # under memray's follow_fork, as STEM.PID, and this child may stop it.
        self.lock, self.fork_held = self.threading.Lock(), False
        self._drop_listener()
        if self.conn is not None:  # the parent was answering a request: not this child's
            try:
                self.conn.close()
            except OSError:
                pass
            self.conn = None
        self.sock_path, self.sock_ino, self.listen_id = "", None, None
        self.parent, self.pid, self.started = self.pid, os.getpid(), self.time.time()
        if self.recording and self.stem:
            self.capture = "%s.%d" % (self.stem, self.pid)
            self.marks, self.capture_started = 0, self.time.time()
        self.scheduled, self.schedule_said = 0, False
        if self.served:
            try:
                self.run_thread()
            except BaseException as e:
                self.log("cannot serve this forked child (%s: %s)" % (type(e).__name__, e))

    def at_exit(self):
        # Closes the capture after the application's own atexit handlers
        # (registered later, run earlier), in the process that writes it.
        if os.getpid() != self.pid:
            return
        held = self.lock.acquire(timeout=30)
        try:
            self.exiting = True  # a request still queued starts nothing now
            if self.recording:
                self.end()
            self._unlink_socket()
            if self.served and not self.parent:
                self._reap()
        except BaseException:
            pass
        finally:
            if held:
                self.lock.release()


def _start():
    out = os.environ.get("MEMPROFILE_CTL_DIR") or os.environ["MEMPROFILE_MEMRAY_DIR"]
    try:
        import memray
    except BaseException as e:  # ImportError, an extension that cannot load, a package that exits
        _say("cannot import memray in %s (%s: %s): not tracked" % (sys.executable, type(e).__name__, e))
        return
    control = _Control(memray, out, os.environ.get("MEMPROFILE_MEMRAY_NATIVE", "1") == "1")
    if os.environ.get("MEMPROFILE_CTL_RECORDING", "1") != "0":
        first = os.path.join(out, "memray.%d.bin" % os.getpid())
        if os.path.lexists(first) and not control.served:
            # An earlier process of this pid (PID 1 after a restart) left
            # its capture: without the control settings, nothing else tracks.
            _say("%s exists (an earlier process with this pid): this process is not tracked" % first)
        else:
            try:
                why = control.begin(on_main=True)
            except BaseException as e:
                why = "%s: %s" % (type(e).__name__, e)
            if why:
                control.stopped_reason = why
                _say("%s: not tracked%s" % (why, " (memprofile start tries again)" if control.served else ""))
    import atexit

    atexit.register(control.at_exit)
    # memray's own fork handler starts the child's tracking thread from the
    # forking thread, whose mask it inherits: the app's signals are blocked
    # across fork, so that thread takes none of them, and the forking
    # thread's own mask is given back on both sides. Registered first: its
    # "before" runs last, its "after"s first.
    os.register_at_fork(before=_block_for_fork, after_in_parent=_unblock_after_fork,
                        after_in_child=_unblock_after_fork)
    if control.served:
        os.register_at_fork(before=control.before_fork, after_in_parent=control.after_fork_parent,
                            after_in_child=control.after_fork_child)
        try:
            control.run_thread()
        except BaseException as e:  # RuntimeError: no thread can start
            _say("cannot start the control thread (%s: %s): %s, but start/stop/status are not served" % (
                type(e).__name__, e, "tracked" if control.recording else "not tracked"))


_fork_mask = None  # the forking thread's own signal mask, across one fork


def _block_app_signals():
    # The app's signals are the app's: none lands on this thread, nor on a
    # thread it starts. A fault of its own (SIGSEGV, SIGBUS, ...) stays
    # deliverable, so that it is reported, not hidden. The mask before, or
    # None when it could not be set.
    try:
        import signal

        sync = {getattr(signal, n) for n in ("SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGABRT", "SIGTRAP")
                if hasattr(signal, n)}
        return signal.pthread_sigmask(signal.SIG_BLOCK, set(signal.valid_signals()) - sync)
    except BaseException:
        return None


def _block_for_fork():
    global _fork_mask
    _fork_mask = _block_app_signals()


def _unblock_after_fork():
    global _fork_mask
    mask, _fork_mask = _fork_mask, None
    if mask is None:
        return
    try:
        import signal

        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    except BaseException:
        pass


def _chain(bootstraps):
    # The application's own sitecustomize: the next one on sys.path that is
    # no memprofile bootstrap, imported under its name as Python would have.
    mine = sys.modules.get(__name__)
    rest = []
    for p in sys.path:
        try:
            if os.path.abspath(p or ".") not in bootstraps:
                rest.append(p)
        except (TypeError, ValueError):
            continue  # not a path (a bytes or other entry): Python skips it too
    import importlib.machinery
    import importlib.util

    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules[__name__] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules[__name__] = mine
        raise


# Once per interpreter: an app's sitecustomize that imports sitecustomize
# again, or a second copy of this bootstrap on the path (an exec nested in
# another, with another library directory), must not start a second tracker
# or chain back here.
_bootstraps = getattr(sys, "_memprofile_bootstraps", None)
if _bootstraps is None:
    _bootstraps = sys._memprofile_bootstraps = set()
    # BaseException: a memray whose import or tracker raises SystemExit or
    # KeyboardInterrupt must not end the interpreter in site's import (the
    # app would never start, nor its own sitecustomize run).
    if _tracked_here():
        try:
            _start()
        except BaseException as e:
            _say("bootstrap failed (%s: %s): not tracked" % (type(e).__name__, e))
_bootstraps.add(os.path.dirname(os.path.abspath(__file__)))
_chain(_bootstraps)
