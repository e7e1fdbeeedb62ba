#!/usr/bin/env bash
# The disk budget while the process runs, on a real tiny tmpfs: jemalloc's
# own dumps rotate (the first and the newest stay) within --max-profile-mb;
# heaptrack's one trace cannot rotate, so recording stops at the
# --min-free-mb floor with one log line that status shows, and its writes
# past the floor are refused where they are made (the control thread's
# checks can come late on a loaded machine); the service runs on to its own
# exit code, and nothing outside the output directory changes.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

build_workloads
JEMALLOC="$(preload_dist jemalloc amd64)/libjemalloc.so.2"
HEAPTRACK="$(preload_dist heaptrack amd64)/libheaptrack_preload.so"
vol="${SCRATCH}/vol"
mkdir -p "${vol}"
mount -t tmpfs -o size=16m memprofile-test "${vol}"
trap 'stop_services; umount --lazy "${vol}" 2>/dev/null || true; rm -rf "${SCRATCH}"' EXIT
echo "the application's data" > "${vol}/data"
mkdir -p "${SCRATCH}/cwd"
unchanged() {
  [[ "$(ls -A "${vol}")" == "$(printf 'data\nout')" && "$(cat "${vol}/data")" == "the application's data" ]] ||
    fail "something outside the output directory changed: $(ls -A "${vol}")"
  [[ -z "$(ls -A "${SCRATCH}/cwd")" ]] || fail "the service's working directory: $(ls -A "${SCRATCH}/cwd")"
}
# What the profiles use now. Rotation deletes dumps while this reads: a file
# gone between the listing and its stat is not an error (du and find exit 1
# for it, and under errexit an assignment from them ended the test silently).
in_use() { { find "${vol}/out" -type f -printf '%s\n' 2>/dev/null || true; } | awk '{ s += $1 } END { print s + 0 }'; }

# jemalloc dumping every MiB allocated (the user's MALLOC_CONF wins over
# memprofile's), within a 1 MiB budget.
out="${vol}/out"
(cd "${SCRATCH}/cwd" && MALLOC_CONF="prof:true,prof_active:true,lg_prof_sample:16,lg_prof_interval:20,prof_final:true,prof_prefix:${out}/jeprof" \
  start_service "${out}" "${SCRATCH}/je.log" --backend jemalloc --preload "${JEMALLOC}" --max-profile-mb 1 -- \
  "${SCRATCH}/leaky" 8 131072 && echo "${SERVICE_PID}" > "${SCRATCH}/je.pid")
pid="$(cat "${SCRATCH}/je.pid")"
track "${pid}"
peak=0
while kill -0 "${pid}" 2>/dev/null; do
  now="$(in_use)"
  ((now > peak)) && peak="${now}"
  # The last answer before the process ends.
  if "${MEMPROFILE}" status --json "${pid}" --output-dir "${out}" > "${SCRATCH}/je.answer" 2>/dev/null; then
    mv "${SCRATCH}/je.answer" "${SCRATCH}/je.status"
  fi
  sleep 0.2
done
wait "${pid}" 2>/dev/null || true  # not our child: the subshell's
grep -q "leaky: leaked" "${SCRATCH}/je.log" || fail "the service did not run to its end: $(cat "${SCRATCH}/je.log")"
((peak <= 1024 * 1024)) || fail "the profiles reached ${peak} bytes, over the 1 MiB budget"
[[ -e "${out}/jeprof.${pid}.0.i0.heap" ]] || fail "the first snapshot was deleted"
newest="$(find "${out}" -name "jeprof.${pid}.*.i*.heap" | sed 's/.*\.\([0-9]*\)\.i[0-9]*\.heap/\1/' | sort -n | tail -1)"
((newest > 50)) || fail "too few dumps for the test to mean anything (newest ${newest})"
(($(jq .rotated "${SCRATCH}/je.status") > 0)) || fail "status does not count the rotated snapshots: $(cat "${SCRATCH}/je.status")"
[[ "$(grep -c "deleting older snapshots in ${out}" "${SCRATCH}/je.log")" == 1 ]] || fail "not one log line: $(cat "${SCRATCH}/je.log")"
unchanged
pass "jemalloc: ${newest} dumps kept within 1 MiB (peak ${peak} bytes), the first and the newest kept, one log line"

# heaptrack's trace grows by megabytes a second: at the floor (12 of 16 MiB
# must stay free) recording stops; the service runs on.
rm -rf "${out}"
(cd "${SCRATCH}/cwd" && start_service "${out}" "${SCRATCH}/ht.log" --backend heaptrack --preload "${HEAPTRACK}" \
  --min-free-mb 12 --max-profile-mb 100 -- "${SCRATCH}/churn" 30000000 hold && echo "${SERVICE_PID}" > "${SCRATCH}/ht.pid")
pid="$(cat "${SCRATCH}/ht.pid")"
track "${pid}"
for _ in $(seq 1 600); do
  grep -q "recording stopped" "${SCRATCH}/ht.log" && break
  sleep 0.1
done
# The check's prediction, or (when the check came late) the refused write.
grep -Eq "memprofile-ctl\[${pid}\]: recording stopped: .* free on the filesystem of ${out}: (the next writes \(about .*\)|heaptrack's next write \([0-9]+ bytes\)) would pass the 12.0 MiB floor \(--min-free-mb\)" \
  "${SCRATCH}/ht.log" || fail "no stop line: $(cat "${SCRATCH}/ht.log")"
# The service holds after its work (churn ... hold): both checks always run.
kill -0 "${pid}" 2>/dev/null || fail "the service ended before status and start were asked: $(cat "${SCRATCH}/ht.log")"
"${MEMPROFILE}" status "${pid}" --output-dir "${out}" > "${SCRATCH}/ht.status" || fail "status after the stop"
grep -q "^pid ${pid}: heaptrack, recording off (stopped: .*12.0 MiB floor" "${SCRATCH}/ht.status" ||
  fail "status: $(cat "${SCRATCH}/ht.status")"
rc=0
"${MEMPROFILE}" start "${pid}" --output-dir "${out}" > "${SCRATCH}/ht.start" 2>&1 || rc=$?
if ((rc != 1)) || ! grep -q "heaptrack stopped for good" "${SCRATCH}/ht.start"; then
  fail "start after the stop: exit ${rc}: $(cat "${SCRATCH}/ht.start")"
fi
kill -TERM "${pid}"
while kill -0 "${pid}" 2>/dev/null; do sleep 0.1; done
# The floor itself holds, however late the checks came: 12 MiB less at most
# two pages (tmpfs counts pages, the gate bytes; and the process's record,
# memprofile-proc.PID.json, can come after the trace's first room was set).
free_kib="$(df -k --output=avail "${vol}" | tail -1)"
((free_kib >= 12 * 1024 - 8)) || fail "only ${free_kib} KiB left free of the 16 MiB volume: the 12 MiB floor did not hold"
unchanged
"${MEMPROFILE}" report --rootfs / "${out}"/heaptrack.*.raw > "${SCRATCH}/ht.report" || fail "the stopped trace does not read"
grep -q "alloc_churn.c" "${SCRATCH}/ht.report" || fail "the stopped trace names no site: $(head "${SCRATCH}/ht.report")"
pass "heaptrack: recording stopped at the floor (${free_kib} KiB still free), status says why, start is refused, the trace reads"

# The gate alone, where no check can help: a writer of a heaptrack-named
# trace with no heaptrack to stop, so only the library's write(2) holds the
# floor. It writes 4 KiB at a time as heaptrack does, 32 MiB in all (twice
# the volume): every write succeeds, as heaptrack's must (it would go on
# past a failed one and leave a gap), and the trace ends at the floor.
umount --lazy "${vol}"
mount -t tmpfs -o size=16m memprofile-test "${vol}"
mkdir -p "${vol}/gate"
cat > "${SCRATCH}/writer.c" <<'C'
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
/* writer TRACE [OTHER]: with OTHER, the trace's fd is first made OTHER by
   dup2, which the library does not see (as close_range): the writes are
   then the application's own, and must all reach OTHER. */
int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) return 2;
  int fd = open(argv[1], O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) return perror(argv[1]), 2;
  if (argc == 3) {
    int other = open(argv[2], O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (other < 0 || dup2(other, fd) != fd) return perror(argv[2]), 2;
  }
  static char buf[4096];
  memset(buf, 'x', sizeof buf);
  unsigned ok = 0, failed = 0;
  for (int i = 0; i < 8192; ++i) write(fd, buf, sizeof buf) == (ssize_t)sizeof buf ? ++ok : ++failed;
  printf("%u %u\n", ok, failed);
  return 0;
}
C
gcc -O1 -o "${SCRATCH}/writer" "${SCRATCH}/writer.c"
gated() {
  env LD_PRELOAD="${CTL_LIBRARY}" MEMPROFILE_CTL_BACKEND=heaptrack MEMPROFILE_CTL_DIR="${vol}/gate" \
    MEMPROFILE_CTL_MIN_FREE_BYTES=$((12 * 1024 * 1024)) "${SCRATCH}/writer" "$@"
}
room=$(($(df -B1 --output=avail "${vol}" | tail -1) - 12 * 1024 * 1024))
trace="${vol}/gate/heaptrack.$$.raw"
gated "${trace}" > "${SCRATCH}/gate.out" 2> "${SCRATCH}/gate.log" || fail "the writer failed: $(cat "${SCRATCH}/gate.log")"
[[ "$(cat "${SCRATCH}/gate.out")" == "8192 0" ]] || fail "the writer's writes (ok, failed): $(cat "${SCRATCH}/gate.out")"
size="$(stat -c %s "${trace}")"
((size <= room && size > room - 8192 && size % 4096 == 0)) ||
  fail "the trace holds ${size} bytes, with ${room} of room to the floor (whole writes only)"
free_kib="$(df -k --output=avail "${vol}" | tail -1)"
((free_kib >= 12 * 1024 - 4)) || fail "the gate: only ${free_kib} KiB left free"
[[ "$(grep -c "heaptrack's next write (4096 bytes) would pass the 12.0 MiB floor (--min-free-mb), so the trace ends there" \
  "${SCRATCH}/gate.log")" == 1 ]] || fail "the end of the trace is not said once: $(cat "${SCRATCH}/gate.log")"
# The application's own fd with the trace's number: never gated.
rm -f "${trace}"
gated "${trace}" "${SCRATCH}/other" > "${SCRATCH}/reuse.out" 2> "${SCRATCH}/reuse.log" ||
  fail "the writer failed: $(cat "${SCRATCH}/reuse.log")"
[[ "$(cat "${SCRATCH}/reuse.out") $(stat -c %s "${SCRATCH}/other")" == "8192 0 $((8192 * 4096))" ]] ||
  fail "a reused fd: $(cat "${SCRATCH}/reuse.out"), $(stat -c %s "${SCRATCH}/other") bytes reached the file"
pass "the gate alone: the trace ends at ${size} of ${room} bytes of room (${free_kib} KiB free), every write succeeds, said once; a reused fd is not gated"
