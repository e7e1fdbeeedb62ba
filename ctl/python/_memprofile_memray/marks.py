# A snapshot of a continuous capture: memray writes one file for the whole
# run, so memprofile snapshot marks the moment in the capture's marks file,
# which report reads to end a span of the run at each mark.
import os
import stat
import time

# Most marks one capture takes (a mark a second for a day): each is a
# line of at most 16 bytes, well within what report reads of a marks file.
MAX_MARKS = 100000


class Marks:
    """The marks of the tracker's current capture."""

    def __init__(self, tracker, room):
        # room: a call that says why nothing more may be written ("" when it may).
        self.tracker, self.room = tracker, room
        self.capture, self.count = -1, 0  # the capture the count is of (the tracker's number of it)

    def path(self):
        # memray-marks. and the rest of the capture's name: report reads
        # it before the capture it marks (it sorts first, also in collect's
        # archive).
        capture = self.tracker.capture
        name = os.path.basename(capture)
        return os.path.join(os.path.dirname(capture), "memray-marks." + name[len("memray."):])

    def taken(self):
        # How many the current capture has: a new capture, or a forked
        # child's own, starts at none, even under a name an earlier one had.
        if self.capture != self.tracker.captures:
            self.capture, self.count = self.tracker.captures, 0
        return self.count

    def mark(self, kind):
        # The moment, appended to the marks file in one write. Returns
        # (seconds since the capture began, "") or (None, why not).
        if not self.tracker.recording:
            return None, "not recording: memprofile start first (a snapshot marks the capture being written)"
        if self.taken() >= MAX_MARKS:
            return None, "%s holds %d marks, memprofile's limit for one capture" % (self.path(), MAX_MARKS)
        why = self.room()
        if why:
            return None, why
        now = time.time()
        line = ("%d %s\n" % (int(now * 1000), kind)).encode()
        # Never through a link, never blocking on a fifo (ENXIO without a
        # reader); the first mark of a capture replaces what an earlier
        # process of this name left.
        flags = (os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) |
                 (os.O_TRUNC if self.count == 0 else 0))
        fd = os.open(self.path(), flags, 0o644)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None, "%s is not a regular file" % self.path()
            size = os.lseek(fd, 0, os.SEEK_END)
            if os.write(fd, line) != len(line):
                os.ftruncate(fd, size)  # a line cut short (the disk filled) is taken back, not left to join the next
                return None, "cannot write %s (a short write: the filesystem is full?)" % self.path()
        finally:
            os.close(fd)
        self.count += 1
        return now - self.tracker.capture_started, ""
