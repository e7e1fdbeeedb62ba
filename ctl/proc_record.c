// The process's record beside its profiles, memprofile-proc.PID.json (see
// proc_record.h). A child its profiler does not record writes one too,
// "recorded":false, so that report can say which processes of the tree it
// cannot see. The boot's id and the start in clock ticks tell two pods'
// pid 1 apart even when they started in the same second.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "proc_record.h"

static void read_small_file(const char* path, char* buf, size_t len) {
  buf[0] = '\0';
  int fd = openat(AT_FDCWD, path, O_RDONLY | O_CLOEXEC);  // libc's own: files.c's open is the profilers'
  if (fd < 0) return;
  ssize_t n = read(fd, buf, len - 1);
  close(fd);
  buf[n > 0 ? n : 0] = '\0';
}

static unsigned long long start_ticks(void) {
  char stat[1024];
  read_small_file("/proc/self/stat", stat, sizeof stat);
  const char* p = strrchr(stat, ')');
  // The blank after ")" comes before field 3 (state); the one before field
  // 22 (starttime) is 19 blanks further, the 20th in all.
  for (int field = 3; p && field <= 22; ++field) p = strchr(p + 1, ' ');
  return p ? strtoull(p + 1, NULL, 10) : 0;
}

unsigned long long proc_record_rss_anon(void) {
  char status[4096];
  read_small_file("/proc/self/status", status, sizeof status);
  const char* anon = strstr(status, "\nRssAnon:");
  return (anon ? strtoull(anon + 9, NULL, 10) : 0) * 1024;
}

void proc_record_write(const char* dir, const struct proc_record* r) {
  char exe[1024], body[2048], quoted[2 * sizeof exe + 3], name[64], tmp[80], boot[64];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[n > 0 ? n : 0] = '\0';
  json_string(quoted, sizeof quoted, exe);
  read_small_file("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
  for (char* c = boot; *c; ++c)
    if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f') || *c == '-')) *c = '\0';
  int len = snprintf(body, sizeof body,
                     "{\"pid\":%d,\"parent\":%d,\"program\":%s,\"backend\":\"%s\",\"started\":%lld,\"boot\":\"%s\","
                     "\"start_ticks\":%llu%s%s%s}\n",
                     (int)r->pid, (int)r->parent, quoted, r->backend, r->started, boot, start_ticks(),
                     r->recorded ? "" : ",\"recorded\":false", r->dormant ? ",\"dormant\":true" : "", r->at_exit);
  snprintf(name, sizeof name, "memprofile-proc.%d.json", (int)r->pid);
  snprintf(tmp, sizeof tmp, "%s.new", name);
  int dfd = openat(AT_FDCWD, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return;
  unlinkat(dfd, tmp, 0);
  int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd >= 0) {
    int ok = len > 0 && write(fd, body, (size_t)len) == len;
    close(fd);
    if (!ok || renameat(dfd, tmp, dfd, name) != 0) unlinkat(dfd, tmp, 0);
  }
  close(dfd);
}

int proc_record_unlink(int dfd, int pid) {
  char name[64];
  snprintf(name, sizeof name, "memprofile-proc.%d.json", pid);
  return unlinkat(dfd, name, 0);
}

int proc_record_pid(const char* name, int* pid) {
  int end = 0;
  return sscanf(name, "memprofile-proc.%d.json%n", pid, &end) == 1 && end > 0 && name[end] == '\0';
}
