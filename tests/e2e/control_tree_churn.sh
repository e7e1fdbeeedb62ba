#!/usr/bin/env bash
# A prefork server (tests/fixtures/src/prefork.c) whose short-lived
# children come and go under jemalloc: the parent leaks no fd, and no
# socket or process record is left behind.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

gcc -O1 -g -o "${SCRATCH}/prefork" "${E2E_ROOT}/tests/fixtures/src/prefork.c"
JEMALLOC="$(preload_dist jemalloc amd64)/libjemalloc.so.2"

# 3. A fork-heavy service: 300 short-lived children leak no fd in the parent
# and leave no socket or record behind.
fds_after_children() {  # SHORT: the parent's open fds once its children ran, into fb-SHORT.fds
  # Not in a "$(...)": a failure there would leave the service running.
  local o="${SCRATCH}/fb-$1"
  start_service "${o}" "${SCRATCH}/fb-$1.log" --backend jemalloc --preload "${JEMALLOC}" -- \
    "${SCRATCH}/prefork" 1 1 4 wait "$1"
  local p="${SERVICE_PID}"
  # The parent waits in wait() once the short children are done (it says
  # so: the socket count alone may pass while a short child's socket is
  # still there, and its TERM below would then kill a short child).
  if (($1 > 0)); then
    wait_until 120 grep -q "^prefork: $1 short children done$" "${SCRATCH}/fb-$1.log" ||
      fail "the $1 short children did not end: $(tail -3 "${SCRATCH}/fb-$1.log")"
  fi
  wait_until 120 sockets_are "${o}" 2 || fail "sockets after $1 children: $(find "${o}" | head)"
  find "/proc/${p}/fd" -mindepth 1 -maxdepth 1 | wc -l > "${o}.fds"
  # Every child: a short one the parent has not reaped yet is listed too.
  local kids
  mapfile -t kids < <(workers_of "${p}")
  kill -TERM "${kids[@]}" 2> /dev/null || true
  wait "${p}" || fail "exit code after $1 children"
}
fds_after_children 0
fds_after_children 300
base_fds="$(cat "${SCRATCH}/fb-0.fds")"
many_fds="$(cat "${SCRATCH}/fb-300.fds")"
[[ "${many_fds}" == "${base_fds}" ]] || fail "the parent holds ${many_fds} fds after 300 children, ${base_fds} after none"
(( $(find "${SCRATCH}/fb-300" -name 'memprofile-proc.*.json' | wc -l) <= 2 )) ||
  fail "records of short-lived children stayed: $(find "${SCRATCH}/fb-300" -name 'memprofile-proc.*' | wc -l)"
pass "300 short-lived children: the parent's fds unchanged (${base_fds}), no socket or record left"
