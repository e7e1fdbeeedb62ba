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
# That is the package beside this file, _memprofile_memray/, one module a
# job; this file is the entry: whether to track, the wiring, the chain.
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


def _start():
    out = os.environ.get("MEMPROFILE_CTL_DIR") or os.environ["MEMPROFILE_MEMRAY_DIR"]
    try:
        import memray
    except BaseException as e:  # ImportError, an extension that cannot load, a package that exits
        _say("cannot import memray in %s (%s: %s): not tracked" % (sys.executable, type(e).__name__, e))
        return
    # The rest of the bootstrap, by job (_memprofile_memray/__init__.py),
    # imported here, on the main thread, in an interpreter it tracks only;
    # the package beside this file, whatever else the path holds (a second
    # bootstrap of another version, an app's module of the same name).
    import importlib.util

    package = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_memprofile_memray")
    spec = importlib.util.spec_from_file_location("_memprofile_memray", os.path.join(package, "__init__.py"),
                                                  submodule_search_locations=[package])
    module = importlib.util.module_from_spec(spec)
    sys.modules["_memprofile_memray"] = module
    spec.loader.exec_module(module)
    from _memprofile_memray.control import Control
    from _memprofile_memray.signals import block_for_fork, unblock_after_fork

    control = Control(memray, out, os.environ.get("MEMPROFILE_MEMRAY_NATIVE", "1") == "1")
    tracker = control.tracker
    if os.environ.get("MEMPROFILE_CTL_RECORDING", "1") != "0":
        first = os.path.join(out, "memray.%d.bin" % os.getpid())
        if os.path.lexists(first) and not control.served:
            # An earlier process of this pid (PID 1 after a restart) left
            # its capture: without the control settings, nothing else tracks.
            _say("%s exists (an earlier process with this pid): this process is not tracked" % first)
        else:
            try:
                why = tracker.begin(on_main=True)
            except BaseException as e:
                why = "%s: %s" % (type(e).__name__, e)
            if why:
                tracker.stopped_reason = why
                _say("%s: not tracked%s" % (why, " (memprofile start tries again)" if control.served else ""))
    import atexit

    atexit.register(control.at_exit)
    # The app's signals are blocked across fork (signals.py): registered
    # first, so that its "before" runs last and its "after"s first.
    os.register_at_fork(before=block_for_fork, after_in_parent=unblock_after_fork, after_in_child=unblock_after_fork)
    if control.served:
        os.register_at_fork(before=control.before_fork, after_in_parent=control.after_fork_parent,
                            after_in_child=control.after_fork_child)
        try:
            control.run_thread()
        except BaseException as e:  # RuntimeError: no thread can start
            _say("cannot start the control thread (%s: %s): %s, but start/stop/status are not served" % (
                type(e).__name__, e, "tracked" if tracker.recording else "not tracked"))


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
