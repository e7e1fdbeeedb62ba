#!/usr/bin/env bash
# The same rule where no configuration tells the user in advance: a Python
# service started as root forks a worker that calls os.setuid(nobody), as
# gunicorn --user does. exec cannot know it; the worker, as it gives up
# root, makes DIR/proc.PID owned by nobody and writes there, so the tree's
# snapshot reaches it and report reads both processes.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

[[ "${EUID}" == 0 ]] || { echo "skip: only root can give up root"; exit 77; }
PYTHON=/usr/bin/python3
chmod 0755 "${SCRATCH}"
JEMALLOC="$(preload_dist jemalloc amd64)/libjemalloc.so.2"
out="${SCRATCH}/out"
mkdir -m 0755 "${out}"
mkdir -m 1777 "${SCRATCH}/flag"  # where the worker, as nobody, says it is ready
cat > "${SCRATCH}/service.py" <<'PY'
import os
import signal
import sys
import time

ready = sys.argv[1]
child = os.fork()
if child == 0:
    os.setgid(65534)
    os.setuid(65534)
    keep = [bytearray(1 << 20) for _ in range(24)]
    open(ready, "w").close()
    time.sleep(120)
    os._exit(0)
signal.signal(signal.SIGTERM, lambda *_: (os.kill(child, signal.SIGKILL), sys.exit(0)))
os.waitpid(child, 0)
PY
"${LAUNCHER}" exec --backend jemalloc --preload "${JEMALLOC}" --output-dir "${out}" --min-free-mb 1 -- \
  "${PYTHON}" "${SCRATCH}/service.py" "${SCRATCH}/flag/ready" > "${SCRATCH}/service.log" 2>&1 &
service=$!
track "${service}"
wait_until 60 test -e "${SCRATCH}/flag/ready" || fail "the worker did not start: $(cat "${SCRATCH}/service.log")"
worker="$(pgrep -P "${service}")"
! grep -q "subdirectory of its own" "${SCRATCH}/service.log" || fail "exec could not have known: $(cat "${SCRATCH}/service.log")"
"${MEMPROFILE}" snapshot "${service}" --output-dir "${out}" > "${SCRATCH}/snaps" 2>&1 || fail "snapshot: $(cat "${SCRATCH}/snaps")"
[[ "$(stat -c %U "${out}/proc.${worker}")" == nobody ]] || fail "proc.${worker}: $(ls -l "${out}")"
grep -q "^${out}/proc.${worker}/jeprof\.${worker}\." "${SCRATCH}/snaps" || fail "the worker's snapshot: $(cat "${SCRATCH}/snaps")"
grep -q "uid 65534 cannot write ${out}: this process writes its files to ${out}/proc.${worker}" "${SCRATCH}/service.log" ||
  fail "not logged: $(cat "${SCRATCH}/service.log")"
"${MEMPROFILE}" report --rootfs / --json "${out}" > "${SCRATCH}/report.json" || fail "report: $(cat "${SCRATCH}/report.json")"
jq -e --argjson w "${worker}" '[.processes[] | select(.pid == $w)] | length == 1' "${SCRATCH}/report.json" > /dev/null ||
  fail "report's processes: $(jq -c .processes "${SCRATCH}/report.json")"
kill -TERM "${service}"
wait "${service}" || fail "the service's exit code changed: $?"
pass "a worker that calls setuid(nobody) itself writes to ${out}/proc.PID (nobody's); snapshot and report reach it"
