// The setuid family, for a process about to give up root for a user who
// cannot write the output directory (nginx's workers, a server's `user`
// setting, gunicorn --user): before the change, while it still can, the
// process makes its own subdirectory there, owned by that user, and writes
// its files into it from then on (ctl_own_directory, ctl.c). The call
// itself then goes to libc unchanged.
//
// These are the library's only wrappers of identity calls; they change
// nothing about the call, its result or errno.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/types.h>
#include <unistd.h>

#include "ctl.h"

static void* next(const char* name) { return dlsym(RTLD_NEXT, name); }

// The euid a call will give, where it gives one: (uid_t)-1 keeps it.
static void before(uid_t euid) {
  if (euid != (uid_t)-1) ctl_own_directory(euid, getegid());
}

__attribute__((visibility("default"))) int setuid(uid_t uid) {
  static int (*real)(uid_t);
  if (!real) real = (int (*)(uid_t))next("setuid");
  if (!real) return errno = ENOSYS, -1;
  before(uid);
  return real(uid);
}

__attribute__((visibility("default"))) int seteuid(uid_t euid) {
  static int (*real)(uid_t);
  if (!real) real = (int (*)(uid_t))next("seteuid");
  if (!real) return errno = ENOSYS, -1;
  before(euid);
  return real(euid);
}

__attribute__((visibility("default"))) int setreuid(uid_t ruid, uid_t euid) {
  static int (*real)(uid_t, uid_t);
  if (!real) real = (int (*)(uid_t, uid_t))next("setreuid");
  if (!real) return errno = ENOSYS, -1;
  before(euid);
  return real(ruid, euid);
}

__attribute__((visibility("default"))) int setresuid(uid_t ruid, uid_t euid, uid_t suid) {
  static int (*real)(uid_t, uid_t, uid_t);
  if (!real) real = (int (*)(uid_t, uid_t, uid_t))next("setresuid");
  if (!real) return errno = ENOSYS, -1;
  before(euid);
  return real(ruid, euid, suid);
}
