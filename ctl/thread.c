// The control thread (see thread.h). It is woken to stop through the
// socket's wake pipe (socket.c), or cancelled when the application closed
// that pipe's fd.
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "socket.h"
#include "thread.h"

static pthread_t thread;
static int thread_running;
static int thread_ended;              // the thread returned by itself (atomic)
static void* (*thread_loop)(void);    // what it runs, for a restart
static pid_t served;                  // the process it was started in (0: none)
static pthread_mutex_t thread_lock = PTHREAD_MUTEX_INITIALIZER;  // app threads only (unshare/setns)

static void* run(void* arg) {
  (void)arg;
  void* r = thread_loop();
  __atomic_store_n(&thread_ended, 1, __ATOMIC_RELEASE);
  return r;
}

int thread_start(void* (*loop)(void)) {
  thread_loop = loop;
  // The application's signals are never delivered to this thread, and it
  // needs little stack.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  __atomic_store_n(&thread_ended, 0, __ATOMIC_RELEASE);
  int rc = pthread_create(&thread, &attr, run, NULL);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    ctl_log("cannot start the control thread: %s", strerror(rc));
    return -1;
  }
  pthread_setname_np(thread, "memprofile-ctl");
  thread_running = 1;
  served = getpid();
  return 0;
}

// The process's threads as the kernel counts them (0 when unknown).
static int thread_count(void) {
  DIR* d = opendir("/proc/self/task");
  if (!d) return 0;
  int n = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n;
}

int thread_stop(void) {
  if (!thread_running) return 0;
  int before = thread_count();
  int ended = __atomic_load_n(&thread_ended, __ATOMIC_ACQUIRE);
  if (ended) {
    // It is gone already, for good: not to be restarted.
  } else if (socket_wake() != 0) {
    // The application closed (and maybe reused) the pipe's fd: never write
    // to it. poll is a cancellation point.
    pthread_cancel(thread);
  }
  pthread_join(thread, NULL);
  // pthread_join returns when the thread's stack is free; the kernel may
  // count the thread a moment longer, and unshare would still see two.
  for (int i = 0; !ended && before > 0 && i < 200 && thread_count() >= before; ++i) {
    struct timespec ms = {0, 1000 * 1000};
    nanosleep(&ms, NULL);
  }
  socket_drain_wake();
  thread_running = 0;
  return 1;
}

void thread_forget(void) {
  pthread_mutex_init(&thread_lock, NULL);
  thread_running = 0;
  served = 0;
}

// unshare and setns into some namespaces (a user namespace, CLONE_FS) fail
// with EINVAL in a process with more than one thread: a single-threaded
// application that uses them (sandboxes, container tools) must not fail
// because of this library. Its thread steps aside for the call (in the
// process it was started in: a child forked without exec has none).
#define WITHOUT_THREAD(call)                                    \
  do {                                                          \
    int stopped = 0;                                            \
    if (served == getpid()) {                                   \
      pthread_mutex_lock(&thread_lock);                         \
      stopped = thread_stop();                                  \
    }                                                           \
    int rc = (call);                                            \
    int saved = errno;                                          \
    if (served == getpid()) {                                   \
      if (stopped) thread_start(thread_loop);                   \
      pthread_mutex_unlock(&thread_lock);                       \
    }                                                           \
    errno = saved;                                              \
    return rc;                                                  \
  } while (0)

__attribute__((visibility("default"))) int unshare(int flags) {
  int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "unshare");
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  WITHOUT_THREAD(real(flags));
}

__attribute__((visibility("default"))) int setns(int fd, int nstype) {
  int (*real)(int, int) = (int (*)(int, int))dlsym(RTLD_NEXT, "setns");
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  WITHOUT_THREAD(real(fd, nstype));
}
