#!/usr/bin/env bash
# A file that vanishes, shrinks or changes kind while collect runs is
# skipped and said, never fatal for the rest: a watcher (inotify, as an
# attacker or the budget's rotation would time it) deletes one dump,
# truncates another and swaps a third for a link when collect opens the
# first, and truncates a 96 MiB trace as soon as collect reads it. collect
# exits 0, its manifest names each, the archive verifies, and report reads
# the archive (the cut entry is left out).
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

build_workloads
JEMALLOC="$(preload_dist jemalloc amd64)/libjemalloc.so.2"
out="${SCRATCH}/out"
# A real dump to copy under each name: leaky under jemalloc, ended by TERM.
mkdir -p "${SCRATCH}/real"
"${LAUNCHER}" exec --backend jemalloc --preload "${JEMALLOC}" --output-dir "${SCRATCH}/real" --min-free-mb 1 -- \
  "${SCRATCH}/leaky" 2 > "${SCRATCH}/real.log" 2>&1 || fail "the real run: $(cat "${SCRATCH}/real.log")"
dump="$(find "${SCRATCH}/real" -name 'jeprof.*.heap' -print -quit)"
[[ -n "${dump}" ]] || fail "no real dump: $(ls "${SCRATCH}/real")"
mkdir -p "${out}"
for k in 0 1 2 3; do cp "${dump}" "${out}/jeprof.4242.${k}.m0.heap"; done
head -c $((96 << 20)) /dev/zero | tr '\0' 'x' > "${out}/jeprof.4242.9.m0.heap"

cat > "${SCRATCH}/watch.py" <<'PY'
import ctypes, os, struct, sys
out = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
IN_ACCESS, IN_OPEN = 0x1, 0x20
fd = libc.inotify_init()
first = libc.inotify_add_watch(fd, os.path.join(out, "jeprof.4242.0.m0.heap").encode(), IN_OPEN)
big = libc.inotify_add_watch(fd, os.path.join(out, "jeprof.4242.9.m0.heap").encode(), IN_ACCESS)
print("watching", flush=True)
done = set()
while len(done) < 2:
    buf = os.read(fd, 4096)
    for wd in [struct.unpack_from("iIII", buf, at)[0] for at in range(0, len(buf), 16) if at + 16 <= len(buf)]:
        if wd == first and first not in done:
            os.unlink(os.path.join(out, "jeprof.4242.1.m0.heap"))
            os.truncate(os.path.join(out, "jeprof.4242.2.m0.heap"), 10)
            os.unlink(os.path.join(out, "jeprof.4242.3.m0.heap"))
            os.symlink("/etc/passwd", os.path.join(out, "jeprof.4242.3.m0.heap"))
            done.add(first)
        elif wd == big and big not in done:
            os.truncate(os.path.join(out, "jeprof.4242.9.m0.heap"), 1 << 20)
            done.add(big)
PY
timeout 120 /usr/bin/python3 "${SCRATCH}/watch.py" "${out}" > "${SCRATCH}/watch.log" 2>&1 &
watcher=$!
track "${watcher}"
wait_until 30 grep -q watching "${SCRATCH}/watch.log" || fail "the watcher did not start: $(cat "${SCRATCH}/watch.log")"

rc=0
"${MEMPROFILE}" collect --backend jemalloc --output-dir "${out}" --settle 0 --out "${SCRATCH}/p.tar" 2> "${SCRATCH}/collect.err" || rc=$?
((rc == 0)) || fail "collect: exit ${rc}: $(cat "${SCRATCH}/collect.err")"
wait "${watcher}" || fail "the watcher: $(cat "${SCRATCH}/watch.log")"
manifest="$(tar -xOf "${SCRATCH}/p.tar" MEMPROFILE-MANIFEST.json)"
why() { jq -r --arg n "$1" '.skipped[] | select(.name == $n) | .why' <<< "${manifest}"; }
[[ "$(why jeprof.4242.1.m0.heap)" == "gone since it was listed"* ]] || fail "the deleted dump: ${manifest}"
[[ "$(why jeprof.4242.2.m0.heap)" == "shrank since it was listed"* ]] || fail "the truncated dump: ${manifest}"
[[ "$(why jeprof.4242.3.m0.heap)" == "replaced by a symbolic link since it was listed, not followed" ]] || fail "the swapped dump: ${manifest}"
# The trace is cut while streamed, or, if the watcher was quicker than the
# open, seen shrunk first: skipped either way.
[[ "$(why jeprof.4242.9.m0.heap)" == "shrank "* ]] || fail "the truncated trace: ${manifest}"
[[ "$(jq -c '[.files[].name | select(startswith("jeprof."))]' <<< "${manifest}")" == '["jeprof.4242.0.m0.heap"]' ]] ||
  fail "not the first dump alone carried: ${manifest}"
grep -q "warning: skipped ${out}/jeprof.4242.1.m0.heap: gone" "${SCRATCH}/collect.err" || fail "not said: $(cat "${SCRATCH}/collect.err")"
"${MEMPROFILE}" collect --verify "${SCRATCH}/p.tar" > "${SCRATCH}/verify" || fail "verify: $(cat "${SCRATCH}/verify")"
"${MEMPROFILE}" report --rootfs / "${SCRATCH}/p.tar" > "${SCRATCH}/report" 2>&1 || fail "report on the archive: $(cat "${SCRATCH}/report")"
pass "collect: a dump deleted, one truncated, one swapped for a link and a trace cut while it ran: each skipped and said, exit 0; it verifies and report reads it"
