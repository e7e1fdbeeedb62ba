#!/usr/bin/env bash
# What a tree command cannot reach, it says: a grandchild under a child
# that exec'd another program is counted in the tree and its memory, and a
# stopped worker is named and makes snapshot exit 2 (0 once it runs).
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

gcc -O1 -g -o "${SCRATCH}/prefork" "${E2E_ROOT}/tests/fixtures/src/prefork.c"

# 5. What a tree command could not reach, it says: a grandchild under a
# child that exec'd another program (no profiler reaches it) is counted in
# the tree and its memory, and a served worker that does not answer (stopped)
# makes the command exit 2, as for one process, with the worker named.
out5="${SCRATCH}/out5"
start_service "${out5}" "${SCRATCH}/tree5.log" --backend none -- \
  bash -c '( sleep 600 & wait ) & sh -c "sleep 601 & wait" & wait'
root5="${SERVICE_PID}"
wait_until 60 sockets_are "${out5}" 2 || fail "not 2 sockets: $(ls "${out5}")"
children_are() { [[ "$(pgrep -P "$1" | wc -l)" -eq "$2" ]]; }
wait_until 60 children_are "${root5}" 2 || fail "not 2 children: $(pgrep -P "${root5}")"
sub="$(pgrep -P "${root5}" -x bash)" || fail "no subshell under ${root5}"
sh5="$(pgrep -P "${root5}" -x sh)" || fail "no sh under ${root5}"
track "${sub}"
track "${sh5}"
wait_until 60 children_are "${sh5}" 1 || fail "sh has no sleep"
grandchild="$(pgrep -P "${sh5}")"
ctl5() { "${MEMPROFILE}" "$@" --output-dir "${out5}"; }
ctl5 status "${root5}" > "${SCRATCH}/tree5.status" 2> "${SCRATCH}/tree5.err" || fail "status: $(cat "${SCRATCH}/tree5.err")"
grep -q "^tree of pid ${root5}: 5 processes, 2 served, 3 not reached (said above); RSS" "${SCRATCH}/tree5.status" ||
  fail "status does not count the whole tree: $(tail -2 "${SCRATCH}/tree5.status")"
grep -q "^memprofile: status: 1 more process of the tree, under processes that are not profiled .*: pid ${grandchild}$" \
  "${SCRATCH}/tree5.err" || fail "status is silent about the grandchild ${grandchild}: $(cat "${SCRATCH}/tree5.err")"
ctl5 status "${root5}" --json 2> /dev/null > "${SCRATCH}/tree5.json" || fail "status --json"
[[ "$(jq -c --argjson g "${grandchild}" '.tree | {processes, served, beyond: (.beyond == [$g]), counted: (.rss_beyond > 0 and .rss > .rss_profiled + .rss_beyond - 1)}' \
  "${SCRATCH}/tree5.json")" == '{"processes":5,"served":2,"beyond":true,"counted":true}' ]] ||
  fail "status --json: $(jq -c .tree "${SCRATCH}/tree5.json")"
pass "status: a grandchild under an exec'd child is counted in the tree and its RSS, and named in one line"

kill -STOP "${sub}"
rc=0
ctl5 snapshot "${root5}" --timeout 2 > "${SCRATCH}/stopped.out" 2> "${SCRATCH}/stopped.err" || rc=$?
kill -CONT "${sub}"
((rc == 2)) || fail "snapshot with a stopped worker: exit ${rc}, not 2: $(cat "${SCRATCH}/stopped.err")"
grep -q "^memprofile: snapshot: pid ${sub} (bash): .*no answer within 2 s" "${SCRATCH}/stopped.err" ||
  fail "the stopped worker is not named: $(cat "${SCRATCH}/stopped.err")"
[[ "$(wc -l < "${SCRATCH}/stopped.out")" == 1 ]] || fail "the root's snapshot: $(cat "${SCRATCH}/stopped.out")"
ctl5 snapshot "${root5}" > /dev/null 2>&1 || fail "snapshot once the worker runs again"
pass "snapshot: a stopped worker is named and the command exits 2; once it runs, 0"
