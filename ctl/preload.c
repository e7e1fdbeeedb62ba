// The library's entry: which process serves, and the constructor, the
// destructor and the fork handlers that hand the core (ctl.c) its tables.
//
// Only the process `memprofile exec` profiles serves: the launcher names it
// in MEMPROFILE_CTL_TARGET. In a dispatcher that is not it, the library does
// nothing and stays in LD_PRELOAD, so the target it execs gets it. In the
// target it removes itself and the profiler from LD_PRELOAD, so no child
// that execs another program gets either (spawn.c gives them back to a
// child that execs the target again). Children forked without exec:
// ctl_fork_child.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"


static uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* v = getenv(name);
  if (!v || !*v) return fallback;
  char* end = NULL;
  errno = 0;
  unsigned long long n = strtoull(v, &end, 10);
  return errno || *end ? fallback : (uint64_t)n;
}

// Whether this process runs the program the launcher profiles.
static int is_target(void) {
  const char* target = getenv("MEMPROFILE_CTL_TARGET");
  if (!target || !*target) return 1;
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n < 0) {
    ctl_log("cannot read /proc/self/exe (%s; is /proc mounted?): start/stop/snapshot/status are not available",
            strerror(errno));
    return 0;
  }
  exe[n] = '\0';
  return strcmp(exe, target) == 0;
}


// The parent's pid when it is a process of the tree this library serves (a
// child that exec'd the profiled program again: spawn.c), else 0: the
// first process of the tree.
static pid_t parent_served(const char* dir) {
  char name[64];
  snprintf(name, sizeof name, "memprofile-ctl.%d.sock", (int)getppid());
  int dfd = openat(AT_FDCWD, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return 0;
  struct stat st;
  int served = fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISSOCK(st.st_mode) && st.st_uid == geteuid();
  close(dfd);
  return served ? getppid() : 0;
}

// One allocation the compiler cannot fold away (free(malloc(1)) it may):
// the profiler's allocator sets itself up, reading its settings.
static void touch_allocator(void) {
  void* volatile p = malloc(1);
  free(p);
}

__attribute__((constructor)) static void ctl_init(void) {
  spawn_init();
  users_init();
  stream_init();
  const char* backend = getenv("MEMPROFILE_CTL_BACKEND");
  const char* dir = getenv("MEMPROFILE_CTL_DIR");
  if (!backend || !dir || !*dir) return;
  int log_fd = fcntl(2, F_DUPFD_CLOEXEC, 200);  // -1 when fd 2 is closed: nothing is logged
  if (log_fd < 0) log_fd = fcntl(2, F_DUPFD_CLOEXEC, 3);
  ctl_log_to(log_fd);
  // Every process the profiler loads into writes there, a dispatcher too.
  files_guard(dir);
  if (!is_target()) return;
  // The profiler reads its settings at its first allocation: after it, the
  // children that exec another program need never see them.
  spawn_remember(getenv("MEMPROFILE_CTL_SETTINGS"));
  touch_allocator();
  spawn_scope(getenv("MEMPROFILE_CTL_PRELOAD"), getenv("MEMPROFILE_CTL_SETTINGS"));
  preload_drop(NULL, "libmemprofile_ctl");
  const struct ctl_profiler* profiler = ctl_profiler_named(backend);
  if (!profiler) return;
  if (strlen(dir) >= CTL_DIR_MAX) {
    ctl_log("output directory name too long (%zu bytes): %.200s...", strlen(dir), dir);
    return;
  }
  const int recording = env_u64("MEMPROFILE_CTL_RECORDING", 1) != 0;
  const struct ctl_settings settings = {
      .profiler = profiler,
      .disk = ctl_disk_budget(),
      .dir = dir,
      .parent = parent_served(dir),
      .recording = recording,
      .max_bytes = env_u64("MEMPROFILE_CTL_MAX_BYTES", 0),
      .min_free_bytes = env_u64("MEMPROFILE_CTL_MIN_FREE_BYTES", 0),
      .snapshot_every_ms = env_u64("MEMPROFILE_CTL_SNAPSHOT_EVERY_MS", 0),
      .dir_moved = files_guard_move,
  };
  ctl_configure(&settings);
  // The allocator is set up before the fork handlers are registered, so that
  // its own child handler (registered at its first allocation) runs first.
  touch_allocator();
  if (ctl_serve() != 0) {
    ctl_unserve();
    return;
  }
  pthread_atfork(ctl_fork_prepare, ctl_fork_parent, ctl_fork_child);
}

__attribute__((destructor)) static void ctl_fini(void) { ctl_exit(); }
