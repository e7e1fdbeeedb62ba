// libmemprofile_ctl.so: the companion preload library that `memprofile
// exec` loads after the heap profiler. It lets `memprofile start|stop|
// snapshot|status` drive a running process (jemalloc can only be switched
// from inside it) and keeps the profiles within a disk budget while the
// process runs. C and libc only: it loads into any glibc program.
//
//   ctl.c      scope (which process serves), the control thread, the socket
//   backend.c  what start/stop/snapshot mean for jemalloc, bytehound, heaptrack
//   budget.c   the profiles in the output directory: usage, rotation, the floor
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

enum ctl_backend { CTL_JEMALLOC, CTL_BYTEHOUND, CTL_HEAPTRACK };

// Everything is read and written by the control thread only, after the
// constructor has set it up; nothing here is touched from a signal handler.
struct ctl_state {
  enum ctl_backend backend;
  char dir[4096];            // the output directory (PATH_MAX)
  pid_t pid;                 // the process served (0: none, e.g. a child the profiler does not record)
  pid_t parent;              // the served process it was forked from (0: the exec'd target itself)
  int recording;
  char stopped_reason[240];  // why recording stopped by itself ("" when it did not)
  uint64_t max_bytes;        // the profiles' disk budget (0: none)
  uint64_t min_free_bytes;   // the free-space floor of the output filesystem
  unsigned snapshots_taken;  // by request
  unsigned snapshots_scheduled;  // by --snapshot-every
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

// The allocator's view of the process's memory: jemalloc's stats (through
// mallctl, after an epoch refresh), or glibc malloc's (mallinfo2) for the
// backends that leave malloc to glibc.
struct allocator_stats {
  const char* name;  // "jemalloc", "glibc"
  uint64_t allocated, active, resident, mapped, retained, metadata;  // jemalloc
  uint64_t arena, in_use, free, mmapped;                              // glibc: in_use counts mmapped blocks
  int wraps;  // glibc older than 2.33: mallinfo's ints, which wrap past 2 GiB
};
int backend_allocator_stats(struct allocator_stats* s);

// memrecord.c: NAME.mem.json beside the dump NAME in the directory `dfd`.
void memory_record_write(int dfd, const char* dump_name);

// files.c: profiles are created in the output directory only exclusively,
// never through a link, nor into a file of another user (open, open64,
// creat and creat64 are the library's own, for the profilers' calls).
void files_guard(const char* dir);
// The last path files.c refused to write ("" when none since the forget).
const char* files_refused(void);
void files_forget_refused(void);
// Around a dump the control thread asks for: its file is created as
// NAME.part; files_end_dump returns NAME ("" when none was created).
void files_begin_dump(void);
const char* files_end_dump(void);

// backend.c. Each returns 0, or -1 with the reason in err.
void backend_init(void);
int backend_set_recording(int on, char* err, size_t errlen);
// The profiler's own state where it can be read (jemalloc's prof.active):
// 0 or 1, -1 when only memprofile's record of it is known.
int backend_recording(void);
// Whether the profiler records in a child forked without exec (jemalloc:
// yes, its state is copied and dumps are named by pid; heaptrack and
// bytehound: no). Runs in the atfork child handler.
int backend_records_children(void);
int backend_snapshot(char* path, size_t pathlen, char* err, size_t errlen);
const char* backend_name(void);

// budget.c
struct usage {
  uint64_t bytes;        // all of the backend's profiles in the directory
  int transient;         // the directory could not be read for a passing reason (EMFILE...)
  uint64_t own_bytes;    // this process's
  unsigned own_files;
  uint64_t largest_own;  // the largest of this process's files
  uint64_t free_bytes;   // statvfs: available to the process's user
};
int budget_usage(struct usage* u);
// Whether recording can go on until the next check (the next dump, and for
// jemalloc the final one at exit): rotates this process's snapshots in the
// middle (the first and newest stay) to make room. 0 when there is room, -1
// with the reason in why; -2 (reason in why too) when the directory cannot
// be read for a passing reason.
int budget_make_room(char* why, size_t whylen);
// Whether a file of `bytes` just written left the directory within the
// budget and the filesystem above its floor; -1 with why when not.
int budget_fits(uint64_t bytes, char* why, size_t whylen);
uint64_t budget_free_bytes(void);
// Stops recording for the budget's reason `why` (status shows it).
void budget_stop(const char* why);
// The recording's periodic check: stops recording, with one log line and
// the reason in ctl.stopped_reason, when the next write would cross the
// budget or the floor.
void budget_check(void);
// Recording (re)starts: growth is measured afresh.
void budget_reset(void);
// This process's snapshots as JSON array items into buf (newest last).
size_t budget_list_json(char* buf, size_t len);
// A jemalloc dump's name, PREFIX.PID.SEQ.KIND[N].heap, read from its end
// (the prefix may hold dots): 1 with its pid, sequence and kind (i, m, f, u).
int jemalloc_dump_name(const char* name, unsigned long long* pid, unsigned long long* seq, char* kind);
// heaptrack.PID.raw or bytehound's memory-profiling_..._PID.dat, for this
// process's backend: 1 with the pid.
int stream_file_pid(const char* name, unsigned long long* pid);
// Whether a file of this pid, modified at `mtime`, is this process's (not an
// earlier process's with the same pid: PID 1 after a container restart).
int is_own_file(time_t mtime);
// How long to sleep between budget checks while recording, in ms.
int budget_interval_ms(void);

// ctl.c: JSON string text for s (quotes added; control characters escaped),
// truncated to fit len. Returns the bytes written (no NUL counted).
size_t json_string(char* out, size_t len, const char* s);
