#!/usr/bin/env bash
# No thread that memprofile or a backend adds to the application takes a
# signal the application could want: every thread but the program's own
# main thread blocks every process-directed signal (the synchronous ones, a
# fault's, go to the thread that faulted and are left). Read from
# /proc/PID/task/*/status under each backend: jemalloc, heaptrack and none
# (the control library's thread, and heaptrack's timer); bytehound's
# mem-prof thread is checked by nginx_quit_bytehound.sh.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

build_workloads
check_backend() {  # BACKEND [exec options...]: leaky under it, its added threads checked
  local backend="$1" out="${SCRATCH}/out-$1" n
  shift
  start_service "${out}" "${SCRATCH}/${backend}.log" --backend "${backend}" "$@" -- "${SCRATCH}/leaky" 0
  n="$(added_threads_block "${SERVICE_PID}" "${backend}")" || exit 1
  ((n >= 1)) || fail "${backend}: no thread was added (the control library's at least): $(ls "/proc/${SERVICE_PID}/task")"
  kill -TERM "${SERVICE_PID}"
  wait "${SERVICE_PID}" || fail "${backend}: the service's exit code changed"
  checked+=("${backend} (${n})")
}

checked=()
check_backend none
check_backend jemalloc --preload "$(preload_dist jemalloc amd64)/libjemalloc.so.2"
check_backend heaptrack --preload "$(preload_dist heaptrack amd64)/libheaptrack_preload.so"
pass "every added thread blocks the application's signals: ${checked[*]}"
