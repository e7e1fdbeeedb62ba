// libmemprofile_ctl.so: the companion preload library that `memprofile
// exec` loads after the heap profiler. It lets `memprofile start|stop|
// snapshot|status` drive a running process (jemalloc can only be switched
// from inside it) and keeps the profiles within a disk budget while the
// process runs. C and libc only: it loads into any glibc program.
//
// A core with thin shims, as heaptrack's src/track/: this header is the
// core's, functions only (the tables' types are tables.h), its state static
// in ctl.c, and every shim calls down into it, never up or sideways. The
// core's leaves (socket.h, conns.h, thread.h, memrecord.h, proc_record.h)
// are handed what they need and call only the log.
//
//   ctl.c       the core: the state, the requests, the snapshot's steps,
//               the control thread's loop, stopping
//   socket.c    the fds it serves on: the control socket, the wake pipe,
//               the stale sockets of the directory
//   conns.c     the connections: the peer's uid first, a request line each
//   thread.c    the control thread's start and stop (unshare and setns too)
//   log.c       the log and JSON string text (no state)
//   memrecord.c the record beside each snapshot (called by the core; libc only)
//   proc_record.c the process's record beside its profiles (likewise)
//   backend.c   what start/stop/snapshot mean for jemalloc, bytehound,
//               heaptrack, and none: a table per profiler (struct ctl_profiler)
//   budget.c    the profiles in the output directory: usage, rotation, the
//               floor (struct ctl_disk)
//   files.c     the profilers' open/creat in the output directory
//   trace_gate.c the profilers' write/close: a trace held at the floor and
//               the budget where it is written
//   spawn.c     the exec family: the profiler stays with the profiled program
//   preload.c   the entry: scope (which process serves), the constructor,
//               the fork handlers; hands the core its tables
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "log.h"  // ctl_log, json_string: the shims log through the core's log
#include "tables.h"

// The core's state is its own (ctl.c, static): the control thread reads and
// writes it after ctl_configure; the shims read what they need through
// these, and change it only through the calls below.
void ctl_configure(const struct ctl_settings* s);
// The process served stops being served (its control thread could not start).
void ctl_unserve(void);
const char* ctl_dir(void);                        // the output directory (the process's own once moved)
pid_t ctl_pid(void);                              // the process served, 0 for none
int ctl_recording_on(void);                       // the core's record of it
const struct ctl_profiler* ctl_profiler_in_use(void);
const struct ctl_disk* ctl_disk_in_use(void);     // NULL before ctl_configure
uint64_t ctl_max_bytes(void);
uint64_t ctl_min_free_bytes(void);
time_t ctl_start_time(void);                      // files of this pid older than this are an earlier process's
// heaptrack after heaptrack_stop: it cannot record again.
int ctl_final_stop(void);
void ctl_set_final_stop(void);
// Snapshots deleted to stay within the budget: the count, and one more
// (returns the count before it).
unsigned long ctl_rotated(void);
unsigned long ctl_add_rotated(void);


// Stops recording for a reason of the core's or the budget's (status shows
// it); said once in the log.
void ctl_stop_recording(const char* why);

// The dump the control thread asks for is written as NAME.part and named
// only when whole and within the budget. files.c asks, at each create in
// the output directory: 1 when `name` is that dump (the asking thread's
// next *.heap), which it then creates as NAME.part.
int ctl_is_asked_dump(const char* name);
// files.c refused to write `path` (a link, another user's file): logged,
// and the snapshot's error names it.
void ctl_note_refused(const char* path);

// Serving (preload.c): the process that is to serve, once its state is set.
// 0, or -1 when nothing could be served.
int ctl_serve(void);
// The fork handlers: no fork inside the control thread's allocations; in
// the child, the parent's fds are closed, and where the profiler records
// forked children the child serves in its own right.
void ctl_fork_prepare(void);
void ctl_fork_parent(void);
void ctl_fork_child(void);
// At exit, in the process served.
void ctl_exit(void);
// The core's lock: no fork, no request and no check of the control
// thread's while it is held (the fork handlers take it too). users.c holds
// it while it makes the process's own directory and moves there.
void ctl_lock(void);
void ctl_unlock(void);
// users.c made DIR/proc.PID for a user the process is about to become, who
// cannot write the output directory: the process writes its files there
// from now on (the profiler moves, where it must; files.c's guard follows).
// 0, or -1 with the profiler's reason in err. Called with ctl_lock held.
int ctl_move_dir(const char* sub, char* err, size_t errlen);
// spawn.c: the process is about to exec another program. A forked child
// its profiler did not record takes its record back (it is no process of
// the profiled program any more). Safe in a vfork child.
void ctl_exec_other(void);

// backend.c: the profiler named "jemalloc", "bytehound", "heaptrack",
// "tcmalloc" or "none" (NULL for another name), set up in the process.
const struct ctl_profiler* ctl_profiler_named(const char* name);

// budget.c: the disk budget's table.
const struct ctl_disk* ctl_disk_budget(void);

// files.c: profiles are created in the output directory only exclusively,
// never through a link, nor into a file of another user (open, open64,
// creat and creat64 are the library's own, for the profilers' calls; the
// library's own files are opened with openat, straight to the kernel).
void files_guard(const char* dir);
// The process's own subdirectory from now on (once; users.c, through ctl_move_dir).
void files_guard_move(const char* dir);

// users.c: libc's setuid family, looked up once by the constructor.
void users_init(void);

// trace_gate.c: heaptrack's trace, gated where it is written. The constructor
// looks up libc's write and close (stream_init). files.c hands over the
// trace's fd once created in the output directory `dir` (stream_opened:
// from the application's thread, often before the constructor); its writes
// may then go on until stream_written() reaches `limit`, which the control
// thread's last look set (stream_allow; budget: 1 when the budget is the
// nearer limit, 0 for the floor). stream_refused: 1, once, when the trace ended
// before a write that would pass the room, with its size and which limit
// ended it.
void stream_init(void);
void stream_opened(int fd, const char* dir);
uint64_t stream_written(void);
void stream_allow(uint64_t limit, int budget);
int stream_refused(uint64_t* bytes, int* budget);

// spawn.c: the exec family's own calls, looked up once by the constructor
// in every process the library loads into (never later: an exec may come
// in a vfork child or a signal handler).
void spawn_init(void);
// In the target, before the profiler starts: LD_PRELOAD and the
// settings as the target got them, for its children that exec it again.
void spawn_remember(const char* settings);
// Then, once the profiler has read its settings: they
// and the profiler's library (`profiler`, as LD_PRELOAD names it) leave the
// environment, so a child that execs another program starts without them;
// a child that execs this program again gets them back. `settings`: the
// names memprofile exec set for the profiler, comma-separated.
void spawn_scope(const char* profiler, const char* settings);
// LD_PRELOAD without the entry `exact` and those containing `containing`
// (either may be NULL); entries are separated by ':' or spaces. The
// constructor's only.
void preload_drop(const char* exact, const char* containing);
