# The captures within the directory's disk budget (--max-profile-mb) and
# the filesystem above its floor (--min-free-mb), as the control library
# keeps a preload profiler's.
import os
import stat
import time

from .names import capture_number, capture_owner, mib


class Budget:
    """The directory's captures, this process's among them."""

    def __init__(self, out, max_bytes, min_free, pid, started):
        self.dir, self.max_bytes, self.min_free = out, max_bytes, min_free
        self.pid, self.started = pid, started  # this process's captures: its pid's, since it started
        self.scan_cost = 0.0

    def limited(self):
        return bool(self.max_bytes or self.min_free)

    def usage(self):
        # (all memray captures in the directory, this process's [(path,
        # bytes)]), bounded by the directory's size. A file counts by the
        # blocks it holds: memray grows its capture ahead of its writes.
        total, own = 0, []
        start = time.monotonic()
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
                if not stat.S_ISREG(st.st_mode):
                    continue
                used = min(st.st_size, st.st_blocks * 512)
                total += used
                if not marks and capture_owner(e.name) == self.pid and st.st_mtime >= self.started - 1:
                    own.append((e.path, used))
        self.scan_cost = time.monotonic() - start
        own.sort(key=lambda pb: (capture_number(os.path.basename(pb[0])), pb[0]))  # oldest first
        return total, own

    def free_bytes(self):
        try:
            v = os.statvfs(self.dir)
            return v.f_bavail * v.f_frsize
        except OSError:
            return None

    def room(self, total=None):
        # "" while the captures are within the budget and the filesystem
        # above its floor; else why recording cannot go on.
        if total is None:
            total = self.usage()[0]
        if self.max_bytes and total >= self.max_bytes:
            return "the captures in %s (%s) reached the %s budget (--max-profile-mb)" % (
                self.dir, mib(total), mib(self.max_bytes))
        free = self.free_bytes()
        if self.min_free and free is not None and free <= self.min_free:
            return "%s free on the filesystem of %s, at the %s floor (--min-free-mb)" % (
                mib(free), self.dir, mib(self.min_free))
        return ""

    def interval(self):
        # Every 100 ms: memray writes a few MB a second at most; a directory
        # that takes long to read is read at most 2 % of the time.
        return min(10.0, max(0.1, self.scan_cost * 50))
