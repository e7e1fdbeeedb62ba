# memray's Tracker in one interpreter: a capture started and ended, under a
# name that is always free.
import os
import threading
import time

from .names import log
from .signals import block_app_signals


class Tracker:
    """The captures of one process: memray.PID.bin, then memray.PID.N.bin."""

    def __init__(self, memray, out, native, room=None):
        # room: None, or a call that says why a new capture may not start
        # ("" when it may): the disk budget, where one is served.
        self.memray, self.dir, self.native, self.room = memray, out, native, room
        self.pid = os.getpid()
        self.tracker, self.capture, self.stem = None, "", ""
        self.capture_started = 0.0
        self.captures = 0  # captures this process began (and a forked child's own): marks.py counts per capture
        self.recording, self.stopped_reason = False, ""

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
        if self.room is not None:
            why = self.room()
            if why:
                return why
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
                block_app_signals()
                try:
                    tracker.__enter__()
                except BaseException as e:
                    failed.append("%s: %s" % (type(e).__name__, e))
                    return
                if gave_up:  # too late: nobody would ever close it
                    tracker.__exit__(None, None, None)

            helper = threading.Thread(target=enter, name="memprofile-memray-start", daemon=True)
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
        self.capture_started = time.time()
        self.captures += 1
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
                log("closing %s: %s: %s" % (self.capture, type(e).__name__, e))

    def _tell_children(self):
        # An interpreter this one spawns later (a multiprocessing spawn
        # worker, a subprocess) starts in the state this one is in now.
        # Written only when it changes (the launcher always sets it, so
        # this replaces a value and never grows the environment).
        value = "1" if self.recording else "0"
        if os.environ.get("MEMPROFILE_CTL_RECORDING") != value:
            os.environ["MEMPROFILE_CTL_RECORDING"] = value

    def after_fork_child(self):
        # A capture the parent was writing goes on in this child under
        # memray's follow_fork, as STEM.PID.
        self.pid = os.getpid()
        if self.recording and self.stem:
            self.capture = "%s.%d" % (self.stem, self.pid)
            self.capture_started = time.time()
            self.captures += 1
