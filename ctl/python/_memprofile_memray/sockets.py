# The control socket of this process (DIR/memprofile-ctl.PID.sock, as the
# control library's, ctl/socket.c), its record beside the captures, and the
# sockets of the tree's processes that ended.
import errno
import json
import os
import socket
import stat
import time

from .names import capture_owner, log


def _at_dir(out, sock, name, op):
    # A directory path too long for sun_path is reached through its fd,
    # as the control library does (ctl/socket.c, at_dir).
    path = os.path.join(out, name)
    if len(path.encode()) < 108:
        return op(sock, path)
    fd = os.open(out, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return op(sock, "/proc/self/fd/%d/%s" % (fd, name))
    finally:
        os.close(fd)


class Listener:
    """The listening socket this process made, and only that one."""

    def __init__(self, out):
        self.dir = out
        self.sock, self.path, self.ino, self.fd_id = None, "", None, None

    def listen(self, pid):
        # Restricted on the fd before bind (the bound file takes the socket
        # inode's mode; a chmod by name would follow a link another user put
        # there, in a directory without the sticky bit), bound under a
        # temporary name, listening, then renamed:
        # a socket under its final name always answers while its process
        # lives (the reaper relies on it). Non-blocking once, here: serve
        # waits in poll, and never changes the fd's flags again (an fd the
        # app closed and reused would be the app's by then).
        name = "memprofile-ctl.%d.sock" % pid
        path = os.path.join(self.dir, name)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            try:
                os.unlink(path + ".new")
            except FileNotFoundError:
                pass
            os.fchmod(s.fileno(), 0o600)
            _at_dir(self.dir, s, name + ".new", lambda k, a: k.bind(a))
            s.listen(16)
            s.setblocking(False)
            os.rename(path + ".new", path)
            self.ino = os.lstat(path).st_ino
            st = os.fstat(s.fileno())
            self.fd_id = (st.st_dev, st.st_ino)
        except OSError as e:
            s.close()
            try:
                os.unlink(path + ".new")
            except OSError:
                pass
            log("cannot serve %s: %s; start/stop/snapshot/status are not available" % (path, e.strerror or e))
            return False
        self.sock, self.path = s, path
        return True

    def ours(self):
        # The fd is still the socket made in listen: an app that closes fds
        # it did not open (a daemon's closerange) may have reused the number
        # for a file or a socket of its own.
        if self.sock is None:
            return False
        try:
            st = os.fstat(self.sock.fileno())
        except (OSError, ValueError):
            return False
        return (st.st_dev, st.st_ino) == self.fd_id

    def drop(self):
        # Closes the socket if the fd is still its own; else forgets the
        # number without closing it (it is the app's now).
        ours = self.ours()
        sock, self.sock = self.sock, None
        if sock is None:
            return
        try:
            if ours:
                sock.close()
            else:
                sock.detach()
        except OSError:
            pass

    def unlink(self):
        # Only the socket this process made: the name may be another's by now.
        try:
            if self.path and os.lstat(self.path).st_ino == self.ino:
                os.unlink(self.path)
        except OSError:
            pass

    def forget(self):
        # In a forked child: the parent's socket is not this process's.
        self.drop()
        self.path, self.ino, self.fd_id = "", None, None


def write_record(out, pid, parent, started):
    # memprofile-proc.PID.json: who this process is in the tree, which
    # collect carries and report reads (as ctl/proc_record.c writes it).
    try:
        exe = os.readlink("/proc/self/exe")
    except OSError:
        exe = ""
    body = json.dumps({"pid": pid, "parent": parent, "program": exe, "backend": "memray",
                       "started": int(started)}) + "\n"
    name = os.path.join(out, "memprofile-proc.%d.json" % pid)
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


class Reaper:
    """The first process's: the sockets nobody serves any more."""

    def __init__(self, out):
        self.dir = out
        self.cost = 0.0  # the last pass's, in seconds

    def reap(self, own_pid):
        # A worker that ended with _exit or was killed. Stale when a connect
        # is refused; at most 1024 a pass. A socket's or a record's NAME.new
        # of a pid that no longer runs is a child that ended between its
        # write and its rename.
        start = time.monotonic()
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
                if not (pid.isdigit() and pid.isascii()) or int(pid) == own_pid:
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
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.setblocking(False)
                try:
                    rc = _at_dir(self.dir, s, n, lambda k, a: k.connect_ex(a))
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
                    owners.add(capture_owner(e.name))
            for pid in stale:
                if pid not in owners:
                    try:
                        os.unlink(os.path.join(self.dir, "memprofile-proc.%d.json" % pid))
                    except OSError:
                        pass
        self.cost = time.monotonic() - start
