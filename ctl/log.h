// The log and JSON string text (log.c): a leaf with no state of the
// core's, which the core, its leaves and the shims all call.
#pragma once

#include <stddef.h>

// One line on the stderr the process started with, "memprofile-ctl[PID]:
// ...", written with one write(2) (to a copy of fd 2 taken at start: the
// application may reuse fd 2 for its own files later).
void ctl_log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// Where the log goes from now on (the constructor's copy of fd 2).
void ctl_log_to(int fd);

// JSON string text for s (quotes added; control characters escaped),
// truncated to fit len. Returns the bytes written (no NUL counted).
size_t json_string(char* out, size_t len, const char* s);
