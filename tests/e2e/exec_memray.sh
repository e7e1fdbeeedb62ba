#!/usr/bin/env bash
# memprofile exec --backend memray, in a Debian trixie root of its own
# (python3-memray 1.17, Python 3.13, gunicorn 23; chroot in a mount
# namespace of the test's): memprofile's bootstrap (python/sitecustomize.py
# beside the control library, first on PYTHONPATH) starts memray's tracker
# inside the interpreter, without touching the app:
#   a script: one capture, memray.PID.bin, whose report names the keeping
#     line, with native frames by default and without them (--python-only);
#   memory a C library holds, called through ctypes: the site is the C
#     function's line (the library's DWARF), the Python caller on its stack;
#   gunicorn, a console script (#!/usr/bin/python3) given with no --target:
#     each forked worker writes its own capture (memray.ARBITER.bin.WORKER),
#     each names the request handler's line, and --merge sums the workers;
#     `attached` sees memray in a worker; `status` reaches the arbiter and
#     both workers, each recording into its own capture;
#   a multiprocessing pool (spawn): each spawned worker runs the bootstrap
#     and writes its own capture;
#   what keeps memray from working is one ERROR line, and the program runs
#     unprofiled (exit 3 with --strict): no memray in the interpreter's
#     sys.path, a program that is no Python, and python3 -I.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

memray_root  # sets root: the trixie root with the launcher and the bootstrap in /opt/memprofile
cat > "${root}/app/service.py" <<'PY'
import functools
import sys

cache = []


def keep(n):
    cache.append(bytearray(n))  # the leak: kept for good


@functools.lru_cache(maxsize=16)
def lookup(i):
    return bytearray(4096)  # bounded: at most 16 kept


def main(rounds):
    for i in range(rounds):
        keep(64 * 1024)
        lookup(i)


if __name__ == "__main__":
    main(int(sys.argv[1]))
PY
leaky_wsgi_app  # /app/leaky.py; sets app_line
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
keep_line="$(grep -n 'cache.append(bytearray(n))' "${root}/app/service.py" | cut -d: -f1)"
work_line="$(grep -n 'kept.append(bytearray(128' "${root}/app/pool.py" | cut -d: -f1)"

memray_exec() { in_root env -C /app /opt/memprofile/memprofile exec --backend memray --min-free-mb 1 "$@"; }

# 1. A script, with native frames (the default) and without.
for mode in native python-only; do
  out="/out-${mode}"
  mkdir -p "${root}${out}"
  flags=(--output-dir "${out}")
  [[ "${mode}" == python-only ]] && flags+=(--python-only)
  memray_exec "${flags[@]}" -- python3 service.py 200 > "${SCRATCH}/${mode}.log" 2>&1 ||
    fail "${mode}: exit code: $(cat "${SCRATCH}/${mode}.log")"
  grep -q "profiling /usr/bin/python3 with memray (/usr/lib/python3/dist-packages/memray/_memray.cpython-3" \
    "${SCRATCH}/${mode}.log" || fail "${mode}: no start line: $(cat "${SCRATCH}/${mode}.log")"
  grep -q "which serves memprofile start/stop/status, output in ${out} (budget " "${SCRATCH}/${mode}.log" ||
    fail "${mode}: the budget and the control are not said: $(cat "${SCRATCH}/${mode}.log")"
  mapfile -t captures < <(cd "${root}${out}" && ls memray.*)
  [[ "${#captures[@]}" == 1 && "${captures[0]}" =~ ^memray\.[0-9]+\.bin$ ]] || fail "${mode}: captures: ${captures[*]}"
  "${MEMPROFILE}" report --rootfs "${root}" --json "${root}${out}" > "${SCRATCH}/${mode}.json" || fail "${mode}: report"
  [[ "$(top_site "${SCRATCH}/${mode}.json")" == "keep (/app/service.py:${keep_line}) "* ]] ||
    fail "${mode}: the top site: $(top_site "${SCRATCH}/${mode}.json")"
  kept="$(jq '.in_use[0].bytes_in_use' "${SCRATCH}/${mode}.json")"
  ((kept >= 200 * 64 * 1024)) || fail "${mode}: keep holds ${kept} bytes, not the 12.5 MiB kept"
  natives="$(jq '[.in_use[0].stack[] | select(.module != "")] | length' "${SCRATCH}/${mode}.json")"
  if [[ "${mode}" == native ]]; then
    ((natives > 0)) || fail "native: no native frame under keep's stack"
  else
    ((natives == 0)) || fail "python-only: ${natives} native frames in keep's stack"
  fi
  pass "${mode}: one capture (${captures[0]}), report names keep (service.py:${keep_line}) with ${kept} bytes, ${natives} native frames in its stack"
done

# 1b. Memory a C library holds (no Python object): called through ctypes,
# the site is the C function's line, symbolised from the library's own
# DWARF in the root, with the Python line that called it on the stack; with
# --python-only, the Python line is the site.
cat > "${SCRATCH}/leak.c" <<'C'
#include <stdlib.h>
#include <string.h>

void *held[4096];

int leak(size_t n) {
  static int count;
  void *p = malloc(n);  /* held for good */
  memset(p, 1, n);
  held[count++ % 4096] = p;
  return count;
}
C
gcc -g -O0 -fPIC -shared -o "${root}/app/libleak.so" "${SCRATCH}/leak.c" || fail "gcc cannot build the C library"
cat > "${root}/app/native.py" <<'PY'
import ctypes
import sys

lib = ctypes.CDLL("/app/libleak.so")
lib.leak.argtypes = [ctypes.c_size_t]


def fill(rounds):
    for _ in range(rounds):
        lib.leak(64 * 1024)  # the C library keeps it


if __name__ == "__main__":
    fill(int(sys.argv[1]))
PY
leak_line="$(grep -n 'held for good' "${SCRATCH}/leak.c" | cut -d: -f1)"
fill_line="$(grep -n 'the C library keeps it' "${root}/app/native.py" | cut -d: -f1)"
for mode in native python-only; do
  out="/out-clib-${mode}"
  mkdir -p "${root}${out}"
  flags=(--output-dir "${out}")
  [[ "${mode}" == python-only ]] && flags+=(--python-only)
  memray_exec "${flags[@]}" -- python3 native.py 200 > "${SCRATCH}/clib.log" 2>&1 ||
    fail "C library, ${mode}: exit code: $(cat "${SCRATCH}/clib.log")"
  "${MEMPROFILE}" report --rootfs "${root}" --json "${root}${out}" > "${SCRATCH}/clib.json" ||
    fail "C library, ${mode}: report"
  want="fill (/app/native.py:${fill_line})"
  [[ "${mode}" == native ]] && want="leak (${SCRATCH}/leak.c:${leak_line})"
  [[ "$(top_site "${SCRATCH}/clib.json")" == "${want} "* ]] ||
    fail "C library, ${mode}: the top site: $(top_site "${SCRATCH}/clib.json"), not ${want}"
  jq -e --argjson line "${fill_line}" '.in_use[0].bytes_in_use >= 200 * 65536 and
      ([.in_use[0].stack[] | select(.function == "fill" and .line == $line)] | length == 1)' \
    "${SCRATCH}/clib.json" > /dev/null || fail "C library, ${mode}: $(jq -c '.in_use[0]' "${SCRATCH}/clib.json")"
done
pass "a C library's malloc through ctypes: the site is leak (leak.c:${leak_line}) from the library's DWARF, with fill (native.py:${fill_line}) on its stack; with --python-only, fill (native.py:${fill_line})"

# 2. gunicorn, its console script given as it is: the arbiter forks two
# workers, each tracked in its own capture.
port="$(free_port)"
mkdir -p "${root}/out-gunicorn"
memray_exec --output-dir /out-gunicorn -- /usr/bin/gunicorn --chdir /app -w 2 --timeout 0 -b "127.0.0.1:${port}" leaky:app \
  > "${SCRATCH}/gunicorn.log" 2>&1 &
track $!
answers() { curl -fsS "http://127.0.0.1:${port}/" > /dev/null 2>&1; }
wait_until 120 answers || fail "gunicorn did not answer: $(tail -20 "${SCRATCH}/gunicorn.log")"
grep -q "profiling /usr/bin/python3 with memray" "${SCRATCH}/gunicorn.log" ||
  fail "gunicorn: not judged by its interpreter: $(head -5 "${SCRATCH}/gunicorn.log")"
arbiter="$(arbiter_of "/usr/bin/gunicorn --chdir /app .*-b 127\.0\.0\.1:${port} ")" || fail "gunicorn: no arbiter: $(pgrep -af gunicorn)"
track "${arbiter}"
# The first worker can answer before the second has booted.
two_workers() { (($(workers_of "${arbiter}" | wc -l) == 2)); }
wait_until 60 two_workers || fail "gunicorn: not 2 workers of ${arbiter}: $(workers_of "${arbiter}" | paste -sd' ')"
mapfile -t workers < <(workers_of "${arbiter}")
((${#workers[@]} == 2)) || fail "gunicorn: not 2 workers of ${arbiter}: ${workers[*]}"
serve_each "${port}" 40 "${workers[@]}"  # 256 KiB kept a request: 10 MiB or more each
# memray's own threads and the bootstrap's take none of the app's signals,
# in the arbiter and in the workers (whose memray thread its fork handler
# started from the forking thread).
for p in "${arbiter}" "${workers[@]}"; do added_threads_block "${p}" "gunicorn ${p} under memray" > /dev/null; done
"${MEMPROFILE}" attached "${workers[0]}" --output-dir "${root}/out-gunicorn" > "${SCRATCH}/attached.txt" ||
  fail "gunicorn: attached: $(cat "${SCRATCH}/attached.txt")"
grep -q "memray library mapped: yes (.*/_memray.cpython-3" "${SCRATCH}/attached.txt" ||
  fail "gunicorn: attached: $(cat "${SCRATCH}/attached.txt")"
# status in the pod (the root's own /proc view): the arbiter and both
# workers answer, each recording into its own capture.
in_root /opt/memprofile/memprofile status "${arbiter}" --output-dir /out-gunicorn --json > "${SCRATCH}/status.json" ||
  fail "gunicorn: status: $(cat "${SCRATCH}/status.json")"
jq -e --argjson a "${arbiter}" --argjson w0 "${workers[0]}" --argjson w1 "${workers[1]}" '
    .tree.served == 3 and ([.processes[] | select(.backend == "memray" and .recording)] | length) == 3 and
    ([.processes[] | select(.pid == $w0 or .pid == $w1) | .snapshots[0].path] ==
     ["/out-gunicorn/memray.\($a).bin.\($w0)", "/out-gunicorn/memray.\($a).bin.\($w1)"])' \
  "${SCRATCH}/status.json" > /dev/null || fail "gunicorn: status: $(jq -c '.processes' "${SCRATCH}/status.json")"
kill -TERM "${arbiter}"
wait_until 60 bash -c "! kill -0 ${arbiter} 2>/dev/null" || fail "gunicorn did not stop on SIGTERM"
total=0
for w in "${workers[@]}"; do
  capture="${root}/out-gunicorn/memray.${arbiter}.bin.${w}"
  [[ -s "${capture}" ]] || fail "gunicorn: no capture for worker ${w}: $(ls "${root}/out-gunicorn")"
  "${MEMPROFILE}" report --rootfs "${root}" --json "${capture}" > "${SCRATCH}/worker-${w}.json" ||
    fail "gunicorn: report of worker ${w}"
  [[ "$(top_site "${SCRATCH}/worker-${w}.json")" == "app (/app/leaky.py:${app_line}) "* ]] ||
    fail "gunicorn: worker ${w}'s top site: $(top_site "${SCRATCH}/worker-${w}.json")"
  total=$((total + $(jq '.in_use[0].bytes_in_use' "${SCRATCH}/worker-${w}.json")))
done
((total >= SERVED * 256 * 1024)) ||
  fail "gunicorn: the workers hold ${total} bytes at the handler, not the $((SERVED / 4)) MiB kept by ${SERVED} requests"
"${MEMPROFILE}" report --rootfs "${root}" --json --merge "${root}/out-gunicorn" > "${SCRATCH}/gunicorn-merged.json" ||
  fail "gunicorn: report --merge"
merged="$(jq '.in_use[0].bytes_in_use' "${SCRATCH}/gunicorn-merged.json")"
if [[ "$(top_site "${SCRATCH}/gunicorn-merged.json")" != "app (/app/leaky.py:${app_line}) "* ]] || ((merged < total)); then
  fail "gunicorn: --merge: $(top_site "${SCRATCH}/gunicorn-merged.json") against ${total} in the workers"
fi
pass "gunicorn: the arbiter's 2 forked workers each wrote a capture naming app (leaky.py:${app_line}) (${total} bytes together), --merge sums them (${merged}), attached sees memray mapped, status reaches all 3 processes, each recording"

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

# 4. What keeps memray from working: one ERROR line, the program runs
# unprofiled with its own exit code; --strict refuses with 3.
refused() {  # refused NAME CODE [exec args...]
  local name="$1" code="$2" rc=0
  shift 2
  mkdir -p "${root}/out-${name}"
  memray_exec --output-dir "/out-${name}" "$@" > "${SCRATCH}/${name}.log" 2>&1 || rc=$?
  ((rc == 0)) || fail "${name}: the unprofiled program's exit code is ${rc}: $(cat "${SCRATCH}/${name}.log")"
  grep -q "running unprofiled: .*: ${code}: " "${SCRATCH}/${name}.log" || fail "${name}: no ${code}: $(cat "${SCRATCH}/${name}.log")"
  [[ -z "$(ls "${root}/out-${name}")" ]] || fail "${name}: something was captured: $(ls "${root}/out-${name}")"
  rc=0
  memray_exec --strict --output-dir "/out-${name}" "$@" > "${SCRATCH}/${name}-strict.log" 2>&1 || rc=$?
  ((rc == 3)) || fail "${name}: --strict exits ${rc}: $(cat "${SCRATCH}/${name}-strict.log")"
}
refused not-python MEMRAY_NOT_PYTHON -- /bin/true
refused isolated MEMRAY_BOOTSTRAP_IGNORED -- python3 -I service.py 5
# A virtual environment sees the base's memray only when it includes the
# system's site-packages (pyvenv.cfg), as its interpreter would.
in_root python3 -m venv --without-pip /opt/venv-isolated || fail "venv: cannot make one"
in_root python3 -m venv --without-pip --system-site-packages /opt/venv-system || fail "venv: cannot make one"
refused venv-isolated MEMRAY_MISSING -- /opt/venv-isolated/bin/python service.py 5
mkdir -p "${root}/out-venv"
memray_exec --output-dir /out-venv -- /opt/venv-system/bin/python service.py 50 > "${SCRATCH}/venv.log" 2>&1 ||
  fail "venv: exit code: $(cat "${SCRATCH}/venv.log")"
[[ "$(cd "${root}/out-venv" && ls memray.*)" =~ ^memray\.[0-9]+\.bin$ ]] || fail "venv: captures: $(ls "${root}/out-venv"): $(cat "${SCRATCH}/venv.log")"
pass "venv: tracked when it includes the system's site-packages, MEMRAY_MISSING when it does not"
mv "${root}/usr/lib/python3/dist-packages/memray" "${root}/memray.away"
refused missing MEMRAY_MISSING -- python3 service.py 5
mv "${root}/memray.away" "${root}/usr/lib/python3/dist-packages/memray"
pass "refused in one line each, the program run unprofiled (exit 3 with --strict): not python, python3 -I, no memray on sys.path"
