// Profiles are never written through a link, nor into a file this process
// does not own. See ctl.h.
//
// The output directory is often world-writable (mode 1777, as image-setup
// makes it, so any uid the app runs as can write there), and every
// profiler names its files predictably (jeprof.PID.SEQ.mN.heap,
// heaptrack.PID.raw, memory-profiling_PROG_TIME_PID.dat). Another user
// could create those names first, as symlinks to a file of the profiled
// process's user, or hard links, and the profiler's creat would write
// through them (fs.protected_symlinks is 0 on many container hosts).
//
// So the library, preloaded after the profiler and before libc, is where
// the profilers' creat/open/open64 resolve. A call that creates a file
// directly in the output directory gets the discipline collect has: the
// name is created exclusively and never followed; a name that exists is
// opened only if it is a regular file of this process's uid with one link
// (a profile an earlier process of the same pid left, say) and is
// refused otherwise, with one line in the log. Every other call goes to
// the kernel unchanged.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ctl.h"

// Set once (the constructor, or the first create before it); moved once at
// most, to the process's own subdirectory (files_guard_move), into the
// other slot, so that a create on another thread reads one whole directory.
struct guard {
  char dir[CTL_DIR_MAX];
  size_t len;
};
static struct guard guards[2];
static struct guard* guarded;  // the directory in force (atomic); NULL until set

static int set_guard(struct guard* g, const char* dir) {
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/') --n;
  if (n == 0 || n >= sizeof g->dir) return -1;
  memcpy(g->dir, dir, n);
  g->dir[n] = '\0';
  g->len = n;
  __atomic_store_n(&guarded, g, __ATOMIC_RELEASE);
  return 0;
}

void files_guard(const char* dir) {
  if (!__atomic_load_n(&guarded, __ATOMIC_ACQUIRE)) set_guard(&guards[0], dir);
}

void files_guard_move(const char* dir) {
  if (__atomic_load_n(&guarded, __ATOMIC_ACQUIRE) == &guards[0]) set_guard(&guards[1], dir);
}

static int sys_openat(int dfd, const char* path, int flags, mode_t mode) {
  return (int)syscall(SYS_openat, dfd, path, flags, mode);
}

// The name inside the guarded directory that `path` creates, or NULL when
// it is elsewhere (a subdirectory included: profilers write none).
static const char* guarded_name(const char* path, const struct guard* g) {
  if (!g || !path || strncmp(path, g->dir, g->len) != 0 || path[g->len] != '/') return NULL;
  const char* name = path + g->len + 1;
  if (!*name || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) return NULL;
  return name;
}

// heaptrack.PID.raw, created by heaptrack: its writes are gated (trace_gate.c).
// Often before the constructor, so the backend is read from the environment.
static int is_trace(const char* name) {
  size_t n = strlen(name);
  const char* backend = getenv("MEMPROFILE_CTL_BACKEND");
  return backend && strcmp(backend, "heaptrack") == 0 && n > 14 && strncmp(name, "heaptrack.", 10) == 0 &&
         strcmp(name + n - 4, ".raw") == 0;
}

static int create_guarded(const struct guard* g, const char* path, const char* name, int flags, mode_t mode) {
  int dfd = sys_openat(AT_FDCWD, g->dir, O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
  if (dfd < 0) return -1;
  // A dump the control thread asked for is written under NAME.part and
  // gets its name only once it is whole and fits (ctl.c): a disk that
  // fills mid-dump leaves no cut profile behind.
  char part[256];
  if (strlen(name) + 6 <= sizeof part && ctl_is_asked_dump(name)) {
    snprintf(part, sizeof part, "%s.part", name);
    // The final name must not be taken by someone else meanwhile either.
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && (!S_ISREG(st.st_mode) || st.st_uid != geteuid())) {
      ctl_note_refused(path);
      close(dfd);
      errno = EEXIST;
      return -1;
    }
    name = part;
  } else if (ctl_disk_in_use() && !ctl_disk_in_use()->admits(name)) {
    // jemalloc's own dump, past the budget: not written (budget.c).
    close(dfd);
    errno = ENOSPC;
    return -1;
  }
  int fd = sys_openat(dfd, name, flags | O_EXCL | O_NOFOLLOW, mode);
  if (fd < 0 && errno == EEXIST) {
    // Not created here: opened (never followed, not truncated yet) and
    // kept only if it is ours alone.
    fd = sys_openat(dfd, name, (flags & ~(O_CREAT | O_TRUNC)) | O_NOFOLLOW | O_NONBLOCK, 0);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || st.st_nlink != 1)) {
      close(fd);
      fd = -1;
      errno = EEXIST;
    }
    if (fd < 0) {
      int saved = errno == ELOOP ? EEXIST : errno;
      ctl_note_refused(path);
      close(dfd);
      errno = saved;
      return -1;
    }
    if (!(flags & O_NONBLOCK)) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    if ((flags & O_TRUNC) && ftruncate(fd, 0) != 0) {
      int saved = errno;
      close(fd);
      close(dfd);
      errno = saved;
      return -1;
    }
  }
  int saved = errno;
  close(dfd);
  if (is_trace(name)) stream_opened(fd, g->dir);
  errno = saved;
  return fd;
}

// gperftools names its dumps from HEAPPROFILE (memprofile exec's
// DIR/tcmalloc-LAUNCH): tcmalloc-LAUNCH.NNNN.heap, tcmalloc-LAUNCH_PID.NNNN.heap
// in a child that execs, and a child forked without exec goes on with its
// parent's name and count. Each is written as tcmalloc.PID.NNNN.heap under
// the pid of the process that writes it, as the kernel gives it: no two
// processes write one name, and report reads the pid from it. NULL when
// `name` is not such a dump.
static const char* tcmalloc_own_name(const char* name, char* buf, size_t len) {
  const char* backend = getenv("MEMPROFILE_CTL_BACKEND");
  size_t n = strlen(name);
  if (!backend || strcmp(backend, "tcmalloc") != 0 || strncmp(name, "tcmalloc-", 9) != 0 || n < 9 + 7 ||
      strcmp(name + n - 5, ".heap") != 0)
    return NULL;
  const char* seq = name + n - 5;
  while (seq > name + 9 && seq[-1] >= '0' && seq[-1] <= '9') --seq;
  if (seq == name + n - 5 || seq[-1] != '.') return NULL;
  for (const char* c = name + 9; c < seq - 1; ++c)
    if ((*c < '0' || *c > '9') && *c != '_') return NULL;
  int w = snprintf(buf, len, "tcmalloc.%d.%.*s.heap", (int)getpid(), (int)(name + n - 5 - seq), seq);
  return w > 0 && (size_t)w < len ? buf : NULL;
}

static int guarded_open(const char* path, int flags, mode_t mode) {
  // A profiler may open its file before this library's constructor has run
  // (heaptrack does, at its first allocation): the directory is read from
  // the environment then. getenv neither allocates nor locks.
  if (!__atomic_load_n(&guarded, __ATOMIC_ACQUIRE) && (flags & O_CREAT)) {
    const char* dir = getenv("MEMPROFILE_CTL_DIR");
    if (dir && *dir && getenv("MEMPROFILE_CTL_BACKEND")) files_guard(dir);
  }
  const struct guard* g = __atomic_load_n(&guarded, __ATOMIC_ACQUIRE);
  const char* name = (flags & O_CREAT) ? guarded_name(path, g) : NULL;
  char own[64];
  if (name && tcmalloc_own_name(name, own, sizeof own)) {
    name = own;
  } else if (!name && (flags & O_CREAT) && g == &guards[1]) {
    // gperftools keeps the prefix it read at start: after the process
    // moved to its own subdirectory (users.c), its dumps follow it there.
    const char* top = guarded_name(path, &guards[0]);
    if (top && tcmalloc_own_name(top, own, sizeof own)) name = own;
  }
  if (name) return create_guarded(g, path, name, flags, mode);
  return sys_openat(AT_FDCWD, path, flags, mode);
}

// The mode argument exists only with O_CREAT or O_TMPFILE (open(2)).
#define MODE_ARG(flags, mode)                       \
  do {                                              \
    if ((flags) & (O_CREAT | __O_TMPFILE)) {        \
      va_list ap;                                   \
      va_start(ap, flags);                          \
      mode = (mode_t)va_arg(ap, unsigned int);      \
      va_end(ap);                                   \
    }                                               \
  } while (0)

__attribute__((visibility("default"))) int open(const char* path, int flags, ...) {
  mode_t mode = 0;
  MODE_ARG(flags, mode);
  return guarded_open(path, flags, mode);
}

__attribute__((visibility("default"))) int open64(const char* path, int flags, ...) {
  mode_t mode = 0;
  MODE_ARG(flags, mode);
  return guarded_open(path, flags, mode);
}

__attribute__((visibility("default"))) int creat(const char* path, mode_t mode) {
  return guarded_open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
}

__attribute__((visibility("default"))) int creat64(const char* path, mode_t mode) {
  return guarded_open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
}
