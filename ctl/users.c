// The setuid family, for a process about to give up root for a user who
// cannot write the output directory (nginx's workers, a server's `user`
// setting, gunicorn --user): before the change, while it still can, the
// process makes its own subdirectory there, owned by that user, and writes
// its files into it from then on (ctl_own_directory, ctl.c). The call
// itself then goes to libc unchanged.
//
// These are the library's only wrappers of identity calls; they change
// nothing about the call, its result or errno. libc's own are looked up
// once, by the constructor (users_init), as spawn.c's are: a vfork child
// may call setuid before it execs, and must not enter the loader then.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/types.h>
#include <unistd.h>

#include "ctl.h"

static int (*real_setuid)(uid_t);
static int (*real_seteuid)(uid_t);
static int (*real_setreuid)(uid_t, uid_t);
static int (*real_setresuid)(uid_t, uid_t, uid_t);

void users_init(void) {
  real_setuid = (int (*)(uid_t))dlsym(RTLD_NEXT, "setuid");
  real_seteuid = (int (*)(uid_t))dlsym(RTLD_NEXT, "seteuid");
  real_setreuid = (int (*)(uid_t, uid_t))dlsym(RTLD_NEXT, "setreuid");
  real_setresuid = (int (*)(uid_t, uid_t, uid_t))dlsym(RTLD_NEXT, "setresuid");
}

// A call before the constructor (another library's) looks libc's up then.
#define REAL(f) (real_##f ? real_##f : (users_init(), real_##f))

// The euid a call will give, where it gives one: (uid_t)-1 keeps it.
static void before(uid_t euid) {
  if (euid != (uid_t)-1) ctl_own_directory(euid, getegid());
}

__attribute__((visibility("default"))) int setuid(uid_t uid) {
  if (!REAL(setuid)) return errno = ENOSYS, -1;
  before(uid);
  return real_setuid(uid);
}

__attribute__((visibility("default"))) int seteuid(uid_t euid) {
  if (!REAL(seteuid)) return errno = ENOSYS, -1;
  before(euid);
  return real_seteuid(euid);
}

__attribute__((visibility("default"))) int setreuid(uid_t ruid, uid_t euid) {
  if (!REAL(setreuid)) return errno = ENOSYS, -1;
  before(euid);
  return real_setreuid(ruid, euid);
}

__attribute__((visibility("default"))) int setresuid(uid_t ruid, uid_t euid, uid_t suid) {
  if (!REAL(setresuid)) return errno = ENOSYS, -1;
  before(euid);
  return real_setresuid(ruid, euid, suid);
}
