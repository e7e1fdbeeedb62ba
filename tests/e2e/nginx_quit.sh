#!/usr/bin/env bash
# Profiling never keeps a service from shutting down: nginx's master blocks
# its signals everywhere but in sigsuspend, so a thread a profiler added
# that took SIGCHLD reaped the workers there, and the master slept on
# (bytehound's mem-prof thread, before thread-signals.patch: `kill -QUIT`
# left nginx running in 1 of 4 runs). nginx, a master and two workers on
# loopback, is stopped with one SIGQUIT, 10 times under bytehound and 3
# under jemalloc and heaptrack; every master ends by itself, and bytehound's
# added threads block every signal the app could want. Without bytehound's
# offline bundle the bytehound part is skipped (exit 77, after the rest).
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

NGINX=/usr/sbin/nginx
[[ -x "${NGINX}" ]] || fail "nginx missing: run scripts/install-deps.sh"
chmod 0755 "${SCRATCH}"
port="$(free_port)"
prefix="${SCRATCH}/nginx"
nginx_conf "${prefix}" "${port}"
two_workers() { [[ "$(pgrep -c -P "$1")" == 2 ]]; }
gone() { ! kill -0 "$1" 2> /dev/null; }

# quit_rounds BACKEND N PRELOAD: N times, nginx under BACKEND serves a
# request and gets one SIGQUIT; it must end by itself (a cap of 60 s, not
# a measure) with exit 0.
quit_rounds() {
  local backend="$1" n="$2" preload="$3" i master out
  for ((i = 1; i <= n; i++)); do
    out="${SCRATCH}/out-${backend}-${i}"
    mkdir -p "${out}"
    chmod 1777 "${out}"
    "${LAUNCHER}" exec --backend "${backend}" --preload "${preload}" --output-dir "${out}" --min-free-mb 1 -- \
      "${NGINX}" -p "${prefix}" -c "${prefix}/nginx.conf" > "${SCRATCH}/nginx.log" 2>&1 &
    master=$!
    track "${master}"
    wait_until 60 two_workers "${master}" || fail "${backend}: no two workers: $(cat "${SCRATCH}/nginx.log")"
    curl -fsS --max-time 20 "http://127.0.0.1:${port}/" > /dev/null || fail "${backend}: nginx does not answer"
    [[ "${backend}" != bytehound || "${i}" != 1 ]] || added_threads_block "${master}" "bytehound's nginx master" > /dev/null
    kill -QUIT "${master}"
    wait_until 60 gone "${master}" || fail "${backend}: round ${i}: nginx's master is still running 60 s after SIGQUIT"
    wait "${master}" || fail "${backend}: round ${i}: nginx's exit code changed: $?"
  done
}

quit_rounds jemalloc 3 "$(preload_dist jemalloc amd64)/libjemalloc.so.2"
quit_rounds heaptrack 3 "$(preload_dist heaptrack amd64)/libheaptrack_preload.so"
pass "nginx ends on one SIGQUIT under jemalloc and heaptrack, 3 times each"
need_bytehound_bundle 77
quit_rounds bytehound 10 "$(preload_dist bytehound amd64)/libbytehound.so"
pass "bytehound: nginx ends on one SIGQUIT 10 times in 10, and its mem-prof thread blocks the app's signals"
