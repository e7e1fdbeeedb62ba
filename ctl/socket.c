// The control socket's fds (see socket.h).
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"
#include "proc_record.h"
#include "socket.h"

static int listen_fd = -1, wake_fd[2] = {-1, -1};
static ino_t listen_ino;  // the socket's inode: an fd number the app reused is not ours
static ino_t wake_ino;    // the wake pipe's, likewise
static char sock_path[CTL_DIR_MAX + 64];

// An fd moved above the numbers applications close and reuse.
static int high_fd(int fd) {
  if (fd < 0) return fd;
  int moved = fcntl(fd, F_DUPFD_CLOEXEC, 200);
  if (moved < 0) return fd;  // a low RLIMIT_NOFILE: keep it where it is
  close(fd);
  return moved;
}

static int is_fifo_of(int fd, ino_t ino) {
  struct stat st;
  return fd >= 0 && fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode) && st.st_ino == ino;
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

// The socket appears with its final name and mode at once: its mode set
// on the fd before bind (the kernel gives the bound file the socket
// inode's mode; a chmod by name would follow a link that another user put
// there, in a directory without the sticky bit), bound under a temporary
// name, then renamed.
int socket_listen(const char* dir, pid_t pid) {
  char name[64], tmp[sizeof sock_path + 8];
  snprintf(name, sizeof name, "memprofile-ctl.%d.sock.new", (int)pid);
  snprintf(sock_path, sizeof sock_path, "%s/memprofile-ctl.%d.sock", dir, (int)pid);
  snprintf(tmp, sizeof tmp, "%s.new", sock_path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return listen_fd = -1;
  unlink(tmp);
  // Listening before the rename: a socket under its final name always
  // answers while its process lives (socket_reap_stale relies on it).
  if (fchmod(fd, 0600) != 0 || at_dir(fd, dir, name, do_bind) != 0 || listen(fd, 16) != 0 ||
      rename(tmp, sock_path) != 0) {
    ctl_log("cannot serve %s: %s; start/stop/snapshot/status are not available", sock_path, strerror(errno));
    unlink(tmp);
    close(fd);
    sock_path[0] = '\0';
    return listen_fd = -1;
  }
  fd = high_fd(fd);
  struct stat st;
  if (fstat(fd, &st) == 0) listen_ino = st.st_ino;
  return listen_fd = fd;
}

int socket_listen_fd(void) { return listen_fd; }

// Whether the listening fd is still the socket this library made: an
// application that closes every fd it did not open (daemons do) may reuse
// the number for its own socket.
int socket_is_ours(void) {
  struct stat st;
  return listen_fd >= 0 && fstat(listen_fd, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == listen_ino;
}

void socket_abandon(void) { listen_fd = -1; }

void socket_unlink(void) {
  if (sock_path[0]) unlink(sock_path);
}

int socket_named(void) { return sock_path[0] != '\0'; }

int socket_open_wake(void) {
  if (pipe2(wake_fd, O_CLOEXEC | O_NONBLOCK) != 0) {
    ctl_log("pipe: %s; start/stop/snapshot/status are not available", strerror(errno));
    wake_fd[0] = wake_fd[1] = -1;
    return -1;
  }
  wake_fd[0] = high_fd(wake_fd[0]);
  wake_fd[1] = high_fd(wake_fd[1]);
  struct stat st;
  if (fstat(wake_fd[1], &st) == 0) wake_ino = st.st_ino;
  return 0;
}

int socket_wake_fd(void) { return wake_fd[0]; }

int socket_wake(void) {
  if (!is_fifo_of(wake_fd[1], wake_ino)) return -1;  // closed (and maybe reused) by the application
  char one = 1;
  ssize_t w = write(wake_fd[1], &one, 1);
  (void)w;
  return 0;
}

void socket_drain_wake(void) {
  char drain[16];
  if (is_fifo_of(wake_fd[0], wake_ino))
    while (read(wake_fd[0], drain, sizeof drain) > 0) {
    }
}

void socket_forget(void) {
  if (listen_fd >= 0) close(listen_fd);
  if (wake_fd[0] >= 0) close(wake_fd[0]);
  if (wake_fd[1] >= 0) close(wake_fd[1]);
  listen_fd = wake_fd[0] = wake_fd[1] = -1;
  sock_path[0] = '\0';
}

// Sockets in the directory that nobody serves any more: a child that ended
// with _exit or was killed (its destructor never ran), or exec'd another
// program (its fds closed on exec). A socket is stale when a connect is
// refused; the name is only ever made while listening (socket_listen). A
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

void socket_reap_stale(const char* dir, pid_t self, const struct ctl_disk* disk) {
  static int stale[kReap], profiled[kReap], ended[kReap];  // control thread or exit only
  int nstale = 0, nprofiled = 0, nended = 0;
  DIR* d = opendir(dir);
  if (!d) return;
  int dfd = dirfd(d);
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    int pid = 0, end = 0;
    unsigned long long dump_pid;
    if (disk->profile_pid(e->d_name, &dump_pid)) {
      if (nprofiled < kReap) profiled[nprofiled++] = (int)dump_pid;
      continue;
    }
    if (proc_record_pid(e->d_name, &pid)) {
      if (pid == (int)self) continue;
      if (kill(pid, 0) != 0 && errno == ESRCH) {
        if (nended < kReap) ended[nended++] = pid;
      } else if (!was_seen_alive(pid)) {
        seen_alive[nseen_alive < kReap ? nseen_alive++ : pid % kReap] = pid;
      }
      continue;
    }
    if (sscanf(e->d_name, "memprofile-ctl.%d.sock%n", &pid, &end) != 1 || e->d_name[end] != '\0' ||
        pid == (int)self || nstale >= kReap)
      continue;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) break;
    int rc = at_dir(fd, dir, e->d_name, do_connect);
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
    if (!keep) proc_record_unlink(dfd, stale[i]);
  }
  for (int pass = 0; pass < 2 && nended > kKeepEnded; ++pass)
    for (int i = 0; i < nended && nended > kKeepEnded; ++i) {
      int keep = pass == 0 && was_seen_alive(ended[i]);
      for (int k = 0; k < nprofiled && !keep; ++k) keep = profiled[k] == ended[i];
      if (keep || proc_record_unlink(dfd, ended[i]) != 0) continue;
      ended[i--] = ended[--nended];
    }
  closedir(d);
}
