# memprofile's memray bootstrap, by job (the entry is ../sitecustomize.py,
# which imports these only in an interpreter it tracks):
#   names.py    capture names, units, the log line
#   signals.py  the app's signals kept off memprofile's threads, across fork too
#   tracker.py  memray's Tracker: a capture started and ended
#   marks.py    a snapshot of a continuous capture: a mark in its marks file
#   budget.py   the captures within the disk budget and above the floor
#   sockets.py  the control socket, the process's record, the stale sockets
#   control.py  memprofile start|stop|snapshot|status served from a thread,
#               and what fork and exit do to all of the above
#
# Every module the control thread needs is imported when these are, on the
# main thread: that thread may hold import locks (site's, sitecustomize's)
# while the control thread runs, so nothing here imports later.
