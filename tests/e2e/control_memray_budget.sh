#!/usr/bin/env bash
# The disk budget under memray in the trixie root: a process and its forked
# child that allocate without end stop recording at --max-profile-mb, each
# says why (in status too), both keep running, and a `start` makes a new
# capture, which the budget stops again; a directory already past the
# budget: the tracker does not start, and `start` is refused until room is
# made.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

memray_root  # sets root: the trixie root with the launcher and the bootstrap in /opt/memprofile
cat > "${root}/app/churn.py" <<'PY'
import os
import time

# Allocates and frees without end (every allocation is a record in memray's
# capture), in this process and in one forked child.
os.fork()
held = []
while True:
    held.append(bytearray(512))
    if len(held) > 2000:
        held.clear()
        time.sleep(0.001)
PY

# 2. The disk budget, over a process and its forked child.
out="${root}/out-budget"
mkdir -p "${out}"
memray_exec --max-profile-mb 2 --output-dir /out-budget -- python3 churn.py > "${SCRATCH}/churn.log" 2>&1 &
track $!
churn="$(interpreter_of $!)" || fail "budget: the launcher started nothing"
track "${churn}"
wait_for_socket "${out}" "${churn}"
child_of() { [[ -n "$(workers_of "${churn}")" ]]; }
wait_until 60 child_of || fail "budget: no forked child: $(cat "${SCRATCH}/churn.log")"
child="$(workers_of "${churn}")"
track "${child}"
# stopped N: status answers for both processes, N of them not recording.
stopped() {
  memray_ctl status "${churn}" --output-dir /out-budget --json > "${SCRATCH}/budget.json" 2>/dev/null &&
    jq -e --argjson n "$1" '.tree.served == 2 and ([.processes[] | select(.recording | not)] | length) == $n' \
      "${SCRATCH}/budget.json" > /dev/null
}
wait_until 300 stopped 2 || fail "budget: not both stopped: $(jq -c '.processes' "${SCRATCH}/budget.json"): $(cat "${SCRATCH}/churn.log")"
for p in "${churn}" "${child}"; do
  kill -0 "${p}" || fail "budget: process ${p} ended"
  grep -q "memprofile-ctl\[${p}\]: memray: recording stopped: the captures in /out-budget (.* MiB) reached the 2.0 MiB budget" \
    "${SCRATCH}/churn.log" || fail "budget: ${p} did not say why it stopped: $(cat "${SCRATCH}/churn.log")"
  jq -e --argjson p "${p}" '.processes[] | select(.pid == $p) | .stopped_reason | test("reached the 2.0 MiB budget")' \
    "${SCRATCH}/budget.json" > /dev/null || fail "budget: status of ${p}: $(jq -c '.processes' "${SCRATCH}/budget.json")"
done
# Checked every 100 ms: what memray writes meanwhile is all that may pass
# the budget (memray then compresses each capture it closes).
used="$(du -cb --apparent-size "${out}"/memray.* | tail -1 | cut -f1)"
((used < 6 * 1024 * 1024)) || fail "budget: the captures hold ${used} bytes against a 2 MiB budget: $(ls -l "${out}")"
pass "budget: the process and its forked child stopped at the 2 MiB budget, said why (status too), and run on (${used} bytes of captures)"

# memray compressed the captures it closed: there is room again, and a
# start makes a new capture, which the budget stops again.
memray_ctl start "${churn}" --only --output-dir /out-budget > "${SCRATCH}/restart.txt" 2>&1 ||
  fail "budget: start after the stop: $(cat "${SCRATCH}/restart.txt")"
[[ -f "${out}/memray.${churn}.2.bin" ]] || fail "budget: no memray.${churn}.2.bin: $(ls "${out}")"
wait_until 300 stopped 2 || fail "budget: the new capture did not stop: $(jq -c '.processes' "${SCRATCH}/budget.json")"
pass "budget: start after it made memray.${churn}.2.bin, which the budget stopped again"

# A directory already past the budget (an earlier process's capture): the
# tracker does not start, says why, and start is refused until room is made.
out="${root}/out-full"
mkdir -p "${out}"
head -c $((3 << 20)) /dev/urandom > "${out}/memray.1.bin"
memray_exec --max-profile-mb 2 --output-dir /out-full -- python3 churn.py > "${SCRATCH}/full.log" 2>&1 &
track $!
full="$(interpreter_of $!)" || fail "full: the launcher started nothing"
track "${full}"
wait_for_socket "${out}" "${full}"
grep -q "memprofile: memray: the captures in /out-full (3.0 MiB) reached the 2.0 MiB budget (--max-profile-mb): not tracked (memprofile start tries again)" \
  "${SCRATCH}/full.log" || fail "full: the refusal is not said: $(cat "${SCRATCH}/full.log")"
rc=0
memray_ctl start "${full}" --only --output-dir /out-full > "${SCRATCH}/refused.txt" 2>&1 || rc=$?
if ((rc != 1)) || ! grep -q "reached the 2.0 MiB budget" "${SCRATCH}/refused.txt"; then
  fail "full: start was not refused: exit ${rc}: $(cat "${SCRATCH}/refused.txt")"
fi
rm "${out}/memray.1.bin"
memray_ctl start "${full}" --only --output-dir /out-full > "${SCRATCH}/made-room.txt" 2>&1 ||
  fail "full: start after room was made: $(cat "${SCRATCH}/made-room.txt")"
[[ -f "${out}/memray.${full}.bin" ]] || fail "full: no capture after start: $(ls "${out}")"
pass "a directory past the budget: the tracker did not start and said why, start was refused (exit 1), then started once room was made"
