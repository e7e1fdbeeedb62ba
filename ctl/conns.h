// The control socket's connections (conns.c): a leaf under the core, libc
// only. Who asks is the kernel's word (SO_PEERCRED), taken before anything
// is read; a peer that may not ask is refused. The thread never blocks on a
// peer: each connection has a second for its request line, several are
// read at once, and a whole line goes to the core's answer.
#pragma once

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

enum { kConns = 8 };

// The core's answer to one request line of an allowed peer (conns_send
// writes it).
typedef void (*conns_answer_fn)(int fd, char* req);

// CLOCK_MONOTONIC in milliseconds.
int64_t conns_now_ms(void);
// How many are being read (at most kConns; while full, new ones wait in
// the listen backlog).
int conns_count(void);
// Their fds into p (room for kConns), in the order conns_read takes.
void conns_poll_fds(struct pollfd* p);
// The earliest of their deadlines and `wake` (-1: none).
int64_t conns_next_wake(int64_t wake);
// Reads each connection whose poll entry says so, answers a whole line,
// and closes those silent past their deadline. `polled` is poll's return.
void conns_read(const struct pollfd* p, int polled, conns_answer_fn answer);
// A new connection on `listen_fd`: checked, then read from conns_read.
void conns_accept(int listen_fd);
// The whole reply, then the end of the connection.
void conns_send(int fd, const char* buf, size_t n);
// In a forked child: the parent's connections are the parent's.
void conns_forget(void);
