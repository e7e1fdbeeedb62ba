// The control socket's fds (socket.c): a leaf under the core, libc only.
// The listening socket and the wake pipe of the process served, kept high
// and close-on-exec, and checked as this library's own before each use (an
// application may close and reuse any fd number); and the other sockets of
// the directory, reached to tell a live one from a stale one.
#pragma once

#include <stddef.h>
#include <sys/types.h>

#include "tables.h"

// Listens on DIR/memprofile-ctl.PID.sock (logged when it cannot: -1).
int socket_listen(const char* dir, pid_t pid);
// The listening fd (-1: none), and whether it is still the socket made.
int socket_listen_fd(void);
int socket_is_ours(void);
// Not served any more; the fd is not closed (the number may be the
// application's now).
void socket_abandon(void);
// At exit: the socket's name goes.
void socket_unlink(void);
// 1 while a socket is named (the process served one).
int socket_named(void);

// The wake pipe: its read end for poll, a byte to wake the thread, drained
// once it ended. -1 when it could not be made.
int socket_open_wake(void);
int socket_wake_fd(void);
int socket_wake(void);  // 0 when written; -1 when the fd is no longer ours
void socket_drain_wake(void);

// In a forked child: the parent's fds are the parent's (closed here).
void socket_forget(void);

// Sockets in the directory that nobody serves any more, and the records of
// the processes that ended (see socket.c).
void socket_reap_stale(const char* dir, pid_t self, const struct ctl_disk* disk);
