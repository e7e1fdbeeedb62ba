# Capture names, units, and the log line of the control side.
import os


def capture_owner(name):
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


def capture_number(name):
    # Which start of its process made capture `name`: N of memray.PID.N.bin
    # (and of NAME.CHILD), 1 for memray.PID.bin.
    parts = name[7:].split(".")
    return int(parts[1]) if len(parts) > 2 and parts[2] == "bin" and parts[1].isdigit() else 1


def mib(n):
    return "%.1f MiB" % (n / 1048576.0)


def log(message):
    # As the control library's lines: "memprofile-ctl[PID]: ...".
    try:
        os.write(2, ("memprofile-ctl[%d]: memray: %s\n" % (os.getpid(), message)).encode("utf-8", "replace"))
    except OSError:
        pass
