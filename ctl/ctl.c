// Scope, the control thread and the socket. See ctl.h.
//
// Only the process `memprofile exec` profiles serves: the launcher names it
// in MEMPROFILE_CTL_TARGET. In a dispatcher that is not it, the library does
// nothing and stays in LD_PRELOAD, so the target it execs gets it. In the
// target it removes itself from LD_PRELOAD, so no child ever gets it; a
// forked child has no control thread (POSIX copies only the forking thread)
// and closes its copy of the socket. The socket is close-on-exec.
#define _GNU_SOURCE
#include "ctl.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
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

static int listen_fd = -1;
static char sock_path[sizeof(((struct sockaddr_un*)0)->sun_path)];

void ctl_log(const char* fmt, ...) {
  char line[512];
  int n = snprintf(line, sizeof line, "memprofile-ctl[%d]: ", (int)getpid());
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
  va_end(ap);
  size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m > sizeof line - (size_t)n - 2 ? sizeof line - (size_t)n - 2 : (size_t)m);
  line[len++] = '\n';
  ssize_t w = write(2, line, len);
  (void)w;
}

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
  if (n < 0) return 0;
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

// The reply to one request: one JSON line.
static size_t status_json(char* buf, size_t len, int ok, const char* error, const char* snapshot) {
  struct usage u = {0};
  budget_usage(&u);
  int n = snprintf(buf, len,
                   "{\"ok\":%s,\"pid\":%d,\"backend\":\"%s\",\"recording\":%s,\"stopped_reason\":\"%s\","
                   "\"error\":\"%s\",\"snapshot\":\"%s\",\"output_dir\":\"%s\",\"disk_bytes\":%llu,"
                   "\"own_bytes\":%llu,\"max_bytes\":%llu,\"free_bytes\":%llu,\"min_free_bytes\":%llu,"
                   "\"rotated\":%lu,\"snapshots\":[",
                   ok ? "true" : "false", (int)ctl.pid, backend_name(), ctl.recording ? "true" : "false",
                   ctl.stopped_reason, error ? error : "", snapshot ? snapshot : "", ctl.dir,
                   (unsigned long long)u.bytes, (unsigned long long)u.own_bytes, (unsigned long long)ctl.max_bytes,
                   (unsigned long long)u.free_bytes, (unsigned long long)ctl.min_free_bytes, ctl.rotated);
  if (n < 0 || (size_t)n >= len) return 0;
  size_t at = (size_t)n;
  at += budget_list_json(buf + at, len - at - 4);
  at += (size_t)snprintf(buf + at, len - at, "]}\n");
  return at;
}

static void handle(int fd) {
  static char reply[16384];
  char req[64] = {0};
  size_t got = 0;
  while (got < sizeof req - 1 && !memchr(req, '\n', got)) {
    ssize_t r = read(fd, req + got, sizeof req - 1 - got);
    if (r <= 0) break;
    got += (size_t)r;
  }
  req[strcspn(req, "\r\n")] = '\0';
  for (char* c = req; *c; ++c)  // echoed in the reply: nothing to escape
    if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-' || *c == '_')) *c = '?';

  struct ucred peer;
  socklen_t plen = sizeof peer;
  char err[256] = "", snap[256] = "";
  int ok = 0;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &plen) != 0) {
    snprintf(err, sizeof err, "cannot read the peer's credentials: %s", strerror(errno));
  } else if (peer.uid != geteuid() && peer.uid != 0) {
    snprintf(err, sizeof err, "permission denied: uid %u is neither the process's uid %u nor root",
             (unsigned)peer.uid, (unsigned)geteuid());
    ctl_log("refused a %s request from uid %u", req, (unsigned)peer.uid);
  } else if (strcmp(req, "status") == 0) {
    ok = 1;
  } else if (strcmp(req, "start") == 0 || strcmp(req, "stop") == 0) {
    int on = req[2] == 'a';
    if (on && ctl.final_stop) {
      snprintf(err, sizeof err, "%s stopped for good (%.160s); it cannot record again until the process restarts",
               backend_name(), ctl.stopped_reason[0] ? ctl.stopped_reason : "stopped");
    } else if (on && ctl.stopped_reason[0] && budget_make_room(err, sizeof err) != 0) {
      // Stopped by the budget, still over it: starting would cross it again.
    } else if (ctl.recording == on) {
      ok = 1;
    } else if (backend_set_recording(on, err, sizeof err) == 0) {
      ok = 1;
      ctl.recording = on;
      if (on) {
        ctl.stopped_reason[0] = '\0';
        budget_reset();
      }
      ctl_log("recording %s on request", on ? "started" : "stopped");
    }
  } else if (strcmp(req, "snapshot") == 0) {
    if (budget_make_room(err, sizeof err) == 0 &&
        backend_snapshot(snap, sizeof snap, err, sizeof err) == 0) {
      ok = 1;
      ++ctl.snapshots_taken;
    }
  } else {
    snprintf(err, sizeof err, "unknown request '%.20s' (start, stop, snapshot or status)", req);
  }
  size_t n = status_json(reply, sizeof reply, ok, err, snap);
  for (size_t off = 0; off < n;) {
    ssize_t w = write(fd, reply + off, n - off);
    if (w <= 0) break;
    off += (size_t)w;
  }
}

static void* serve(void* arg) {
  (void)arg;
  for (;;) {
    struct pollfd p = {listen_fd, POLLIN, 0};
    // While recording, the budget is checked often: a trace can grow by tens
    // of megabytes a second, jemalloc's own dumps more slowly (a check is
    // one pass over the output directory, microseconds). Otherwise nothing
    // grows and the thread sleeps until a request comes.
    int timeout = !ctl.recording || !(ctl.max_bytes || ctl.min_free_bytes) ? -1 : ctl.backend == CTL_JEMALLOC ? 100 : 20;
    int n = poll(&p, listen_fd >= 0 ? 1 : 0, timeout);
    if (n < 0 && errno != EINTR) {
      ctl_log("control socket: %s; requests are no longer answered", strerror(errno));
      listen_fd = -1;
      continue;
    }
    if (n > 0 && (p.revents & POLLIN)) {
      int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
      if (fd >= 0) {
        // A client that never sends or never reads cannot hold the thread.
        struct timeval tv = {2, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        handle(fd);
        close(fd);
      }
    }
    if (ctl.recording) budget_check();
  }
  return NULL;
}

static int open_socket(void) {
  int n = snprintf(sock_path, sizeof sock_path, "%s/memprofile-ctl.%d.sock", ctl.dir, (int)ctl.pid);
  if (n < 0 || (size_t)n >= sizeof sock_path) {
    ctl_log("%s is too long a directory for a unix socket; start/stop/snapshot/status are not available", ctl.dir);
    sock_path[0] = '\0';
    return -1;
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  memcpy(a.sun_path, sock_path, (size_t)n + 1);
  unlink(sock_path);  // left by an earlier process with this pid (PID 1 after a restart)
  if (bind(fd, (struct sockaddr*)&a, sizeof a) != 0 || chmod(sock_path, 0600) != 0 || listen(fd, 8) != 0) {
    ctl_log("cannot serve %s: %s; start/stop/snapshot/status are not available", sock_path, strerror(errno));
    close(fd);
    sock_path[0] = '\0';
    return -1;
  }
  return fd;
}

// After fork, in the child: it is not the process served.
static void in_child(void) {
  ctl.pid = 0;
  ctl.recording = 0;
  if (listen_fd >= 0) close(listen_fd);
  listen_fd = -1;
}

__attribute__((constructor)) static void ctl_init(void) {
  const char* backend = getenv("MEMPROFILE_CTL_BACKEND");
  const char* dir = getenv("MEMPROFILE_CTL_DIR");
  if (!backend || !dir || !*dir || !is_target()) return;
  drop_self_from_preload();
  if (strcmp(backend, "jemalloc") == 0) ctl.backend = CTL_JEMALLOC;
  else if (strcmp(backend, "bytehound") == 0) ctl.backend = CTL_BYTEHOUND;
  else if (strcmp(backend, "heaptrack") == 0) ctl.backend = CTL_HEAPTRACK;
  else return;
  if (strlen(dir) >= sizeof ctl.dir || strpbrk(dir, "\"\\")) {
    ctl_log("output directory name not usable: %.200s", dir);
    return;
  }
  strcpy(ctl.dir, dir);
  ctl.pid = getpid();
  ctl.recording = env_u64("MEMPROFILE_CTL_RECORDING", 1) != 0;
  ctl.max_bytes = env_u64("MEMPROFILE_CTL_MAX_BYTES", 0);
  ctl.min_free_bytes = env_u64("MEMPROFILE_CTL_MIN_FREE_BYTES", 0);
  listen_fd = open_socket();
  pthread_atfork(NULL, NULL, in_child);

  // The application's signals are never delivered to this thread, and it
  // needs little stack.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t t;
  int rc = pthread_create(&t, &attr, serve, NULL);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    ctl_log("cannot start the control thread: %s", strerror(rc));
    return;
  }
  pthread_setname_np(t, "memprofile-ctl");
}

__attribute__((destructor)) static void ctl_fini(void) {
  if (ctl.pid == getpid() && sock_path[0]) unlink(sock_path);
}
