// What start, stop and snapshot mean for each profiler. See ctl.h.
//   jemalloc   mallctl("prof.active") and mallctl("prof.dump"), found with
//              dlsym in the process (jemalloc is the preloaded malloc, or
//              the program's own, by the name MEMPROFILE_CTL_MALLCTL gives)
//   bytehound  its SIGUSR1 toggle (MEMORY_PROFILER_REGISTER_SIGUSR1)
//   heaptrack  heaptrack_stop(): it records from the first allocation and
//              cannot resume without losing the frees in between
//   none       no profiler: nothing starts or stops; a snapshot is a memory
//              record, and the allocator is whichever the process has
//   tcmalloc   gperftools' heap profiler, linked into the program: it
//              records from the start; a snapshot is HeapProfilerDump()
//              where the program exports it (files.c names the dumps)
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl.h"
#include "symtab.h"

typedef int (*mallctl_fn)(const char*, void*, size_t*, void*, size_t);

static mallctl_fn mallctl_ptr;
// Where an unexported mallctl was found ("" when exported, or not found).
static char mallctl_where[600];

// The jemalloc to drive: the preloaded one's mallctl, or, where the program
// carries its own jemalloc (memprofile exec found it, and preloads none),
// that jemalloc's mallctl as the program exports it: MEMPROFILE_CTL_MALLCTL,
// "je_mallctl", or "" when it exports none.
// Its name where the program does not export it (MEMPROFILE_CTL_MALLCTL is
// then ""): "mallctl", "_rjem_mallctl", looked for in its symbol table.
// Both are read once, when the profiler is named at start (copied: status
// and snapshot run on the control thread while the program may setenv).
static char own_env[128], own_symbol_env[128];
static int own_env_set, own_symbol_env_set;
static void read_own_mallctl_env(void) {
  const char* v = getenv("MEMPROFILE_CTL_MALLCTL");
  own_env_set = v != NULL;
  snprintf(own_env, sizeof own_env, "%s", v ? v : "");
  v = getenv("MEMPROFILE_CTL_MALLCTL_SYMBOL");
  own_symbol_env_set = v != NULL;
  snprintf(own_symbol_env, sizeof own_symbol_env, "%s", v ? v : "");
}
static const char* own_mallctl(void) { return own_env_set ? own_env : NULL; }
static const char* own_mallctl_symbol(void) { return own_symbol_env_set ? own_symbol_env : NULL; }

// A mallctl found by name is jemalloc's only if it says so: "version" is a
// harmless read, a string of jemalloc's ("5.3.0-0-g54eaed1d...").
static int answers_as_jemalloc(mallctl_fn f) {
  const char* version = NULL;
  size_t len = sizeof version;
  if (f("version", &version, &len, NULL, 0) != 0 || !version) return 0;
  return version[0] >= '0' && version[0] <= '9' && strnlen(version, 128) < 128 && strchr(version, '.') != NULL;
}

static mallctl_fn look_up_mallctl(void) {
  const char* own = own_mallctl();
  if (own && *own) return (mallctl_fn)dlsym(RTLD_DEFAULT, own);
  if (own) {
    const char* symbol = own_mallctl_symbol();
    if (!symbol || !*symbol) return NULL;
    mallctl_fn f = (mallctl_fn)ctl_find_own_function(symbol, mallctl_where, sizeof mallctl_where);
    if (f && answers_as_jemalloc(f)) return f;
    mallctl_where[0] = '\0';
    return NULL;
  }
  return (mallctl_fn)dlsym(RTLD_DEFAULT, "mallctl");
}

static mallctl_fn find_mallctl(char* err, size_t errlen) {
  const char* own = own_mallctl();
  const char* symbol = own_mallctl_symbol();
  if (!mallctl_ptr && own && !*own && symbol && *symbol)
    snprintf(err, errlen,
             "the program's own jemalloc does not export its %s, and neither its symbol table nor a debug file (by "
             "build-id or debuglink) names it: snapshot, start and stop cannot reach it (it dumps at exit and every "
             "--dump-every-mb)", symbol);
  else if (!mallctl_ptr && own)
    snprintf(err, errlen,
             "the program's own jemalloc does not export its mallctl%s%s: snapshot, start and stop cannot reach it "
             "(it dumps at exit and every --dump-every-mb)", *own ? " " : "", own);
  else if (!mallctl_ptr)
    snprintf(err, errlen, "jemalloc's mallctl is not in this process: was libjemalloc preloaded?");
  return mallctl_ptr;
}


static int jemalloc_unreachable(char* err, size_t errlen) { return find_mallctl(err, errlen) ? 0 : 1; }

static int jemalloc_recording(void) {
  if (!mallctl_ptr) return -1;
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

static int jemalloc_stats(struct allocator_stats* s) {
  memset(s, 0, sizeof *s);
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

static int glibc_stats(struct allocator_stats* s) {
  memset(s, 0, sizeof *s);
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

static int jemalloc_records_children(void) { return mallctl_ptr != NULL; }
static int never(void) { return 0; }
static int unknown(void) { return -1; }

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

// One dump, named by jemalloc from its prof_prefix with its own dump
// sequence (NULL), so report orders it among the interval dumps. The core
// makes it NAME.part and checks it (ctl.c, take_snapshot).
static int jemalloc_dump(char* err, size_t errlen) {
  mallctl_fn mallctl = find_mallctl(err, errlen);
  if (!mallctl) return -2;
  const char* name = NULL;
  int rc = mallctl("prof.dump", NULL, NULL, &name, sizeof name);
  if (rc == 0) return 0;
  // Said as what it is: a worker that dropped to another user (nginx's
  // nobody) cannot write a directory only root can.
  if (faccessat(AT_FDCWD, ctl_dir(), W_OK | X_OK, AT_EACCESS) != 0)
    snprintf(err, errlen, "%s is not writable by uid %u (this process's user): chmod 1777 %s, or give memprofile exec "
             "--output-dir a directory every user of the tree can write", ctl_dir(), (unsigned)geteuid(), ctl_dir());
  else
    snprintf(err, errlen, "mallctl prof.dump: %s (no prof_prefix, or %s not writable?)", strerror(rc), ctl_dir());
  return -1;
}

// A toggle: only sent when the state changes. The signal goes to this
// thread alone (raise), with SIGUSR1 unblocked for it here: sent to the
// process, it would land in one of the application's threads and cut a
// blocking call short there (EINTR), which many programs do not retry.
static int bytehound_set_recording(int on, char* err, size_t errlen) {
  if (on == ctl_recording_on()) return 0;
  if (!bytehound_owns_sigusr1(err, errlen)) return -1;
  sigset_t one, old;
  sigemptyset(&one);
  sigaddset(&one, SIGUSR1);
  pthread_sigmask(SIG_UNBLOCK, &one, &old);
  int rc = raise(SIGUSR1);  // bytehound's handler has run when it returns
  int saved = errno;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    snprintf(err, errlen, "cannot signal bytehound: %s", strerror(saved));
    return -1;
  }
  return 0;
}

static int heaptrack_set_recording(int on, char* err, size_t errlen) {
  if (!on && ctl_final_stop()) return 0;
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
  ctl_set_final_stop();
  return 0;
}

static int none_set_recording(int on, char* err, size_t errlen) {
  snprintf(err, errlen,
           "no heap profiler is loaded (memprofile exec --backend none): there is nothing to %s; status and snapshot "
           "give the memory",
           on ? "start" : "stop");
  return -1;
}

static int always(void) { return 1; }

// The application's own allocator: jemalloc when it links it (mallctl is
// there), else glibc's.
static int none_stats(struct allocator_stats* s) { return mallctl_ptr ? jemalloc_stats(s) : glibc_stats(s); }

// Its later dumps under the new directory: jemalloc's prof.prefix (5.3),
// which it copies.
static int jemalloc_moved(const char* dir, char* err, size_t errlen) {
  mallctl_fn mallctl = find_mallctl(err, errlen);
  if (!mallctl) return -1;
  static char prefix[CTL_DIR_MAX + 16];
  snprintf(prefix, sizeof prefix, "%s/jeprof", dir);
  const char* p = prefix;
  int rc = mallctl("prof.prefix", NULL, NULL, (void*)&p, sizeof p);
  if (rc != 0) {
    snprintf(err, errlen, "mallctl prof.prefix: %s", strerror(rc));
    return -1;
  }
  return 0;
}

// gperftools: what the program exports of its heap profiler, by name (a program that exports none still dumps by
// itself, on its intervals and at exit).
static int tcmalloc_set_recording(int on, char* err, size_t errlen) {
  snprintf(err, errlen,
           "gperftools' heap profiler records from the program's start (HEAPPROFILE) and cannot be %s: stopping it "
           "drops what it recorded",
           on ? "started again" : "stopped");
  return -1;
}

// Unknown until the profiler is seen running: a status asked before the
// program's initialisers started it must not read as "stopped".
static int tcmalloc_recording(void) {
  static int seen;
  int (*running)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "IsHeapProfilerRunning");
  if (!running) return -1;
  int on = running() != 0;
  if (on) __atomic_store_n(&seen, 1, __ATOMIC_RELEASE);
  return __atomic_load_n(&seen, __ATOMIC_ACQUIRE) ? on : -1;
}

static int tcmalloc_dump(char* err, size_t errlen) {
  void (*dump)(const char*) = (void (*)(const char*))dlsym(RTLD_DEFAULT, "HeapProfilerDump");
  if (!dump) {
    snprintf(err, errlen,
             "the program does not export HeapProfilerDump: snapshot cannot reach gperftools' heap profiler (it "
             "still dumps every 1 GiB allocated, every 100 MiB of growth and at exit)");
    return -2;
  }
  dump("memprofile snapshot");
  return 0;
}

// tcmalloc's own figures are not read (MallocExtension is rarely exported),
// and glibc's would describe an allocator the program does not use: unknown.
static int tcmalloc_stats(struct allocator_stats* s) {
  memset(s, 0, sizeof *s);
  return -1;
}

// The profilers' file names, as the budget reads them (budget.c): each
// with the pid it carries and, for dumps, the sequence that orders them.
static int parse_digits(const char* s, size_t n, unsigned long long* out) {
  if (!n || n > 19) return 0;
  unsigned long long v = 0;
  for (size_t i = 0; i < n; ++i) {
    if (s[i] < '0' || s[i] > '9') return 0;
    v = v * 10 + (unsigned long long)(s[i] - '0');
  }
  *out = v;
  return 1;
}

static int ends_with(const char* s, size_t n, const char* suffix) {
  size_t k = strlen(suffix);
  return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

// jemalloc: PREFIX.PID.SEQ.KIND[N].heap (KIND: i interval, m manual, f
// final, u gdump). Its sequence orders the dumps of one process.
static int jemalloc_dump_name(const char* name, unsigned long long* pid, unsigned long long* seq, char* kind) {
  size_t n = strlen(name);
  if (!ends_with(name, n, ".heap")) return 0;
  n -= 5;
  const char* fields[3];
  size_t lens[3];
  for (int f = 2; f >= 0; --f) {  // KIND[N], SEQ, PID from the end
    size_t dot = n;
    while (dot > 0 && name[dot - 1] != '.') --dot;
    if (dot == 0) return 0;
    fields[f] = name + dot;
    lens[f] = n - dot;
    n = dot - 1;
  }
  unsigned long long kindn;
  if (lens[2] < 1 || !strchr("imfu", fields[2][0]) || (lens[2] > 1 && !parse_digits(fields[2] + 1, lens[2] - 1, &kindn)))
    return 0;
  *kind = fields[2][0];
  return parse_digits(fields[0], lens[0], pid) && parse_digits(fields[1], lens[1], seq);
}

// HEAD.PID.SEQ.TAIL, a name with pid and sequence between a fixed head and
// tail: gperftools' dumps as files.c names them (tcmalloc.PID.SEQ.heap), and
// "none"'s memory records (memprofile-mem.PID.SEQ.mem.json).
static int pid_seq_name(const char* name, const char* head, const char* tail, unsigned long long* pid,
                        unsigned long long* seq) {
  size_t n = strlen(name), h = strlen(head), t = strlen(tail);
  if (n <= h + t || strncmp(name, head, h) != 0 || !ends_with(name, n, tail)) return 0;
  const char* dot = memchr(name + h, '.', n - h - t);
  return dot && parse_digits(name + h, (size_t)(dot - name) - h, pid) &&
         parse_digits(dot + 1, (size_t)(name + n - t - dot - 1), seq);
}

// heaptrack.PID.raw
static int heaptrack_name(const char* name, unsigned long long* pid, unsigned long long* seq) {
  size_t n = strlen(name);
  *seq = 0;
  if (strncmp(name, "heaptrack.", 10) != 0 || !ends_with(name, n, ".raw")) return 0;
  return parse_digits(name + 10, n - 14, pid);
}

// memory-profiling_EXE_TIME_PID.dat
static int bytehound_name(const char* name, unsigned long long* pid, unsigned long long* seq) {
  size_t n = strlen(name);
  *seq = 0;
  if (strncmp(name, "memory-profiling_", 17) != 0 || !ends_with(name, n, ".dat")) return 0;
  size_t end = n - 4, us = end;
  while (us > 0 && name[us - 1] != '_') --us;
  return us > 17 && parse_digits(name + us, end - us, pid);
}

static int jemalloc_name(const char* name, unsigned long long* pid, unsigned long long* seq) {
  char kind;
  return jemalloc_dump_name(name, pid, seq, &kind);
}

// gperftools' dumps as files.c names them.
static int tcmalloc_name(const char* name, unsigned long long* pid, unsigned long long* seq) {
  return pid_seq_name(name, "tcmalloc.", ".heap", pid, seq);
}

// The memory records of "none".
static int record_name(const char* name, unsigned long long* pid, unsigned long long* seq) {
  return pid_seq_name(name, "memprofile-mem.", ".mem.json", pid, seq);
}

static const struct ctl_profiler jemalloc = {
    .name = "jemalloc", .profile_name = jemalloc_name, .rotates = 1, .creates_dumps = 1,
    .set_recording = jemalloc_active, .recording = jemalloc_recording, .records_children = jemalloc_records_children,
    .dump = jemalloc_dump, .allocator_stats = jemalloc_stats, .unreachable = jemalloc_unreachable,
    .moved = jemalloc_moved};
// bytehound and heaptrack leave malloc to glibc, and write one continuous file.
static const struct ctl_profiler bytehound = {
    .name = "bytehound", .profile_name = bytehound_name, .set_recording = bytehound_set_recording,
    .recording = unknown, .records_children = never, .allocator_stats = glibc_stats};
static const struct ctl_profiler heaptrack = {
    .name = "heaptrack", .profile_name = heaptrack_name, .gated_trace = 1, .set_recording = heaptrack_set_recording,
    .recording = unknown, .records_children = never, .allocator_stats = glibc_stats};
// Dumps named by the pid that writes them (files.c): a forked child's are its own.
static const struct ctl_profiler tcmalloc = {
    .name = "tcmalloc", .profile_name = tcmalloc_name, .rotates = 1, .creates_dumps = 1, .unstoppable = 1,
    .set_recording = tcmalloc_set_recording, .recording = tcmalloc_recording, .records_children = always,
    .dump = tcmalloc_dump, .allocator_stats = tcmalloc_stats};
// Every process of the tree is served: what it reports is its own memory.
static const struct ctl_profiler none = {
    .name = "none", .profile_name = record_name, .rotates = 1, .set_recording = none_set_recording,
    .recording = never, .records_children = always, .allocator_stats = none_stats, .records_only = 1};

const struct ctl_profiler* ctl_profiler_named(const char* name) {
  if (strcmp(name, "jemalloc") == 0) {
    read_own_mallctl_env();
    mallctl_ptr = look_up_mallctl();
    return &jemalloc;
  }
  if (strcmp(name, "none") == 0) {
    mallctl_ptr = (mallctl_fn)dlsym(RTLD_DEFAULT, "mallctl");
    return &none;
  }
  static const struct ctl_profiler* const others[] = {&bytehound, &heaptrack, &tcmalloc};
  for (size_t i = 0; i < sizeof others / sizeof others[0]; ++i)
    if (strcmp(name, others[i]->name) == 0) return others[i];
  return NULL;
}
