# memprofile's bootstrap for the memray backend (memprofile exec --backend
# memray puts this directory first on PYTHONPATH). Python's site module
# imports it at startup, in every interpreter that inherits the variable:
# the program exec started, its spawned workers (multiprocessing spawn and
# forkserver, subprocess running the same interpreter), and any other
# Python program a child runs. It starts memray's tracker only in the
# interpreter memprofile exec judged (MEMPROFILE_MEMRAY_TARGET), so a child
# that runs another program is never tracked; forked children follow
# (follow_fork), each in its own capture. Then it hands over to the
# application's own sitecustomize, if it has one, as ddtrace-run's does.
#
# It never stops the application: anything that goes wrong is one line on
# stderr, and the program runs untracked.
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
    out = os.environ["MEMPROFILE_MEMRAY_DIR"]
    path = os.path.join(out, "memray.%d.bin" % os.getpid())
    if os.path.lexists(path):
        # memray never overwrites, and neither does memprofile: an earlier
        # process of this pid (PID 1 after a restart) left its capture.
        _say("%s exists (an earlier process with this pid): this process is not tracked" % path)
        return
    try:
        import memray
    except Exception as e:  # ImportError, or an extension that cannot load
        _say("cannot import memray in %s (%s: %s): not tracked" % (sys.executable, type(e).__name__, e))
        return
    native = os.environ.get("MEMPROFILE_MEMRAY_NATIVE", "1") == "1"
    # Made here, where imports may run (this thread holds the import locks
    # of site and sitecustomize: a helper thread importing would wait on
    # them for ever), and entered on a helper.
    try:
        tracker = memray.Tracker(path, native_traces=native, follow_fork=True)
    except Exception as e:
        _say("cannot start the tracker into %s (%s: %s): not tracked" % (path, type(e).__name__, e))
        return
    started = []

    def enter():
        # memray hides the frames below Tracker.__enter__ on the thread that
        # enters it (skipped_frames_on_main_tid): entered here, that is this
        # short-lived thread, not the application's main thread.
        try:
            tracker.__enter__()
            started.append(tracker)
        except Exception as e:
            _say("cannot start the tracker into %s (%s: %s): not tracked" % (path, type(e).__name__, e))

    import threading

    helper = threading.Thread(target=enter, name="memprofile-memray-start", daemon=True)
    helper.start()
    helper.join(60)
    if helper.is_alive():
        _say("the tracker did not start within 60 s: this process may be tracked from later on, or not at all")
    if started:
        import atexit

        # Closes the capture (memray compresses it at exit) after the
        # application's own atexit handlers, registered later, have run.
        atexit.register(started[0].__exit__, None, None, None)


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
    if _tracked_here():
        try:
            _start()
        except Exception as e:
            _say("bootstrap failed (%s: %s): not tracked" % (type(e).__name__, e))
_bootstraps.add(os.path.dirname(os.path.abspath(__file__)))
_chain(_bootstraps)
