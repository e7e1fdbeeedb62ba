// The control thread (thread.c): started and stopped for the core, and
// stepping aside for unshare and setns. The application's signals are never
// delivered to it.
#pragma once

// Starts the thread running `loop` (logged when it cannot: -1).
int thread_start(void* (*loop)(void));
// Ends it (it finishes the request it is answering); returns whether it was
// serving (and is to be started again).
int thread_stop(void);
// In a forked child: no thread runs, and the parent's lock is not held.
void thread_forget(void);
