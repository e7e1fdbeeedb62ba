#!/usr/bin/env bash
# memprofile exec --backend memray on a multiprocessing pool (spawn) in the
# trixie root: each spawned worker is a new interpreter that runs the
# bootstrap and writes its own capture.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

memray_root  # sets root: the trixie root with the launcher and the bootstrap in /opt/memprofile
cat > "${root}/app/pool.py" <<'PY'
import multiprocessing as mp
import os

kept = []
both = None


def ready(barrier):
    global both
    both = barrier


def work(i):
    # Two tasks at a time, so each worker runs half of them however the
    # machine schedules it.
    both.wait(timeout=300)
    kept.append(bytearray(128 * 1024))  # kept by the worker that ran the task
    return os.getpid()


if __name__ == "__main__":
    mp.set_start_method("spawn")
    with mp.Pool(2, initializer=ready, initargs=(mp.Barrier(2),)) as pool:
        pids = set(pool.map(work, range(40), chunksize=1))
    print(len(pids), "workers")
PY
work_line="$(grep -n 'kept.append(bytearray(128' "${root}/app/pool.py" | cut -d: -f1)"

# 3. multiprocessing, spawned workers: each is a new interpreter that runs
# the bootstrap and writes memray.PID.bin of its own.
mkdir -p "${root}/out-spawn"
memray_exec --output-dir /out-spawn -- python3 pool.py > "${SCRATCH}/spawn.log" 2>&1 ||
  fail "spawn: exit code: $(cat "${SCRATCH}/spawn.log")"
grep -qx "2 workers" "${SCRATCH}/spawn.log" || fail "spawn: $(cat "${SCRATCH}/spawn.log")"
found=0
for capture in "${root}"/out-spawn/memray.*.bin; do
  "${MEMPROFILE}" report --rootfs "${root}" --json "${capture}" > "${SCRATCH}/spawn.json" || fail "spawn: report of ${capture}"
  if [[ "$(top_site "${SCRATCH}/spawn.json")" == "work (/app/pool.py:${work_line}) "* ]]; then
    held="$(jq '.in_use[0].bytes_in_use' "${SCRATCH}/spawn.json")"
    ((held >= 20 * 128 * 1024)) || fail "spawn: ${capture} holds ${held} bytes at work, not its 20 tasks' 2.5 MiB"
    found=$((found + 1))
  fi
done
((found == 2)) || fail "spawn: ${found} captures name work (pool.py:${work_line}): $(ls "${root}/out-spawn")"
pass "spawn: both spawned workers wrote a capture of their own naming work (pool.py:${work_line}), each with its 20 tasks"
