// A service that leaks on purpose, for memprofile's example and tests: every
// tick it allocates a buffer in leaky_function and keeps it, and allocates
// and frees a temporary one elsewhere. It runs for SECONDS (0: until SIGTERM)
// and exits cleanly on SIGTERM/SIGINT, so profilers that write at exit
// (jemalloc's prof_final, heaptrack) finish their files.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t stopping;
static void on_signal(int sig) { (void)sig; stopping = 1; }

struct chunk {
  struct chunk* next;
  char data[];
};
static struct chunk* kept;

__attribute__((noinline)) void leaky_function(size_t size) {
  struct chunk* c = malloc(sizeof *c + size);
  if (!c) abort();
  memset(c->data, 0xab, size);
  c->next = kept;  // reachable, never freed: the leak a profiler must find
  kept = c;
}

__attribute__((noinline)) void temporary_work(size_t size) {
  char* p = malloc(size);
  if (!p) abort();
  memset(p, 1, size);
  free(p);
}

int main(int argc, char** argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 0;
  size_t per_tick = argc > 2 ? strtoul(argv[2], NULL, 10) : 256 * 1024;
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  struct timespec start, now, tick = {0, 10 * 1000 * 1000};
  clock_gettime(CLOCK_MONOTONIC, &start);
  size_t leaked = 0;
  while (!stopping) {
    leaky_function(per_tick);
    temporary_work(per_tick * 2);
    leaked += per_tick;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (seconds > 0 && (now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 >= seconds) break;
    nanosleep(&tick, NULL);
  }
  printf("leaky: leaked %zu bytes in leaky_function\n", leaked);
  return 0;
}
