// The control socket's connections (see conns.h).
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "conns.h"
#include "log.h"

enum { kRequestMs = 1000 };
static struct conn {
  int fd;
  size_t got;
  int64_t deadline;
  char req[64];
} conns[kConns];
static int nconns;

int64_t conns_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

int conns_count(void) { return nconns; }

void conns_poll_fds(struct pollfd* p) {
  for (int i = 0; i < nconns; ++i) p[i] = (struct pollfd){conns[i].fd, POLLIN, 0};
}

int64_t conns_next_wake(int64_t wake) {
  for (int i = 0; i < nconns; ++i)
    if (wake < 0 || conns[i].deadline < wake) wake = conns[i].deadline;
  return wake;
}

void conns_send(int fd, const char* buf, size_t n) {
  for (size_t off = 0; off < n;) {
    ssize_t w = send(fd, buf + off, n - off, MSG_NOSIGNAL);
    if (w <= 0) break;
    off += (size_t)w;
  }
  // The client sees the end now, even when a child forked meanwhile holds a
  // copy of this connection.
  shutdown(fd, SHUT_RDWR);
}

// A peer that may not ask gets a refusal and nothing else: no state, no
// paths. Nothing is read from it. The log says so at most once in 10 s,
// with how many were refused meanwhile, and before the reply: whoever has
// seen the refusal finds it in the log.
static void refuse(int fd, uid_t uid) {
  static int64_t last_said;
  static unsigned long unsaid;
  char reply[256];
  int n = snprintf(reply, sizeof reply,
                   "{\"ok\":false,\"error\":\"permission denied: uid %u is neither the process's uid %u nor root\"}\n",
                   (unsigned)uid, (unsigned)geteuid());
  int64_t now = conns_now_ms();
  if (last_said && now - last_said < 10000) {
    ++unsaid;
  } else {
    if (unsaid)
      ctl_log("refused a request from uid %u (and %lu more refused in the last 10 s)", (unsigned)uid, unsaid);
    else
      ctl_log("refused a request from uid %u", (unsigned)uid);
    last_said = now;
    unsaid = 0;
  }
  conns_send(fd, reply, (size_t)n);
}

static void drop_conn(int i) {
  close(conns[i].fd);
  conns[i] = conns[--nconns];
}

void conns_forget(void) {
  for (int i = 0; i < nconns; ++i) close(conns[i].fd);
  nconns = 0;
}

// Who asks comes first, before anything is read.
void conns_accept(int listen_fd) {
  if (nconns >= kConns) return;
  int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    if (errno == EMFILE || errno == ENFILE || errno == ENOMEM || errno == ENOBUFS) {
      // Out of fds (a leaking application): the pending connection keeps
      // the socket readable; wait instead of spinning.
      struct timespec pause = {0, 100 * 1000 * 1000};
      nanosleep(&pause, NULL);
    }
    return;
  }
  struct ucred peer;
  socklen_t plen = sizeof peer;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &plen) != 0) {
    close(fd);
    return;
  }
  if (peer.uid != geteuid() && peer.uid != 0) {
    refuse(fd, peer.uid);
    close(fd);
    return;
  }
  conns[nconns++] = (struct conn){fd, 0, conns_now_ms() + kRequestMs, ""};
}

// Reads what connection i sent; answers once its line is whole. A peer
// that closes without a line is a probe (socket_reap_stale): no answer.
static void read_conn(int i, conns_answer_fn answer) {
  struct conn* c = &conns[i];
  ssize_t r = read(c->fd, c->req + c->got, sizeof c->req - 1 - c->got);
  if (r < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (r > 0) c->got += (size_t)r;
  c->req[c->got] = '\0';
  int whole = memchr(c->req, '\n', c->got) != NULL || c->got == sizeof c->req - 1;
  if (whole || (r <= 0 && c->got > 0)) {
    answer(c->fd, c->req);
  } else if (r > 0) {
    return;  // more to come
  }
  drop_conn(i);
}

// From the last, as drop_conn moves the last one into a freed slot.
void conns_read(const struct pollfd* p, int polled, conns_answer_fn answer) {
  int64_t now = conns_now_ms();
  for (int i = nconns - 1; polled > 0 && i >= 0; --i) {
    if (p[i].revents) read_conn(i, answer);
    else if (now >= conns[i].deadline) drop_conn(i);  // silent too long: closed unanswered
  }
  for (int i = nconns - 1; polled == 0 && i >= 0; --i)
    if (now >= conns[i].deadline) drop_conn(i);
}
