// A trace's writes, held at the floor and the budget where they happen.
// See ctl.h.
//
// heaptrack writes one continuous file from the application's threads,
// 4 KiB at a time through write(2), and can add tens of MB a second. The
// control thread's checks stop it before the floor, but only when they come
// on time: on a loaded machine late checks let a trace pass a 12 MiB floor
// by 9 MiB. So the library's write(2), where heaptrack's resolve
// (preloaded after it, before libc), refuses the write that would take
// the trace past what the last look at the directory left room for: the
// floor's free space, or the budget's. The trace ends there, at its last
// whole buffer (a line boundary): the fd is turned to /dev/null, so the
// write and every later one of heaptrack's succeed and are discarded.
// heaptrack must never see the write fail: it drops a buffer it cannot
// write and goes on, numbering the lines after it, so a later write that
// got through would leave a trace whose stacks are shifted past the gap.
// The control thread then says why and stops recording for good.
//
// bytehound writes its file with raw syscalls, which no library sees: its
// stop is the control thread's check alone (docs/launcher.md).
//
// Every write(2) and close(2) of the process comes here: for any other fd
// it is one atomic load and the call libc would have made.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ctl.h"

typedef ssize_t (*write_fn)(int, const void*, size_t);
typedef int (*close_fn)(int);
// libc's, once the constructor looked them up (heaptrack's timer thread
// may write meanwhile: atomics).
static write_fn real_write;
static close_fn real_close;

static int trace_fd = -1;               // the trace's fd (-1: none gated)
static pid_t trace_owner;               // the process that created it (a vfork child shares this memory)
static dev_t trace_dev;                 // and the file it is, for an fd reused
static ino_t trace_ino;                 // after a close this library did not see
static uint64_t trace_written;          // bytes written through the gate
static uint64_t trace_limit = UINT64_MAX;  // what trace_written may reach
static int limit_is_budget;             // which limit trace_limit is (0: the floor)
static int refused_budget;              // which limit refused the write
static uint64_t refused_bytes;          // the first write refused (0: none)
static int refusal_said;
static int refusing;                    // no /dev/null: the trace's writes fail from then on

void stream_init(void) {
  __atomic_store_n(&real_write, (write_fn)dlsym(RTLD_NEXT, "write"), __ATOMIC_RELEASE);
  __atomic_store_n(&real_close, (close_fn)dlsym(RTLD_NEXT, "close"), __ATOMIC_RELEASE);
}

// As the constructor reads the same variables: digits only, else none (0).
static uint64_t env_bytes(const char* name) {
  const char* v = getenv(name);  // neither allocates nor locks
  uint64_t n = 0;
  int i = 0;
  for (; v && i < 19 && v[i] >= '0' && v[i] <= '9'; ++i) n = n * 10 + (uint64_t)(v[i] - '0');
  return v && v[i] == '\0' ? n : 0;
}

// The limit before the control thread's first look: heaptrack creates its
// file at its first allocation, often before this library's constructor
// (so from the environment), and from inside its malloc (so statfs:
// statvfs may read /proc/mounts through stdio, which allocates).
static uint64_t first_room(const char* dir, int* budget) {
  uint64_t floor = env_bytes("MEMPROFILE_CTL_MIN_FREE_BYTES"), max = env_bytes("MEMPROFILE_CTL_MAX_BYTES");
  uint64_t room = UINT64_MAX;
  *budget = 0;
  struct statfs f;
  if (floor && statfs(dir, &f) == 0) {
    uint64_t free_ = (uint64_t)f.f_bavail * (uint64_t)f.f_frsize;
    room = free_ > floor ? free_ - floor : 0;
  }
  if (max && max < room) {
    room = max;
    *budget = 1;
  }
  return room;
}

void stream_opened(int fd, const char* dir) {
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) return;
  int budget;
  uint64_t room = first_room(dir, &budget);
  trace_dev = st.st_dev;
  trace_ino = st.st_ino;
  trace_owner = getpid();
  __atomic_store_n(&refusing, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&trace_written, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&limit_is_budget, budget, __ATOMIC_RELEASE);
  __atomic_store_n(&trace_limit, room, __ATOMIC_RELEASE);
  __atomic_store_n(&trace_fd, fd, __ATOMIC_RELEASE);
}

uint64_t stream_written(void) { return __atomic_load_n(&trace_written, __ATOMIC_ACQUIRE); }

void stream_allow(uint64_t limit, int budget) {
  __atomic_store_n(&limit_is_budget, budget, __ATOMIC_RELEASE);
  __atomic_store_n(&trace_limit, limit, __ATOMIC_RELEASE);
}

int stream_refused(uint64_t* bytes, int* budget) {
  uint64_t n = __atomic_load_n(&refused_bytes, __ATOMIC_ACQUIRE);
  if (!n || __atomic_exchange_n(&refusal_said, 1, __ATOMIC_ACQ_REL)) return 0;
  *bytes = n;
  *budget = __atomic_load_n(&refused_budget, __ATOMIC_ACQUIRE);
  return 1;
}

static ssize_t pass_write(int fd, const void* buf, size_t n) {
  write_fn w = __atomic_load_n(&real_write, __ATOMIC_ACQUIRE);
  return w ? w(fd, buf, n) : (ssize_t)syscall(SYS_write, fd, buf, n);
}

// Whether fd is still the trace (an application may close it by
// close_range, which no library sees, and get its number back).
static int still_the_trace(int fd) {
  struct stat st;
  if (fstat(fd, &st) == 0 && st.st_dev == trace_dev && st.st_ino == trace_ino) return 1;
  __atomic_compare_exchange_n(&trace_fd, &fd, -1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  return 0;
}

// The trace ends before this write: the fd becomes /dev/null (for
// heaptrack's later writes, and its close), and is no longer gated. Without
// a /dev/null, this and every later write to the trace fail instead.
static ssize_t end_trace(int fd, size_t n) {
  __atomic_store_n(&refused_budget, __atomic_load_n(&limit_is_budget, __ATOMIC_ACQUIRE), __ATOMIC_RELEASE);
  uint64_t none = 0;
  __atomic_compare_exchange_n(&refused_bytes, &none, n ? (uint64_t)n : 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  int null = (int)syscall(SYS_openat, AT_FDCWD, "/dev/null", O_WRONLY | O_CLOEXEC, 0);
  if (null >= 0) {
    int moved = (int)syscall(SYS_dup3, null, fd, O_CLOEXEC);
    syscall(SYS_close, null);
    if (moved == fd) {
      __atomic_compare_exchange_n(&trace_fd, &fd, -1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
      return (ssize_t)n;
    }
  }
  __atomic_store_n(&refusing, 1, __ATOMIC_RELEASE);
  errno = ENOSPC;
  return -1;
}

// All or nothing: heaptrack takes a short write as a whole one.
static ssize_t gated_write(int fd, const void* buf, size_t n) {
  if (__atomic_load_n(&refusing, __ATOMIC_ACQUIRE) && still_the_trace(fd)) {
    errno = ENOSPC;
    return -1;
  }
  uint64_t after = __atomic_add_fetch(&trace_written, n, __ATOMIC_ACQ_REL);
  if (after > __atomic_load_n(&trace_limit, __ATOMIC_ACQUIRE) && still_the_trace(fd)) {
    __atomic_sub_fetch(&trace_written, n, __ATOMIC_ACQ_REL);
    return end_trace(fd, n);
  }
  ssize_t rc = pass_write(fd, buf, n);
  if (rc < (ssize_t)n) __atomic_sub_fetch(&trace_written, n - (size_t)(rc > 0 ? rc : 0), __ATOMIC_ACQ_REL);
  return rc;
}

__attribute__((visibility("default"))) ssize_t write(int fd, const void* buf, size_t n) {
  if (fd >= 0 && fd == __atomic_load_n(&trace_fd, __ATOMIC_RELAXED)) return gated_write(fd, buf, n);
  return pass_write(fd, buf, n);
}

__attribute__((visibility("default"))) int close(int fd) {
  // A vfork child's close is its own fd table's, not the trace's owner's.
  int gated = fd;
  if (fd >= 0 && fd == __atomic_load_n(&trace_fd, __ATOMIC_RELAXED) && getpid() == trace_owner)
    __atomic_compare_exchange_n(&trace_fd, &gated, -1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  close_fn c = __atomic_load_n(&real_close, __ATOMIC_ACQUIRE);
  return c ? c(fd) : (int)syscall(SYS_close, fd);
}
