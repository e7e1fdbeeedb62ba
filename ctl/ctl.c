// Scope, the control thread and the socket. See ctl.h.
//
// Only the process `memprofile exec` profiles serves: the launcher names it
// in MEMPROFILE_CTL_TARGET. In a dispatcher that is not it, the library does
// nothing and stays in LD_PRELOAD, so the target it execs gets it. In the
// target it removes itself from LD_PRELOAD, so no child ever gets it; a
// forked child has no control thread (POSIX copies only the forking thread),
// closes its copies of the library's fds and stops recording (it is outside
// the budget). Every fd of the library is close-on-exec and kept high,
// clear of the small numbers applications close and reuse.
#define _GNU_SOURCE
#include "ctl.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

struct ctl_state ctl;

static int listen_fd = -1, log_fd = -1, wake_fd[2] = {-1, -1};
static ino_t listen_ino;  // the socket's inode: an fd number the app reused is not ours
static ino_t wake_ino;    // the wake pipe's, likewise
static int thread_ended;  // the thread returned by itself (atomic)
static char sock_path[sizeof ctl.dir + 64];
static pthread_t thread;
static int thread_running;
static pthread_mutex_t thread_lock = PTHREAD_MUTEX_INITIALIZER;  // app threads only (unshare/setns)

void ctl_log(const char* fmt, ...) {
  if (log_fd < 0) return;
  char line[512];
  int n = snprintf(line, sizeof line, "memprofile-ctl[%d]: ", (int)getpid());
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
  va_end(ap);
  size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m > sizeof line - (size_t)n - 2 ? sizeof line - (size_t)n - 2 : (size_t)m);
  line[len++] = '\n';
  ssize_t w = write(log_fd, line, len);
  (void)w;
}

size_t json_string(char* out, size_t len, const char* s) {
  static const char hex[] = "0123456789abcdef";
  size_t at = 0;
  if (len < 3) return 0;
  out[at++] = '"';
  for (; *s; ++s) {
    unsigned char c = (unsigned char)*s;
    char esc[7];
    size_t n = 0;
    if (c == '"' || c == '\\') {
      esc[n++] = '\\';
      esc[n++] = (char)c;
    } else if (c < 0x20) {
      memcpy(esc, "\\u00", 4);
      esc[4] = hex[c >> 4];
      esc[5] = hex[c & 15];
      n = 6;
    } else {
      esc[n++] = (char)c;
    }
    if (at + n + 2 > len) break;  // room for the closing quote and NUL
    memcpy(out + at, esc, n);
    at += n;
  }
  out[at++] = '"';
  out[at] = '\0';
  return at;
}

static uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* v = getenv(name);
  if (!v || !*v) return fallback;
  char* end = NULL;
  errno = 0;
  unsigned long long n = strtoull(v, &end, 10);
  return errno || *end ? fallback : (uint64_t)n;
}

// An fd moved above the numbers applications close and reuse.
static int high_fd(int fd) {
  if (fd < 0) return fd;
  int moved = fcntl(fd, F_DUPFD_CLOEXEC, 200);
  if (moved < 0) return fd;  // a low RLIMIT_NOFILE: keep it where it is
  close(fd);
  return moved;
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

// LD_PRELOAD without this library (entries are separated by ':' or spaces).
static void drop_self_from_preload(void) {
  const char* v = getenv("LD_PRELOAD");
  if (!v) return;
  size_t len = strlen(v);
  char* out = malloc(len + 1);
  if (!out) return;
  size_t o = 0;
  for (const char* p = v; *p;) {
    size_t n = strcspn(p, ": \t");
    if (n && !memmem(p, n, "libmemprofile_ctl", 17)) {
      if (o) out[o++] = ':';
      memcpy(out + o, p, n);
      o += n;
    }
    p += n;
    if (*p) ++p;
  }
  out[o] = '\0';
  if (o) setenv("LD_PRELOAD", out, 1);
  else unsetenv("LD_PRELOAD");
  free(out);
}

// ---- requests -------------------------------------------------------------

struct out {
  char* p;
  size_t len, at;
};

static void put(struct out* o, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out* o, const char* fmt, ...) {
  if (o->at >= o->len) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(o->p + o->at, o->len - o->at, fmt, ap);
  va_end(ap);
  if (n > 0) o->at = o->at + (size_t)n < o->len ? o->at + (size_t)n : o->len - 1;
}

static void put_str(struct out* o, const char* key, const char* value) {
  put(o, ",\"%s\":", key);
  if (o->at < o->len) o->at += json_string(o->p + o->at, o->len - o->at, value ? value : "");
}

// The reply to one request: one JSON line.
static size_t reply_json(char* buf, size_t len, int ok, const char* error, const char* snapshot) {
  struct usage u;
  memset(&u, 0, sizeof u);
  budget_usage(&u);
  int actual = backend_recording();
  if (actual >= 0) ctl.recording = actual;
  struct out o = {buf, len - 4, 0};  // room for "]}\n"
  put(&o, "{\"ok\":%s,\"pid\":%d", ok ? "true" : "false", (int)ctl.pid);
  put_str(&o, "backend", backend_name());
  put(&o, ",\"recording\":%s", ctl.recording ? "true" : "false");
  put_str(&o, "stopped_reason", ctl.stopped_reason);
  put_str(&o, "error", error);
  put_str(&o, "snapshot", snapshot);
  put_str(&o, "output_dir", ctl.dir);
  put(&o, ",\"disk_bytes\":%llu,\"own_bytes\":%llu,\"own_files\":%u,\"max_bytes\":%llu,\"free_bytes\":%llu,"
          "\"min_free_bytes\":%llu,\"rotated\":%lu,\"snapshots\":[",
      (unsigned long long)u.bytes, (unsigned long long)u.own_bytes, u.own_files, (unsigned long long)ctl.max_bytes,
      (unsigned long long)u.free_bytes, (unsigned long long)ctl.min_free_bytes, ctl.rotated);
  if (o.at + 1 < o.len) o.at += budget_list_json(buf + o.at, o.len - o.at);
  memcpy(buf + o.at, "]}\n", 4);
  return o.at + 3;
}

static int64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

// The request line, within one 2 s deadline for the whole of it.
static void read_request(int fd, char* req, size_t len) {
  size_t got = 0;
  int64_t deadline = now_ms() + 2000;
  while (got < len - 1 && !memchr(req, '\n', got)) {
    int64_t left = deadline - now_ms();
    struct pollfd p = {fd, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, (int)left) <= 0) break;
    ssize_t r = read(fd, req + got, len - 1 - got);
    if (r <= 0) break;
    got += (size_t)r;
  }
  req[got] = '\0';
  req[strcspn(req, "\r\n")] = '\0';
  for (char* c = req; *c; ++c)  // echoed in messages: plain words only
    if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-' || *c == '_')) *c = '?';
}

static void set_recording(int on, char* err, size_t errlen, int* ok) {
  if (on && ctl.final_stop) {
    snprintf(err, errlen, "%s stopped for good (%.160s); it cannot record again until the process restarts",
             backend_name(), ctl.stopped_reason[0] ? ctl.stopped_reason : "stopped");
    return;
  }
  if (on && budget_make_room(err, errlen) != 0) return;  // it would cross the budget at once
  if (backend_set_recording(on, err, errlen) != 0) return;
  *ok = 1;
  if (ctl.recording != on) ctl_log("recording %s on request", on ? "started" : "stopped");
  ctl.recording = on;
  if (on) {
    ctl.stopped_reason[0] = '\0';
    budget_reset();
  }
}

static void handle(int fd) {
  // The control thread's own (static: its stack is small). The reply holds
  // the longest directory name several times; the snapshots listed beyond
  // it are counted, not named (budget_list_json).
  static char reply[64 * 1024], snap[sizeof ctl.dir + 256];
  char req[64] = "", err[256] = "";
  snap[0] = '\0';
  int ok = 0;
  // Who asks comes first: nothing is read from a peer that may not ask.
  struct ucred peer;
  socklen_t plen = sizeof peer;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &plen) != 0) {
    snprintf(err, sizeof err, "cannot read the peer's credentials: %s", strerror(errno));
  } else if (peer.uid != geteuid() && peer.uid != 0) {
    read_request(fd, req, sizeof req);
    snprintf(err, sizeof err, "permission denied: uid %u is neither the process's uid %u nor root",
             (unsigned)peer.uid, (unsigned)geteuid());
    ctl_log("refused a %s request from uid %u", req, (unsigned)peer.uid);
  } else {
    read_request(fd, req, sizeof req);
    if (strcmp(req, "status") == 0) {
      ok = 1;
    } else if (strcmp(req, "start") == 0 || strcmp(req, "stop") == 0) {
      set_recording(req[2] == 'a', err, sizeof err, &ok);
    } else if (strcmp(req, "snapshot") == 0) {
      if (budget_make_room(err, sizeof err) == 0 && backend_snapshot(snap, sizeof snap, err, sizeof err) == 0) {
        ok = 1;
        ++ctl.snapshots_taken;
      }
    } else {
      snprintf(err, sizeof err, "unknown request '%.20s' (start, stop, snapshot or status)", req);
    }
  }
  size_t n = reply_json(reply, sizeof reply, ok, err, snap);
  for (size_t off = 0; off < n;) {
    ssize_t w = send(fd, reply + off, n - off, MSG_NOSIGNAL);
    if (w <= 0) break;
    off += (size_t)w;
  }
  // The client sees the end now, even when a child forked meanwhile holds a
  // copy of this connection.
  shutdown(fd, SHUT_RDWR);
}

// Whether the listening fd is still the socket this library made: an
// application that closes every fd it did not open (daemons do) may reuse
// the number for its own socket.
static int socket_is_ours(void) {
  struct stat st;
  return listen_fd >= 0 && fstat(listen_fd, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == listen_ino;
}

static void stop_serving(const char* why) {
  ctl_log("the control socket %s; start/stop/snapshot/status are no longer answered", why);
  listen_fd = -1;  // not closed: the number may be the application's now
}

static void* serve_loop(void);

static void* serve(void* arg) {
  (void)arg;
  void* r = serve_loop();
  __atomic_store_n(&thread_ended, 1, __ATOMIC_RELEASE);
  return r;
}

static void* serve_loop(void) {
  int64_t next_check = now_ms();
  for (;;) {
    struct pollfd p[2] = {{wake_fd[0], POLLIN, 0}, {listen_fd, POLLIN, 0}};
    // While recording, the budget is checked often; otherwise nothing grows
    // and the thread sleeps until a request comes.
    int timeout = -1;
    if (ctl.recording && (ctl.max_bytes || ctl.min_free_bytes) && !ctl.cannot_stop) {
      int64_t left = next_check - now_ms();
      timeout = left > 0 ? (int)left : 0;
    }
    int n = poll(p, listen_fd >= 0 ? 2 : 1, timeout);
    if (n < 0 && errno != EINTR) {
      ctl_log("poll: %s; the control thread ends", strerror(errno));
      return NULL;
    }
    if (n > 0 && p[0].revents) {
      // stop_thread(), or the application closed this library's fds too.
      if (p[0].revents & POLLNVAL) stop_serving("and the library's other fds were closed by the application");
      return NULL;
    }
    if (n > 0 && listen_fd >= 0 && p[1].revents) {
      if (p[1].revents & (POLLNVAL | POLLERR | POLLHUP)) {
        stop_serving("was closed by the application");
      } else if (!socket_is_ours()) {
        stop_serving("fd was closed and reused by the application");
      } else {
        int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0) {
          handle(fd);
          close(fd);
        } else if (errno == EMFILE || errno == ENFILE || errno == ENOMEM || errno == ENOBUFS) {
          // Out of fds (a leaking application): the pending connection keeps
          // the socket readable; wait instead of spinning.
          struct timespec pause = {0, 100 * 1000 * 1000};
          nanosleep(&pause, NULL);
        }
      }
    }
    if (ctl.recording && now_ms() >= next_check) {
      budget_check();
      next_check = now_ms() + budget_interval_ms();
    }
  }
  return NULL;
}

static int start_thread(void) {
  // The application's signals are never delivered to this thread, and it
  // needs little stack.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  __atomic_store_n(&thread_ended, 0, __ATOMIC_RELEASE);
  int rc = pthread_create(&thread, &attr, serve, NULL);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    ctl_log("cannot start the control thread: %s", strerror(rc));
    return -1;
  }
  pthread_setname_np(thread, "memprofile-ctl");
  thread_running = 1;
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

// Ends the control thread (it finishes the request it is answering);
// returns whether it was serving (and is to be started again).
static int stop_thread(void) {
  if (!thread_running) return 0;
  struct stat st;
  int before = thread_count();
  int ended = __atomic_load_n(&thread_ended, __ATOMIC_ACQUIRE);
  if (ended) {
    // It is gone already, for good: not to be restarted.
  } else if (fstat(wake_fd[1], &st) == 0 && S_ISFIFO(st.st_mode) && st.st_ino == wake_ino) {
    char one = 1;
    ssize_t w = write(wake_fd[1], &one, 1);
    (void)w;
  } else {
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
  char drain[16];
  if (fstat(wake_fd[0], &st) == 0 && S_ISFIFO(st.st_mode) && st.st_ino == wake_ino)
    while (read(wake_fd[0], drain, sizeof drain) > 0) {
    }
  thread_running = 0;
  return 1;
}

// unshare and setns into some namespaces (a user namespace, CLONE_FS) fail
// with EINVAL in a process with more than one thread: a single-threaded
// application that uses them (sandboxes, container tools) must not fail
// because of this library. Its thread steps aside for the call.
#define WITHOUT_THREAD(call)                                    \
  do {                                                          \
    int stopped = 0;                                            \
    if (ctl.pid == getpid()) {                                  \
      pthread_mutex_lock(&thread_lock);                         \
      stopped = stop_thread();                                  \
    }                                                           \
    int rc = (call);                                            \
    int saved = errno;                                          \
    if (ctl.pid == getpid()) {                                  \
      if (stopped) start_thread();                              \
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

// bind(2) takes at most 107 bytes of path, and output directories (a test's
// scratch dir, a deep volume mount) can be longer. Then the socket is bound
// through /proc/self/fd/N/NAME: the kernel resolves the directory by its fd,
// and the socket still lands at DIR/NAME, where the client finds it the
// same way.
static int bind_at(int fd, const char* dir, const char* name) {
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  int n = snprintf(a.sun_path, sizeof a.sun_path, "%s/%s", dir, name);
  if (n >= 0 && (size_t)n < sizeof a.sun_path) return bind(fd, (struct sockaddr*)&a, sizeof a);
  int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return -1;
  n = snprintf(a.sun_path, sizeof a.sun_path, "/proc/self/fd/%d/%s", dfd, name);
  int rc = n >= 0 && (size_t)n < sizeof a.sun_path ? bind(fd, (struct sockaddr*)&a, sizeof a) : (errno = ENAMETOOLONG, -1);
  int saved = errno;
  close(dfd);
  errno = saved;
  return rc;
}

// The socket appears with its final name and mode at once: bound under a
// temporary name, restricted, then renamed.
static int open_socket(void) {
  char name[64], tmp[sizeof sock_path + 8];
  snprintf(name, sizeof name, "memprofile-ctl.%d.sock.new", (int)ctl.pid);
  snprintf(sock_path, sizeof sock_path, "%s/memprofile-ctl.%d.sock", ctl.dir, (int)ctl.pid);
  snprintf(tmp, sizeof tmp, "%s.new", sock_path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  unlink(tmp);
  if (bind_at(fd, ctl.dir, name) != 0 || chmod(tmp, 0600) != 0 || rename(tmp, sock_path) != 0 ||
      listen(fd, 16) != 0) {
    ctl_log("cannot serve %s: %s; start/stop/snapshot/status are not available", sock_path, strerror(errno));
    unlink(tmp);
    close(fd);
    sock_path[0] = '\0';
    return -1;
  }
  fd = high_fd(fd);
  struct stat st;
  if (fstat(fd, &st) == 0) listen_ino = st.st_ino;
  return fd;
}

// After fork, in the child: it is not the process served. Only close and
// the profiler's own switch run here (jemalloc's own child handler, which
// makes its locks usable again, was registered first and has run).
static void in_child(void) {
  if (ctl.pid == 0) return;
  ctl.pid = 0;
  thread_running = 0;
  if (listen_fd >= 0) close(listen_fd);
  if (wake_fd[0] >= 0) close(wake_fd[0]);
  if (wake_fd[1] >= 0) close(wake_fd[1]);
  listen_fd = wake_fd[0] = wake_fd[1] = -1;
  if (ctl.recording) backend_child();
  ctl.recording = 0;
}

__attribute__((constructor)) static void ctl_init(void) {
  const char* backend = getenv("MEMPROFILE_CTL_BACKEND");
  const char* dir = getenv("MEMPROFILE_CTL_DIR");
  if (!backend || !dir || !*dir) return;
  log_fd = fcntl(2, F_DUPFD_CLOEXEC, 200);  // -1 when fd 2 is closed: nothing is logged
  if (log_fd < 0) log_fd = fcntl(2, F_DUPFD_CLOEXEC, 3);
  if (!is_target()) return;
  drop_self_from_preload();
  if (strcmp(backend, "jemalloc") == 0) ctl.backend = CTL_JEMALLOC;
  else if (strcmp(backend, "bytehound") == 0) ctl.backend = CTL_BYTEHOUND;
  else if (strcmp(backend, "heaptrack") == 0) ctl.backend = CTL_HEAPTRACK;
  else return;
  if (strlen(dir) >= sizeof ctl.dir) {
    ctl_log("output directory name too long (%zu bytes): %.200s...", strlen(dir), dir);
    return;
  }
  strcpy(ctl.dir, dir);
  ctl.pid = getpid();
  ctl.start_time = time(NULL);
  ctl.recording = env_u64("MEMPROFILE_CTL_RECORDING", 1) != 0;
  ctl.max_bytes = env_u64("MEMPROFILE_CTL_MAX_BYTES", 0);
  ctl.min_free_bytes = env_u64("MEMPROFILE_CTL_MIN_FREE_BYTES", 0);
  backend_init();
  if (pipe2(wake_fd, O_CLOEXEC | O_NONBLOCK) != 0) {
    ctl_log("pipe: %s; start/stop/snapshot/status are not available", strerror(errno));
    ctl.pid = 0;
    return;
  }
  wake_fd[0] = high_fd(wake_fd[0]);
  wake_fd[1] = high_fd(wake_fd[1]);
  struct stat st;
  if (fstat(wake_fd[1], &st) == 0) wake_ino = st.st_ino;
  listen_fd = open_socket();
  // The allocator is set up before the fork handler is registered, so that
  // its own child handler (registered at its first allocation) runs first.
  free(malloc(1));
  pthread_atfork(NULL, NULL, in_child);
  start_thread();
}

__attribute__((destructor)) static void ctl_fini(void) {
  if (ctl.pid == getpid() && sock_path[0]) unlink(sock_path);
}
