// What start, stop and snapshot mean for each profiler. See ctl.h.
//   jemalloc   mallctl("prof.active") and mallctl("prof.dump"), found with
//              dlsym in the process (jemalloc is the preloaded malloc)
//   bytehound  its SIGUSR1 toggle (MEMORY_PROFILER_REGISTER_SIGUSR1)
//   heaptrack  heaptrack_stop(): it records from the first allocation and
//              cannot resume without losing the frees in between
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl.h"

typedef int (*mallctl_fn)(const char*, void*, size_t*, void*, size_t);

const char* backend_name(void) {
  switch (ctl.backend) {
    case CTL_JEMALLOC: return "jemalloc";
    case CTL_BYTEHOUND: return "bytehound";
    case CTL_HEAPTRACK: return "heaptrack";
  }
  return "?";
}

static mallctl_fn mallctl_ptr;

void backend_init(void) {
  if (ctl.backend == CTL_JEMALLOC) mallctl_ptr = (mallctl_fn)dlsym(RTLD_DEFAULT, "mallctl");
}

static mallctl_fn find_mallctl(char* err, size_t errlen) {
  if (!mallctl_ptr) snprintf(err, errlen, "jemalloc's mallctl is not in this process: was libjemalloc preloaded?");
  return mallctl_ptr;
}

int backend_recording(void) {
  if (ctl.backend != CTL_JEMALLOC || !mallctl_ptr) return -1;
  bool active = false;
  size_t len = sizeof active;
  return mallctl_ptr("prof.active", &active, &len, NULL, 0) == 0 ? active : -1;
}

// The allocator's own view, read in the process (ctl.h). jemalloc's stats
// are refreshed by writing "epoch" first; glibc's mallinfo2 (2.33 and
// later) is looked up at run time, so the library still loads where glibc
// is older, and then mallinfo's int fields (they wrap past 2 GiB: said).
struct glibc_mallinfo2 {
  size_t arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks, uordblks, fordblks, keepcost;
};
struct glibc_mallinfo {
  int arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks, uordblks, fordblks, keepcost;
};

int backend_allocator_stats(struct allocator_stats* s) {
  memset(s, 0, sizeof *s);
  if (ctl.backend == CTL_JEMALLOC) {
    if (!mallctl_ptr) return -1;
    uint64_t epoch = 1;
    size_t len = sizeof epoch;
    mallctl_ptr("epoch", &epoch, &len, &epoch, len);
    const char* names[] = {"stats.allocated", "stats.active", "stats.resident", "stats.mapped", "stats.retained",
                           "stats.metadata"};
    uint64_t* out[] = {&s->allocated, &s->active, &s->resident, &s->mapped, &s->retained, &s->metadata};
    for (int i = 0; i < 6; ++i) {
      size_t v = 0;
      len = sizeof v;
      if (mallctl_ptr(names[i], &v, &len, NULL, 0) != 0) return -1;  // jemalloc built without --enable-stats
      *out[i] = v;
    }
    s->name = "jemalloc";
    return 0;
  }
  typedef struct glibc_mallinfo2 (*mallinfo2_fn)(void);
  typedef struct glibc_mallinfo (*mallinfo_fn)(void);
  mallinfo2_fn mi2 = (mallinfo2_fn)dlsym(RTLD_DEFAULT, "mallinfo2");
  if (mi2) {
    struct glibc_mallinfo2 m = mi2();
    s->arena = m.arena;
    s->in_use = m.uordblks + m.hblkhd;
    s->free = m.fordblks;
    s->mmapped = m.hblkhd;
  } else {
    mallinfo_fn mi = (mallinfo_fn)dlsym(RTLD_DEFAULT, "mallinfo");
    if (!mi) return -1;
    struct glibc_mallinfo m = mi();
    s->arena = (unsigned)m.arena;
    s->in_use = (unsigned)m.uordblks + (unsigned)m.hblkhd;
    s->free = (unsigned)m.fordblks;
    s->mmapped = (unsigned)m.hblkhd;
    s->wraps = 1;
  }
  s->name = "glibc";
  return 0;
}

int backend_records_children(void) { return ctl.backend == CTL_JEMALLOC && mallctl_ptr; }

// Whether SIGUSR1 is bytehound's toggle here: its handler is in the
// bytehound library. Otherwise the signal would kill the process, or fire
// the application's own handler (a graceful restart, an inspector...).
static int bytehound_owns_sigusr1(char* err, size_t errlen) {
  struct sigaction sa;
  if (sigaction(SIGUSR1, NULL, &sa) != 0) return 0;
  void* handler = (sa.sa_flags & SA_SIGINFO) ? (void*)sa.sa_sigaction : (void*)sa.sa_handler;
  Dl_info info;
  if (handler != (void*)SIG_DFL && handler != (void*)SIG_IGN && dladdr(handler, &info) && info.dli_fname &&
      strstr(info.dli_fname, "bytehound"))
    return 1;
  snprintf(err, errlen,
           "SIGUSR1 is not bytehound's toggle in this process (MEMORY_PROFILER_REGISTER_SIGUSR1=0, or the "
           "application handles SIGUSR1 itself): start/stop cannot switch it");
  return 0;
}

static int jemalloc_active(int on, char* err, size_t errlen) {
  mallctl_fn mallctl = find_mallctl(err, errlen);
  if (!mallctl) return -1;
  bool value = on != 0;
  int rc = mallctl("prof.active", NULL, NULL, &value, sizeof value);
  if (rc != 0) {
    snprintf(err, errlen, "mallctl prof.active: %s (jemalloc was started without prof:true?)", strerror(rc));
    return -1;
  }
  return 0;
}

// A dump this thread asks for is written as NAME.part (files.c), then
// checked: one that jemalloc could not finish (a full disk), or that
// crossed the floor or the budget once written, is removed, and recording
// stops with the reason; one that fits gets its name. So no cut dump is
// ever left under a profile's name, and a sudden large dump cannot keep
// the filesystem past its floor.
static int jemalloc_dump(char* path, size_t pathlen, char* err, size_t errlen) {
  mallctl_fn mallctl = find_mallctl(err, errlen);
  if (!mallctl) return -1;
  // NULL: jemalloc names the file from its prof_prefix, with its own dump
  // sequence, so report orders it among the interval dumps.
  const char* name = NULL;
  files_forget_refused();
  files_begin_dump();
  int rc = mallctl("prof.dump", NULL, NULL, &name, sizeof name);
  char final_name[256];
  snprintf(final_name, sizeof final_name, "%s", files_end_dump());
  int dfd = open(ctl.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  char part[sizeof final_name + 8];
  snprintf(part, sizeof part, "%s.part", final_name);
  struct stat st;
  int have_part = final_name[0] && dfd >= 0 && fstatat(dfd, part, &st, AT_SYMLINK_NOFOLLOW) == 0;
  if (rc != 0 || !have_part) {
    uint64_t free_bytes = budget_free_bytes();  // before what was written goes
    if (have_part) unlinkat(dfd, part, 0);
    if (dfd >= 0) close(dfd);
    if (files_refused()[0])
      snprintf(err, errlen,
               "refused to write %.200s: the name exists and is not this process's own file (a link, or another "
               "user's); nothing was written",
               files_refused());
    else if (free_bytes < (1u << 20)) {
      snprintf(err, errlen, "the filesystem of %.200s is full (%llu bytes free): the dump could not be written, and "
               "what was written of it is removed", ctl.dir, (unsigned long long)free_bytes);
      budget_stop(err);
    }
    else if (rc != 0)
      snprintf(err, errlen, "mallctl prof.dump: %s (no prof_prefix, or %s not writable?)", strerror(rc), ctl.dir);
    else
      snprintf(err, errlen, "jemalloc dumped, but not under %s", ctl.dir);
    return -1;
  }
  char why[sizeof ctl.stopped_reason];
  if (budget_fits((uint64_t)st.st_size, why, sizeof why) != 0) {
    unlinkat(dfd, part, 0);
    close(dfd);
    snprintf(err, errlen, "%s: the dump is removed", why);
    budget_stop(err);
    return -1;
  }
  rc = renameat(dfd, part, dfd, final_name);
  int saved = errno;
  if (rc != 0) unlinkat(dfd, part, 0);
  if (rc == 0) memory_record_write(dfd, final_name);
  close(dfd);
  if (rc != 0) {
    snprintf(err, errlen, "cannot name the dump %s/%s: %s", ctl.dir, final_name, strerror(saved));
    return -1;
  }
  snprintf(path, pathlen, "%s/%s", ctl.dir, final_name);
  return 0;
}

int backend_set_recording(int on, char* err, size_t errlen) {
  switch (ctl.backend) {
    case CTL_JEMALLOC:
      return jemalloc_active(on, err, errlen);
    case CTL_BYTEHOUND:
      // A toggle: only sent when the state changes. The signal goes to the
      // process, so one of the application's threads takes it (this one
      // blocks every signal).
      if (on == ctl.recording) return 0;
      if (!bytehound_owns_sigusr1(err, errlen)) return -1;
      if (kill(getpid(), SIGUSR1) != 0) {
        snprintf(err, errlen, "cannot signal bytehound: %s", strerror(errno));
        return -1;
      }
      return 0;
    case CTL_HEAPTRACK: {
      if (!on && ctl.final_stop) return 0;
      if (on) {
        snprintf(err, errlen, "heaptrack records from the start of the process and cannot start again");
        return -1;
      }
      void (*stop)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "heaptrack_stop");
      if (!stop) {
        snprintf(err, errlen, "heaptrack_stop is not in this process: was libheaptrack_preload preloaded?");
        return -1;
      }
      stop();
      ctl.final_stop = 1;
      return 0;
    }
  }
  return -1;
}

int backend_snapshot(char* path, size_t pathlen, char* err, size_t errlen) {
  if (ctl.backend == CTL_JEMALLOC) return jemalloc_dump(path, pathlen, err, errlen);
  snprintf(err, errlen,
           "%s writes one continuous file, not snapshots: copy it out with memprofile collect (it holds the whole "
           "history)",
           backend_name());
  return -1;
}
