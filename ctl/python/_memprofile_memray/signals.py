# The app's signals are the app's: none lands on a thread memprofile starts
# (the control thread, the tracker's helper), nor on a thread those start,
# nor on the thread memray's fork handler starts in a forked child.
import signal

_fork_mask = None  # the forking thread's own signal mask, across one fork


def block_app_signals():
    # Blocks them on this thread. A fault of its own (SIGSEGV, SIGBUS, ...)
    # stays deliverable, so that it is reported, not hidden. The mask
    # before, or None when it could not be set.
    try:
        sync = {getattr(signal, n) for n in ("SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGABRT", "SIGTRAP")
                if hasattr(signal, n)}
        return signal.pthread_sigmask(signal.SIG_BLOCK, set(signal.valid_signals()) - sync)
    except BaseException:
        return None


# memray's own fork handler starts the child's tracking thread from the
# forking thread, whose mask it inherits: the app's signals are blocked
# across fork, so that thread takes none of them, and the forking thread's
# own mask is given back on both sides.
def block_for_fork():
    global _fork_mask
    _fork_mask = block_app_signals()


def unblock_after_fork():
    global _fork_mask
    mask, _fork_mask = _fork_mask, None
    if mask is None:
        return
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    except BaseException:
        pass
