// The setuid family, for a process about to give up root for a user who
// cannot write the output directory (nginx's workers, a server's `user`
// setting, gunicorn --user): before the change, while it still can, the
// process makes its own subdirectory there, owned by that user, and writes
// its files into it from then on (own_directory, then the core's
// ctl_move_dir). The call itself then goes to libc unchanged.
//
// These are the library's only wrappers of identity calls; they change
// nothing about the call, its result or errno. libc's own are looked up
// once, by the constructor (users_init), as spawn.c's are: a vfork child
// may call setuid before it execs, and must not enter the loader then.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
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

// Whether `euid`/`egid` can create files in a directory of status `st`, as
// the kernel checks the mode (supplementary groups aside: the one the
// process will have is all this knows).
static int can_write(const struct stat* st, uid_t euid, gid_t egid) {
  if (euid == 0) return 1;
  if (st->st_uid == euid) return (st->st_mode & (S_IWUSR | S_IXUSR)) == (S_IWUSR | S_IXUSR);
  if (st->st_gid == egid) return (st->st_mode & (S_IWGRP | S_IXGRP)) == (S_IWGRP | S_IXGRP);
  return (st->st_mode & (S_IWOTH | S_IXOTH)) == (S_IWOTH | S_IXOTH);
}

// The process is about to become `euid`, who may not be able to write the
// output directory: while it still can, it makes DIR/proc.PID, owned by
// that user (group `egid`), and moves there. Once, in the process served.
static void own_directory(uid_t euid, gid_t egid) {
  static int moved;
  if (moved || ctl_pid() != getpid() || !ctl_dir()[0] || geteuid() != 0 || euid == 0) return;
  struct stat st;
  if (stat(ctl_dir(), &st) != 0 || can_write(&st, euid, egid)) return;
  // Held to the end: no fork copies the change half made, and a second
  // thread's setuid finds the directory this one moved to.
  ctl_lock();
  char dir[CTL_DIR_MAX], name[32], sub[CTL_DIR_MAX], err[256] = "";
  snprintf(dir, sizeof dir, "%s", ctl_dir());
  snprintf(name, sizeof name, "proc.%d", (int)getpid());
  int dfd = -1, sfd = -1;
  if (strlen(dir) + 1 + strlen(name) >= sizeof sub) {
    snprintf(err, sizeof err, "the directory's name is too long for a subdirectory");
  } else if ((dfd = openat(AT_FDCWD, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
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
    snprintf(sub, sizeof sub, "%s/%s", dir, name);
    if (ctl_move_dir(sub, err, sizeof err) == 0) {
      ctl_log("uid %u cannot write %s: this process writes its files to %s, its own subdirectory, owned by uid %u",
              (unsigned)euid, dir, sub, (unsigned)euid);
      moved = 1;
    }
  }
  if (sfd >= 0) close(sfd);
  if (dfd >= 0) close(dfd);
  if (!moved)
    ctl_log("uid %u cannot write %s, and no subdirectory of its own could be made (%s): its snapshots will fail; "
            "chmod 1777 %s, or give memprofile exec --output-dir a directory every user of the tree can write",
            (unsigned)euid, dir, err, dir);
  ctl_unlock();
}

// The euid a call will give, where it gives one: (uid_t)-1 keeps it.
static void before(uid_t euid) {
  if (euid != (uid_t)-1) own_directory(euid, getegid());
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
