// Beside each snapshot the control library takes, a record of where the
// process's memory was at that moment: NAME.mem.json, one JSON line with
// RSS as the kernel splits it (/proc/self/status), the allocator's view
// (the profiler's allocator_stats, handed in) and the cgroup's charge
// (memory.current, or v1's memory.usage_in_bytes) with its shmem and file
// parts (memory.stat). collect carries it; report compares the
// first and last to say which bucket grew (the heap, anonymous memory
// outside the allocator, file-backed or shared memory, the cgroup beyond
// the processes). Created exclusively, never through a link, renamed into
// place; control thread only (static buffers).
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "memrecord.h"

// A small file of /proc or /sys, whole, into buf; its length or -1.
static ssize_t read_small(const char* path, char* buf, size_t len) {
  int fd = openat(AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t got = 0;
  for (ssize_t n; got + 1 < len && (n = read(fd, buf + got, len - 1 - got)) > 0;) got += (size_t)n;
  close(fd);
  buf[got] = '\0';
  return (ssize_t)got;
}

// "Key:   123 kB" of /proc/self/status, in bytes.
static unsigned long long status_bytes(const char* text, const char* key) {
  char k[32];
  snprintf(k, sizeof k, "\n%s:", key);
  const char* at = strstr(text, k);
  return at ? strtoull(at + strlen(k), NULL, 10) * 1024 : 0;
}

// "key value" of memory.stat, or -1.
static long long stat_value(const char* text, const char* key) {
  size_t n = strlen(key);
  for (const char* at = text; (at = strstr(at, key)) != NULL; at += n)
    if ((at == text || at[-1] == '\n') && at[n] == ' ') return strtoll(at + n + 1, NULL, 10);
  return -1;
}

struct cgroup_charge {
  long long current, shmem, file;  // -1 when not read
};

// The charge of the process's memory cgroup (memory.current, or v1's
// memory.usage_in_bytes) and its shmem and file-backed parts (memory.stat:
// "shmem", and "file" or v1's "cache"), or current -1 when none can be read.
static struct cgroup_charge cgroup_charge(void) {
  static char text[4096], path[1024], num[64], stat[16384];
  struct cgroup_charge c = {-1, -1, -1};
  if (read_small("/proc/self/cgroup", text, sizeof text) <= 0) return c;
  for (char *save = NULL, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    char* a = strchr(line, ':');
    char* b = a ? strchr(a + 1, ':') : NULL;
    if (!b) continue;
    *b = '\0';
    const char* cg = strcmp(b + 1, "/") == 0 ? "" : b + 1;
    int v2 = strcmp(line, "0") == 0 && a[1] == '\0';  // v2: "0::PATH"; v1: "N:memory:PATH"
    if (!v2 && !strstr(a + 1, "memory")) continue;
    const char* dir = v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory";
    snprintf(path, sizeof path, "%s%s/%s", dir, cg, v2 ? "memory.current" : "memory.usage_in_bytes");
    // A container without a cgroup namespace: /proc names the host's path,
    // its own cgroup is mounted at the root (as runtime/memory.cpp reads it).
    if (read_small(path, num, sizeof num) <= 0) {
      cg = "";
      snprintf(path, sizeof path, "%s/%s", dir, v2 ? "memory.current" : "memory.usage_in_bytes");
      if (read_small(path, num, sizeof num) <= 0) continue;
    }
    c.current = strtoll(num, NULL, 10);
    snprintf(path, sizeof path, "%s%s/memory.stat", dir, cg);
    if (read_small(path, stat, sizeof stat) > 0) {
      // v1's usage is hierarchical, its plain counters are not: total_*.
      c.shmem = v2 ? stat_value(stat, "shmem") : stat_value(stat, "total_shmem");
      c.file = v2 ? stat_value(stat, "file") : stat_value(stat, "total_cache");
      if (!v2 && c.shmem < 0) c.shmem = stat_value(stat, "shmem");
      if (!v2 && c.file < 0) c.file = stat_value(stat, "cache");
    }
    return c;
  }
  return c;
}

long memory_record_write(int dfd, const char* dump_name, pid_t pid, const struct allocator_stats* as) {
  static char status[8192], body[1024], name[300], tmp[310];
  if (read_small("/proc/self/status", status + 1, sizeof status - 1) <= 0) return -1;
  status[0] = '\n';
  int n = snprintf(body, sizeof body,
                   "{\"pid\":%d,\"dump\":\"%.200s\",\"time\":%lld,\"rss\":%llu,\"anon\":%llu,\"file\":%llu,\"shmem\":%llu,"
                   "\"swap\":%llu",
                   (int)pid, dump_name, (long long)time(NULL), status_bytes(status, "VmRSS"),
                   status_bytes(status, "RssAnon"), status_bytes(status, "RssFile"), status_bytes(status, "RssShmem"),
                   status_bytes(status, "VmSwap"));
  if (n > 0 && (size_t)n < sizeof body && as) {
    int jem = strcmp(as->name, "jemalloc") == 0;
    n += snprintf(body + n, sizeof body - (size_t)n, ",\"allocator\":\"%s\",\"allocated\":%llu,\"allocator_resident\":%llu",
                  as->name, (unsigned long long)(jem ? as->allocated : as->in_use),
                  (unsigned long long)(jem ? as->resident : as->arena + as->mmapped));
  }
  struct cgroup_charge cg = cgroup_charge();
  if (n > 0 && (size_t)n < sizeof body && cg.current >= 0)
    n += snprintf(body + n, sizeof body - (size_t)n, ",\"cgroup\":%lld", cg.current);
  if (n > 0 && (size_t)n < sizeof body && cg.current >= 0 && cg.shmem >= 0 && cg.file >= 0)
    n += snprintf(body + n, sizeof body - (size_t)n, ",\"cgroup_shmem\":%lld,\"cgroup_file\":%lld", cg.shmem, cg.file);
  if (n <= 0 || (size_t)n + 3 > sizeof body) return -1;
  memcpy(body + n, "}\n", 3);
  n += 2;
  snprintf(name, sizeof name, "%.280s.mem.json", dump_name);
  snprintf(tmp, sizeof tmp, "%s.new", name);
  unlinkat(dfd, tmp, 0);
  int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  int ok = write(fd, body, (size_t)n) == n;
  close(fd);
  if (ok && renameat(dfd, tmp, dfd, name) == 0) return n;
  unlinkat(dfd, tmp, 0);
  return -1;
}
