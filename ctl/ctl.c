// The core: the state, the log, the socket and the control thread, the
// requests, a snapshot's steps, stopping. See ctl.h. The profiler and the
// disk budget are reached through the tables preload.c hands over
// (ctl.profiler, ctl.disk), never by name.
//
// A process tree is the unit: a child the target forks (prefork workers, a
// backend per connection) runs the app's code, and where the profiler
// records in forked children (jemalloc keeps its profiling state across
// fork and names dumps by pid) the child serves a socket of its own,
// memprofile-ctl.PID.sock, from a control thread started in the atfork
// child handler, and keeps the recording state it was forked with. Where
// the profiler does not record a forked child (heaptrack, bytehound), the
// child serves nothing, and memprofile status says so. Every fd of the
// library is close-on-exec and kept high, clear of the small numbers
// applications close and reuse.
//
// Fork safety: the parent may be multi-threaded. The control thread holds
// `busy` whenever it may allocate or take a library's lock (a profiler
// wraps malloc with its own lock: a fork while this thread held it would
// leave the child's copy locked for ever, and the child's exit would hang).
// The prepare handler takes `busy`, so no fork happens inside those
// sections. The child handler only uses what glibc makes usable again in a
// forked child (malloc, pthread_create, the loader's locks).
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

// Everything is read and written by the control thread only, after the
// constructor has set it up; nothing here is touched from a signal handler.
static struct ctl_state {
  const struct ctl_profiler* profiler;
  const struct ctl_disk* disk;
  void (*dir_moved)(const char* dir);  // the entry's: files.c's guard follows a moved directory
  char dir[CTL_DIR_MAX];     // the output directory
  pid_t pid;                 // the process served (0: none, e.g. a child the profiler does not record)
  pid_t parent;              // the served process it was forked from (0: the exec'd target itself)
  int recording;
  int dormant;               // the tree was started dormant: recording began at memprofile start
  char stopped_reason[240];  // why recording stopped by itself ("" when it did not)
  uint64_t max_bytes;        // the profiles' disk budget (0: none)
  uint64_t min_free_bytes;   // the free-space floor of the output filesystem
  unsigned snapshots_taken;  // by request
  unsigned snapshots_scheduled;  // by --snapshot-every
  unsigned records_written;  // "none": memory records, named by this count
  unsigned schedule_said;    // a scheduled snapshot failed (said once)
  uint64_t snapshot_every_ms;  // --snapshot-every (0: none)
  unsigned long rotated;     // snapshots deleted to stay within the budget
  int final_stop;            // heaptrack after heaptrack_stop: cannot record again
  int cannot_stop;           // stopping at the budget failed once: said, not retried
  time_t start_time;         // files of this pid older than this are an earlier process's
} ctl;

void ctl_configure(const struct ctl_settings* s) {
  snprintf(ctl.dir, sizeof ctl.dir, "%s", s->dir);
  ctl.pid = getpid();
  ctl.parent = s->parent;
  ctl.start_time = time(NULL);
  ctl.recording = s->recording;
  ctl.dormant = !s->recording;
  ctl.max_bytes = s->max_bytes;
  ctl.min_free_bytes = s->min_free_bytes;
  ctl.snapshot_every_ms = s->snapshot_every_ms;
  ctl.disk = s->disk;
  ctl.profiler = s->profiler;
  ctl.dir_moved = s->dir_moved;
}
void ctl_unserve(void) { ctl.pid = 0; }
const char* ctl_dir(void) { return ctl.dir; }
pid_t ctl_pid(void) { return ctl.pid; }
int ctl_recording_on(void) { return ctl.recording; }
const struct ctl_profiler* ctl_profiler_in_use(void) { return ctl.profiler; }
const struct ctl_disk* ctl_disk_in_use(void) { return ctl.disk; }
uint64_t ctl_max_bytes(void) { return ctl.max_bytes; }
uint64_t ctl_min_free_bytes(void) { return ctl.min_free_bytes; }
time_t ctl_start_time(void) { return ctl.start_time; }
int ctl_final_stop(void) { return ctl.final_stop; }
void ctl_set_final_stop(void) { ctl.final_stop = 1; }
unsigned long ctl_rotated(void) { return ctl.rotated; }
unsigned long ctl_add_rotated(void) { return ctl.rotated++; }

static int listen_fd = -1, wake_fd[2] = {-1, -1};
static pid_t unrecorded_pid;  // a forked child the profiler does not record: its record's pid
static ino_t listen_ino;  // the socket's inode: an fd number the app reused is not ours
static ino_t wake_ino;    // the wake pipe's, likewise
static int thread_ended;  // the thread returned by itself (atomic)
static char sock_path[sizeof ctl.dir + 64];
static pthread_t thread;
static int thread_running;
static pthread_mutex_t thread_lock = PTHREAD_MUTEX_INITIALIZER;  // app threads only (unshare/setns)
static pthread_mutex_t busy = PTHREAD_MUTEX_INITIALIZER;         // see above: no fork inside it

// An fd moved above the numbers applications close and reuse.
static int high_fd(int fd) {
  if (fd < 0) return fd;
  int moved = fcntl(fd, F_DUPFD_CLOEXEC, 200);
  if (moved < 0) return fd;  // a low RLIMIT_NOFILE: keep it where it is
  close(fd);
  return moved;
}

// ---- snapshots ------------------------------------------------------------

// The dump this thread asked for (ctl_is_asked_dump), and the last name
// files.c refused (for the snapshot's error; approximate across threads).
static pthread_t asking_thread;
static int asking;
static char asked[256];
static char refused[sizeof ctl.dir + 256];

int ctl_is_asked_dump(const char* name) {
  size_t n = strlen(name);
  if (!__atomic_load_n(&asking, __ATOMIC_ACQUIRE) || !pthread_equal(asking_thread, pthread_self()) || n <= 5 ||
      strcmp(name + n - 5, ".heap") != 0 || n >= sizeof asked)
    return 0;
  __atomic_store_n(&asking, 0, __ATOMIC_RELEASE);
  memcpy(asked, name, n + 1);
  return 1;
}

void ctl_note_refused(const char* path) {
  snprintf(refused, sizeof refused, "%s", path);
  ctl_log("refused to write %s: the name exists and is not this process's own file (a link, or another "
          "user's); nothing was written",
          path);
  asked[0] = '\0';
}

void ctl_stop_recording(const char* why) {
  char err[256];
  if (!ctl.recording || ctl.cannot_stop) return;
  if (ctl.profiler->set_recording(0, err, sizeof err) != 0) {
    // Said once; the profiler goes on, and the budget is not checked again
    // (but for gperftools, whose own dumps the checks still rotate and the
    // gate still admits one by one).
    ctl_log("cannot stop recording at the disk budget (%s): %s", why, err);
    ctl.cannot_stop = 1;
    return;
  }
  ctl.recording = 0;
  snprintf(ctl.stopped_reason, sizeof ctl.stopped_reason, "%s", why);
  ctl_log("recording stopped: %s", why);
}

// A reason into err, cut to fit (the reply and the log have room for one line).
static void set_error(char* err, size_t errlen, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_error(char* err, size_t errlen, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

// Why a dump failed, into err (the profiler's own reason stays when none
// of these is why), with the free bytes seen before its part was removed.
// A full disk stops recording.
static void dump_failed(int rc, uint64_t free_bytes, char* err, size_t errlen) {
  if (refused[0])
    set_error(err, errlen,
             "refused to write %.200s: the name exists and is not this process's own file (a link, or another "
             "user's); nothing was written",
             refused);
  else if (free_bytes < (1u << 20)) {
    set_error(err, errlen, "the filesystem of %.200s is full (%llu bytes free): the dump could not be written, and "
             "what was written of it is removed", ctl.dir, (unsigned long long)free_bytes);
    ctl_stop_recording(err);
  } else if (rc == 0)
    set_error(err, errlen, "%s dumped, but not under %s", ctl.profiler->name, ctl.dir);
}

// One snapshot: the profiler's dump is written as NAME.part (files.c),
// then checked: one the profiler could not finish (a full disk), or that
// crossed the floor or the budget once written, is removed, and recording
// stops with the reason; one that fits gets its name, and its memory
// record beside it. So no cut dump is ever left under a profile's name,
// and a sudden large dump cannot keep the filesystem past its floor.
// "none"'s snapshot: the memory record alone, memprofile-mem.PID.SEQ,
// kept only within the budget and above the floor.
static int take_record(char* path, size_t pathlen, char* err, size_t errlen) {
  char name[64], file[80], why[sizeof ctl.stopped_reason];
  int dfd = openat(AT_FDCWD, ctl.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    set_error(err, errlen, "cannot open the output directory %s: %s", ctl.dir, strerror(errno));
    return -1;
  }
  // The next sequence whose name is free: an earlier process of this pid
  // (a re-exec in place, PID 1 after a restart) left its own records.
  struct stat st;
  for (unsigned tries = 0;; ++tries) {
    snprintf(name, sizeof name, "memprofile-mem.%d.%u", (int)ctl.pid, ctl.records_written + 1);
    snprintf(file, sizeof file, "%s.mem.json", name);
    if (fstatat(dfd, file, &st, AT_SYMLINK_NOFOLLOW) != 0 || tries == 4096) break;
    ++ctl.records_written;
  }
  struct allocator_stats as;
  long bytes = memory_record_write(dfd, name, ctl.pid, ctl.profiler->allocator_stats(&as) == 0 ? &as : NULL);
  if (bytes < 0) {
    set_error(err, errlen, "cannot write the memory record %s/%s: %s", ctl.dir, file, strerror(errno));
    close(dfd);
    return -1;
  }
  // Already under its name, so among the profiles the budget counts.
  if (ctl.disk->fits(0, why, sizeof why) != 0) {
    unlinkat(dfd, file, 0);
    close(dfd);
    set_error(err, errlen, "%s: the memory record is removed", why);
    return -1;
  }
  close(dfd);
  ++ctl.records_written;
  snprintf(path, pathlen, "%s/%s", ctl.dir, file);
  return 0;
}

static int take_snapshot(char* path, size_t pathlen, char* err, size_t errlen) {
  if (ctl.profiler->records_only) return take_record(path, pathlen, err, errlen);
  if (!ctl.profiler->dump) {
    set_error(err, errlen,
             "%s writes one continuous file, not snapshots: copy it out with memprofile collect (it holds the whole "
             "history)",
             ctl.profiler->name);
    return -1;
  }
  refused[0] = asked[0] = '\0';
  asking_thread = pthread_self();
  __atomic_store_n(&asking, 1, __ATOMIC_RELEASE);
  int rc = ctl.profiler->dump(err, errlen);
  __atomic_store_n(&asking, 0, __ATOMIC_RELEASE);
  if (rc == -2) return -1;  // it could not even try: nothing was written
  char final_name[256], part[sizeof final_name + 8];
  snprintf(final_name, sizeof final_name, "%s", asked);
  snprintf(part, sizeof part, "%s.part", final_name);
  int dfd = openat(AT_FDCWD, ctl.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  struct stat st;
  int have_part = final_name[0] && dfd >= 0 && fstatat(dfd, part, &st, AT_SYMLINK_NOFOLLOW) == 0;
  if (rc != 0 || !have_part) {
    uint64_t free_bytes = ctl.disk->free_bytes();  // before what was written goes
    if (have_part) unlinkat(dfd, part, 0);
    if (dfd >= 0) close(dfd);
    dump_failed(rc, free_bytes, err, errlen);
    return -1;
  }
  char why[sizeof ctl.stopped_reason];
  if (ctl.disk->fits((uint64_t)st.st_size, why, sizeof why) != 0) {
    unlinkat(dfd, part, 0);
    close(dfd);
    set_error(err, errlen, "%s: the dump is removed", why);
    ctl_stop_recording(err);
    return -1;
  }
  rc = renameat(dfd, part, dfd, final_name);
  int saved = errno;
  if (rc != 0) unlinkat(dfd, part, 0);
  if (rc == 0) {
    struct allocator_stats as;
    memory_record_write(dfd, final_name, ctl.pid, ctl.profiler->allocator_stats(&as) == 0 ? &as : NULL);
  }
  close(dfd);
  if (rc != 0) {
    set_error(err, errlen, "cannot name the dump %s/%s: %s", ctl.dir, final_name, strerror(saved));
    return -1;
  }
  snprintf(path, pathlen, "%s/%s", ctl.dir, final_name);
  return 0;
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
  ctl.disk->usage(&u);
  int actual = ctl.profiler->recording();
  if (actual >= 0) ctl.recording = actual;
  struct out o = {buf, len - 4, 0};  // room for "]}\n"
  put(&o, "{\"ok\":%s,\"pid\":%d,\"parent\":%d", ok ? "true" : "false", (int)ctl.pid, (int)ctl.parent);
  char exe[1024];
  ssize_t en = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[en > 0 ? en : 0] = '\0';
  put_str(&o, "program", exe);
  put_str(&o, "backend", ctl.profiler->name);
  struct allocator_stats as;
  if (ctl.profiler->allocator_stats(&as) == 0) {
    if (strcmp(as.name, "jemalloc") == 0)
      put(&o, ",\"allocator\":{\"name\":\"jemalloc\",\"allocated\":%llu,\"active\":%llu,\"resident\":%llu,"
              "\"mapped\":%llu,\"retained\":%llu,\"metadata\":%llu}",
          (unsigned long long)as.allocated, (unsigned long long)as.active, (unsigned long long)as.resident,
          (unsigned long long)as.mapped, (unsigned long long)as.retained, (unsigned long long)as.metadata);
    else
      put(&o, ",\"allocator\":{\"name\":\"glibc\",\"arena\":%llu,\"in_use\":%llu,\"free\":%llu,\"mmapped\":%llu%s}",
          (unsigned long long)as.arena, (unsigned long long)as.in_use, (unsigned long long)as.free,
          (unsigned long long)as.mmapped, as.wraps ? ",\"wraps_past_2gib\":true" : "");
  }
  // What the profiler does in a child forked without exec: said, never left
  // for the user to find out.
  put(&o, ",\"forked_children\":\"%s\",\"snapshot_every_ms\":%llu,\"snapshots_scheduled\":%u",
      ctl.profiler->records_children() ? "recorded" : "not recorded", (unsigned long long)ctl.snapshot_every_ms,
      ctl.snapshots_scheduled);
  put(&o, ",\"recording\":%s", ctl.recording ? "true" : "false");
  put_str(&o, "stopped_reason", ctl.stopped_reason);
  put_str(&o, "error", error);
  put_str(&o, "snapshot", snapshot);
  put_str(&o, "output_dir", ctl.dir);
  put(&o, ",\"disk_bytes\":%llu,\"own_bytes\":%llu,\"own_files\":%u,\"max_bytes\":%llu,\"free_bytes\":%llu,"
          "\"min_free_bytes\":%llu,\"rotated\":%lu,\"snapshots\":[",
      (unsigned long long)u.bytes, (unsigned long long)u.own_bytes, u.own_files, (unsigned long long)ctl.max_bytes,
      (unsigned long long)u.free_bytes, (unsigned long long)ctl.min_free_bytes, ctl.rotated);
  if (o.at + 1 < o.len) o.at += ctl.disk->list_json(buf + o.at, o.len - o.at);
  memcpy(buf + o.at, "]}\n", 4);
  return o.at + 3;
}

static int64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

// A request line as it arrived: plain words only (it is echoed in messages).
static void clean_request(char* req) {
  req[strcspn(req, "\r\n")] = '\0';
  for (char* c = req; *c; ++c)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-' || *c == '_')) *c = '?';
}

static void set_recording(int on, char* err, size_t errlen, int* ok) {
  if (on && ctl.final_stop) {
    snprintf(err, errlen, "%s stopped for good (%.160s); it cannot record again until the process restarts",
             ctl.profiler->name, ctl.stopped_reason[0] ? ctl.stopped_reason : "stopped");
    return;
  }
  if (on && ctl.disk->make_room(err, errlen) != 0) return;  // it would cross the budget at once
  if (ctl.profiler->set_recording(on, err, errlen) != 0) return;
  *ok = 1;
  if (ctl.recording != on) ctl_log("recording %s on request", on ? "started" : "stopped");
  ctl.recording = on;
  if (on) {
    ctl.stopped_reason[0] = '\0';
    ctl.disk->reset();
  }
}

static void send_all(int fd, const char* buf, size_t n) {
  for (size_t off = 0; off < n;) {
    ssize_t w = send(fd, buf + off, n - off, MSG_NOSIGNAL);
    if (w <= 0) break;
    off += (size_t)w;
  }
  // The client sees the end now, even when a child forked meanwhile holds a
  // copy of this connection.
  shutdown(fd, SHUT_RDWR);
}

// One request of an allowed peer, answered.
static void answer(int fd, char* req) {
  // The control thread's own (static: its stack is small). The reply holds
  // the longest directory name several times; the snapshots listed beyond
  // it are counted, not named (the disk's list_json).
  static char reply[64 * 1024], snap[sizeof ctl.dir + 256];
  char err[256] = "";
  snap[0] = '\0';
  int ok = 0;
  clean_request(req);
  pthread_mutex_lock(&busy);
  if (strcmp(req, "status") == 0) {
    ok = 1;
  } else if (strcmp(req, "start") == 0 || strcmp(req, "stop") == 0) {
    set_recording(req[2] == 'a', err, sizeof err, &ok);
  } else if (strcmp(req, "snapshot") == 0) {
    if (ctl.disk->make_room(err, sizeof err) == 0 && take_snapshot(snap, sizeof snap, err, sizeof err) == 0) {
      ok = 1;
      ++ctl.snapshots_taken;
    }
  } else {
    snprintf(err, sizeof err, "unknown request '%.20s' (start, stop, snapshot or status)", req);
  }
  size_t n = reply_json(reply, sizeof reply, ok, err, snap);
  pthread_mutex_unlock(&busy);
  send_all(fd, reply, n);
}

// A peer that may not ask gets a refusal and nothing else: no state, no
// paths. Nothing is read from it. The log says so at most once in 10 s,
// with how many were refused meanwhile, and before the reply: whoever has
// seen the refusal finds it in the log.
static void refuse(int fd, uid_t uid) {
  static int64_t last_said;
  static unsigned long unsaid;
  char reply[256];
  int n = snprintf(reply, sizeof reply,
                   "{\"ok\":false,\"error\":\"permission denied: uid %u is neither the process's uid %u nor root\"}\n",
                   (unsigned)uid, (unsigned)geteuid());
  int64_t now = now_ms();
  if (last_said && now - last_said < 10000) {
    ++unsaid;
  } else {
    if (unsaid)
      ctl_log("refused a request from uid %u (and %lu more refused in the last 10 s)", (unsigned)uid, unsaid);
    else
      ctl_log("refused a request from uid %u", (unsigned)uid);
    last_said = now;
    unsaid = 0;
  }
  send_all(fd, reply, (size_t)n);
}

// Connections being read: the thread never blocks on a peer. Each has
// kRequestMs for its request line, several are read at once, and the
// budget's schedule runs between them whatever they do. While the table
// is full, new connections wait in the listen backlog.
enum { kConns = 8, kRequestMs = 1000 };
static struct conn {
  int fd;
  size_t got;
  int64_t deadline;
  char req[64];
} conns[kConns];
static int nconns;

static void drop_conn(int i) {
  close(conns[i].fd);
  conns[i] = conns[--nconns];
}

// In a forked child: the parent's connections are the parent's.
static void forget_conns(void) {
  for (int i = 0; i < nconns; ++i) close(conns[i].fd);
  nconns = 0;
}

// A new connection: who asks comes first, before anything is read.
static void accept_one(void) {
  int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    if (errno == EMFILE || errno == ENFILE || errno == ENOMEM || errno == ENOBUFS) {
      // Out of fds (a leaking application): the pending connection keeps
      // the socket readable; wait instead of spinning.
      struct timespec pause = {0, 100 * 1000 * 1000};
      nanosleep(&pause, NULL);
    }
    return;
  }
  struct ucred peer;
  socklen_t plen = sizeof peer;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &plen) != 0) {
    close(fd);
    return;
  }
  if (peer.uid != geteuid() && peer.uid != 0) {
    refuse(fd, peer.uid);
    close(fd);
    return;
  }
  conns[nconns++] = (struct conn){fd, 0, now_ms() + kRequestMs, ""};
}

// Reads what connection i sent; answers once its line is whole. A peer
// that closes without a line is a probe (reap_stale_sockets): no answer.
static void read_conn(int i) {
  struct conn* c = &conns[i];
  ssize_t r = read(c->fd, c->req + c->got, sizeof c->req - 1 - c->got);
  if (r < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (r > 0) c->got += (size_t)r;
  c->req[c->got] = '\0';
  int whole = memchr(c->req, '\n', c->got) != NULL || c->got == sizeof c->req - 1;
  if (whole || (r <= 0 && c->got > 0)) {
    answer(c->fd, c->req);
  } else if (r > 0) {
    return;  // more to come
  }
  drop_conn(i);
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
static int connect_at(int fd, const char* dir, const char* name);

static void* serve(void* arg) {
  (void)arg;
  void* r = serve_loop();
  __atomic_store_n(&thread_ended, 1, __ATOMIC_RELEASE);
  return r;
}

// Scheduled snapshots (--snapshot-every): a process that records writes one
// on that schedule, within the budget, so a slow leak in a long-lived worker
// shows growth without anyone running a command, and a worker that ends
// with _exit (no exit dump) leaves its last one.
static void scheduled_snapshot(void) {
  char err[256], snap[sizeof ctl.dir + 256];
  if (ctl.disk->make_room(err, sizeof err) != 0) {
    if (!ctl.schedule_said++) ctl_log("scheduled snapshot skipped: %s", err);
    return;
  }
  if (take_snapshot(snap, sizeof snap, err, sizeof err) != 0) {
    if (!ctl.schedule_said++) ctl_log("scheduled snapshot failed: %s", err);
    return;
  }
  ++ctl.snapshots_scheduled;
}

// Sockets in the directory that nobody serves any more: a child that ended
// with _exit or was killed (its destructor never ran), or exec'd another
// program (its fds closed on exec). A socket is stale when a connect is
// refused; the name is only ever made while listening (open_socket). A
// stale process's record goes with it unless it left profiles, which the
// record names. The first process of the tree does this, on the budget's
// schedule; at most kReap of each per pass.
// Records of ended processes without a socket or profiles (forked children
// the profiler did not record: report names them) are kept up to
// kKeepEnded; past that, those of processes no pass saw alive (children
// that lived under a second: a fork-heavy service's) go first, then any,
// so that a fork-per-request service does not fill the directory.
enum { kReap = 1024, kKeepEnded = 512 };
static int seen_alive[kReap], nseen_alive;  // control thread or exit only

static int was_seen_alive(int pid) {
  for (int i = 0; i < nseen_alive; ++i)
    if (seen_alive[i] == pid) return 1;
  return 0;
}

static void reap_stale_sockets(void) {
  static int stale[kReap], profiled[kReap], ended[kReap];  // control thread or exit only
  int nstale = 0, nprofiled = 0, nended = 0;
  DIR* d = opendir(ctl.dir);
  if (!d) return;
  int dfd = dirfd(d);
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    int pid = 0, end = 0;
    unsigned long long dump_pid;
    if (ctl.disk->profile_pid(e->d_name, &dump_pid)) {
      if (nprofiled < kReap) profiled[nprofiled++] = (int)dump_pid;
      continue;
    }
    if (sscanf(e->d_name, "memprofile-proc.%d.json%n", &pid, &end) == 1 && e->d_name[end] == '\0') {
      if (pid == (int)ctl.pid) continue;
      if (kill(pid, 0) != 0 && errno == ESRCH) {
        if (nended < kReap) ended[nended++] = pid;
      } else if (!was_seen_alive(pid)) {
        seen_alive[nseen_alive < kReap ? nseen_alive++ : pid % kReap] = pid;
      }
      continue;
    }
    if (sscanf(e->d_name, "memprofile-ctl.%d.sock%n", &pid, &end) != 1 || e->d_name[end] != '\0' ||
        pid == (int)ctl.pid || nstale >= kReap)
      continue;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) break;
    int rc = connect_at(fd, ctl.dir, e->d_name);
    int err = errno;
    close(fd);
    struct stat st;
    if (rc != 0 && err == ECONNREFUSED && fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISSOCK(st.st_mode) && st.st_uid == geteuid() && unlinkat(dfd, e->d_name, 0) == 0)
      stale[nstale++] = pid;
  }
  for (int i = 0; i < nstale; ++i) {
    int keep = 0;
    for (int k = 0; k < nprofiled && !keep; ++k) keep = profiled[k] == stale[i];
    char name[64];
    snprintf(name, sizeof name, "memprofile-proc.%d.json", stale[i]);
    if (!keep) unlinkat(dfd, name, 0);
  }
  for (int pass = 0; pass < 2 && nended > kKeepEnded; ++pass)
    for (int i = 0; i < nended && nended > kKeepEnded; ++i) {
      int keep = pass == 0 && was_seen_alive(ended[i]);
      for (int k = 0; k < nprofiled && !keep; ++k) keep = profiled[k] == ended[i];
      char name[64];
      snprintf(name, sizeof name, "memprofile-proc.%d.json", ended[i]);
      if (keep || unlinkat(dfd, name, 0) != 0) continue;
      ended[i--] = ended[--nended];
    }
  closedir(d);
}

static void* serve_loop(void) {
  int64_t next_check = now_ms(), next_snapshot = now_ms() + (int64_t)ctl.snapshot_every_ms, next_reap = now_ms();
  for (;;) {
    struct pollfd p[2 + kConns] = {{wake_fd[0], POLLIN, 0}, {listen_fd, nconns < kConns ? POLLIN : 0, 0}};
    for (int i = 0; i < nconns; ++i) p[2 + i] = (struct pollfd){conns[i].fd, POLLIN, 0};
    // While recording, the budget is checked often, and snapshots come on
    // their schedule; the first process also clears stale sockets every
    // second or so. Otherwise nothing grows and the thread sleeps until a
    // request comes.
    int64_t wake = -1;
    if (ctl.recording && (ctl.max_bytes || ctl.min_free_bytes) && (!ctl.cannot_stop || ctl.profiler->unstoppable))
      wake = next_check;
    const int scheduling = ctl.recording || ctl.profiler->records_only;
    if (scheduling && ctl.snapshot_every_ms && (wake < 0 || next_snapshot < wake)) wake = next_snapshot;
    if (!ctl.parent && (wake < 0 || next_reap < wake)) wake = next_reap;
    for (int i = 0; i < nconns; ++i)
      if (wake < 0 || conns[i].deadline < wake) wake = conns[i].deadline;
    int timeout = -1;
    if (wake >= 0) {
      int64_t left = wake - now_ms();
      timeout = left > 0 ? (int)(left < 60000 ? left : 60000) : 0;
    }
    int n = poll(p, (nfds_t)(2 + nconns), timeout);
    if (n < 0 && errno != EINTR) {
      ctl_log("poll: %s; the control thread ends", strerror(errno));
      return NULL;
    }
    if (n > 0 && p[0].revents) {
      // stop_thread(), or the application closed this library's fds too.
      if (p[0].revents & POLLNVAL) stop_serving("and the library's other fds were closed by the application");
      forget_conns();
      return NULL;
    }
    // Connections first (from the last, as drop_conn moves the last one
    // into a freed slot), then new ones, then the schedule.
    int64_t now = now_ms();
    for (int i = nconns - 1; n > 0 && i >= 0; --i) {
      if (p[2 + i].revents) read_conn(i);
      else if (now >= conns[i].deadline) drop_conn(i);  // silent too long: closed unanswered
    }
    for (int i = nconns - 1; n == 0 && i >= 0; --i)
      if (now >= conns[i].deadline) drop_conn(i);
    if (n > 0 && listen_fd >= 0 && p[1].revents) {
      if (p[1].revents & (POLLNVAL | POLLERR | POLLHUP)) {
        stop_serving("was closed by the application");
      } else if (!socket_is_ours()) {
        stop_serving("fd was closed and reused by the application");
      } else {
        accept_one();
      }
    }
    now = now_ms();
    pthread_mutex_lock(&busy);
    if (ctl.recording && now >= next_check) {
      char why[sizeof ctl.stopped_reason];
      if (ctl.disk->check(why, sizeof why) == -1) ctl_stop_recording(why);
      next_check = now_ms() + ctl.disk->interval_ms();
    }
    if (ctl.snapshot_every_ms && now >= next_snapshot) {
      if (ctl.recording || ctl.profiler->records_only) scheduled_snapshot();
      next_snapshot = now_ms() + (int64_t)ctl.snapshot_every_ms;
    }
    if (!ctl.parent && now >= next_reap) {
      reap_stale_sockets();
      next_reap = now_ms() + 1000 + ctl.disk->interval_ms();
    }
    pthread_mutex_unlock(&busy);
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
// same way. `op` is bind or connect.
static int at_dir(int fd, const char* dir, const char* name, int (*op)(int, const struct sockaddr*, socklen_t)) {
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  int n = snprintf(a.sun_path, sizeof a.sun_path, "%s/%s", dir, name);
  if (n >= 0 && (size_t)n < sizeof a.sun_path) return op(fd, (struct sockaddr*)&a, sizeof a);
  int dfd = openat(AT_FDCWD, dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return -1;
  n = snprintf(a.sun_path, sizeof a.sun_path, "/proc/self/fd/%d/%s", dfd, name);
  int rc = n >= 0 && (size_t)n < sizeof a.sun_path ? op(fd, (struct sockaddr*)&a, sizeof a) : (errno = ENAMETOOLONG, -1);
  int saved = errno;
  close(dfd);
  errno = saved;
  return rc;
}

static int do_bind(int fd, const struct sockaddr* a, socklen_t len) { return bind(fd, a, len); }
static int do_connect(int fd, const struct sockaddr* a, socklen_t len) { return connect(fd, a, len); }
static int bind_at(int fd, const char* dir, const char* name) { return at_dir(fd, dir, name, do_bind); }
static int connect_at(int fd, const char* dir, const char* name) { return at_dir(fd, dir, name, do_connect); }

// The socket appears with its final name and mode at once: its mode set
// on the fd before bind (the kernel gives the bound file the socket
// inode's mode; a chmod by name would follow a link that another user put
// there, in a directory without the sticky bit), bound under a temporary
// name, then renamed.
static int open_socket(void) {
  char name[64], tmp[sizeof sock_path + 8];
  snprintf(name, sizeof name, "memprofile-ctl.%d.sock.new", (int)ctl.pid);
  snprintf(sock_path, sizeof sock_path, "%s/memprofile-ctl.%d.sock", ctl.dir, (int)ctl.pid);
  snprintf(tmp, sizeof tmp, "%s.new", sock_path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  unlink(tmp);
  // Listening before the rename: a socket under its final name always
  // answers while its process lives (reap_stale_sockets relies on it).
  if (fchmod(fd, 0600) != 0 || bind_at(fd, ctl.dir, name) != 0 || listen(fd, 16) != 0 || rename(tmp, sock_path) != 0) {
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

// Whether `euid`/`egid` can create files in a directory of status `st`, as
// the kernel checks the mode (supplementary groups aside: the one the
// process will have is all this knows).
static int can_write(const struct stat* st, uid_t euid, gid_t egid) {
  if (euid == 0) return 1;
  if (st->st_uid == euid) return (st->st_mode & (S_IWUSR | S_IXUSR)) == (S_IWUSR | S_IXUSR);
  if (st->st_gid == egid) return (st->st_mode & (S_IWGRP | S_IXGRP)) == (S_IWGRP | S_IXGRP);
  return (st->st_mode & (S_IWOTH | S_IXOTH)) == (S_IWOTH | S_IXOTH);
}

void ctl_own_directory(uid_t euid, gid_t egid) {
  static int moved;
  if (moved || ctl.pid != getpid() || !ctl.dir[0] || geteuid() != 0 || euid == 0) return;
  struct stat st;
  if (stat(ctl.dir, &st) != 0 || can_write(&st, euid, egid)) return;
  pthread_mutex_lock(&busy);
  char name[32], sub[sizeof ctl.dir], err[256] = "";
  snprintf(name, sizeof name, "proc.%d", (int)ctl.pid);
  int dfd = -1, sfd = -1;
  if (strlen(ctl.dir) + 1 + strlen(name) >= sizeof sub) {
    snprintf(err, sizeof err, "the directory's name is too long for a subdirectory");
  } else if ((dfd = openat(AT_FDCWD, ctl.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
    snprintf(err, sizeof err, "cannot open it: %s", strerror(errno));
  } else if (mkdirat(dfd, name, 0755) != 0 && errno != EEXIST) {
    snprintf(err, sizeof err, "cannot make %s there: %s", name, strerror(errno));
  } else if ((sfd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
    // (An earlier process of this pid may have left one: a directory is
    // taken over, a link or anything else is not.)
    snprintf(err, sizeof err, "%s there is not a directory of its own: %s", name, strerror(errno));
  } else if (fchown(sfd, euid, egid) != 0 || fchmod(sfd, 0755) != 0) {
    snprintf(err, sizeof err, "cannot give %s to uid %u: %s", name, (unsigned)euid, strerror(errno));
  } else {
    snprintf(sub, sizeof sub, "%s/%s", ctl.dir, name);
    if (!ctl.profiler->moved || ctl.profiler->moved(sub, err, sizeof err) == 0) {
      ctl_log("uid %u cannot write %s: this process writes its files to %s, its own subdirectory, owned by uid %u",
              (unsigned)euid, ctl.dir, sub, (unsigned)euid);
      strcpy(ctl.dir, sub);
      if (ctl.dir_moved) ctl.dir_moved(sub);
      moved = 1;
    }
  }
  if (sfd >= 0) close(sfd);
  if (dfd >= 0) close(dfd);
  if (!moved)
    ctl_log("uid %u cannot write %s, and no subdirectory of its own could be made (%s): its snapshots will fail; "
            "chmod 1777 %s, or give memprofile exec --output-dir a directory every user of the tree can write",
            (unsigned)euid, ctl.dir, err, ctl.dir);
  pthread_mutex_unlock(&busy);
}

void ctl_fork_prepare(void) { pthread_mutex_lock(&busy); }
void ctl_fork_parent(void) { pthread_mutex_unlock(&busy); }

// The process's record beside its profiles, memprofile-proc.PID.json: who
// it is in the tree (its parent, its program, when it started), which
// memprofile collect carries and memprofile report reads to name the
// processes whose dumps it has. Written to a name of its own, created
// exclusively and never through a link, then renamed into place.
// A child its profiler does not record writes one too, "recorded":false,
// so that report can say which processes of the tree it cannot see. The
// boot's id and the start in clock ticks tell two pods' pid 1 apart even
// when they started in the same second.
static void read_small_file(const char* path, char* buf, size_t len) {
  buf[0] = '\0';
  int fd = openat(AT_FDCWD, path, O_RDONLY | O_CLOEXEC);  // libc's own: files.c's open is the profilers'
  if (fd < 0) return;
  ssize_t n = read(fd, buf, len - 1);
  close(fd);
  buf[n > 0 ? n : 0] = '\0';
}

static unsigned long long start_ticks(void) {
  char stat[1024];
  read_small_file("/proc/self/stat", stat, sizeof stat);
  const char* p = strrchr(stat, ')');
  // The blank after ")" comes before field 3 (state); the one before field
  // 22 (starttime) is 19 blanks further, the 20th in all.
  for (int field = 3; p && field <= 22; ++field) p = strchr(p + 1, ' ');
  return p ? strtoull(p + 1, NULL, 10) : 0;
}

// What the process holds as it exits, for report's "most of its memory is
// not in the profile": the kernel's anonymous resident memory (RssAnon) and
// what its allocator says is in use. "" before exit.
static void exit_memory(char* out, size_t len) {
  char status[4096];
  read_small_file("/proc/self/status", status, sizeof status);
  const char* anon = strstr(status, "\nRssAnon:");
  unsigned long long kb = anon ? strtoull(anon + 9, NULL, 10) : 0;
  struct allocator_stats as;
  unsigned long long in_use = 0;
  if (ctl.profiler->allocator_stats && ctl.profiler->allocator_stats(&as) == 0)
    in_use = as.name && strcmp(as.name, "jemalloc") == 0 ? as.allocated : as.in_use;
  snprintf(out, len, ",\"exit_rss_anon\":%llu,\"exit_allocator_in_use\":%llu", kb * 1024, in_use);
}

static void write_process_record(pid_t pid, pid_t parent, long long started, int recorded, const char* at_exit) {
  char exe[1024], body[2048], quoted[2 * sizeof exe + 3], name[64], tmp[80], boot[64];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[n > 0 ? n : 0] = '\0';
  json_string(quoted, sizeof quoted, exe);
  read_small_file("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
  for (char* c = boot; *c; ++c)
    if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f') || *c == '-')) *c = '\0';
  int len = snprintf(body, sizeof body,
                     "{\"pid\":%d,\"parent\":%d,\"program\":%s,\"backend\":\"%s\",\"started\":%lld,\"boot\":\"%s\","
                     "\"start_ticks\":%llu%s%s%s}\n",
                     (int)pid, (int)parent, quoted, ctl.profiler->name, started, boot, start_ticks(),
                     recorded ? "" : ",\"recorded\":false", ctl.dormant ? ",\"dormant\":true" : "", at_exit);
  snprintf(name, sizeof name, "memprofile-proc.%d.json", (int)pid);
  snprintf(tmp, sizeof tmp, "%s.new", name);
  int dfd = openat(AT_FDCWD, ctl.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return;
  unlinkat(dfd, tmp, 0);
  int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd >= 0) {
    int ok = len > 0 && write(fd, body, (size_t)len) == len;
    close(fd);
    if (!ok || renameat(dfd, tmp, dfd, name) != 0) unlinkat(dfd, tmp, 0);
  }
  close(dfd);
}

// The wake pipe, the socket and the control thread of the process served.
static int start_serving(void) {
  write_process_record(ctl.pid, ctl.parent, (long long)ctl.start_time, 1, "");
  if (pipe2(wake_fd, O_CLOEXEC | O_NONBLOCK) != 0) {
    ctl_log("pipe: %s; start/stop/snapshot/status are not available", strerror(errno));
    wake_fd[0] = wake_fd[1] = -1;
    return -1;
  }
  wake_fd[0] = high_fd(wake_fd[0]);
  wake_fd[1] = high_fd(wake_fd[1]);
  struct stat st;
  if (fstat(wake_fd[1], &st) == 0) wake_ino = st.st_ino;
  listen_fd = open_socket();
  return start_thread();
}

// After fork, in the child (jemalloc's own child handler, which makes its
// locks usable again, was registered first and has run). The parent's fds
// are closed; the socket file stays the parent's. Where the profiler
// records forked children, the child is served in its own right: it keeps
// the recording state it was forked with, its files are those written from
// now on under its pid, and the budget it answers to is the directory's,
// shared with the whole tree.
void ctl_fork_child(void) {
  pthread_mutex_init(&busy, NULL);
  pthread_mutex_init(&thread_lock, NULL);
  if (ctl.pid == 0) return;
  pid_t parent = ctl.pid;
  ctl.pid = 0;
  thread_running = 0;
  forget_conns();
  if (listen_fd >= 0) close(listen_fd);
  if (wake_fd[0] >= 0) close(wake_fd[0]);
  if (wake_fd[1] >= 0) close(wake_fd[1]);
  listen_fd = wake_fd[0] = wake_fd[1] = -1;
  sock_path[0] = '\0';
  if (!ctl.profiler->records_children()) {
    ctl.recording = 0;
    // Not recorded, and not served: its record says so, until it execs
    // another program (ctl_exec_other), when it is no longer the
    // profiled program.
    unrecorded_pid = getpid();
    write_process_record(unrecorded_pid, parent, (long long)time(NULL), 0, "");
    return;
  }
  ctl.pid = getpid();
  ctl.parent = parent;
  ctl.start_time = time(NULL);
  ctl.snapshots_taken = ctl.snapshots_scheduled = ctl.records_written = 0;
  ctl.schedule_said = 0;
  ctl.rotated = 0;
  ctl.disk->reset();
  if (start_serving() != 0) ctl.pid = 0;
}

int ctl_serve(void) { return start_serving() != 0 && wake_fd[0] < 0 ? -1 : 0; }

void ctl_exec_other(void) {
  if (unrecorded_pid == 0 || unrecorded_pid != getpid() || !ctl.dir[0]) return;
  char name[64];
  snprintf(name, sizeof name, "memprofile-proc.%d.json", (int)unrecorded_pid);
  int dfd = openat(AT_FDCWD, ctl.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return;
  unlinkat(dfd, name, 0);
  close(dfd);
}

void ctl_exit(void) {
  if (ctl.pid != getpid()) return;
  // A trace refused at the floor just before the exit: said here, since no
  // check came after it (heaptrack has closed the file already).
  char why[sizeof ctl.stopped_reason];
  if (ctl.recording && ctl.disk && ctl.disk->refused(why, sizeof why)) ctl_log("recording stopped: %s", why);
  if (sock_path[0]) unlink(sock_path);
  // The record again, with what the process holds as it ends (a record is
  // only where one was written at start).
  if (sock_path[0]) {
    char at_exit[128];
    exit_memory(at_exit, sizeof at_exit);
    write_process_record(ctl.pid, ctl.parent, (long long)ctl.start_time, 1, at_exit);
  }
  // The first process ends last in most trees: what its children left.
  if (!ctl.parent) reap_stale_sockets();
}
