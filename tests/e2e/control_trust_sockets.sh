#!/usr/bin/env bash
# One process of the tree cannot act as another through its socket name: a
# tree command asks only a socket that is the process's own (never a link,
# owned by its uid or root, and SO_PEERCRED naming its pid), and shows an
# answer only where /proc and the output directory agree with it. Hostile
# peers run as nobody in the shared 1777 directory (hostile_peer.py):
# squatters under root's and nobody's siblings' names, a member that lies
# about its program, one that names another process's record as its
# snapshot, and a link to another service's private socket.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

[[ "${EUID}" == 0 ]] || { echo "skip: the hostile peers run as another uid (setpriv needs root)"; exit 77; }
chmod 0755 "${SCRATCH}"
cp "$(dirname "$0")/hostile_peer.py" "${SCRATCH}/peer.py"
out="${SCRATCH}/out"
mkdir -p "${out}"
chmod 1777 "${out}"
nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
gone_pid() { ! kill -0 "$1" 2> /dev/null; }
peer_log="${SCRATCH}/peers.log"
touch "${peer_log}"
chmod 0666 "${peer_log}"

# The tree: root's sh (served) with a root child, a nobody child (both
# exec'd sleep: no socket of their own) and two nobody members that serve
# their own names and lie.
start_service "${out}" "${SCRATCH}/run.log" --backend none -- /bin/sh -c "
  sleep 300 & echo \$! > ${SCRATCH}/root-sibling
  setpriv --reuid=65534 --regid=65534 --clear-groups sleep 300 & echo \$! > ${SCRATCH}/nobody-sibling
  setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 ${SCRATCH}/peer.py ${out} liar-program '' ${peer_log} &
  setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 ${SCRATCH}/peer.py ${out} liar-snapshot \$\$ ${peer_log} &
  wait"
sh_pid="${SERVICE_PID}"
# Each liar serves once the tree's first process has reaped the socket its
# forked shell left under that pid before the exec.
serving() { [[ "$(cat "${SCRATCH}/run.log" "${SCRATCH}"/squat-*.log 2> /dev/null | grep -c '^serving ')" == "$1" ]]; }
wait_until 600 serving 2 || fail "the liars do not serve: $(cat "${SCRATCH}/run.log")"
root_sibling="$(cat "${SCRATCH}/root-sibling")"
nobody_sibling="$(cat "${SCRATCH}/nobody-sibling")"
# The squatters: not of the tree, binding its children's names.
for victim in "${root_sibling}" "${nobody_sibling}"; do
  nobody /usr/bin/python3 "${SCRATCH}/peer.py" "${out}" squat "${victim}" "${peer_log}" > "${SCRATCH}/squat-${victim}.log" 2>&1 &
  track $!
done
wait_until 600 serving 4 || fail "the squatters do not serve: $(cat "${SCRATCH}"/squat-*.log)"
mapfile -t liars < <(pgrep -f "^/usr/bin/python3 ${SCRATCH}/peer.py ${out} liar" | sort -n)
((${#liars[@]} == 2)) || fail "not two liars: ${liars[*]}"

rc=0
"${MEMPROFILE}" status "${sh_pid}" --output-dir "${out}" --timeout 20 > "${SCRATCH}/status" 2> "${SCRATCH}/status.err" || rc=$?
((rc == 2)) || fail "status with hostile members: exit ${rc}, not 2: $(cat "${SCRATCH}/status" "${SCRATCH}/status.err")"
! grep -q forged "${SCRATCH}/status" || fail "status shows what a liar said: $(cat "${SCRATCH}/status")"
grep -q "^pid ${sh_pid}: no heap profiler" "${SCRATCH}/status" || fail "the real member is not shown: $(cat "${SCRATCH}/status")"
said() {
  local line
  line="$(grep -F "memprofile: status: pid $1 " "${SCRATCH}/status.err" || true)"
  [[ "${line}" == *"$2"* ]] || fail "pid $1: not '$2': $(cat "${SCRATCH}/status.err")"
}
said "${root_sibling}" "owned by uid 65534, not by process ${root_sibling}'s uid 0: not its control socket"
said "${nobody_sibling}" "not by process ${nobody_sibling}: not its control socket"
said "${liars[0]}" "names its program /usr/sbin/forged-by-nobody, but process ${liars[0]} runs /usr/bin/python3"
said "${liars[1]}" "memprofile-mem.${sh_pid}.1.mem.json as its own, which is not a file of process ${liars[1]}"
"${MEMPROFILE}" status "${sh_pid}" --output-dir "${out}" --json > "${SCRATCH}/status.json" 2> /dev/null || true
[[ "$(jq -c '[.processes[] | select(.refused) | .pid] | sort' "${SCRATCH}/status.json")" == \
  "$(printf '%s\n' "${root_sibling}" "${nobody_sibling}" "${liars[@]}" | sort -n | jq -sc .)" ]] ||
  fail "--json: the refused members: $(jq -c '[.processes[] | {pid, refused, error}]' "${SCRATCH}/status.json")"
pass "status: squatters of root's and nobody's children refused (owner, SO_PEERCRED), liars' program and snapshot refused; exit 2"

# A squatter that passes the owner check never learns what was asked: the
# request goes only to a peer the kernel says is the process.
: > "${peer_log}"
rc=0
"${MEMPROFILE}" snapshot "${sh_pid}" --output-dir "${out}" --timeout 20 > "${SCRATCH}/snap" 2> "${SCRATCH}/snap.err" || rc=$?
((rc == 2)) || fail "snapshot: exit ${rc}: $(cat "${SCRATCH}/snap.err")"
mapfile -t squatters < <(pgrep -f "^/usr/bin/python3 ${SCRATCH}/peer.py ${out} squat")
for s in "${squatters[@]}"; do
  ! grep -q "^request .* ${s}$" "${peer_log}" || fail "squatter ${s} was sent the request: $(cat "${peer_log}")"
done
{ [[ "$(wc -l < "${SCRATCH}/snap")" == 1 ]] && grep -q "/memprofile-mem\.${sh_pid}\.[0-9]*\.mem\.json$" "${SCRATCH}/snap"; } ||
  fail "snapshot: not the real member's record alone: $(cat "${SCRATCH}/snap")"
pass "snapshot: only the real member wrote a record; no squatter was sent the request"

# A link under a nobody process's own name to another root service's
# socket in a private 0700 directory is never followed.
private="${SCRATCH}/private"
mkdir -m 0700 "${private}"
start_service "${private}" "${SCRATCH}/other.log" --backend none -- sleep 300
other="${SERVICE_PID}"
nobody sleep 300 &
lone=$!
track "${lone}"
nobody ln -s "${private}/memprofile-ctl.${other}.sock" "${out}/memprofile-ctl.${lone}.sock"
for action in snapshot status; do
  rc=0
  "${MEMPROFILE}" "${action}" "${lone}" --output-dir "${out}" --timeout 20 > "${SCRATCH}/link" 2>&1 || rc=$?
  ((rc == 2)) || fail "${action} through a link: exit ${rc}, not 2: $(cat "${SCRATCH}/link")"
  grep -qF "memprofile-ctl.${lone}.sock: a link, not a socket" "${SCRATCH}/link" || fail "${action} through a link: $(cat "${SCRATCH}/link")"
done
[[ -z "$(find "${private}" -name "memprofile-mem.${other}.*")" ]] || fail "the other service took a snapshot: $(ls "${private}")"
pass "a link to another service's socket is refused and never followed (the other service took no snapshot)"

# A listener whose process ended, its socket kept and answered by a child,
# is not that process (SO_PEERCRED still names the ended pid, which may be
# reused): the peer's pidfd says it has ended.
orphans="${SCRATCH}/orphans"
mkdir -m 1777 "${orphans}"
nobody /usr/bin/python3 "${SCRATCH}/peer.py" "${orphans}" orphan > "${SCRATCH}/orphan.log" 2>&1
ended="$(sed -n 's/^serving .*memprofile-ctl\.\([0-9]*\)\.sock$/\1/p' "${SCRATCH}/orphan.log" | head -1)"
[[ -n "${ended}" ]] || fail "the orphan did not serve: $(cat "${SCRATCH}/orphan.log")"
track "$(pgrep -f "^/usr/bin/python3 ${SCRATCH}/peer.py ${orphans} orphan" | head -1)"
wait_until 30 gone_pid "${ended}" || fail "the listener's process did not end"
rc=0
"${MEMPROFILE}" status "${ended}" --only --output-dir "${orphans}" --timeout 20 > "${SCRATCH}/orphan" 2>&1 || rc=$?
((rc == 2)) || fail "a socket of an ended process answered for it: exit ${rc}: $(cat "${SCRATCH}/orphan")"
grep -q "its listener has ended\|made before process" "${SCRATCH}/orphan" || fail "not said: $(cat "${SCRATCH}/orphan")"
pass "a socket kept open by the child of an ended process is refused: the listener has ended"
