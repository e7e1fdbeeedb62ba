// A trace's writes, held at the floor and the budget where they happen.
// See ctl.h.
//
// heaptrack writes one continuous file from the application's threads,
// 4 KiB at a time through write(2), and can add tens of MB a second. The
// control thread's checks stop it before the floor, but only when they come
// on time: on a loaded machine a check 50 ms late let a trace pass a 12 MiB
// floor by 9 MiB. So the library's write(2), where heaptrack's resolve
// (preloaded after it, before libc), refuses the write that would take
// the trace past what the last look at the directory left room for: the
// floor's free space, or the budget's. heaptrack takes the refusal as a
// full disk (its own writeError: it flushes what it can and closes the
// file), so the trace ends at its last whole buffer, a line boundary. The
// control thread then says why and stops recording for good.
//
// bytehound writes its file with raw syscalls, which no library sees: its
// stop is the control thread's check alone (docs/launcher.md).
//
// Every write(2) and close(2) of the process comes here: for any other fd
// it is one atomic load and the call libc would have made.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
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
static write_fn real_write;  // libc's, once the constructor looked it up
static close_fn real_close;

static int trace_fd = -1;               // the trace's fd (-1: none gated)
static dev_t trace_dev;                 // and the file it is, for an fd reused
static ino_t trace_ino;                 // after a close this library did not see
static uint64_t trace_written;          // bytes written through the gate
static uint64_t trace_limit = UINT64_MAX;  // what trace_written may reach
static int limit_is_budget;             // which limit trace_limit is (0: the floor)
static uint64_t refused_bytes;          // the first write refused (0: none)
static int refusal_said;

void stream_init(void) {
  real_write = (write_fn)dlsym(RTLD_NEXT, "write");
  real_close = (close_fn)dlsym(RTLD_NEXT, "close");
}

static uint64_t env_bytes(const char* name) {
  const char* v = getenv(name);  // neither allocates nor locks
  uint64_t n = 0;
  for (int i = 0; v && i < 20 && v[i] >= '0' && v[i] <= '9'; ++i) n = n * 10 + (uint64_t)(v[i] - '0');
  return n;
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
    uint64_t free_ = (uint64_t)f.f_bavail * (uint64_t)f.f_bsize;
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
  __atomic_store_n(&trace_written, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&limit_is_budget, budget, __ATOMIC_RELEASE);
  __atomic_store_n(&trace_limit, room, __ATOMIC_RELEASE);
  __atomic_store_n(&trace_fd, fd, __ATOMIC_RELEASE);
}

uint64_t stream_written(void) { return __atomic_load_n(&trace_written, __ATOMIC_ACQUIRE); }

void stream_allow(uint64_t written_before, uint64_t room, int budget) {
  uint64_t limit = room > UINT64_MAX - written_before ? UINT64_MAX : written_before + room;
  __atomic_store_n(&limit_is_budget, budget, __ATOMIC_RELEASE);
  __atomic_store_n(&trace_limit, limit, __ATOMIC_RELEASE);
}

int stream_refused(uint64_t* bytes, int* budget) {
  uint64_t n = __atomic_load_n(&refused_bytes, __ATOMIC_ACQUIRE);
  if (!n || __atomic_exchange_n(&refusal_said, 1, __ATOMIC_ACQ_REL)) return 0;
  *bytes = n;
  *budget = __atomic_load_n(&limit_is_budget, __ATOMIC_ACQUIRE);
  return 1;
}

static ssize_t pass_write(int fd, const void* buf, size_t n) {
  return real_write ? real_write(fd, buf, n) : (ssize_t)syscall(SYS_write, fd, buf, n);
}

// Whether fd is still the trace (an application may close it by
// close_range, which no library sees, and get its number back).
static int still_the_trace(int fd) {
  struct stat st;
  if (fstat(fd, &st) == 0 && st.st_dev == trace_dev && st.st_ino == trace_ino) return 1;
  __atomic_compare_exchange_n(&trace_fd, &fd, -1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  return 0;
}

// All or nothing: heaptrack takes a short write as a whole one.
static ssize_t gated_write(int fd, const void* buf, size_t n) {
  uint64_t after = __atomic_add_fetch(&trace_written, n, __ATOMIC_ACQ_REL);
  if (after > __atomic_load_n(&trace_limit, __ATOMIC_ACQUIRE) && still_the_trace(fd)) {
    __atomic_sub_fetch(&trace_written, n, __ATOMIC_ACQ_REL);
    uint64_t none = 0;
    __atomic_compare_exchange_n(&refused_bytes, &none, n ? (uint64_t)n : 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    errno = ENOSPC;
    return -1;
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
  int gated = fd;
  if (fd >= 0) __atomic_compare_exchange_n(&trace_fd, &gated, -1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  return real_close ? real_close(fd) : (int)syscall(SYS_close, fd);
}
