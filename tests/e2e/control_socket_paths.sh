#!/usr/bin/env bash
# Where the socket is: an output directory deeper than a unix socket path
# can name is served; a process that is gone, or was never started with the
# library, or left a stale socket, gets one clear line, exit 2.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

build_workloads
jemalloc_for_anyone
# An output directory deeper than a unix socket path can name (107 bytes: a
# volume mounted deep, a CI scratch dir) is still served, through the
# directory's fd on both sides.
deep="${SCRATCH}/$(printf 'a-deep-volume-mount-%02d/' $(seq 1 8))out"
((${#deep} > 160)) || fail "the deep directory is only ${#deep} bytes"
start_service "${deep}" "${SCRATCH}/deep.log" --dormant --backend jemalloc --preload "${JEMALLOC}" -- "${SCRATCH}/leaky" 0
"${MEMPROFILE}" start "${SERVICE_PID}" --output-dir "${deep}" > /dev/null || fail "start under a deep directory"
snap="$("${MEMPROFILE}" snapshot "${SERVICE_PID}" --output-dir "${deep}")" || fail "snapshot under a deep directory"
[[ -s "${snap}" && "${snap}" == "${deep}"/* ]] || fail "the deep snapshot: '${snap}'"
[[ "$("${MEMPROFILE}" status "${SERVICE_PID}" --output-dir "${deep}" | head -1)" == "pid ${SERVICE_PID}: jemalloc, recording on" ]] ||
  fail "status under a deep directory"
kill -TERM "${SERVICE_PID}"
wait "${SERVICE_PID}" || fail "the deep service did not exit cleanly: $(cat "${SCRATCH}/deep.log")"
complaints="$(grep "memprofile-ctl" "${SCRATCH}/deep.log" | grep -v "recording started on request" || true)"
[[ -z "${complaints}" ]] || fail "the library complained: ${complaints}"
pass "an output directory of ${#deep} bytes is served: start, snapshot and status, no complaint"

# One line for a process that is not served (in a directory of no service).
kids="${SCRATCH}/kids"
mkdir -p "${kids}"
rc=0
"${MEMPROFILE}" status 999999 --output-dir "${kids}" > "${SCRATCH}/none" 2>&1 || rc=$?
if ((rc != 2)) || ! grep -q "no control socket: process 999999 was not started by memprofile exec with the control library (none in ${kids}); there is no process 999999 here" \
  "${SCRATCH}/none"; then
  fail "no socket: exit ${rc}: $(cat "${SCRATCH}/none")"
fi
# Without --output-dir the directory is the config's, which may not exist:
# the line still says the process does not.
rc=0
"${MEMPROFILE}" status 999999 --config /dev/null > "${SCRATCH}/none-dir" 2>&1 || rc=$?
if ((rc != 2)) ||
  ! grep -q "; there is no process 999999 here (it ended, or runs in another pid namespace)$" "${SCRATCH}/none-dir"; then
  fail "no process, no --output-dir: exit ${rc}: $(cat "${SCRATCH}/none-dir")"
fi
# A stale socket: the process was killed before it could remove it.
"${LAUNCHER}" exec --backend jemalloc --preload "${JEMALLOC}" --output-dir "${kids}" --min-free-mb 1 -- \
  "${SCRATCH}/leaky" 0 > /dev/null 2>&1 &
pid=$!
track "${pid}"
wait_for_socket "${kids}" "${pid}"
kill -KILL "${pid}"
wait "${pid}" || true
rc=0
"${MEMPROFILE}" snapshot "${pid}" --output-dir "${kids}" > "${SCRATCH}/stale" 2>&1 || rc=$?
if ((rc != 2)) || ! grep -q "nobody answers: the process is gone (a stale socket)" "${SCRATCH}/stale"; then
  fail "stale socket: exit ${rc}: $(cat "${SCRATCH}/stale")"
fi
pass "no socket, and a stale one: one line each, exit 2"
