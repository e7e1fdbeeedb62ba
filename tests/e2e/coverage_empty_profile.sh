#!/usr/bin/env bash
# No silent empty profile. Each process's record carries what it held at
# exit (RssAnon and its allocator's count); report holds the profile against
# it. Two ways a profile misses the heap, both with the profiler preloaded as
# an image may do it without memprofile exec's check:
#  - heaptrack in a program that carries its own malloc writes no file at
#    all: report's error names the process and the likely cause;
#  - CPython with pymalloc left on (the user's PYTHONMALLOC wins over exec's):
#    the trace holds a tenth of what the process held, and report says so.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

fx="$(allocator_fixtures)"
HEAPTRACK="$(preload_dist heaptrack amd64)/libheaptrack_preload.so"
PYTHON=/usr/bin/python3

out="${SCRATCH}/own"
mkdir "${out}"
env LD_PRELOAD="${HEAPTRACK}:${CTL_LIBRARY}" DUMP_HEAPTRACK_OUTPUT="${out}/heaptrack.\$\$.raw" \
  MEMPROFILE_CTL_BACKEND=heaptrack MEMPROFILE_CTL_DIR="${out}" MEMPROFILE_CTL_TARGET="${fx}/je-static" \
  "${fx}/je-static" > /dev/null
if "${MEMPROFILE}" report --rootfs / "${out}" > "${SCRATCH}/own.txt" 2>&1; then
  fail "report found a profile heaptrack never wrote: $(cat "${SCRATCH}/own.txt")"
fi
grep -q "no profile in ${out}: pid [0-9]* (${fx}/je-static) ran under heaptrack, which wrote nothing for it. Likely cause: the program's heap does not go through the malloc" \
  "${SCRATCH}/own.txt" || fail "not said why: $(cat "${SCRATCH}/own.txt")"
pass "heaptrack wrote nothing for a program with its own malloc: report names it and the cause"

cat > "${SCRATCH}/small.py" <<'PY'
import ctypes

keep = [("x%07d" % i) * 3 for i in range(1_000_000)]
ctypes.pythonapi.Py_IncRef(ctypes.py_object(keep))
PY
out="${SCRATCH}/pymalloc"
mkdir "${out}"
PYTHONMALLOC=pymalloc "${LAUNCHER}" exec --backend heaptrack --preload "${HEAPTRACK}" --output-dir "${out}" \
  --min-free-mb 1 -- "${PYTHON}" "${SCRATCH}/small.py" 2> "${SCRATCH}/exec.log" || fail "exec: $(cat "${SCRATCH}/exec.log")"
! grep -q "PYTHONMALLOC=malloc so that" "${SCRATCH}/exec.log" || fail "exec says PYTHONMALLOC=malloc over the user's"
"${MEMPROFILE}" report --rootfs / "${out}" > "${SCRATCH}/pymalloc.txt" 2>&1 || fail "report: $(cat "${SCRATCH}/pymalloc.txt")"
grep -q "^note: pid [0-9]* (.*python3.*) held [0-9.]* MiB of anonymous memory at exit, but its profile holds at most .*: most of its memory is outside the malloc the profiler sees" \
  "${SCRATCH}/pymalloc.txt" || fail "no note: $(head -5 "${SCRATCH}/pymalloc.txt")"
pass "pymalloc kept on by the user: report says most of the memory is outside the profile"

# And a profile that does hold the heap gets no such note.
out="${SCRATCH}/seen"
mkdir "${out}"
"${LAUNCHER}" exec --backend heaptrack --preload "${HEAPTRACK}" --output-dir "${out}" --min-free-mb 1 -- \
  "${fx}/plain" > /dev/null 2>&1
"${MEMPROFILE}" report --rootfs / "${out}" > "${SCRATCH}/seen.txt" 2>&1 || fail "report: $(cat "${SCRATCH}/seen.txt")"
grep -q "planted_growth" "${SCRATCH}/seen.txt" || fail "plain: $(head -5 "${SCRATCH}/seen.txt")"
! grep -q "outside the malloc" "${SCRATCH}/seen.txt" || fail "a false note: $(head -5 "${SCRATCH}/seen.txt")"
pass "a profile that holds the heap is not flagged"

# status says it of a live process, from the kernel's and the allocator's
# figures: pymalloc kept on under jemalloc, and not with exec's default.
cat > "${SCRATCH}/hold.py" <<'PY'
import sys
import time

keep = [("x%07d" % i) * 3 for i in range(1_000_000)]
open(sys.argv[1], "w").close()
time.sleep(120)
PY
JEMALLOC="$(preload_dist jemalloc amd64)/libjemalloc.so.2"
# status_of MODE: status of hold.py under exec, PYTHONMALLOC as MODE says
# ("" leaves exec's own), in ${SCRATCH}/status-MODE.
status_of() {
  local out="${SCRATCH}/live-${1:-default}" pid
  mkdir "${out}"
  env ${1:+PYTHONMALLOC=$1} "${LAUNCHER}" exec --backend jemalloc --preload "${JEMALLOC}" --output-dir "${out}" \
    --min-free-mb 1 -- "${PYTHON}" "${SCRATCH}/hold.py" "${out}/ready" > /dev/null 2>&1 &
  pid=$!
  track "${pid}"
  wait_until 60 test -e "${out}/ready" || fail "hold.py did not start"
  "${MEMPROFILE}" status "${pid}" --output-dir "${out}" > "${SCRATCH}/status-${1:-default}" || fail "status"
  kill -KILL "${pid}"
  wait "${pid}" 2> /dev/null || true
}
status_of pymalloc
grep -q "most of its memory is outside the malloc jemalloc sees" "${SCRATCH}/status-pymalloc" ||
  fail "status does not say: $(cat "${SCRATCH}/status-pymalloc")"
status_of ""
! grep -q "outside the malloc" "${SCRATCH}/status-default" || fail "a false line: $(cat "${SCRATCH}/status-default")"
pass "status: pymalloc's arenas are named as memory the profile will not show; with PYTHONMALLOC=malloc, nothing"

# attached, on a live process: heaptrack mapped, and no trace at all,
# because the program never calls the malloc heaptrack interposes.
out="${SCRATCH}/attached"
mkdir "${out}"
env LD_PRELOAD="${HEAPTRACK}" DUMP_HEAPTRACK_OUTPUT="${out}/heaptrack.\$\$.raw" MEMPROFILE_BACKEND=heaptrack PLANTED_HOLD=60 \
  "${fx}/je-static" > /dev/null &
held=$!
track "${held}"
wait_until 30 grep -q libheaptrack_preload "/proc/${held}/maps" || fail "heaptrack not mapped"
"${MEMPROFILE}" attached "${held}" --output-dir "${out}" --window 1 > "${SCRATCH}/attached.txt" || true
grep -q "note: heaptrack writes its file from the first malloc it sees, and there is none" "${SCRATCH}/attached.txt" ||
  fail "attached does not say: $(cat "${SCRATCH}/attached.txt")"
kill -KILL "${held}"
wait "${held}" 2> /dev/null || true
pass "attached: heaptrack mapped into a program with its own malloc, no trace, and why"
