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
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
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

static mallctl_fn find_mallctl(char* err, size_t errlen) {
  mallctl_fn f = (mallctl_fn)dlsym(RTLD_DEFAULT, "mallctl");
  if (!f) snprintf(err, errlen, "jemalloc's mallctl is not in this process: was libjemalloc preloaded?");
  return f;
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

// The newest manual dump of this process (PREFIX.PID.SEQ.mN.heap), which
// jemalloc has just named: the largest sequence among them.
static int newest_manual_dump(char* path, size_t len) {
  DIR* d = opendir(ctl.dir);
  if (!d) return -1;
  char pid_part[32];
  snprintf(pid_part, sizeof pid_part, ".%d.", (int)ctl.pid);
  unsigned long long best = 0;
  int found = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    const char* at = strstr(e->d_name, pid_part);
    if (!at || !is_backend_profile(e->d_name, ctl.pid)) continue;
    unsigned long long seq = 0;
    char kind = 0;
    if (sscanf(at + strlen(pid_part), "%llu.%c", &seq, &kind) != 2 || kind != 'm') continue;
    if (!found || seq >= best) {
      best = seq;
      found = 1;
      snprintf(path, len, "%s/%s", ctl.dir, e->d_name);
    }
  }
  closedir(d);
  return found ? 0 : -1;
}

static int jemalloc_dump(char* path, size_t pathlen, char* err, size_t errlen) {
  mallctl_fn mallctl = find_mallctl(err, errlen);
  if (!mallctl) return -1;
  // NULL: jemalloc names the file from its prof_prefix, with its own dump
  // sequence, so report orders it among the interval dumps.
  const char* name = NULL;
  int rc = mallctl("prof.dump", NULL, NULL, &name, sizeof name);
  if (rc != 0) {
    snprintf(err, errlen, "mallctl prof.dump: %s (no prof_prefix, or %s not writable?)", strerror(rc), ctl.dir);
    return -1;
  }
  if (newest_manual_dump(path, pathlen) != 0) {
    snprintf(err, errlen, "jemalloc dumped, but no jeprof.%d.*.m*.heap is in %s", (int)ctl.pid, ctl.dir);
    return -1;
  }
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
      if (kill(getpid(), SIGUSR1) != 0) {
        snprintf(err, errlen, "cannot signal bytehound: %s", strerror(errno));
        return -1;
      }
      return 0;
    case CTL_HEAPTRACK: {
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
