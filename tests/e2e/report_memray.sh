#!/usr/bin/env bash
# report reads memray's own captures, written by Debian trixie's
# python3-memray 1.17 (Python 3.13) in a root of its own (mmdebstrap; chroot
# in a mount namespace of the test's):
#   a script whose function keeps a 64 KiB bytearray a round in a
#     module-level list, beside a bounded lru_cache and temporary work, run
#     by `python3 -m memray run` (LZ4-framed at exit), with --native (the
#     interpreter's own frames folded past), and killed with SIGKILL (raw,
#     zero-padded, no trailer): each report names the keeping line;
#   a multiprocessing pool (fork) under --follow-fork: one capture per worker
#     (each cut short: workers end with os._exit), whose reports name the
#     worker's keeping line, and --merge sums them (each task waits at a
#     barrier for one on the other worker, so both run 20).
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

[[ "${EUID}" == 0 ]] || { echo "skip: the trixie root needs root (a mount namespace and chroot)"; exit 77; }
root="${SCRATCH}/root"
unpack_trixie_python_root "${root}"
mkdir -p "${root}/app"
cat > "${root}/app/service.py" <<'PY'
import functools
import sys
import time

cache = []


def keep(n):
    cache.append(bytearray(n))  # the leak: kept for good


@functools.lru_cache(maxsize=16)
def lookup(i):
    return bytearray(4096)  # bounded: at most 16 kept


def scratch(n):
    return len(bytearray(n))  # temporary


def main(rounds, pause):
    for i in range(rounds):
        keep(64 * 1024)
        lookup(i)
        scratch(256 * 1024)
        time.sleep(pause)


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]))
PY
cat > "${root}/app/pool.py" <<'PY'
import multiprocessing as mp
import os

kept = []
# Each task waits for one on the other worker: on a loaded machine one worker
# could otherwise take all 40 and leave the other with nothing kept.
both = None


def work(i):
    kept.append(bytearray(128 * 1024))  # kept by the worker that ran the task
    both.wait(timeout=120)
    return os.getpid()


if __name__ == "__main__":
    mp.set_start_method("fork")
    both = mp.Barrier(2)
    with mp.Pool(2) as pool:
        pids = set(pool.map(work, range(40), chunksize=1))
    print(len(pids), "workers")
PY
keep_line="$(grep -n 'cache.append(bytearray(n))' "${root}/app/service.py" | cut -d: -f1)"
work_line="$(grep -n 'kept.append(bytearray(128' "${root}/app/pool.py" | cut -d: -f1)"
cat > "${SCRATCH}/inside.sh" <<'SH'
set -o errexit -o nounset -o pipefail
mount -t proc proc "${ROOT}/proc"
in_root() { chroot "${ROOT}" env -C /app "$@"; }
in_root python3 -m memray run -q -o /app/plain/capture.bin service.py 100 0.005
in_root python3 -m memray run -q --native -o /app/native/capture.bin service.py 100 0.005
# chroot, env and python exec each other: $! is memray's own pid, killed by
# that pid alone (a pattern would reach another run's memray too).
chroot "${ROOT}" env -C /app python3 -m memray run -q --native -o /app/killed/capture.bin service.py 100000 0.005 &
victim=$!
for _ in $(seq 300); do
  (($(stat -c %s "${ROOT}/app/killed/capture.bin" 2> /dev/null || echo 0) > 262144)) && break
  sleep 0.1
done
sleep 1
kill -KILL "${victim}" || true
wait || true
in_root python3 -m memray run -q --follow-fork -o /app/pool/capture.bin pool.py
SH
mkdir -p "${root}/app/plain" "${root}/app/native" "${root}/app/killed" "${root}/app/pool"
ROOT="${root}" unshare --mount --propagation private bash "${SCRATCH}/inside.sh" > "${SCRATCH}/run.log" 2>&1 ||
  fail "memray in the trixie root: $(tail -5 "${SCRATCH}/run.log")"

# names_keep DIR: the report of DIR's capture names service.py's keeping line
# first, in use and grown, and not the bounded lru_cache.
names_keep() {
  local dir="$1" out
  out="${SCRATCH}/$(basename "$1").json"
  "${MEMPROFILE}" report --json --rootfs "${root}" "${dir}" > "${out}" || fail "report ${dir}: $(cat "${out}")"
  jq -e --argjson line "${keep_line}" '.backend == "memray" and .in_use[0].site.function == "keep"
      and .in_use[0].site.line == $line and (.in_use[0].site.file | endswith("service.py"))' "${out}" > /dev/null ||
    fail "report ${dir}: $(jq -c '{top: .in_use[0].site, warnings}' "${out}")"
  jq -e '[.growth[] | select(.site.function == "lookup" and .leak_suspect)] | length == 0' "${out}" > /dev/null ||
    fail "report ${dir} blames the bounded lru_cache: $(jq -c '[.growth[] | select(.site.function == "lookup")
      | .bytes_per_snapshot]' "${out}")"
}
names_keep "${root}/app/plain"
[[ "$(head -c 4 "${root}/app/plain/capture.bin" | od -An -tx1 | tr -d ' ')" == 04224d18 ]] ||
  fail "the clean run's capture is not LZ4-framed"
names_keep "${root}/app/native"
"${MEMPROFILE}" report --rootfs "${root}" "${root}/app/native" > "${SCRATCH}/native.txt"
grep -q "^  1 .* keep (service.py:${keep_line})" "${SCRATCH}/native.txt" ||
  fail "the native report's first site: $(sed -n '1,12p' "${SCRATCH}/native.txt")"
names_keep "${root}/app/killed"
[[ "$("${MEMPROFILE}" report --rootfs "${root}" "${root}/app/killed" | sed -n 1p)" == *"the file is cut short"* ]] ||
  fail "the killed run's capture is not said to be cut short"
jq -e '.growth[0].site.function == "keep" and .growth[0].leak_suspect' "${SCRATCH}/killed.json" > /dev/null ||
  fail "the killed run's growth: $(jq -c '.growth[0]' "${SCRATCH}/killed.json")"
pass "memray's captures (LZ4-framed, --native, killed): report names keep (service.py:${keep_line}), not the lru_cache; the killed one's growth a leak suspect"

mapfile -t workers < <(find "${root}/app/pool" -name 'capture.bin.*')
((${#workers[@]} == 2)) || fail "--follow-fork: ${#workers[@]} worker captures: $(ls "${root}/app/pool")"
for w in "${workers[@]}"; do
  "${MEMPROFILE}" report --json --rootfs "${root}" "${w}" > "${SCRATCH}/worker.json" || fail "report ${w}"
  jq -e --argjson line "${work_line}" '.in_use[0].site.function == "work" and .in_use[0].site.line == $line' \
    "${SCRATCH}/worker.json" > /dev/null || fail "worker ${w}: $(jq -c '.in_use[0].site' "${SCRATCH}/worker.json")"
done
"${MEMPROFILE}" report --json --rootfs "${root}" --merge "${workers[@]}" > "${SCRATCH}/merged.json" || fail "report --merge"
jq -e '.in_use[0].site.function == "work" and .in_use[0].bytes_in_use >= 40 * 131072' "${SCRATCH}/merged.json" > /dev/null ||
  fail "--merge: $(jq -c '.in_use[0] | {site: .site.function, bytes_in_use}' "${SCRATCH}/merged.json")"
pass "a fork pool under --follow-fork: each worker's capture names work (pool.py:${work_line}); --merge sums the workers' 40 tasks"
