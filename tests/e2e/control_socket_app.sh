#!/usr/bin/env bash
# The application's own use of its process does not change under the
# control library: a single-threaded program may unshare a user namespace,
# and a daemon may close every fd it did not open (the library stops
# serving, without spinning).
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

build_workloads
jemalloc_for_anyone
# The application's own use of the process must not change: a single-
# threaded program may unshare a user namespace (EINVAL with a second
# thread: the control thread steps aside for the call), and a daemon may
# close every fd it did not open (the library stops serving and never
# touches the numbers again).
cat > "${SCRATCH}/hostile.c" <<'C'
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <linux/close_range.h>
#include <sys/syscall.h>
int main(int argc, char** argv) {
  sleep(1);
  if (strcmp(argv[1], "unshare") == 0) {
    if (unshare(CLONE_NEWUSER) != 0) { perror("unshare"); return 1; }
  } else if (syscall(SYS_close_range, 3, ~0U, 0) != 0) {
    perror("close_range");
    return 1;
  }
  puts("hostile: done");
  fflush(stdout);
  // argv[2]: a file whose appearance says the test has looked (a cap of
  // 60 s, not a measure: no sleep decides how long it lives).
  for (int i = 0; argc > 2 && i < 600 && access(argv[2], F_OK) != 0; ++i) usleep(100000);
  return 0;
}
C
gcc -O1 -o "${SCRATCH}/hostile" "${SCRATCH}/hostile.c"
start_service "${SCRATCH}/h1" "${SCRATCH}/h1.log" --dormant --backend jemalloc --preload "${JEMALLOC}" -- \
  "${SCRATCH}/hostile" unshare
wait "${SERVICE_PID}" || fail "unshare(CLONE_NEWUSER) failed under the control library: $(cat "${SCRATCH}/h1.log")"
start_service "${SCRATCH}/h2" "${SCRATCH}/h2.log" --dormant --backend jemalloc --preload "${JEMALLOC}" -- \
  "${SCRATCH}/hostile" close "${SCRATCH}/h2.looked"
log_says "${SCRATCH}/h2.log" "hostile: done" || fail "the daemon-like program did not close its fds: $(cat "${SCRATCH}/h2.log")"
# Its log fd went too: what is left to see is that nobody answers, in one line.
rc=0
"${MEMPROFILE}" status "${SERVICE_PID}" --output-dir "${SCRATCH}/h2" --timeout 3 > "${SCRATCH}/h2.status" 2>&1 || rc=$?
((rc == 2)) || fail "status after the fds were closed: exit ${rc}: $(cat "${SCRATCH}/h2.status")"
# CPU time over a second after that, not since the start: what the
# launcher (an ASan build's startup, on a busy machine) took before it
# exec'd counts in the process's own, and a spin takes a core's share.
ticks_now() { awk '{ print $14 + $15 }' "/proc/${SERVICE_PID}/stat"; }
before="$(ticks_now)"
sleep 1
ticks=$(($(ticks_now) - before))
((ticks < 20)) || fail "the process spun after its fds were closed: ${ticks} ticks in a second"
touch "${SCRATCH}/h2.looked"
wait "${SERVICE_PID}" || fail "the daemon-like program failed: $(cat "${SCRATCH}/h2.log")"
pass "unshare(CLONE_NEWUSER) still works in a single-threaded program; closing every fd stops serving, no spin"
