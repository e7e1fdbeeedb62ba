#!/usr/bin/env bash
# An app that runs its own memray tracker (memray allows one a process):
# memprofile start is refused in one line with memray's reason, and leaves
# no capture behind.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

memray_root  # sets root: the trixie root with the launcher and the bootstrap in /opt/memprofile

# An app that runs its own memray tracker: memray allows one a process.
out="${root}/out-own"
mkdir -p "${out}"
cat > "${root}/app/own.py" <<'PY'
import time

import memray

with memray.Tracker("/out-own/own.bin"):
    while True:
        time.sleep(1)
PY
memray_exec --dormant --output-dir /out-own -- python3 own.py > "${SCRATCH}/own.log" 2>&1 &
track $!
own="$(interpreter_of $!)" || fail "own: the launcher started nothing"
track "${own}"
wait_for_socket "${out}" "${own}"
wait_until 60 test -s "${out}/own.bin" || fail "own: the app's tracker did not start: $(cat "${SCRATCH}/own.log")"
rc=0
memray_ctl start "${own}" --only --output-dir /out-own > "${SCRATCH}/own-start.txt" 2>&1 || rc=$?
if ((rc != 1)) || ! grep -q "start ${own}: cannot start the tracker into /out-own/memray.${own}.bin (RuntimeError: No more than one Tracker" \
  "${SCRATCH}/own-start.txt"; then
  fail "own: start was not refused with memray's reason: exit ${rc}: $(cat "${SCRATCH}/own-start.txt")"
fi
compgen -G "${out}/memray.*" > /dev/null && fail "own: the refused start left a capture: $(ls "${out}")"
pass "an app with its own memray tracker: start refused (exit 1) with memray's reason, no capture left"
