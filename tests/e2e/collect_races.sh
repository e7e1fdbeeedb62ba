#!/usr/bin/env bash
# A file that vanishes, shrinks or changes kind while collect runs is
# skipped and said, never fatal for the rest: a watcher (fanotify's
# permission events, as an attacker or the budget's rotation would time it)
# deletes one dump, truncates another and swaps a third for a link when
# collect opens the first, and truncates a 96 MiB trace as soon as collect
# reads it. collect
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
# fanotify's permission events hold collect's open (and read) until the
# watcher has acted: the race is won the same way on an idle machine and a
# loaded one (inotify told it only after collect had gone on).
import ctypes, os, struct, sys
out = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
libc.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p]
FAN_CLASS_CONTENT, FAN_CLOEXEC, FAN_MARK_ADD = 0x4, 0x1, 0x1
FAN_OPEN_PERM, FAN_ACCESS_PERM, FAN_ALLOW, AT_FDCWD = 0x10000, 0x20000, 0x1, -100
fd = libc.fanotify_init(FAN_CLASS_CONTENT | FAN_CLOEXEC, os.O_RDONLY)
if fd < 0:
    sys.exit("fanotify_init: errno %d" % ctypes.get_errno())
first, big = os.path.join(out, "jeprof.4242.0.m0.heap"), os.path.join(out, "jeprof.4242.9.m0.heap")
for path, mask in ((first, FAN_OPEN_PERM), (big, FAN_ACCESS_PERM)):
    if libc.fanotify_mark(fd, FAN_MARK_ADD, mask, AT_FDCWD, path.encode()) != 0:
        sys.exit("fanotify_mark %s: errno %d" % (path, ctypes.get_errno()))
print("watching", flush=True)
done = set()
while len(done) < 2:
    buf = os.read(fd, 4096)
    at = 0
    while at + 24 <= len(buf):
        length, _, _, _, mask, efd, _ = struct.unpack_from("IBBHQii", buf, at)
        if mask & FAN_OPEN_PERM and "first" not in done:
            os.unlink(os.path.join(out, "jeprof.4242.1.m0.heap"))
            os.truncate(os.path.join(out, "jeprof.4242.2.m0.heap"), 10)
            os.unlink(os.path.join(out, "jeprof.4242.3.m0.heap"))
            os.symlink("/etc/passwd", os.path.join(out, "jeprof.4242.3.m0.heap"))
            done.add("first")
        elif mask & FAN_ACCESS_PERM and "big" not in done:
            os.truncate(big, 1 << 20)
            done.add("big")
        os.write(fd, struct.pack("iI", efd, FAN_ALLOW))
        os.close(efd)
        at += length
# Closing the group allows whatever is still held.
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
