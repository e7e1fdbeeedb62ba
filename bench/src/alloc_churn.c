// An allocation-heavy workload for bench/report_vs_*.sh: N iterations, each
// allocating 16..4096 bytes on one of eight call paths into a ring of 4096
// slots and freeing what the slot held (two heap events per iteration), plus
// one path that keeps a 256-byte block every 1000 iterations (a slow leak).
// `alloc_churn N hold`: then it stays up (at most 600 s) until SIGTERM, and
// exits normally (its profiler's exit handlers run), for the tests that look
// at it after its work.
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SLOTS 4096
static void* ring[SLOTS];
static void* kept[1 << 20];

#define PATH(n) \
  __attribute__((noinline)) static void* path##n(size_t size) { void* p = malloc(size); memset(p, n, 16); return p; }
PATH(0) PATH(1) PATH(2) PATH(3) PATH(4) PATH(5) PATH(6) PATH(7)
static void* (*const paths[8])(size_t) = {path0, path1, path2, path3, path4, path5, path6, path7};

__attribute__((noinline)) static void* slow_leak(void) { return malloc(256); }

static volatile sig_atomic_t done;
static void on_term(int sig) { (void)sig; done = 1; }

int main(int argc, char** argv) {
  long n = argc > 1 ? atol(argv[1]) : 1000000;
  int hold = argc > 2 && strcmp(argv[2], "hold") == 0;
  if (hold) signal(SIGTERM, on_term);
  uint64_t x = 88172645463325252ull;
  for (long i = 0; i < n; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift
    size_t slot = x % SLOTS;
    free(ring[slot]);
    ring[slot] = paths[(x >> 20) % 8](16 + (x >> 32) % 4081);
    if (i % 1000 == 0 && i / 1000 < (1 << 20)) kept[i / 1000] = slow_leak();
  }
  for (int s = 0; hold && s < 6000 && !done; s++) usleep(100000);
  return 0;
}
