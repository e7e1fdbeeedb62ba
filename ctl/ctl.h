// libmemprofile_ctl.so: the companion preload library that `memprofile
// exec` loads after the heap profiler. It lets `memprofile start|stop|
// snapshot|status` drive a running process (jemalloc can only be switched
// from inside it) and keeps the profiles within a disk budget while the
// process runs. C and libc only: it loads into any glibc program.
//
// A core with thin shims, as heaptrack's src/track/: this header is the
// core's, and every shim calls down into it, never up or sideways.
//
//   ctl.c       the core: the state, the log, the socket and the control
//               thread, the requests, the snapshot's steps, stopping
//   memrecord.c the record beside each snapshot (called by the core; libc only)
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

#include "memrecord.h"

// One profiler as one row (backend.c): what it does on the core's
// requests, and what the budget needs to know of its files. Each function
// that can fail returns 0, or -1 with the reason in err. "none" is no heap
// profiler (memprofile exec --backend none): the library alone serves status
// and takes memory records as snapshots.
struct ctl_profiler {
  const char* name;
  // One of its profiles in the output directory: 1 with the pid its name
  // carries and its sequence (0 for one continuous file), else 0.
  int (*profile_name)(const char* name, unsigned long long* pid, unsigned long long* seq);
  // Its profiles are dumps (or records) taken one moment at a time, with a
  // sequence: the middle ones can be rotated out. Else one continuous trace.
  int rotates;
  // It creates its dumps itself (files.c sees the open): each is admitted
  // against the budget before it is written.
  int creates_dumps;
  // Its trace's writes are gated where they are written (trace_gate.c): the
  // budget's scan tells the gate how much room there is.
  int gated_trace;
  // It records from the program's start and cannot be stopped: at the
  // budget its dumps are rotated all the same.
  int unstoppable;
  int (*set_recording)(int on, char* err, size_t errlen);
  // The profiler's own state where it can be read (jemalloc's prof.active):
  // 0 or 1, -1 when only the core's record of it is known.
  int (*recording)(void);
  // Whether the profiler records in a child forked without exec (jemalloc:
  // yes, its state is copied and dumps are named by pid; heaptrack and
  // bytehound: no). Runs in the atfork child handler.
  int (*records_children)(void);
  // Writes one dump into the output directory under the name the profiler
  // picks: 0, -1 (it tried and failed, err says why) or -2 (it cannot
  // dump at all here, err says why). NULL: the profiler writes one
  // continuous file and takes no snapshots.
  int (*dump)(char* err, size_t errlen);
  int (*allocator_stats)(struct allocator_stats* s);
  // A snapshot is the memory record alone (memprofile-mem.PID.SEQ.mem.json),
  // taken whether or not anything records: "none".
  int records_only;
  // The process's files go to `dir` from now on (its own subdirectory,
  // users.c): the profiler's later files too. 0, or -1 with why in err.
  // NULL: its files are open already (one continuous file) or it has none.
  int (*moved)(const char* dir, char* err, size_t errlen);
};

struct usage {
  uint64_t bytes;        // all of the backend's profiles in the directory
  int transient;         // the directory could not be read for a passing reason (EMFILE...)
  uint64_t own_bytes;    // this process's
  unsigned own_files;
  uint64_t largest_own;  // the largest of this process's files
  uint64_t free_bytes;   // statvfs: available to the process's user
};

// The output directory as the disk budget sees it (budget.c).
struct ctl_disk {
  int (*usage)(struct usage* u);
  // Whether recording can go on until the next check (the next dump, and
  // for jemalloc the final one at exit): rotates this process's snapshots in
  // the middle (the first and newest stay) to make room. 0 when there is
  // room, -1 with the reason in why; -2 (reason in why too) when the
  // directory cannot be read for a passing reason.
  int (*make_room)(char* why, size_t whylen);
  // The recording's periodic look: as make_room, and it measures how fast
  // the profiles grow; 0, -1 (stop: why says why) or -2 (try again later).
  int (*check)(char* why, size_t whylen);
  // Whether a file of `bytes` just written left the directory within the
  // budget and the filesystem above its floor; -1 with why when not.
  int (*fits)(uint64_t bytes, char* why, size_t whylen);
  uint64_t (*free_bytes)(void);  // UINT64_MAX when it cannot be read
  // Recording (re)starts: growth is measured afresh.
  void (*reset)(void);
  // This process's snapshots as JSON array items into buf (newest last).
  size_t (*list_json)(char* buf, size_t len);
  // A profile's name (a jemalloc dump, heaptrack.PID.raw, bytehound's
  // memory-profiling_..._PID.dat): 1 with its pid.
  int (*profile_pid)(const char* name, unsigned long long* pid);
  // How long to sleep between checks while recording, in ms.
  int (*interval_ms)(void);
  // Whether a dump the profiler creates by itself (`name`, in the output
  // directory) still fits the budget: 1, or 0 (files.c refuses the create).
  // Asked from the application's thread inside the profiler: atomics only.
  int (*admits)(const char* name);
  // A trace's write was refused at the floor or the budget (trace_gate.c):
  // 1, once, with what to say in why; else 0.
  int (*refused)(char* why, size_t whylen);
};

// Everything is read and written by the control thread only, after the
// constructor has set it up; nothing here is touched from a signal handler.
struct ctl_state {
  const struct ctl_profiler* profiler;
  const struct ctl_disk* disk;
  char dir[4096];            // the output directory (PATH_MAX)
  pid_t pid;                 // the process served (0: none, e.g. a child the profiler does not record)
  pid_t parent;              // the served process it was forked from (0: the exec'd target itself)
  int recording;
  int dormant;               // the tree was started dormant: recording began at memprofile start
  char stopped_reason[240];  // why recording stopped by itself ("" when it did not)
  uint64_t max_bytes;        // the profiles' disk budget (0: none)
  uint64_t min_free_bytes;   // the free-space floor of the output filesystem
  unsigned snapshots_taken;  // by request
  unsigned snapshots_scheduled;  // by --snapshot-every
  unsigned records_written;  // "none": memory records, named by this count
  unsigned schedule_said;    // a scheduled snapshot failed (said once)
  uint64_t snapshot_every_ms;  // --snapshot-every (0: none)
  unsigned long rotated;     // snapshots deleted to stay within the budget
  int final_stop;            // heaptrack after heaptrack_stop: cannot record again
  int cannot_stop;           // stopping at the budget failed once: said, not retried
  time_t start_time;         // files of this pid older than this are an earlier process's
  uint64_t scan_ns;          // what the last look at the output directory took
};
extern struct ctl_state ctl;

// One line on the stderr the process started with, "memprofile-ctl[PID]:
// ...", written with one write(2) (to a copy of fd 2 taken at start: the
// application may reuse fd 2 for its own files later).
void ctl_log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// Where the log goes from now on (the constructor's copy of fd 2).
void ctl_log_to(int fd);

// JSON string text for s (quotes added; control characters escaped),
// truncated to fit len. Returns the bytes written (no NUL counted).
size_t json_string(char* out, size_t len, const char* s);

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
// The process's own subdirectory from now on (once; ctl_own_directory).
void files_guard_move(const char* dir);

// users.c: the process is about to become `euid`, who may not be able to
// write the output directory (nginx's workers become its `user`): while it
// still can, it makes its own subdirectory there, DIR/proc.PID, owned by
// that user (group `egid`), and writes its files into it from then on.
// Called from the setuid family's wrappers, before the change.
void ctl_own_directory(uid_t euid, gid_t egid);
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
