#!/usr/bin/env bash
# The control socket on real processes: it refuses a peer with another uid
# (the socket's mode, then the library's own check of the peer's
# credentials) with nothing but the refusal, and serves its own uid and root
# beside silent connections.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

build_workloads
jemalloc_for_anyone
# The service runs as nobody: the output directory must be reachable.
out="${SCRATCH}/out"
mkdir -p "${out}"
chmod 1777 "${out}"

as_uid() { local uid="$1"; shift; setpriv --reuid="${uid}" --regid="${uid}" --clear-groups "$@"; }
# setpriv itself in the background (not a function: $! would be a subshell).
setpriv --reuid=65534 --regid=65534 --clear-groups "${LAUNCHER}" exec --dormant --backend jemalloc --preload "${JEMALLOC}" --output-dir "${out}" \
  --min-free-mb 1 -- "${SCRATCH}/leaky" 0 > "${SCRATCH}/run.log" 2>&1 &
pid=$!
track "${pid}"
wait_for_socket "${out}" "${pid}"
sock="${out}/memprofile-ctl.${pid}.sock"
[[ "$(stat -c '%a %u' "${sock}")" == "600 65534" ]] || fail "socket mode/owner: $(stat -c '%a %u' "${sock}")"

rc=0
as_uid 65533 "${MEMPROFILE}" start "${pid}" --output-dir "${out}" > "${SCRATCH}/other" 2>&1 || rc=$?
((rc == 2)) || fail "another uid: exit ${rc}, not 2: $(cat "${SCRATCH}/other")"
grep -q "memprofile: ${sock}: permission denied: run as the profiled process's user" "${SCRATCH}/other" ||
  fail "another uid: $(cat "${SCRATCH}/other")"
# With the file's mode out of the way, the library checks the peer itself.
chmod 0666 "${sock}"
rc=0
as_uid 65533 "${MEMPROFILE}" start "${pid}" --output-dir "${out}" > "${SCRATCH}/other" 2>&1 || rc=$?
((rc == 1)) || fail "another uid past the mode: exit ${rc}, not 1: $(cat "${SCRATCH}/other")"
grep -q "permission denied: uid 65533 is neither the process's uid 65534 nor root" "${SCRATCH}/other" ||
  fail "another uid past the mode: $(cat "${SCRATCH}/other")"
grep -q "refused a request from uid 65533" "${SCRATCH}/run.log" || fail "the refusal is not logged"
# A refused peer gets the refusal and nothing else (no paths, no state), at
# once, without a request line; 20 of them are logged once, then counted.
# Meanwhile 17 silent connections of another uid and 8 of the process's own
# are held open: the owner's status is still answered (the thread reads no
# peer it refused, and reads each connection in its own short window).
cat > "${SCRATCH}/peers.py" <<'PY'
import socket, sys, time
sock, mode = sys.argv[1], sys.argv[2]
if mode == "refused":
    replies = []
    for _ in range(20):
        s = socket.socket(socket.AF_UNIX)
        s.connect(sock)
        replies.append(s.makefile().read())
        s.close()
    print(replies[0], end="")
    print(len(set(replies)))
else:
    held = []
    for _ in range(int(mode)):
        s = socket.socket(socket.AF_UNIX)
        s.connect(sock)
        held.append(s)
    open(sys.argv[3], "w").close()  # all connected: the test may ask now
    time.sleep(60)
PY
as_uid 65533 /usr/bin/python3 "${SCRATCH}/peers.py" "${sock}" refused > "${SCRATCH}/refused"
[[ "$(head -1 "${SCRATCH}/refused")" == '{"ok":false,"error":"permission denied: uid 65533 is neither the process'"'"'s uid 65534 nor root"}' ]] ||
  fail "a refused peer got more than the refusal: $(cat "${SCRATCH}/refused")"
[[ "$(tail -1 "${SCRATCH}/refused")" == 1 ]] || fail "the refusals differ: $(cat "${SCRATCH}/refused")"
(($(grep -c "refused a request from uid 65533" "${SCRATCH}/run.log") <= 2)) ||
  fail "every refusal logged: $(grep -c "refused a request" "${SCRATCH}/run.log") lines"
held="${SCRATCH}/held"
mkdir -p "${held}"
chmod 1777 "${held}"
setpriv --reuid=65533 --regid=65533 --clear-groups timeout 120 /usr/bin/python3 "${SCRATCH}/peers.py" "${sock}" 17 \
  "${held}/other" &
silent_other=$!
setpriv --reuid=65534 --regid=65534 --clear-groups timeout 120 /usr/bin/python3 "${SCRATCH}/peers.py" "${sock}" 8 \
  "${held}/own" &
silent_own=$!
wait_until 60 test -e "${held}/other" -a -e "${held}/own" || fail "the 25 silent connections were not made"
as_uid 65534 "${MEMPROFILE}" status "${pid}" --output-dir "${out}" > "${SCRATCH}/busy-status" 2>&1 ||
  fail "status not answered beside 25 silent connections: $(cat "${SCRATCH}/busy-status")"
kill "${silent_other}" "${silent_own}" 2>/dev/null || true
wait "${silent_other}" "${silent_own}" 2>/dev/null || true
[[ "$(as_uid 65534 "${MEMPROFILE}" status "${pid}" --output-dir "${out}" | head -1)" == \
   "pid ${pid}: jemalloc, recording off" ]] || fail "the process's own uid was refused, or start went through"
"${MEMPROFILE}" status "${pid}" --output-dir "${out}" > /dev/null || fail "root was refused"
kill -TERM "${pid}"
wait "${pid}" || fail "the service did not exit cleanly on SIGTERM"
pass "a peer with another uid is refused (socket mode 0600, then the peer's credentials) with nothing but the refusal, logged once in 10 s; its own uid and root are served, beside 25 silent connections"
