#!/usr/bin/env bash
# memprofile serve reads the files of a tree whose members may turn hostile,
# in the shared output directory, and holds (#56):
# 1. heaptrack in a 0777 directory: another user puts a FIFO under the
#    trace's name. The scrape is answered, naming the FIFO as left out, and
#    SIGTERM ends serve at once (it never blocked in open()).
# 2. jemalloc in the recommended 1777 directory: a child that dropped to
#    nobody (hostile_peer.py forge-heap) makes a directory under its own
#    record's name holding 5000 dumps named as a root worker's, each with
#    987654321 bytes at /forged/by/pid/ITS-PID. None is read: the scrape
#    holds the root worker's real heap, no forged byte, and the directory
#    is named as left out.
# 3. A member whose own dump is a crafted 1,500,000 distinct stacks
#    (hostile_peer.py big-dump): serve leaves it out in one line naming its
#    memory ceiling (--max-memory 64), answers with the others, and its peak
#    memory stays within the ceiling.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

[[ "${EUID}" == 0 ]] || { echo "skip: the hostile members run as another uid (setpriv needs root)"; exit 77; }
command -v go > /dev/null || fail "go missing: run scripts/install-deps.sh (golang-go)"
export GOCACHE="${SCRATCH}/gocache" GOPATH="${SCRATCH}/gopath" PPROF_TMPDIR="${SCRATCH}/pprof"
chmod 0755 "${SCRATCH}"
cp "$(dirname "$0")/hostile_peer.py" "${SCRATCH}/peer.py"
nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
gone() { ! kill -0 "$1" 2> /dev/null; }
# scrape NAME: the heap, its headers and its HTTP status in SCRATCH/NAME.*;
# within a minute whatever serve does (a blocked serve is a failure).
scrape() {
  curl -s --max-time 60 -D "${SCRATCH}/$1.headers" -o "${SCRATCH}/$1.pb.gz" -w '%{http_code}' \
    "${SERVE_URL}/debug/pprof/heap" > "${SCRATCH}/$1.status" || fail "$1: no answer within 60 s (curl: $?)"
}
left_out_why() { grep -i '^x-memprofile-left-out-why:' "${SCRATCH}/$1.headers" || true; }

# 1. A FIFO under heaptrack's trace.
gcc -O1 -g -o "${SCRATCH}/leaky" "${E2E_ROOT}/examples/leaky/leaky.c"
out1="${SCRATCH}/out1"
mkdir -p "${out1}"
chmod 0777 "${out1}"
start_service "${out1}" "${SCRATCH}/ht.log" --backend heaptrack \
  --preload "$(preload_dist heaptrack amd64)/libheaptrack_preload.so" -- "${SCRATCH}/leaky"
app1="${SERVICE_PID}"
wait_until 60 test -s "${out1}/heaptrack.${app1}.raw" || fail "no heaptrack trace: $(ls "${out1}")"
start_serve "${SCRATCH}/serve1.log" --output-dir "${out1}" --min-interval 1 "${app1}"
nobody mv "${out1}/heaptrack.${app1}.raw" "${out1}/moved.raw"
nobody mkfifo "${out1}/heaptrack.${app1}.raw"
scrape fifo
[[ "$(cat "${SCRATCH}/fifo.status")" == 503 ]] || fail "a FIFO for the only member: HTTP $(cat "${SCRATCH}/fifo.status")"
grep -q "heaptrack.${app1}.raw left out: a FIFO" "${SCRATCH}/fifo.pb.gz" ||
  fail "the answer does not name the FIFO: $(head -c 600 "${SCRATCH}/fifo.pb.gz")"
kill -TERM "${SERVE_PID}"
wait_until 30 gone "${SERVE_PID}" || fail "serve still runs 30 s after SIGTERM"
pass "a FIFO under heaptrack's trace: the scrape is answered (503, naming the FIFO), and serve ends on SIGTERM"

# tree OUT MODE [ARG]: in OUT (1777), a shell under jemalloc with a root
# worker (a forked subshell that keeps a 4 MiB string, which jemalloc
# samples, then blocks on a FIFO) and a member that dropped to nobody,
# hostile_peer.py MODE (ARG, or the worker's pid); sets ROOT_SH, WORKER and
# PEER once all three serve.
tree() {
  local out="$1" mode="$2" arg="${3:-}"
  mkdir -p "${out}"
  chmod 1777 "${out}"
  [[ -p "${SCRATCH}/never" ]] || mkfifo "${SCRATCH}/never"
  rm -f "${SCRATCH}/worker"
  start_service "${out}" "${SCRATCH}/${mode}.log" --backend jemalloc \
    --preload "$(preload_dist jemalloc amd64)/libjemalloc.so.2" -- /bin/sh -c "
      ( s=x; i=0; while [ \$i -lt 22 ]; do s=\$s\$s; i=\$((i + 1)); done; read -r _ < ${SCRATCH}/never ) &
      echo \$! > ${SCRATCH}/worker
      setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 ${SCRATCH}/peer.py ${out} ${mode} \
        ${arg:-\$(cat ${SCRATCH}/worker)} &
      wait"
  ROOT_SH="${SERVICE_PID}"
  wait_until 60 test -s "${SCRATCH}/worker" || fail "no root worker"
  WORKER="$(cat "${SCRATCH}/worker")"
  wait_until 60 test -S "${out}/memprofile-ctl.${WORKER}.sock" || fail "the root worker serves no socket: $(ls "${out}")"
  wait_until 300 grep -q '^serving ' "${SCRATCH}/${mode}.log" || fail "${mode}: the peer does not serve: $(cat "${SCRATCH}/${mode}.log")"
  PEER="$(pgrep -f "^/usr/bin/python3 ${SCRATCH}/peer.py ${out} ${mode}" | head -1)"
  [[ -n "${PEER}" ]] || fail "${mode}: no peer"
}

# 2. Forged dumps in a directory under a member's own record's name.
out2="${SCRATCH}/out2"
tree "${out2}" forge-heap
[[ -d "${out2}/jeprof.${PEER}.0.m0.heap.mem.json" ]] || fail "the forger made no directory: $(ls "${out2}")"
start_serve "${SCRATCH}/serve2.log" --output-dir "${out2}" --min-interval 1 "${ROOT_SH}"
scrape forged
[[ "$(cat "${SCRATCH}/forged.status")" == 200 ]] ||
  fail "with a forger in the tree: HTTP $(cat "${SCRATCH}/forged.status"): $(head -c 600 "${SCRATCH}/forged.pb.gz")"
go tool pprof -raw "${SCRATCH}/forged.pb.gz" > "${SCRATCH}/forged.raw" 2> "${SCRATCH}/pprof.err" ||
  fail "go tool pprof: $(cat "${SCRATCH}/pprof.err")"
! grep -q "987654321\|/forged/by/pid" "${SCRATCH}/forged.raw" || fail "a forged dump was read: $(grep -m 3 "987654321\|forged" "${SCRATCH}/forged.raw")"
grep -q "pid:\[${WORKER}\]" "${SCRATCH}/forged.raw" || fail "the root worker's own heap is not in the profile: $(head -40 "${SCRATCH}/forged.raw")"
grep -q "jeprof.${PEER}.0.m0.heap.mem.json left out: a directory" <<< "$(left_out_why forged)" ||
  fail "the forger's directory is not named as left out: $(left_out_why forged)"
pass "5000 forged dumps in a directory under a member's record name: none read, the root worker's real heap served"
kill -TERM "${SERVE_PID}"
wait_until 30 gone "${SERVE_PID}" || fail "serve still runs 30 s after SIGTERM"

# 3. A member's own dump of 1,500,000 crafted stacks: left out at serve's
# memory ceiling, the root worker served.
out3="${SCRATCH}/out3"
tree "${out3}" big-dump 1500000
start_serve "${SCRATCH}/serve3.log" --output-dir "${out3}" --min-interval 1 --max-memory 64 "${ROOT_SH}"
scrape big
status="$(cat "${SCRATCH}/big.status")"
hwm="$(awk '/^VmHWM:/ { print $2 }' "/proc/${SERVE_PID}/status")"
grep -q "pid ${PEER}: .*memory ceiling of 64 MiB" <<< "$(left_out_why big)" ||
  fail "the big dump is not left out at the ceiling (HTTP ${status}): $(left_out_why big) $(head -c 600 "${SCRATCH}/big.pb.gz")"
[[ "${status}" == 200 ]] || fail "the root worker is not served beside the big dump: HTTP ${status}"
if sanitized "${MEMPROFILE}"; then
  pass "a crafted 1,500,000-stack dump is left out at the 64 MiB ceiling (peak not compared: an AddressSanitizer build)"
else
  ((hwm <= (64 + 48) * 1024)) || fail "serve's peak memory ${hwm} kB, past its 64 MiB ceiling and the binary's own"
  pass "a crafted 1,500,000-stack dump is left out at the 64 MiB ceiling; serve's peak ${hwm} kB"
fi
