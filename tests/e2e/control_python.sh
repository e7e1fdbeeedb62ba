#!/usr/bin/env bash
# Python services are trees too, run from Debian trixie's own packages in a
# root of their own (mmdebstrap; chroot in a mount namespace of the test's):
#   gunicorn 23 (Debian's /usr/bin/gunicorn, a console script: --target
#     names the interpreter) with a WSGI app whose two workers keep 1 MiB
#     per request: status lists the
#     arbiter and both workers, a snapshot of the arbiter's tree reaches
#     them, report analyses the workers that grew, --merge sums them;
#   a multiprocessing pool (fork) whose two workers keep what their tasks
#     make: the workers' growth is seen with --snapshot-every alone.
# Driven from outside as a user would: HTTP on loopback, the arbiter's or
# the parent's pid, never a worker's.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

# The launcher runs inside the trixie root: an ASan build needs the host's
# libasan there. The main build's run covers this test.
if sanitized "${LAUNCHER}"; then
  echo "skip: ${LAUNCHER} is an AddressSanitizer build (it needs libasan, which the trixie root has not)"
  exit 77
fi
JEMALLOC="$(preload_dist jemalloc amd64)/libjemalloc.so.2"
root="${SCRATCH}/root"
unpack_trixie_python_root "${root}"
python="$(readlink -f "${root}/usr/bin/python3")"
python="${python#"${root}"}"
[[ "${python}" == /usr/bin/python3.1[0-9] ]] || fail "the root's python3 is ${python}"
mkdir -p "${root}/opt/memprofile" "${root}/app"
cp "${LAUNCHER}" "${root}/opt/memprofile/memprofile"
cp "${JEMALLOC}" "${CTL_LIBRARY}" "${root}/opt/memprofile/"
cat > "${root}/app/leaky.py" <<'PY'
import os

kept = []


def app(environ, start_response):
    # 1 MiB a request, kept by the worker that served it.
    kept.append(os.urandom(1 << 20))
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [("%d\n" % os.getpid()).encode()]
PY
cat > "${root}/app/pool.py" <<'PY'
import multiprocessing as mp
import os
import sys
import time

kept = []


def work(i):
    kept.append(os.urandom(256 << 10))  # kept by the worker: 256 KiB a task
    return os.getpid()


if __name__ == "__main__":
    mp.set_start_method(sys.argv[2])
    with mp.Pool(2) as pool:
        for _ in range(int(sys.argv[1])):
            pool.map(work, range(8), chunksize=1)
            time.sleep(0.1)
PY

in_memprofile() { in_root /opt/memprofile/memprofile "$@"; }

# 1. gunicorn: the arbiter forks its workers from Python. --timeout 0: on a
# loaded machine a worker late with its heartbeat (30 s by default) would be
# killed and replaced, and the tree the test counts would change under it.
port="$(free_port)"
mkdir -p "${root}/out"
in_memprofile exec --output-dir /out --min-free-mb 1 --backend jemalloc --preload /opt/memprofile/libjemalloc.so.2 \
  --target "${python}" -- /usr/bin/gunicorn --chdir /app -w 2 --timeout 0 -b "127.0.0.1:${port}" leaky:app \
  > "${SCRATCH}/gunicorn.log" 2>&1 &
track $!
answers() { curl -fsS "http://127.0.0.1:${port}/" > /dev/null 2>&1; }
wait_until 120 answers || fail "gunicorn did not answer: $(tail -20 "${SCRATCH}/gunicorn.log")"
grep -q "profiling ${python} with jemalloc" "${SCRATCH}/gunicorn.log" || fail "gunicorn is not profiled: $(head -5 "${SCRATCH}/gunicorn.log")"
# The arbiter: the one gunicorn process whose parent is not gunicorn.
arbiter="$(arbiter_of "/usr/bin/gunicorn --chdir /app .*-b 127\.0\.0\.1:${port} ")" || fail "gunicorn: no arbiter: $(pgrep -af gunicorn)"
track "${arbiter}"
wait_until 60 sockets_are "${root}/out" 3 || fail "gunicorn: not 3 sockets: $(ls "${root}/out")"
mapfile -t workers < <(workers_of "${arbiter}")
((${#workers[@]} == 2)) || fail "gunicorn: not 2 workers of ${arbiter}: ${workers[*]}"
ctl() { "${MEMPROFILE}" "$@" --output-dir "${root}/out"; }
ctl status "${arbiter}" --json > "${SCRATCH}/gunicorn-status.json" || fail "gunicorn: status"
[[ "$(jq -c '.tree | {failed, processes, served}' "${SCRATCH}/gunicorn-status.json")" == '{"failed":0,"processes":3,"served":3}' ]] ||
  fail "gunicorn: status: $(jq -c '.tree, [.processes[] | {pid, parent, program}]' "${SCRATCH}/gunicorn-status.json")"
ctl snapshot "${arbiter}" > "${SCRATCH}/gunicorn-snap1" || fail "gunicorn: the first snapshot"
serve_each "${port}" 30 "${workers[@]}"  # 1 MiB kept a request: 30 MiB or more each
ctl snapshot "${arbiter}" > "${SCRATCH}/gunicorn-snap2" || fail "gunicorn: the second snapshot"
for w in "${workers[@]}"; do
  grep -q "jeprof\.${w}\." "${SCRATCH}/gunicorn-snap2" || fail "gunicorn: the tree's snapshot misses worker ${w}"
done
kill -KILL "${workers[@]}" "${arbiter}"
"${MEMPROFILE}" report --rootfs "${root}" --json "${root}/out" > "${SCRATCH}/gunicorn.json" || fail "gunicorn: report"
grown="$(jq --argjson a "${arbiter}" '[.processes[] | select(.parent == $a and .growth > 8388608)] | length' "${SCRATCH}/gunicorn.json")"
((grown == 2)) || fail "gunicorn: ${grown} workers grew: $(jq -c '[.processes[] | {pid, parent, growth}]' "${SCRATCH}/gunicorn.json")"
[[ " ${workers[*]} " == *" $(jq -r .pid "${SCRATCH}/gunicorn.json") "* ]] ||
  fail "gunicorn: the first view is not a worker's: $(jq -c '{pid, view}' "${SCRATCH}/gunicorn.json")"
"${MEMPROFILE}" report --rootfs "${root}" --json --merge "${root}/out" > "${SCRATCH}/gunicorn-merged.json" ||
  fail "gunicorn: report --merge"
jq -e --arg p "${python}" '.view == ($p + ": 3 processes merged") and (.pids | length) == 3' \
  "${SCRATCH}/gunicorn-merged.json" > /dev/null || fail "gunicorn: --merge: $(jq -c '{view, pids}' "${SCRATCH}/gunicorn-merged.json")"
merged="$(jq '.growth[0].growth' "${SCRATCH}/gunicorn-merged.json")"
# (jemalloc samples: two thirds of what the requests kept, at least)
awk -v g="${merged}" -v n="${SERVED}" 'BEGIN { exit !(g > n * 2 / 3 * 1048576) }' ||
  fail "gunicorn: --merge's top site grew ${merged} bytes after ${SERVED} requests of 1 MiB"
[[ "$(jq -r '.growth[0].site.module' "${SCRATCH}/gunicorn-merged.json")" == "${python}" ]] ||
  fail "gunicorn: the growth is not in the interpreter: $(jq -c '.growth[0].site' "${SCRATCH}/gunicorn-merged.json")"
pass "gunicorn: the arbiter and its 2 workers served; one snapshot of the arbiter reaches both; report analyses the 2 workers that grew, --merge sums them ($(awk -v g="${merged}" 'BEGIN { printf "%d", g / 1048576 }') MiB at the top site)"

# 2. A multiprocessing pool, forked and spawned (the interpreter exec'd
# again: ctl/spawn.c gives it the profiler back): scheduled snapshots alone
# show the workers' growth.
for method in fork spawn; do
  rm -rf "${root}/out" && mkdir -p "${root}/out"
  in_memprofile exec --output-dir /out --min-free-mb 1 --backend jemalloc --preload /opt/memprofile/libjemalloc.so.2 \
    --snapshot-every 1s -- "${python}" /app/pool.py 60 "${method}" > "${SCRATCH}/pool-${method}.log" 2>&1 ||
    fail "pool (${method}): exit code: $(tail -5 "${SCRATCH}/pool-${method}.log")"
  "${MEMPROFILE}" report --rootfs "${root}" --json "${root}/out" > "${SCRATCH}/pool-${method}.json" || fail "pool (${method}): report"
  parent="$(jq -r '[.processes[] | select(.parent == 0)] | min_by(.pid) | .pid' "${SCRATCH}/pool-${method}.json")"
  grown="$(jq --argjson p "${parent}" '[.processes[] | select(.parent == $p and .growth > 4194304)] | length' \
    "${SCRATCH}/pool-${method}.json")"
  ((grown == 2)) ||
    fail "pool (${method}): ${grown} workers grew: $(jq -c '[.processes[] | {pid, parent, snapshots, growth}]' "${SCRATCH}/pool-${method}.json")"
  pass "multiprocessing pool (${method}): both workers' growth seen from scheduled snapshots alone; the app's exit code is its own"
done
