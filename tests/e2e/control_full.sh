#!/usr/bin/env bash
# A sudden large dump never leaves the filesystem past its floor, nor a cut
# dump behind. On a real tiny tmpfs, a service's first snapshot is a few
# KiB; then it maps tens of thousands of regions (a dump lists the process's
# maps), so its next one is megabytes: on an 8 MiB tmpfs with a 7 MiB floor
# it is written, found past the floor, removed, and recording stops with the
# reason; on a 2 MiB tmpfs it fills the disk mid-dump, and what was written
# is removed, with the full disk named. status says why; report of the
# directory reads the dumps that are whole.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

JEMALLOC="$(preload_dist jemalloc amd64)/libjemalloc.so.2"
cat > "${SCRATCH}/maps.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
// argv[1]: a file to create once the regions are mapped; argv[2]: how many;
// argv[3]: a file whose creation says map them now (after the test's first
// look, however long the test takes to get there). Runs until killed.
int main(int argc, char** argv) {
  if (argc < 4) return 2;
  char* keep = malloc(1 << 20);
  struct stat st;
  while (stat(argv[3], &st) != 0) usleep(50000);
  long n = atol(argv[2]), page = sysconf(_SC_PAGESIZE);
  char* base = mmap(NULL, (size_t)(n * page), PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return 3;
  // Every other page writable: the kernel cannot merge them into one map.
  for (long i = 0; i < n; i += 2) mprotect(base + i * page, (size_t)page, PROT_READ | PROT_WRITE);
  fclose(fopen(argv[1], "w"));
  for (;;) pause();
  free(keep);
}
C
gcc -O1 -g -o "${SCRATCH}/maps" "${SCRATCH}/maps.c"

vols=()
cleanup() {
  local v
  stop_services
  for v in "${vols[@]}"; do umount --lazy "${v}" 2>/dev/null || true; done
  rm -rf "${SCRATCH}"
}
trap cleanup EXIT

# run SIZE FLOOR_MB REGIONS: a service on a tmpfs of SIZE, a first snapshot,
# then one after REGIONS regions are mapped; sets out, pid, and the second
# snapshot's exit code and output in ${SCRATCH}/second.
run() {
  local vol="${SCRATCH}/vol-$1"
  mkdir -p "${vol}"
  mount -t tmpfs -o "size=$1" memprofile-test "${vol}"
  vols+=("${vol}")
  out="${vol}/out"
  start_service "${out}" "${SCRATCH}/$1.log" --dormant --backend jemalloc --preload "${JEMALLOC}" \
    --min-free-mb "$2" --max-profile-mb 64 -- "${SCRATCH}/maps" "${SCRATCH}/mapped-$1" "$3" "${SCRATCH}/go-$1"
  pid="${SERVICE_PID}"
  "${MEMPROFILE}" start "${pid}" --output-dir "${out}" > /dev/null || fail "$1: start"
  "${MEMPROFILE}" snapshot "${pid}" --output-dir "${out}" > "${SCRATCH}/first" || fail "$1: the first snapshot"
  touch "${SCRATCH}/go-$1"
  wait_until 60 test -e "${SCRATCH}/mapped-$1" || fail "$1: the regions were not mapped"
  second_rc=0
  "${MEMPROFILE}" snapshot "${pid}" --output-dir "${out}" > "${SCRATCH}/second" 2>&1 || second_rc=$?
}

# check SIZE: no cut or partial dump, the first one still whole, status
# says why recording stopped, report of the directory works.
check() {
  ((second_rc != 0)) || fail "$1: the large snapshot was kept: $(cat "${SCRATCH}/second")"
  [[ -z "$(find "${out}" -name '*.part')" ]] || fail "$1: a partial dump was left: $(ls "${out}")"
  [[ "$(find "${out}" -name 'jeprof.*.heap' | wc -l)" == 1 ]] || fail "$1: dumps: $(ls "${out}")"
  "${MEMPROFILE}" status "${pid}" --output-dir "${out}" --json > "${SCRATCH}/status.json"
  [[ "$(jq -r .recording "${SCRATCH}/status.json")" == false ]] || fail "$1: still recording"
  "${MEMPROFILE}" report --rootfs / "${out}" > "${SCRATCH}/report" 2>&1 || fail "$1: report: $(cat "${SCRATCH}/report")"
}

run 8m 7 40000
grep -q "left .* free on the filesystem of ${out}, under the 7.0 MiB floor (--min-free-mb): the dump is removed" \
  "${SCRATCH}/second" || fail "8m: $(cat "${SCRATCH}/second")"
check 8m
jq -e '.stopped_reason | contains("under the 7.0 MiB floor")' "${SCRATCH}/status.json" > /dev/null ||
  fail "8m: status: $(jq -c '{recording, stopped_reason}' "${SCRATCH}/status.json")"
(($(df --output=avail -B1 "${out}" | tail -1) >= 7 * 1024 * 1024)) || fail "8m: the floor is crossed: $(df -h "${out}")"
pass "a dump that crossed the 7 MiB floor once written is removed, recording stops, status says why"

run 2m 1 60000
grep -q "the filesystem of ${out} is full .*: the dump could not be written, and what was written of it is removed" \
  "${SCRATCH}/second" || fail "2m: $(cat "${SCRATCH}/second")"
check 2m
jq -e '.stopped_reason | contains("is full")' "${SCRATCH}/status.json" > /dev/null ||
  fail "2m: status: $(jq -c '{recording, stopped_reason}' "${SCRATCH}/status.json")"
pass "a dump that filled the disk is removed, no cut dump is left, the full disk is named, report reads the rest"
