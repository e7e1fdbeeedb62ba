# memprofile start|stop|snapshot|status for one interpreter, served from a
# thread of its own on the control library's protocol (one line in, one
# JSON line out), and what fork and exit do to the tracker and the socket.
import _thread
import errno
import json
import os
import select
import socket
import struct
import threading
import time

from .budget import Budget
from .marks import Marks
from .names import log
from .signals import block_app_signals
from .sockets import Listener, Reaper, write_record
from .tracker import Tracker


def _number(name):
    try:
        return max(0, int(os.environ.get(name, "0")))
    except ValueError:
        return 0


class Control:
    """The tracker of one interpreter, and memprofile's control of it."""

    def __init__(self, memray, out, native):
        env = os.environ
        self.dir = out
        self.served = bool(env.get("MEMPROFILE_CTL_DIR"))
        self.every_ms = _number("MEMPROFILE_CTL_SNAPSHOT_EVERY_MS")  # --snapshot-every (0: none)
        self.scheduled = 0  # the marks --snapshot-every made in this process
        self.schedule_said = False
        self.lock = threading.Lock()
        self.pid, self.parent = os.getpid(), 0
        self.budget = Budget(out, _number("MEMPROFILE_CTL_MAX_BYTES"), _number("MEMPROFILE_CTL_MIN_FREE_BYTES"),
                             self.pid, time.time())
        self.tracker = Tracker(memray, out, native, self.budget.room if self.served else None)
        self.marks = Marks(self.tracker, self.budget.room)
        self.listener, self.reaper = Listener(out), Reaper(out)
        self.conn = None  # the connection being answered (a forked child closes its copy)
        self.exiting = False  # at_exit ran: nothing starts any more
        self.fork_held = False

    # --- the requests ------------------------------------------------------

    def reply(self, ok, error=""):
        total, own = self.budget.usage()
        free = self.budget.free_bytes()
        try:
            exe = os.readlink("/proc/self/exe")
        except OSError:
            exe = ""
        t = self.tracker
        return {"ok": ok, "pid": self.pid, "parent": self.parent, "program": exe, "backend": "memray",
                "forked_children": "recorded", "snapshot_every_ms": self.every_ms, "snapshots_scheduled": self.scheduled,
                "recording": t.recording, "stopped_reason": t.stopped_reason, "error": error, "snapshot": "",
                "output_dir": self.dir, "disk_bytes": total, "own_bytes": sum(b for _, b in own),
                "own_files": len(own), "max_bytes": self.budget.max_bytes,
                "free_bytes": free if free is not None else 0, "min_free_bytes": self.budget.min_free, "rotated": 0,
                "snapshots": [{"path": p, "bytes": b, "seq": i + 1} for i, (p, b) in enumerate(own[-64:])]}

    def handle(self, request):
        t = self.tracker
        if request == "status":
            return self.reply(True)
        if request == "start":
            if t.recording:
                return self.reply(True)
            if self.exiting:
                return self.reply(False, "the process is exiting")
            why = t.begin(on_main=False)
            if why:
                return self.reply(False, why)
            log("recording started on request, into %s" % t.capture)
            return self.reply(True)
        if request == "stop":
            if t.recording:
                t.end()
                log("recording stopped on request; %s is closed" % t.capture)
            return self.reply(True)
        if request == "snapshot":
            try:
                at, why = self.marks.mark("m")
            except OSError as e:
                at, why = None, "cannot write %s (%s)" % (self.marks.path(), e.strerror or e)
            if why:
                return self.reply(False, why)
            log("snapshot marked in %s at %.1f s" % (t.capture, at))
            answer = self.reply(True)
            answer.update({"snapshot": t.capture, "marks": self.marks.path(), "mark": self.marks.count,
                           "mark_at_ms": int(at * 1000)})
            return answer
        return self.reply(False, "unknown request '%s' (start, stop, snapshot or status)" % request[:40])

    def _answer(self, conn):
        conn.settimeout(1.0)  # a peer that says nothing for a second is dropped unanswered
        pid, uid, gid = struct.unpack("iII", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        if uid not in (0, os.geteuid()):
            conn.sendall(('{"ok":false,"error":"permission denied: uid %d is neither the process\'s uid %d nor '
                          'root"}\n' % (uid, os.geteuid())).encode())
            return
        line = b""
        deadline = time.monotonic() + 1.0
        while b"\n" not in line and len(line) < 256 and time.monotonic() < deadline:
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
                answer = {"ok": False, "pid": self.pid, "backend": "memray", "recording": self.tracker.recording,
                          "error": "the request failed in the bootstrap (%s: %s)" % (type(e).__name__, e)}
        conn.sendall((json.dumps(answer) + "\n").encode())

    # --- the schedule --------------------------------------------------------

    def _check(self):
        why = self.budget.room()
        if why and self.tracker.recording:
            self.tracker.end(why)
            log("recording stopped: %s" % why)

    def _scheduled_mark(self):
        # --snapshot-every: a mark while recording; a failure is said once.
        if not self.tracker.recording:
            return
        try:
            _, why = self.marks.mark("i")
        except OSError as e:
            why = "cannot write %s (%s)" % (self.marks.path(), e.strerror or e)
        if why:
            if not self.schedule_said:
                log("scheduled snapshot skipped: %s" % why)
                self.schedule_said = True
            return
        self.scheduled += 1
        self.schedule_said = False  # a later failure is said again

    # --- the control thread --------------------------------------------------

    def _stop_serving(self, why):
        if why:
            log("%s; start/stop/status are no longer served" % why)
        self.listener.unlink()
        self.listener.drop()

    def _accept(self, said_emfile):
        # A connection, or None; and whether running out of fds was said.
        try:
            conn, _ = self.listener.sock.accept()
            return conn, said_emfile
        except (BlockingIOError, InterruptedError):
            return None, said_emfile  # another look took it, or the peer gave up
        except OSError as e:
            if e.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                raise
            # Out of fds: the peer waits in the backlog; try again soon.
            if not said_emfile:
                log("accept: %s; requests wait until fds are free" % e.strerror)
            time.sleep(0.5)
            return None, True

    def serve(self):
        # The control thread: requests one at a time, and between them the
        # budget's check while recording and, in the first process, the
        # reaper. It wakes at least once a second to see that its fd is
        # still its own and the process is not exiting.
        block_app_signals()
        listening = self.listener.listen(self.pid)
        # Written here, not before the thread starts: a child that ends
        # at once (a fork worker's os._exit) leaves no record behind, and
        # one that ends later leaves its socket, which the reaper takes
        # with the record.
        write_record(self.dir, self.pid, self.parent, self.budget.started)
        if not listening:
            return
        poller = select.poll()
        poller.register(self.listener.sock.fileno(), select.POLLIN)
        next_check = next_reap = time.monotonic()
        next_mark = next_check + self.every_ms / 1000.0
        said_emfile = False
        while True:
            if self.exiting:
                return self._stop_serving("")
            if not self.listener.ours():
                return self._stop_serving("the control socket's fd was closed by the application")
            now = time.monotonic()
            wake = now + 1.0
            if self.tracker.recording and self.budget.limited():
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
            if ready and self.listener.ours():  # looked at again: the fd may be the app's since poll began
                try:
                    conn, said_emfile = self._accept(said_emfile)
                except OSError as e:
                    if e.errno != errno.ECONNABORTED:
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
            now = time.monotonic()
            with self.lock:
                # A directory that cannot be read now is read again next time.
                if self.tracker.recording and self.budget.limited() and now >= next_check:
                    try:
                        self._check()
                    except OSError:
                        pass
                    next_check = time.monotonic() + self.budget.interval()
                if self.every_ms and now >= next_mark:
                    self._scheduled_mark()
                    next_mark = time.monotonic() + self.every_ms / 1000.0
                if not self.parent and now >= next_reap:
                    try:
                        self.reaper.reap(self.pid)
                    except OSError:
                        pass
                    # Every 2 s, and at most 2 % of the time in a directory slow to read.
                    next_reap = time.monotonic() + min(60.0, max(2.0, self.reaper.cost * 50))

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
        # under memray's follow_fork, and this child may stop it.
        self.lock, self.fork_held = threading.Lock(), False
        self.listener.forget()
        if self.conn is not None:  # the parent was answering a request: not this child's
            try:
                self.conn.close()
            except OSError:
                pass
            self.conn = None
        self.parent, self.pid = self.pid, os.getpid()
        self.budget.pid, self.budget.started = self.pid, time.time()
        self.tracker.after_fork_child()
        self.scheduled, self.schedule_said = 0, False
        if self.served:
            try:
                self.run_thread()
            except BaseException as e:
                log("cannot serve this forked child (%s: %s)" % (type(e).__name__, e))

    def at_exit(self):
        # Closes the capture after the application's own atexit handlers
        # (registered later, run earlier), in the process that writes it.
        if os.getpid() != self.pid:
            return
        held = self.lock.acquire(timeout=30)
        try:
            self.exiting = True  # a request still queued starts nothing now
            if self.tracker.recording:
                self.tracker.end()
            self.listener.unlink()
            if self.served and not self.parent:
                self.reaper.reap(self.pid)
        except BaseException:
            pass
        finally:
            if held:
                self.lock.release()
