// The core's log and its JSON string text (ctl.h): one line per event on
// the stderr the process started with, written with one write(2); no state
// of the core's.
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

static int log_fd = -1;
static int log_ready;  // the constructor ran: log_fd is what it chose

void ctl_log_to(int fd) {
  log_fd = fd;
  log_ready = 1;
}

void ctl_log(const char* fmt, ...) {
  // Before the constructor (a profiler that opens its file first), stderr.
  int fd = log_ready ? log_fd : 2;
  if (fd < 0) return;
  char line[512];
  int n = snprintf(line, sizeof line, "memprofile-ctl[%d]: ", (int)getpid());
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
  va_end(ap);
  size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m > sizeof line - (size_t)n - 2 ? sizeof line - (size_t)n - 2 : (size_t)m);
  line[len++] = '\n';
  ssize_t w = write(fd, line, len);
  (void)w;
}

size_t json_string(char* out, size_t len, const char* s) {
  static const char hex[] = "0123456789abcdef";
  size_t at = 0;
  if (len < 3) return 0;
  out[at++] = '"';
  for (; *s; ++s) {
    unsigned char c = (unsigned char)*s;
    char esc[7];
    size_t n = 0;
    if (c == '"' || c == '\\') {
      esc[n++] = '\\';
      esc[n++] = (char)c;
    } else if (c < 0x20) {
      memcpy(esc, "\\u00", 4);
      esc[4] = hex[c >> 4];
      esc[5] = hex[c & 15];
      n = 6;
    } else {
      esc[n++] = (char)c;
    }
    if (at + n + 2 > len) break;  // room for the closing quote and NUL
    memcpy(out + at, esc, n);
    at += n;
  }
  out[at++] = '"';
  out[at] = '\0';
  return at;
}
