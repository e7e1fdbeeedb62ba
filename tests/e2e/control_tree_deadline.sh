#!/usr/bin/env bash
# A tree command asks its members at once, within one deadline: eight
# members that never answer hold `status --timeout 2` for one timeout, not
# eight. Shown without a clock: every silent member is asked before
# the command gives up on any of them (hostile_peer.py logs both), and each
# is named with exit 2.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

cp "$(dirname "$0")/hostile_peer.py" "${SCRATCH}/peer.py"
out="${SCRATCH}/out"
log="${SCRATCH}/peers.log"
start_service "${out}" "${SCRATCH}/run.log" --backend none -- /bin/sh -c "
  for i in 1 2 3 4 5 6 7 8; do /usr/bin/python3 ${SCRATCH}/peer.py ${out} silent '' ${log} & done
  wait"
# Each serves once the tree's first process has reaped the socket its
# forked shell left under that pid before the exec.
serving() { [[ "$(grep -c '^serving ' "${SCRATCH}/run.log")" == "$1" ]]; }
# Eight interpreters starting on a machine a whole test run loads (the
# sanitizer run beside the others): a hang guard, not a time to meet.
wait_until 600 serving 8 || fail "the silent members do not serve: $(cat "${SCRATCH}/run.log")"
mapfile -t silent < <(pgrep -f "^/usr/bin/python3 ${SCRATCH}/peer.py ${out} silent" | sort -n)
((${#silent[@]} == 8)) || fail "not eight silent members: ${silent[*]}"

rc=0
"${MEMPROFILE}" status "${SERVICE_PID}" --output-dir "${out}" --timeout 2 > "${SCRATCH}/status" 2> "${SCRATCH}/status.err" || rc=$?
((rc == 2)) || fail "status: exit ${rc}, not 2: $(cat "${SCRATCH}/status.err")"
for p in "${silent[@]}"; do
  grep -q "memprofile: status: pid ${p} .*no answer within 2 s" "${SCRATCH}/status.err" ||
    fail "pid ${p} is not named: $(cat "${SCRATCH}/status.err")"
done
wait_until 30 test "$(grep -c '^closed' "${log}")" -eq 8 || fail "not every connection closed: $(cat "${log}")"
first_closed="$(grep -n -m1 '^closed' "${log}" | cut -d: -f1)"
asked_before="$(head -n "${first_closed}" "${log}" | grep -c '^request status')"
((asked_before == 8)) || fail "members were asked one after another (${asked_before} asked before the first was given up): $(cat "${log}")"
pass "eight silent members asked at once within one --timeout, each named, exit 2"
