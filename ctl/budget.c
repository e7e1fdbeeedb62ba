// The profiles in the output directory: what they use, rotation, the floor.
// See ctl.h. Every scan is one pass over the directory's entries; rotation
// deletes at most one file per scan and a bounded number per call.
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "ctl.h"

// What the last look at the output directory took (the control thread's).
static uint64_t scan_ns;

// A profile of this process's profiler (its row's name reader, backend.c):
// 1 with its pid and sequence (0 for one continuous file).
static int profile_name(const char* name, unsigned long long* pid, unsigned long long* seq) {
  *seq = 0;
  return ctl_profiler_in_use()->profile_name(name, pid, seq);
}

// Whether a file of this pid, modified at `mtime`, is this process's (not an
// earlier process's with the same pid: PID 1 after a container restart).
static int is_own_file(time_t mtime) { return mtime + 1 >= ctl_start_time(); }

// One pass over the directory: usage, and this process's first, second and
// newest snapshots by sequence (the second is the oldest in the middle).
struct scan {
  struct usage u;
  char first[256], second[256];
  unsigned long long first_seq, second_seq, newest_seq;
};

// What the application's threads see of the budget between two scans, for
// the dumps jemalloc writes by itself (interval, final): the usage the last
// scan counted, the largest dump it saw, and the dumps created since. The
// control thread's checks keep the directory within the budget with room
// for the next dumps; when they come late (a loaded machine, a starved
// thread) this gate still refuses a dump that would pass it. Atomics only:
// it is asked from inside jemalloc's dump.
static uint64_t seen_bytes, seen_largest;
static unsigned created_since;
static int scanned, gate_said;

// How far the trace's own writes may go until the next look: to the floor,
// and to the budget, whichever is nearer (trace_gate.c refuses the write past
// it). Each is counted from what the trace had written when its figure was
// read: the directory's bytes at the scan's start, the free space at the
// statvfs (free_written).
static void allow_trace(const struct usage* u, int free_known, uint64_t scan_written, uint64_t free_written) {
  uint64_t limit = UINT64_MAX;
  int budget = 0;
  if (ctl_min_free_bytes() && free_known)
    limit = free_written + (u->free_bytes > ctl_min_free_bytes() ? u->free_bytes - ctl_min_free_bytes() : 0);
  if (ctl_max_bytes()) {
    uint64_t left = scan_written + (u->bytes < ctl_max_bytes() ? ctl_max_bytes() - u->bytes : 0);
    if (left < limit) {
      limit = left;
      budget = 1;
    }
  }
  stream_allow(limit, budget);
}

// The free space, and what the trace had written when it was read. The
// trace's writes go on meanwhile (heaptrack's thread, at full speed): what
// it writes between the two reads would count twice, in the free space and
// past `*written`, and stop the trace early by as much. So the reads are
// taken close together, again until no write came between them (a few
// tries; a preempted look on a loaded machine), else the closest pair's.
static int free_space(uint64_t* bytes, uint64_t* written) {
  uint64_t best_gap = UINT64_MAX;
  int known = 0;
  for (int tries = 0; tries < 8 && best_gap != 0; ++tries) {
    struct statvfs v;
    uint64_t before = stream_written();
    if (statvfs(ctl_dir(), &v) != 0) return known;
    uint64_t after = stream_written();
    if (after - before < best_gap) {
      best_gap = after - before;
      *bytes = (uint64_t)v.f_bavail * v.f_frsize;
      *written = before;
      known = 1;
    }
  }
  return known;
}

static int scan_dir(struct scan* s) {
  memset(s, 0, sizeof *s);
  s->first_seq = s->second_seq = ~0ULL;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  unsigned created_before = __atomic_load_n(&created_since, __ATOMIC_ACQUIRE);
  // Read before the look: what the trace writes meanwhile is then counted
  // twice (in the free space and past this), never not at all.
  uint64_t written_before = stream_written();
  DIR* d = opendir(ctl_dir());
  if (!d) {
    // Out of fds or memory for a moment (a leaking application): not a
    // reason to stop recording; the next check tries again.
    s->u.transient = errno == EMFILE || errno == ENFILE || errno == ENOMEM;
    return -1;
  }
  int dfd = dirfd(d);
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    unsigned long long pid, seq;
    if (!profile_name(e->d_name, &pid, &seq)) continue;
    struct stat st;
    if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    uint64_t bytes = (uint64_t)st.st_size;
    s->u.bytes += bytes;
    // Only this process's own files (its uid: another user may make names
    // like ours) are its snapshots to rotate.
    if (pid != (unsigned long long)ctl_pid() || !is_own_file(st.st_mtime) || st.st_uid != geteuid()) continue;
    s->u.own_bytes += bytes;
    s->u.own_files++;
    if (bytes > s->u.largest_own) s->u.largest_own = bytes;
    if (seq > s->newest_seq || s->u.own_files == 1) s->newest_seq = seq;
    if (strlen(e->d_name) >= sizeof s->first) continue;
    if (seq < s->first_seq) {
      s->second_seq = s->first_seq;
      memcpy(s->second, s->first, sizeof s->second);
      s->first_seq = seq;
      strcpy(s->first, e->d_name);
    } else if (seq < s->second_seq) {
      s->second_seq = seq;
      strcpy(s->second, e->d_name);
    }
  }
  closedir(d);
  uint64_t free_written = 0;
  int free_known = free_space(&s->u.free_bytes, &free_written);
  if (ctl_profiler_in_use()->gated_trace) allow_trace(&s->u, free_known, written_before, free_written);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  scan_ns = (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000000000u + (uint64_t)t1.tv_nsec - (uint64_t)t0.tv_nsec;
  // Dumps created before the listing are in it now; those since are not.
  __atomic_store_n(&seen_bytes, s->u.bytes, __ATOMIC_RELEASE);
  if (s->u.largest_own > __atomic_load_n(&seen_largest, __ATOMIC_ACQUIRE))
    __atomic_store_n(&seen_largest, s->u.largest_own, __ATOMIC_RELEASE);
  __atomic_sub_fetch(&created_since, created_before, __ATOMIC_ACQ_REL);
  __atomic_store_n(&scanned, 1, __ATOMIC_RELEASE);
  return 0;
}

static int interval_ms(void) {
  // 100 ms for jemalloc's dumps, 20 ms for a trace that can grow by tens of
  // MB a second; a directory that takes long to read (thousands of files)
  // is read at most 2 % of the time.
  uint64_t base = ctl_profiler_in_use()->rotates ? 100 : 20, cost = scan_ns / 1000000u * 50;
  return (int)(cost > base ? (cost < 10000 ? cost : 10000) : base);
}

static int usage(struct usage* u) {
  struct scan s;
  int rc = scan_dir(&s);
  *u = s.u;
  return rc;
}

// How fast the profiles grew between checks (a decaying maximum): dumps
// that jemalloc writes by itself, or a trace, can add that much before the
// next check.
static uint64_t growth_rate, last_bytes;
static int primed;

static void reset(void) {
  primed = 0;
  growth_rate = 0;
}

static void note_growth(uint64_t bytes) {
  uint64_t grew = primed && bytes > last_bytes ? bytes - last_bytes : 0;
  primed = 1;
  last_bytes = bytes;
  growth_rate = grew > growth_rate ? grew : growth_rate - growth_rate / 4;
}

// What recording may still write before the next check: twice the recent
// growth, plus for jemalloc the next dump and the final one at exit, each
// about as large as the largest so far, and for a trace a small margin.
static uint64_t headroom(const struct usage* u) {
  uint64_t base;
  if (ctl_profiler_in_use()->rotates) {
    base = 2 * (u->largest_own > 65536 ? u->largest_own : 65536);
  } else {
    base = ctl_max_bytes() / 64;
    if (base < (256u << 10)) base = 256u << 10;
  }
  return base + 2 * growth_rate;
}

static void mib(char* buf, size_t len, uint64_t bytes) {
  snprintf(buf, len, "%.1f MiB", (double)bytes / (1024.0 * 1024.0));
}

static int make_room(char* why, size_t whylen, int note) {
  struct scan s;
  for (int deleted = 0;; ++deleted) {
    if (scan_dir(&s) != 0) {
      snprintf(why, whylen, "cannot read the output directory %s%s: %s", ctl_dir(), s.u.transient ? " right now" : "",
               strerror(errno));
      return s.u.transient ? -2 : -1;
    }
    if (note && deleted == 0) note_growth(s.u.bytes);
    uint64_t need = headroom(&s.u);
    int over_budget = ctl_max_bytes() && s.u.bytes + need > ctl_max_bytes();
    int under_floor = ctl_min_free_bytes() && s.u.free_bytes < ctl_min_free_bytes() + need;
    if (!over_budget && !under_floor) return 0;
    // The first and the newest snapshots stay; the oldest in between goes.
    int can_rotate = ctl_profiler_in_use()->rotates && s.u.own_files >= 3 && s.second_seq != s.newest_seq &&
                     s.second[0] && deleted < 4096;
    if (can_rotate) {
      int dfd = openat(AT_FDCWD, ctl_dir(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      int rc = dfd >= 0 ? unlinkat(dfd, s.second, 0) : -1;
      if (rc == 0) {  // its memory record goes with it
        char record[sizeof s.second + 16];
        snprintf(record, sizeof record, "%s.mem.json", s.second);
        unlinkat(dfd, record, 0);
      }
      if (dfd >= 0) close(dfd);
      if (rc == 0) {
        // One line, the first time; status counts them.
        if (ctl_add_rotated() == 0)
          ctl_log("deleting older snapshots in %s to stay within the disk budget (the first and the newest stay)",
                  ctl_dir());
        continue;
      }
    }
    char used[32], limit[32], free_[32], next[32];
    mib(used, sizeof used, s.u.bytes);
    mib(limit, sizeof limit, over_budget ? ctl_max_bytes() : ctl_min_free_bytes());
    mib(free_, sizeof free_, s.u.free_bytes);
    mib(next, sizeof next, need);
    if (over_budget)
      snprintf(why, whylen, "the profiles in %s (%s) and the next writes (about %s) would pass the %s budget "
               "(--max-profile-mb)", ctl_dir(), used, next, limit);
    else
      snprintf(why, whylen, "%s free on the filesystem of %s: the next writes (about %s) would pass the %s floor "
               "(--min-free-mb)", free_, ctl_dir(), next, limit);
    return -1;
  }
}

static int room(char* why, size_t whylen) { return make_room(why, whylen, 0); }

static int fits(uint64_t bytes, char* why, size_t whylen) {
  struct scan s;
  if (scan_dir(&s) != 0) return 0;  // cannot tell: the next check will
  char size[32], limit[32], free_[32];
  mib(size, sizeof size, bytes);
  mib(free_, sizeof free_, s.u.free_bytes);
  if (ctl_min_free_bytes() && s.u.free_bytes < ctl_min_free_bytes()) {
    mib(limit, sizeof limit, ctl_min_free_bytes());
    snprintf(why, whylen, "the dump (%s) left %s free on the filesystem of %s, under the %s floor (--min-free-mb)", size,
             free_, ctl_dir(), limit);
    return -1;
  }
  // The dump is not yet under its name, so not among the profiles counted.
  if (ctl_max_bytes() && s.u.bytes + bytes > ctl_max_bytes()) {
    char used[32];
    mib(used, sizeof used, s.u.bytes + bytes);
    mib(limit, sizeof limit, ctl_max_bytes());
    snprintf(why, whylen, "with the dump (%s) the profiles in %s would hold %s, past the %s budget (--max-profile-mb)",
             size, ctl_dir(), used, limit);
    return -1;
  }
  return 0;
}

// The output filesystem's free bytes, or UINT64_MAX when it cannot be read.
static uint64_t free_bytes(void) {
  struct statvfs v;
  return statvfs(ctl_dir(), &v) == 0 ? (uint64_t)v.f_bavail * v.f_frsize : UINT64_MAX;
}

// heaptrack's write past the floor or the budget was refused (trace_gate.c),
// and its trace ends there: said once, as the reason recording stopped.
// No look at the directory here: ctl_exit asks too, beside the thread.
static int refused(char* why, size_t whylen) {
  uint64_t bytes;
  int budget;
  if (!stream_refused(&bytes, &budget)) return 0;
  char limit[32], now[32];
  if (budget) {
    mib(limit, sizeof limit, ctl_max_bytes());
    snprintf(why, whylen, "the profiles in %s: heaptrack's next write (%llu bytes) would pass the %s budget "
             "(--max-profile-mb), so the trace ends there (heaptrack's later writes are discarded)", ctl_dir(),
             (unsigned long long)bytes, limit);
  } else {
    mib(limit, sizeof limit, ctl_min_free_bytes());
    uint64_t left = free_bytes();
    mib(now, sizeof now, left == UINT64_MAX ? 0 : left);
    snprintf(why, whylen, "%s free on the filesystem of %s: heaptrack's next write (%llu bytes) would pass the %s "
             "floor (--min-free-mb), so the trace ends there (heaptrack's later writes are discarded)", now, ctl_dir(),
             (unsigned long long)bytes, limit);
  }
  return 1;
}

static int check(char* why, size_t whylen) {
  if (refused(why, whylen)) return -1;
  int rc = make_room(why, whylen, 1);
  if (rc == 0 && ctl_rotated()) {  // after a rotation, growth is measured from what is left
    struct usage after;
    memset(&after, 0, sizeof after);
    if (usage(&after) == 0) last_bytes = after.bytes;
  }
  return rc;
}

static size_t list_json(char* buf, size_t len) {
  DIR* d = opendir(ctl_dir());
  if (!d) return 0;
  int dfd = dirfd(d);
  size_t at = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    unsigned long long pid, seq;
    if (!profile_name(e->d_name, &pid, &seq) || pid != (unsigned long long)ctl_pid()) continue;
    struct stat st;
    if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) || !is_own_file(st.st_mtime))
      continue;
    // Control thread only (static: its stack is small). The launcher
    // refuses directory names with control characters: quoting at most
    // doubles a name.
    static char path[CTL_DIR_MAX + 256], quoted[2 * sizeof path + 3], item[sizeof quoted + 100];
    snprintf(path, sizeof path, "%s/%s", ctl_dir(), e->d_name);
    json_string(quoted, sizeof quoted, path);
    int n = snprintf(item, sizeof item, "%s{\"path\":%s,\"bytes\":%llu,\"seq\":%llu}", at ? "," : "", quoted,
                     (unsigned long long)st.st_size, seq);
    // The reply's room: own_files counts them all, the directory has them.
    if (n < 0 || at + (size_t)n >= len) break;
    memcpy(buf + at, item, (size_t)n);
    at += (size_t)n;
  }
  closedir(d);
  if (at < len) buf[at] = '\0';
  return at;
}

// A profile of this process's backend: 1 with its pid.
static int admits(const char* name) {
  unsigned long long pid, seq;
  if (!ctl_profiler_in_use()->creates_dumps || !ctl_max_bytes() || ctl_pid() != getpid() ||
      !profile_name(name, &pid, &seq) || !__atomic_load_n(&scanned, __ATOMIC_ACQUIRE))
    return 1;
  // Dumps grow as the process does: the next one a quarter larger.
  uint64_t largest = __atomic_load_n(&seen_largest, __ATOMIC_ACQUIRE);
  largest += largest / 4;
  if (largest < 65536) largest = 65536;
  unsigned n = __atomic_add_fetch(&created_since, 1, __ATOMIC_ACQ_REL);
  if (__atomic_load_n(&seen_bytes, __ATOMIC_ACQUIRE) + (uint64_t)n * largest <= ctl_max_bytes()) return 1;
  __atomic_sub_fetch(&created_since, 1, __ATOMIC_ACQ_REL);
  if (!__atomic_exchange_n(&gate_said, 1, __ATOMIC_ACQ_REL))
    ctl_log("%s's dump %.200s would pass the %.1f MiB budget before the next check: not written (said once)",
            ctl_profiler_in_use()->name, name, (double)ctl_max_bytes() / (1024.0 * 1024.0));
  return 0;
}

static int profile_pid(const char* name, unsigned long long* pid) {
  unsigned long long seq;
  return profile_name(name, pid, &seq);
}

const struct ctl_disk* ctl_disk_budget(void) {
  static const struct ctl_disk disk = {usage, room, check, fits, free_bytes, reset, list_json, profile_pid, interval_ms,
                                       admits, refused};
  return &disk;
}
