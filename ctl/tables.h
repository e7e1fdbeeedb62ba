// The tables the shims hand the core (ctl.h): one row per profiler
// (backend.c), the disk's (budget.c), and the settings the entry reads
// (preload.c). Types only; the state they describe is the core's own.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "memrecord.h"

// The longest output directory served (PATH_MAX).
#define CTL_DIR_MAX 4096

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
  // Why start, stop and snapshot cannot reach the profiler in this process
  // (a program's own jemalloc whose mallctl nothing names), written to err:
  // 1, or 0 when they can. NULL: they always can. Said by status.
  int (*unreachable)(char* err, size_t errlen);
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

// What the entry (preload.c) read of the process's settings, handed to
// the core once, before it serves.
struct ctl_settings {
  const struct ctl_profiler* profiler;
  const struct ctl_disk* disk;
  const char* dir;             // the output directory (shorter than CTL_DIR_MAX)
  pid_t parent;                // the served process it was forked from (0: the exec'd target itself)
  int recording;               // 0: started dormant, recording from memprofile start
  uint64_t max_bytes;          // the profiles' disk budget (0: none)
  uint64_t min_free_bytes;     // the free-space floor of the output filesystem
  uint64_t snapshot_every_ms;  // --snapshot-every (0: none)
  // Called once the process writes to its own subdirectory (users.c,
  // through ctl_move_dir): files.c's guard follows it there.
  void (*dir_moved)(const char* dir);
};
