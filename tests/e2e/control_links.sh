#!/usr/bin/env bash
# No profile is written through a link, or into a file the process does not
# own: in a world-writable output directory (mode 1777, as image-setup
# makes it) another user plants the names the profilers will write next, as
# symlinks to a root-owned file outside the directory and as files of its
# own. The root service's snapshots, its exit dump and heaptrack's trace
# refuse them (one line in the log), the victim is untouched, the planted
# files are not rotated away by the budget, and the service's exit code is
# its own. fs.protected_symlinks is 0 on this machine (and on many container
# hosts): the kernel would follow.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

build_workloads
chmod 0755 "${SCRATCH}"
JEMALLOC="$(preload_dist jemalloc amd64)/libjemalloc.so.2"
HEAPTRACK="$(preload_dist heaptrack amd64)/libheaptrack_preload.so"
victim="${SCRATCH}/victim"
echo "root's own file" > "${victim}"
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }

# plant DIR PID: as nobody, every name jemalloc can give PID's next dumps
# (sequences 0-15: manual, interval and final) and heaptrack's trace name,
# half as symlinks to the victim, half as nobody's own files.
plant() {
  as_nobody /usr/bin/python3 - "$1" "$2" "${victim}" <<'PY'
import os, sys
d, pid, victim = sys.argv[1], sys.argv[2], sys.argv[3]
names = [f"heaptrack.{pid}.raw"]
for seq in range(16):
    names += [f"jeprof.{pid}.{seq}.m{m}.heap" for m in range(16)]
    names += [f"jeprof.{pid}.{seq}.i{i}.heap" for i in range(4)]
    names.append(f"jeprof.{pid}.{seq}.f.heap")
for k, n in enumerate(names):
    if k % 2 == 0:
        os.symlink(victim, os.path.join(d, n))
    else:
        with open(os.path.join(d, n), "w") as f:
            f.write("nobody's\n")
PY
}

# after_go GO COMMAND...: COMMAND runs, in this pid, once the file GO exists:
# its pid (the background job's: exec) is known before it starts, so the
# names are planted first.
after_go() {
  # shellcheck disable=SC2016 # the inner shell expands them
  exec sh -c 'go="$1"; shift; while [ ! -e "${go}" ]; do sleep 0.05; done; exec "$@"' sh "$@"
}

# jemalloc: the service runs until TERM, and exits 0 on it (its exit dump).
out="${SCRATCH}/jemalloc"
mkdir -p "${out}"
chmod 1777 "${out}"
after_go "${SCRATCH}/go-jemalloc" "${LAUNCHER}" exec --dormant --backend jemalloc --preload "${JEMALLOC}" \
  --output-dir "${out}" --min-free-mb 1 -- "${SCRATCH}/leaky" 0 > "${SCRATCH}/jemalloc.log" 2>&1 &
pid=$!
track "${pid}"
plant "${out}" "${pid}"
planted="$(find "${out}" -maxdepth 1 -name "jeprof.${pid}.*" | wc -l)"
touch "${SCRATCH}/go-jemalloc"
wait_for_socket "${out}" "${pid}"
"${MEMPROFILE}" start "${pid}" --output-dir "${out}" > /dev/null || fail "start"
rc=0
"${MEMPROFILE}" snapshot "${pid}" --output-dir "${out}" > "${SCRATCH}/snap" 2>&1 || rc=$?
((rc != 0)) || fail "a snapshot went through a planted name: $(cat "${SCRATCH}/snap")"
kill -TERM "${pid}"
wait "${pid}" || fail "the service's exit code changed: $?"
[[ "$(cat "${victim}")" == "root's own file" ]] || fail "the victim was written through a symlink: $(head -c 200 "${victim}")"
[[ "$(find "${out}" -maxdepth 1 -name "jeprof.${pid}.*" | wc -l)" == "${planted}" ]] ||
  fail "planted names were removed or replaced"
[[ -z "$(find "${out}" -maxdepth 1 -name "jeprof.${pid}.*" -type f -user root)" ]] || fail "a root-owned dump appeared among the planted names"
while read -r f; do
  [[ "$(cat "${f}")" == "nobody's" ]] || fail "${f}: nobody's file was written into"
done < <(find "${out}" -maxdepth 1 -name "jeprof.${pid}.*" -type f)
grep -q "memprofile-ctl\[${pid}\]: refused to write ${out}/jeprof.${pid}.0.m0.heap: the name exists and is not this process's own file" \
  "${SCRATCH}/jemalloc.log" || fail "the refusal is not logged: $(cat "${SCRATCH}/jemalloc.log")"
pass "jemalloc: ${planted} planted names (symlinks to a root file, nobody's files): the snapshot and the exit dump refused them, nothing written through"

# Without planted names the same service writes its snapshots (the guard is
# not in the way of the normal case), and a dump left by an earlier process
# of the same pid (root's own) is written over as before.
out2="${SCRATCH}/plain"
start_service "${out2}" "${SCRATCH}/plain.log" --dormant --backend jemalloc --preload "${JEMALLOC}" -- "${SCRATCH}/leaky" 0
pid2="${SERVICE_PID}"
echo "an earlier run's" > "${out2}/jeprof.${pid2}.0.m0.heap"
"${MEMPROFILE}" start "${pid2}" --output-dir "${out2}" > /dev/null || fail "start"
snap="$("${MEMPROFILE}" snapshot "${pid2}" --output-dir "${out2}")" || fail "snapshot in a clean directory"
[[ "${snap}" == "${out2}/jeprof.${pid2}.0.m0.heap" ]] || fail "snapshot path ${snap}"
grep -q "^heap_v2/" "${snap}" || fail "the earlier run's file was not written over: $(head -c 100 "${snap}")"
kill -TERM "${pid2}"
wait "${pid2}" || fail "the service's exit code changed: $?"
pass "jemalloc without planted names: snapshots written, an own file of an earlier run written over"

# heaptrack opens its trace with open(2): the same guard.
out3="${SCRATCH}/heaptrack"
mkdir -p "${out3}"
chmod 1777 "${out3}"
after_go "${SCRATCH}/go-heaptrack" "${LAUNCHER}" exec --backend heaptrack --preload "${HEAPTRACK}" \
  --output-dir "${out3}" --min-free-mb 1 -- "${SCRATCH}/leaky" 2 > "${SCRATCH}/heaptrack.log" 2>&1 &
pid3=$!
track "${pid3}"
plant "${out3}" "${pid3}"
touch "${SCRATCH}/go-heaptrack"
wait "${pid3}" || fail "heaptrack: the service's exit code changed: $?"
[[ "$(cat "${victim}")" == "root's own file" ]] || fail "heaptrack wrote through a symlink: $(head -c 200 "${victim}")"
[[ -L "${out3}/heaptrack.${pid3}.raw" ]] || fail "the planted link was replaced"
grep -q "refused to write ${out3}/heaptrack.${pid3}.raw" "${SCRATCH}/heaptrack.log" ||
  fail "heaptrack: the refusal is not logged: $(cat "${SCRATCH}/heaptrack.log")"
pass "heaptrack: a planted symlink for its trace is refused, the service runs to its end"
