// The process's record beside its profiles (proc_record.c): a leaf under
// the core, libc only, handed what it writes.
#pragma once

#include <stddef.h>
#include <sys/types.h>

// memprofile-proc.PID.json: who the process is in the tree, which
// memprofile collect carries and memprofile report reads to name the
// processes whose dumps it has.
struct proc_record {
  pid_t pid;
  pid_t parent;         // the served process it was forked from (0: the exec'd target itself)
  long long started;    // time(2) at its start
  const char* backend;  // the profiler's name
  int recorded;         // 0: a forked child its profiler does not record
  int dormant;          // the tree was started dormant
  const char* at_exit;  // "" or the fields of what it holds as it exits
};

// Writes the record into `dir`: to a name of its own, created exclusively
// and never through a link, then renamed into place. Nothing when it cannot.
void proc_record_write(const char* dir, const struct proc_record* r);
// Removes process `pid`'s record from the directory `dfd`; 0 when removed.
int proc_record_unlink(int dfd, int pid);
// 1 when `name` is a process record, with its pid.
int proc_record_pid(const char* name, int* pid);
// The kernel's anonymous resident memory of this process (RssAnon), in bytes.
unsigned long long proc_record_rss_anon(void);
