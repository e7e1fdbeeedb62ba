// The core: the state, the requests, a snapshot's steps, the control
// thread's loop, stopping. See ctl.h; the fds it serves on are socket.c's,
// the connections conns.c's, the thread thread.c's. The profiler and the
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

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "conns.h"
#include "memrecord.h"
#include "proc_record.h"
#include "socket.h"
#include "thread.h"

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

static pid_t unrecorded_pid;  // a forked child the profiler does not record: its record's pid
static pthread_mutex_t busy = PTHREAD_MUTEX_INITIALIZER;  // see above: no fork inside it

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
  char unreachable[512] = "";
  if (ctl.profiler->unreachable && ctl.profiler->unreachable(unreachable, sizeof unreachable))
    put_str(&o, "unreachable", unreachable);
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
  conns_send(fd, reply, n);
}

static void stop_serving(const char* why) {
  ctl_log("the control socket %s; start/stop/snapshot/status are no longer answered", why);
  socket_abandon();
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

static void* serve_loop(void) {
  int64_t next_check = conns_now_ms(), next_snapshot = next_check + (int64_t)ctl.snapshot_every_ms,
          next_reap = next_check;
  for (;;) {
    const int listen_fd = socket_listen_fd(), nconns = conns_count();
    struct pollfd p[2 + kConns] = {{socket_wake_fd(), POLLIN, 0}, {listen_fd, nconns < kConns ? POLLIN : 0, 0}};
    conns_poll_fds(p + 2);
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
    wake = conns_next_wake(wake);
    int timeout = -1;
    if (wake >= 0) {
      int64_t left = wake - conns_now_ms();
      timeout = left > 0 ? (int)(left < 60000 ? left : 60000) : 0;
    }
    int n = poll(p, (nfds_t)(2 + nconns), timeout);
    if (n < 0 && errno != EINTR) {
      ctl_log("poll: %s; the control thread ends", strerror(errno));
      return NULL;
    }
    if (n > 0 && p[0].revents) {
      // thread_stop(), or the application closed this library's fds too.
      if (p[0].revents & POLLNVAL) stop_serving("and the library's other fds were closed by the application");
      conns_forget();
      return NULL;
    }
    // Connections first, then new ones, then the schedule.
    conns_read(p + 2, n, answer);
    if (n > 0 && listen_fd >= 0 && p[1].revents) {
      if (p[1].revents & (POLLNVAL | POLLERR | POLLHUP)) {
        stop_serving("was closed by the application");
      } else if (!socket_is_ours()) {
        stop_serving("fd was closed and reused by the application");
      } else {
        conns_accept(listen_fd);
      }
    }
    int64_t now = conns_now_ms();
    pthread_mutex_lock(&busy);
    if (ctl.recording && now >= next_check) {
      char why[sizeof ctl.stopped_reason];
      if (ctl.disk->check(why, sizeof why) == -1) ctl_stop_recording(why);
      next_check = conns_now_ms() + ctl.disk->interval_ms();
    }
    if (ctl.snapshot_every_ms && now >= next_snapshot) {
      if (ctl.recording || ctl.profiler->records_only) scheduled_snapshot();
      next_snapshot = conns_now_ms() + (int64_t)ctl.snapshot_every_ms;
    }
    if (!ctl.parent && now >= next_reap) {
      socket_reap_stale(ctl.dir, ctl.pid, ctl.disk);
      next_reap = conns_now_ms() + 1000 + ctl.disk->interval_ms();
    }
    pthread_mutex_unlock(&busy);
  }
  return NULL;
}

void ctl_lock(void) { pthread_mutex_lock(&busy); }
void ctl_unlock(void) { pthread_mutex_unlock(&busy); }

int ctl_move_dir(const char* sub, char* err, size_t errlen) {
  int rc = ctl.profiler->moved ? ctl.profiler->moved(sub, err, errlen) : 0;
  if (rc == 0) {
    snprintf(ctl.dir, sizeof ctl.dir, "%s", sub);
    if (ctl.dir_moved) ctl.dir_moved(sub);
  }
  return rc;
}

void ctl_fork_prepare(void) { ctl_lock(); }
void ctl_fork_parent(void) { ctl_unlock(); }

// The process's record as it is now, with `at_exit` ("" before exit).
static void write_record(pid_t pid, pid_t parent, long long started, int recorded, const char* at_exit) {
  struct proc_record r = {pid, parent, started, ctl.profiler->name, recorded, ctl.dormant, at_exit};
  proc_record_write(ctl.dir, &r);
}

// The wake pipe, the socket and the control thread of the process served.
static int start_serving(void) {
  write_record(ctl.pid, ctl.parent, (long long)ctl.start_time, 1, "");
  if (socket_open_wake() != 0) return -1;
  socket_listen(ctl.dir, ctl.pid);
  return thread_start(serve_loop);
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
  if (ctl.pid == 0) {
    thread_forget();
    return;
  }
  pid_t parent = ctl.pid;
  ctl.pid = 0;
  thread_forget();
  conns_forget();
  socket_forget();
  if (!ctl.profiler->records_children()) {
    ctl.recording = 0;
    // Not recorded, and not served: its record says so, until it execs
    // another program (ctl_exec_other), when it is no longer the
    // profiled program.
    unrecorded_pid = getpid();
    write_record(unrecorded_pid, parent, (long long)time(NULL), 0, "");
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

int ctl_serve(void) { return start_serving() != 0 && socket_wake_fd() < 0 ? -1 : 0; }

void ctl_exec_other(void) {
  if (unrecorded_pid == 0 || unrecorded_pid != getpid() || !ctl.dir[0]) return;
  int dfd = openat(AT_FDCWD, ctl.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return;
  proc_record_unlink(dfd, (int)unrecorded_pid);
  close(dfd);
}

void ctl_exit(void) {
  if (ctl.pid != getpid()) return;
  // A trace refused at the floor just before the exit: said here, since no
  // check came after it (heaptrack has closed the file already).
  char why[sizeof ctl.stopped_reason];
  if (ctl.recording && ctl.disk && ctl.disk->refused(why, sizeof why)) ctl_log("recording stopped: %s", why);
  // The record again, with what the process holds as it ends (a record is
  // only where one was written at start).
  if (socket_named()) {
    socket_unlink();
    // What the process holds as it exits, for report's "most of its memory
    // is not in the profile": the kernel's anonymous resident memory, read
    // first, then what its allocator says is in use.
    char at_exit[128];
    unsigned long long rss_anon = proc_record_rss_anon(), in_use = 0;
    struct allocator_stats as;
    if (ctl.profiler->allocator_stats && ctl.profiler->allocator_stats(&as) == 0)
      in_use = as.name && strcmp(as.name, "jemalloc") == 0 ? as.allocated : as.in_use;
    snprintf(at_exit, sizeof at_exit, ",\"exit_rss_anon\":%llu,\"exit_allocator_in_use\":%llu", rss_anon, in_use);
    write_record(ctl.pid, ctl.parent, (long long)ctl.start_time, 1, at_exit);
  }
  // The first process ends last in most trees: what its children left.
  if (!ctl.parent) socket_reap_stale(ctl.dir, ctl.pid, ctl.disk);
}
