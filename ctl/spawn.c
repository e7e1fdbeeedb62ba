// The profiler stays with the profiled program. See ctl.h.
//
// LD_PRELOAD and the profiler's settings (MALLOC_CONF, DUMP_HEAPTRACK_OUTPUT,
// MEMORY_PROFILER_*) are inherited through exec, so without this every
// child the service runs (sh from system(), tar, a health-check script)
// would load the profiler too and write profiles of its own into the
// output directory. In the target the library takes them out of the
// environment once the profiler has read them (spawn_scope), so a child
// that execs another program starts without it, and children glibc spawns
// itself (system, popen) too. A child that execs the profiled program again
// (multiprocessing's spawn and forkserver, a re-exec on upgrade) gets them
// back: the exec family is the library's own (execve, execv, execvp,
// execvpe, execl, execle, execlp, posix_spawn, posix_spawnp), and adds them
// to the environment it passes when the program is the same file as the
// target.
//
// These run in children forked or vforked from a multi-threaded process,
// and in signal handlers on small stacks: no allocation, no lock, only
// syscalls and what the constructor prepared, and arrays on the stack
// sized by what they hold (a few hundred bytes for a usual environment).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl.h"

extern char** environ;

enum { kMaxKept = 32, kKeptBytes = 32 * 1024, kMaxEnv = 4096, kMaxArgs = 4096 };

// What the target started with, as NAME=value, to hand back to its own
// program: set once by the constructor, read only after.
static char kept_pool[kKeptBytes];
static char* kept[kMaxKept];
static size_t kept_names[kMaxKept];  // each name's length
static int nkept;
static dev_t target_dev;
static ino_t target_ino;
static int scoped;  // the constructor ran in the target

// Settings read after this library's constructor, so left in the target's
// environment (MEMPROFILE_CTL_LATE: a program's own jemalloc reads its
// variable at its first allocation, gperftools HEAPPROFILE in the program's
// initialisers, CPython PYTHONMALLOC in main): taken out of what another
// program gets through the exec family instead, so that it never writes
// into the output directory unguarded. (glibc's system and popen spawn
// without it: said in docs/launcher.md.)
enum { kMaxLate = 8 };
static char late_pool[256];
static const char* late[kMaxLate];
static size_t late_len[kMaxLate];
static int nlate;

typedef int (*execve_fn)(const char*, char* const[], char* const[]);
typedef int (*spawn_fn)(pid_t*, const char*, const posix_spawn_file_actions_t*, const posix_spawnattr_t*,
                        char* const[], char* const[]);
static execve_fn real_execve, real_execvpe;
static spawn_fn real_spawn, real_spawnp;

void spawn_init(void) {
  if (!real_execve) real_execve = (execve_fn)dlsym(RTLD_NEXT, "execve");
  if (!real_execvpe) real_execvpe = (execve_fn)dlsym(RTLD_NEXT, "execvpe");
  if (!real_spawn) real_spawn = (spawn_fn)dlsym(RTLD_NEXT, "posix_spawn");
  if (!real_spawnp) real_spawnp = (spawn_fn)dlsym(RTLD_NEXT, "posix_spawnp");
}

// NAME's value in the environment the process was exec'd with
// (/proc/self/environ: a profiler may have unset its own variables before
// this library's constructor ran, as heaptrack does), into buf; NULL when
// it had none, or one longer than buf.
static const char* initial_env(const char* name, char* buf, size_t len, int* too_long) {
  int fd = openat(AT_FDCWD, "/proc/self/environ", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  static char chunk[16384];
  size_t n = strlen(name), have = 0;  // bytes of the current entry in buf
  int skipping = 0, found = 0;
  for (ssize_t got; !found && (got = read(fd, chunk, sizeof chunk)) > 0;) {
    for (ssize_t i = 0; i < got && !found; ++i) {
      char c = chunk[i];
      if (c != '\0') {
        if (have + 1 < len) buf[have++] = c;
        else skipping = 1;
        continue;
      }
      buf[have] = '\0';
      int named = have > n && memcmp(buf, name, n) == 0 && buf[n] == '=';
      if (named && skipping) *too_long = 1;
      found = named && !skipping;
      if (!found) have = 0, skipping = 0;
    }
  }
  close(fd);
  if (!found) return NULL;
  memmove(buf, buf + n + 1, have - n);
  return buf;
}

// Keeps NAME=value of the environment for the profiled program's own
// children; 0, or -1 when the pool is full.
static int keep(const char* name) {
  static char initial[8192];
  int too_long = 0;
  const char* v = getenv(name);
  if (!v) v = initial_env(name, initial, sizeof initial, &too_long);
  if (too_long || (v && nkept == kMaxKept)) return -1;
  if (!v) return 0;
  static size_t used;
  size_t n = strlen(name), m = strlen(v);
  if (used + n + m + 2 > sizeof kept_pool) return -1;
  char* at = kept_pool + used;
  memcpy(at, name, n);
  at[n] = '=';
  memcpy(at + n + 1, v, m + 1);
  used += n + m + 2;
  kept_names[nkept] = n;
  kept[nkept++] = at;
  return 0;
}

void preload_drop(const char* exact, const char* containing) {
  const char* v = getenv("LD_PRELOAD");
  if (!v || ((!exact || !*exact) && !containing)) return;
  static char out[8192];  // the constructor's only
  size_t o = 0, exactn = exact ? strlen(exact) : 0, containn = containing ? strlen(containing) : 0;
  for (const char* p = v; *p;) {
    size_t n = strcspn(p, ": \t");
    int drop = (exactn && n == exactn && memcmp(p, exact, n) == 0) || (containn && memmem(p, n, containing, containn));
    if (n && !drop && o + n + 2 >= sizeof out) {
      ctl_log("LD_PRELOAD is longer than 8 KiB: its entries past it are left out for the children");
      break;
    }
    if (n && !drop) {
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
}

// Calls fn on each name of a comma-separated list (at most 1 KiB of it).
static void each_setting(const char* settings, void (*fn)(const char* name)) {
  char names[1024];
  snprintf(names, sizeof names, "%s", settings ? settings : "");
  for (char* save = NULL, *n = strtok_r(names, ",", &save); n; n = strtok_r(NULL, ",", &save)) fn(n);
}

static void keep_setting(const char* name) {
  if (keep(name) != 0) ctl_log("%.100s is too long to keep for a child that execs this program again", name);
}

static void drop_setting(const char* name) { unsetenv(name); }

static void note_late(const char* name) {
  static size_t used;
  size_t n = strlen(name);
  if (nlate == kMaxLate || used + n + 1 > sizeof late_pool) return;
  memcpy(late_pool + used, name, n + 1);
  late[nlate] = late_pool + used;
  late_len[nlate++] = n;
  used += n + 1;
  keep_setting(name);  // the target's own children that exec it again get it back
}

// envp without the late settings, into out (room for env_count(envp) + 1);
// envp itself when there are none, or it has more than kMaxEnv entries.
static char* const* without_late(char* const envp[], char* out[]) {
  if (!nlate || !envp) return envp;
  size_t o = 0;
  for (size_t i = 0; envp[i]; ++i) {
    if (i >= kMaxEnv) return envp;
    int drop = 0;
    for (int k = 0; k < nlate && !drop; ++k)
      drop = strncmp(envp[i], late[k], late_len[k]) == 0 && envp[i][late_len[k]] == '=';
    if (!drop) out[o++] = envp[i];
  }
  out[o] = NULL;
  return out;
}

// Another program: envp without the late settings, on the caller's stack.
#define EXEC_OTHER(call, envp)                 \
  do {                                         \
    char* other_[env_count(envp) + 1];         \
    return call(without_late((envp), other_)); \
  } while (0)

void spawn_remember(const char* settings) {
  // LD_PRELOAD as the target got it: the profiler and this library (from
  // the exec'd environment when a profiler took its own out already).
  if (keep("LD_PRELOAD") != 0) {
    ctl_log("LD_PRELOAD is too long to keep: a child that execs this program again runs without the profiler");
    nkept = 0;
    return;
  }
  each_setting(settings, keep_setting);
  // The control library's own settings too: a child exec'd with an
  // environment of its own (subprocess's env=) is still served, within the
  // same budget, and keeps the scope for its own children.
  static const char* const control[] = {"MEMPROFILE_CTL_BACKEND", "MEMPROFILE_CTL_DIR", "MEMPROFILE_CTL_TARGET",
                                        "MEMPROFILE_CTL_RECORDING", "MEMPROFILE_CTL_MAX_BYTES",
                                        "MEMPROFILE_CTL_MIN_FREE_BYTES", "MEMPROFILE_CTL_SNAPSHOT_EVERY_MS",
                                        "MEMPROFILE_CTL_PRELOAD", "MEMPROFILE_CTL_SETTINGS", "MEMPROFILE_CTL_LATE"};
  for (size_t i = 0; i < sizeof control / sizeof control[0]; ++i) keep_setting(control[i]);
  each_setting(getenv("MEMPROFILE_CTL_LATE"), note_late);
}

void spawn_scope(const char* profiler, const char* settings) {
  struct stat st;
  if (stat("/proc/self/exe", &st) != 0) return;  // no /proc: said by the constructor
  each_setting(settings, drop_setting);
  preload_drop(profiler, NULL);
  target_dev = st.st_dev;
  target_ino = st.st_ino;
  __atomic_store_n(&scoped, 1, __ATOMIC_RELEASE);
}

static int is_target_file(const char* path) {
  struct stat st;
  return __atomic_load_n(&scoped, __ATOMIC_ACQUIRE) && nkept && stat(path, &st) == 0 && st.st_dev == target_dev &&
         st.st_ino == target_ino;
}

// What execvp would run for `file`: itself when it has a '/', else the
// first regular executable file on PATH (an empty entry is the working
// directory), into buf; 0, or -1 when none.
static int search_path(const char* file, char* buf, size_t len) {
  if (strchr(file, '/')) return snprintf(buf, len, "%s", file) < (int)len ? 0 : -1;
  const char* path = getenv("PATH");
  if (!path) path = "/bin:/usr/bin";
  for (const char* p = path;; ++p) {
    size_t n = strcspn(p, ":");
    struct stat st;
    if (snprintf(buf, len, "%.*s/%s", n ? (int)n : 1, n ? p : ".", file) < (int)len && stat(buf, &st) == 0 &&
        S_ISREG(st.st_mode) && access(buf, X_OK) == 0)
      return 0;
    p += n;
    if (!*p) return -1;
  }
}

static size_t env_count(char* const envp[]) {
  size_t n = 0;
  while (envp && envp[n] && n < kMaxEnv) ++n;
  return n;
}

// envp with the target's settings in place of any of the same names, into
// out (room for env_count(envp) + nkept + 1); envp itself when it has more
// than kMaxEnv entries.
static char* const* with_profiler(char* const envp[], char* out[]) {
  size_t o = 0;
  for (size_t i = 0; envp && envp[i]; ++i) {
    if (i >= kMaxEnv) return envp;
    int ours = 0;
    for (int k = 0; k < nkept && !ours; ++k) ours = strncmp(envp[i], kept[k], kept_names[k] + 1) == 0;
    if (!ours) out[o++] = envp[i];
  }
  for (int k = 0; k < nkept; ++k) out[o++] = kept[k];
  out[o] = NULL;
  return out;
}

// The target: envp with its settings. On the caller's stack, as large as
// it needs (a VLA: no allocation in a vfork child).
#define EXEC_WITH_PROFILER(call, envp)                      \
  do {                                                      \
    char* env_[env_count(envp) + (size_t)nkept + 1];        \
    return call(with_profiler((envp), env_));               \
  } while (0)

__attribute__((visibility("default"))) int execve(const char* path, char* const argv[], char* const envp[]) {
  if (!real_execve) {
    errno = ENOSYS;
    return -1;
  }
  if (!is_target_file(path)) {
    ctl_exec_other();
#define CALL(e) real_execve(path, argv, e)
    EXEC_OTHER(CALL, envp);
#undef CALL
  }
#define CALL(e) real_execve(path, argv, e)
  EXEC_WITH_PROFILER(CALL, envp);
#undef CALL
}

__attribute__((visibility("default"))) int execv(const char* path, char* const argv[]) {
  return execve(path, argv, environ);
}

// execvpe in the target: PATH searched (a path buffer on the stack only
// here); returns only when `file` is not the target or its exec failed.
__attribute__((noinline)) static void execvpe_target(const char* file, char* const argv[], char* const envp[]) {
  char found[PATH_MAX];
  if (search_path(file, found, sizeof found) != 0 || !is_target_file(found)) return;
  char* env[env_count(envp) + (size_t)nkept + 1];
  real_execve(found, argv, with_profiler(envp, env));
}

// Another program: glibc's own search, unchanged (its ENOEXEC and EACCES
// rules); the profiled program: found as it would, with the settings.
__attribute__((visibility("default"))) int execvpe(const char* file, char* const argv[], char* const envp[]) {
  if (!real_execvpe) {
    errno = ENOSYS;
    return -1;
  }
  if (__atomic_load_n(&scoped, __ATOMIC_ACQUIRE) && *file && real_execve) execvpe_target(file, argv, envp);
  ctl_exec_other();
  // Another program, or the target's exec failed: glibc's way.
#define CALL(e) real_execvpe(file, argv, e)
  EXEC_OTHER(CALL, envp);
#undef CALL
}

__attribute__((visibility("default"))) int execvp(const char* file, char* const argv[]) {
  return execvpe(file, argv, environ);
}

// The arguments of execl and its kin, counted (at most kMaxArgs: E2BIG
// past it, where glibc has no limit), then laid out as an argv on the
// caller's stack, as large as they need.
static size_t count_args(va_list ap) {
  size_t n = 1;
  while (n <= kMaxArgs && va_arg(ap, char*) != NULL) ++n;
  return n;
}

#define EXECL_ARGV(first, last_named)                  \
  va_list ap;                                          \
  va_start(ap, last_named);                            \
  size_t n_ = count_args(ap);                          \
  va_end(ap);                                          \
  if (n_ > kMaxArgs) {                                 \
    errno = E2BIG;                                     \
    return -1;                                         \
  }                                                    \
  char* argv[n_ + 1];                                  \
  va_start(ap, last_named);                            \
  argv[0] = (char*)(first);                            \
  for (size_t i_ = 1; i_ <= n_; ++i_) argv[i_] = va_arg(ap, char*)

__attribute__((visibility("default"))) int execl(const char* path, const char* arg, ...) {
  EXECL_ARGV(arg, arg);
  va_end(ap);
  return execve(path, argv, environ);
}

__attribute__((visibility("default"))) int execlp(const char* file, const char* arg, ...) {
  EXECL_ARGV(arg, arg);
  va_end(ap);
  return execvpe(file, argv, environ);
}

__attribute__((visibility("default"))) int execle(const char* path, const char* arg, ...) {
  EXECL_ARGV(arg, arg);
  char* const* envp = va_arg(ap, char* const*);
  va_end(ap);
  return execve(path, argv, envp);
}

__attribute__((visibility("default"))) int posix_spawn(pid_t* pid, const char* path,
                                                       const posix_spawn_file_actions_t* actions,
                                                       const posix_spawnattr_t* attr, char* const argv[],
                                                       char* const envp[]) {
  if (!real_spawn) return ENOSYS;
#define CALL(e) real_spawn(pid, path, actions, attr, argv, e)
  if (!is_target_file(path)) EXEC_OTHER(CALL, envp);
  EXEC_WITH_PROFILER(CALL, envp);
#undef CALL
}

// posix_spawnp in the target: PATH searched (a path buffer on the stack
// only here).
__attribute__((noinline)) static int spawnp_target(pid_t* pid, const char* file, const posix_spawn_file_actions_t* actions,
                         const posix_spawnattr_t* attr, char* const argv[], char* const envp[]) {
  char found[PATH_MAX];
#define CALL(e) real_spawnp(pid, file, actions, attr, argv, e)
  if (search_path(file, found, sizeof found) != 0 || !is_target_file(found)) EXEC_OTHER(CALL, envp);
  EXEC_WITH_PROFILER(CALL, envp);
#undef CALL
}

__attribute__((visibility("default"))) int posix_spawnp(pid_t* pid, const char* file,
                                                        const posix_spawn_file_actions_t* actions,
                                                        const posix_spawnattr_t* attr, char* const argv[],
                                                        char* const envp[]) {
  if (!real_spawnp) return ENOSYS;
  if (!__atomic_load_n(&scoped, __ATOMIC_ACQUIRE) || !*file) return real_spawnp(pid, file, actions, attr, argv, envp);
  return spawnp_target(pid, file, actions, attr, argv, envp);  // the target, or another program without the late settings
}
