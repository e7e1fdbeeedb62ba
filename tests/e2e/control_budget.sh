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
  --min-free-mb 12 --max-profile-mb 100 -- "${SCRATCH}/churn" 30000000 && echo "${SERVICE_PID}" > "${SCRATCH}/ht.pid")
pid="$(cat "${SCRATCH}/ht.pid")"
track "${pid}"
for _ in $(seq 1 600); do
  grep -q "recording stopped" "${SCRATCH}/ht.log" && break
  sleep 0.1
done
# The check's prediction, or (when the check came late) the refused write.
grep -Eq "memprofile-ctl\[${pid}\]: recording stopped: .* free on the filesystem of ${out}: (the next writes \(about .*\)|heaptrack's next write \([0-9]+ bytes\)) would pass the 12.0 MiB floor \(--min-free-mb\)" \
  "${SCRATCH}/ht.log" || fail "no stop line: $(cat "${SCRATCH}/ht.log")"
if kill -0 "${pid}" 2>/dev/null; then
  "${MEMPROFILE}" status "${pid}" --output-dir "${out}" > "${SCRATCH}/ht.status" || fail "status after the stop"
  grep -q "^pid ${pid}: heaptrack, recording off (stopped: .*12.0 MiB floor" "${SCRATCH}/ht.status" ||
    fail "status: $(cat "${SCRATCH}/ht.status")"
  rc=0
  "${MEMPROFILE}" start "${pid}" --output-dir "${out}" > "${SCRATCH}/ht.start" 2>&1 || rc=$?
  if ((rc != 1)) || ! grep -q "heaptrack stopped for good" "${SCRATCH}/ht.start"; then
    fail "start after the stop: exit ${rc}: $(cat "${SCRATCH}/ht.start")"
  fi
fi
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
# trace with no heaptrack to stop, so only the refused write(2) holds the
# floor. It writes 4 KiB at a time as heaptrack does, until a write fails.
umount --lazy "${vol}"
mount -t tmpfs -o size=16m memprofile-test "${vol}"
mkdir -p "${vol}/gate"
cat > "${SCRATCH}/writer.c" <<'C'
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char** argv) {
  if (argc != 2) return 2;
  int fd = open(argv[1], O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) return perror(argv[1]), 2;
  static char buf[4096];
  memset(buf, 'x', sizeof buf);
  unsigned long long total = 0;
  int err = 0;
  for (long i = 0; i < 8192 && !err; ++i) {  /* 32 MiB at most: twice the volume */
    ssize_t n = write(fd, buf, sizeof buf);
    if (n < 0) err = errno;
    else total += (unsigned long long)n;
  }
  /* Its number again, for another file, by dup2 (which the library does
     not see, as close_range): that file's writes are not gated. */
  int other = open("/dev/null", O_WRONLY);
  int same = other >= 0 ? dup2(other, fd) : -1;
  printf("%llu %s %s %zd\n", total, err == ENOSPC ? "ENOSPC" : err ? strerror(err) : "none",
         same == fd ? "same-fd" : "no-fd", write(fd, buf, sizeof buf));
  return 0;
}
C
gcc -O1 -o "${SCRATCH}/writer" "${SCRATCH}/writer.c"
room=$(($(df -B1 --output=avail "${vol}" | tail -1) - 12 * 1024 * 1024))
env LD_PRELOAD="${CTL_LIBRARY}" MEMPROFILE_CTL_BACKEND=heaptrack MEMPROFILE_CTL_DIR="${vol}/gate" \
  MEMPROFILE_CTL_MIN_FREE_BYTES=$((12 * 1024 * 1024)) "${SCRATCH}/writer" "${vol}/gate/heaptrack.$$.raw" \
  > "${SCRATCH}/gate.out" 2> "${SCRATCH}/gate.log" || fail "the writer failed: $(cat "${SCRATCH}/gate.log")"
read -r written why fdnote reused < "${SCRATCH}/gate.out"
[[ "${why}" == ENOSPC ]] || fail "the writer's writes ended with ${why} after ${written} bytes, not with ENOSPC at the floor"
((written <= room && written > room - 8192)) || fail "the gate let ${written} bytes through, with ${room} of room to the floor"
[[ "${fdnote} ${reused}" == "same-fd 4096" ]] || fail "a reused fd: ${fdnote}, its write returned ${reused}"
free_kib="$(df -k --output=avail "${vol}" | tail -1)"
((free_kib >= 12 * 1024 - 4)) || fail "the gate: only ${free_kib} KiB left free"
grep -q "heaptrack's next write (4096 bytes) would pass the 12.0 MiB floor (--min-free-mb), so it was refused" "${SCRATCH}/gate.log" ||
  fail "the refusal is not said: $(cat "${SCRATCH}/gate.log")"
pass "the gate alone: ${written} of ${room} bytes of room written, then ENOSPC (${free_kib} KiB free), said once; a reused fd is not gated"
