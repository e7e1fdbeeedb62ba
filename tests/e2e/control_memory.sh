#!/usr/bin/env bash
# Where the memory went, when it is not the heap: memprofile status shows,
# for each process of the tree, RSS as the kernel splits it, the
# allocator's own view (jemalloc's stats, glibc's mallinfo2 under
# heaptrack) and the gap between them by cause, plus the cgroup. A service
# whose heap stays flat while it maps 64 MiB of anonymous memory and fills
# 32 MiB of shared memory: the gap says which, the allocator does not move.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

JEMALLOC="$(preload_dist jemalloc amd64)/libjemalloc.so.2"
HEAPTRACK="$(preload_dist heaptrack amd64)/libheaptrack_preload.so"
cat > "${SCRATCH}/offheap.c" <<'C'
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
// argv[1]: a file to create once the memory outside the heap is in use;
// argv[2]: a file whose appearance says to map it (after the test's first
// look, however late a busy machine makes that: no sleep decides it);
// argv[3]: a file created once the 8 MiB heap is in use (the control
// socket is up before main, so the first look waits for this).
int main(int argc, char** argv) {
  if (argc < 4) return 2;
  char* heap = malloc(8 << 20);
  memset(heap, 1, 8 << 20);
  fclose(fopen(argv[3], "w"));
  for (int i = 0; access(argv[2], F_OK) != 0; ++i) {
    if (i == 60000) return 4;  // 10 minutes: the test is gone
    usleep(10000);
  }
  char* anon = mmap(NULL, 64 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  int fd = memfd_create("offheap", 0);
  if (anon == MAP_FAILED || fd < 0 || ftruncate(fd, 32 << 20) != 0) return 3;
  char* shm = mmap(NULL, 32 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (shm == MAP_FAILED) return 3;
  memset(anon, 1, 64 << 20);
  memset(shm, 1, 32 << 20);
  fclose(fopen(argv[1], "w"));
  sleep(600);  // until the test kills it
  free(heap);
  return 0;
}
C
gcc -O1 -g -o "${SCRATCH}/offheap" "${SCRATCH}/offheap.c"

# gap JSON WHAT: the bytes of one cause of the gap, in MiB.
gap() { jq --arg w "$2" '[.processes[0].gap[] | select(.what == $w) | .bytes][0] / 1048576 | floor' "$1"; }
allocated() { jq '.processes[0].allocator | (.allocated // .in_use) / 1048576 | floor' "$1"; }

# Beside each snapshot, a record of the same numbers (NAME.mem.json), which
# collect carries and report compares: with jemalloc, a snapshot before the
# off-heap memory and one after make report say the heap is flat and RSS
# grew outside the allocator; the leaky example's say the heap grew.
out="${SCRATCH}/records"
start_service "${out}" "${SCRATCH}/records.log" --dormant --backend jemalloc --preload "${JEMALLOC}" -- \
  "${SCRATCH}/offheap" "${SCRATCH}/ready-records" "${SCRATCH}/go-records" "${SCRATCH}/heap-records"
pid="${SERVICE_PID}"
wait_until 60 test -e "${SCRATCH}/heap-records" || fail "records: the heap was not allocated"
"${MEMPROFILE}" start "${pid}" --output-dir "${out}" > /dev/null || fail "records: start"
first="$("${MEMPROFILE}" snapshot "${pid}" --output-dir "${out}")" || fail "records: the first snapshot"
touch "${SCRATCH}/go-records"
wait_until 60 test -e "${SCRATCH}/ready-records" || fail "records: the memory was not mapped"
second="$("${MEMPROFILE}" snapshot "${pid}" --output-dir "${out}")" || fail "records: the second snapshot"
for f in "${first}" "${second}"; do
  jq -e '.rss > 0 and .allocator == "jemalloc" and (.allocated | type) == "number"' "${f}.mem.json" > /dev/null ||
    fail "records: ${f}.mem.json: $(cat "${f}.mem.json" 2>&1)"
done
kill -KILL "${pid}"
"${MEMPROFILE}" report --rootfs / "${out}" --trend "${SCRATCH}/records.svg" > "${SCRATCH}/records.txt" 2>&1 ||
  fail "records: report: $(cat "${SCRATCH}/records.txt")"
# The trend draws RSS and the allocator's resident bytes beside the sites.
grep -q 'data-name="RSS (' "${SCRATCH}/records.svg" || fail "records: the trend has no RSS line"
grep -q 'data-name="allocator resident (' "${SCRATCH}/records.svg" || fail "records: the trend has no allocator line"
grep -q "^memory of pid ${pid}, first snapshot to last: RSS .* -> .* (+.*): anonymous +6[0-9].[0-9] MiB" "${SCRATCH}/records.txt" ||
  fail "records: no memory line: $(head -8 "${SCRATCH}/records.txt")"
grep -q "^  where it grew: the heap is flat (.*); RSS grew by 6[0-9].[0-9] MiB outside the allocator: anonymous mappings" \
  "${SCRATCH}/records.txt" || fail "records: verdict: $(grep -A1 '^memory of' "${SCRATCH}/records.txt")"
"${LAUNCHER}" collect --backend jemalloc --output-dir "${out}" --out "${SCRATCH}/records.tar" --settle 0 --timeout 10 2> /dev/null ||
  fail "records: collect"
"${MEMPROFILE}" report --json --rootfs / "${SCRATCH}/records.tar" > "${SCRATCH}/records.json" || fail "records: report of the archive"
jq -e '.memory[0].verdict | contains("outside the allocator")' "${SCRATCH}/records.json" > /dev/null ||
  fail "records: the archive's report: $(jq -c .memory "${SCRATCH}/records.json")"
pass "records beside the snapshots, carried by collect: report says the heap is flat and RSS grew outside the allocator"

build_workloads
out="${SCRATCH}/leak-records"
start_service "${out}" "${SCRATCH}/leak.log" --dormant --backend jemalloc --preload "${JEMALLOC}" -- "${SCRATCH}/leaky" 0 1048576
"${MEMPROFILE}" start "${SERVICE_PID}" --output-dir "${out}" > /dev/null || fail "leak: start"
"${MEMPROFILE}" snapshot "${SERVICE_PID}" --output-dir "${out}" > /dev/null || fail "leak: the first snapshot"
sleep 3
second="$("${MEMPROFILE}" snapshot "${SERVICE_PID}" --output-dir "${out}")" || fail "leak: the second snapshot"
# status gives the profile's view too, in either binary: bytes in use at
# the newest snapshot (this one, or an interval dump jemalloc wrote since),
# the number report gives for that dump.
"${MEMPROFILE}" status "${SERVICE_PID}" --output-dir "${out}" --json > "${SCRATCH}/leak-status.json" || fail "leak: status"
"${LAUNCHER}" status "${SERVICE_PID}" --output-dir "${out}" > "${SCRATCH}/leak-status.txt" || fail "leak: status (static)"
dump_re="${out//./\\.}/jeprof\\.${SERVICE_PID}\\.[0-9]+\\.[a-z][0-9]*\\.heap"
grep -Eq "^  profile: [0-9.]+ MiB in use at the last snapshot \(${dump_re}\), scaled as memprofile report scales it$" \
  "${SCRATCH}/leak-status.txt" || fail "leak: status's profile line: $(grep profile "${SCRATCH}/leak-status.txt")"
newest="$(jq -r '.processes[0].profile.snapshot' "${SCRATCH}/leak-status.json")"
[[ "${newest}" =~ ^${dump_re}$ ]] || fail "leak: status's snapshot $(jq -c '.processes[0].profile' "${SCRATCH}/leak-status.json")"
kill -KILL "${SERVICE_PID}"
"${MEMPROFILE}" report --rootfs / "${out}" > "${SCRATCH}/leak.txt" 2>&1 || fail "leak: report: $(cat "${SCRATCH}/leak.txt")"
"${MEMPROFILE}" report --json --rootfs / "${out}" > "${SCRATCH}/leak-report.json" || fail "leak: report --json"
"${MEMPROFILE}" report --json --rootfs / "${newest}" > "${SCRATCH}/newest-report.json" || fail "leak: report of ${newest}"
status_bytes="$(jq '.processes[0].profile.bytes_in_use | floor' "${SCRATCH}/leak-status.json")"
report_bytes="$(jq '.snapshots[-1].bytes_in_use | floor' "${SCRATCH}/newest-report.json")"
((status_bytes == report_bytes && status_bytes > 1048576)) ||
  fail "leak: status says ${status_bytes} bytes in use at ${newest}, report ${report_bytes}"
grep -q "^  where it grew: the heap grew by .*: see the sites below" "${SCRATCH}/leak.txt" ||
  fail "leak: verdict: $(grep -A1 '^memory of' "${SCRATCH}/leak.txt")"
pass "the leaky example's records: report says the heap grew, see the sites; status's in-use bytes at the last snapshot are report's (${report_bytes})"

for backend in jemalloc heaptrack; do
  lib="${JEMALLOC}"
  [[ "${backend}" == heaptrack ]] && lib="${HEAPTRACK}"
  out="${SCRATCH}/out-${backend}"
  start_service "${out}" "${SCRATCH}/${backend}.log" --backend "${backend}" --preload "${lib}" -- \
    "${SCRATCH}/offheap" "${SCRATCH}/ready-${backend}" "${SCRATCH}/go-${backend}" "${SCRATCH}/heap-${backend}"
  pid="${SERVICE_PID}"
  wait_until 60 test -e "${SCRATCH}/heap-${backend}" || fail "${backend}: the heap was not allocated"
  "${MEMPROFILE}" status "${pid}" --output-dir "${out}" --json > "${SCRATCH}/before.json" || fail "${backend}: status"
  touch "${SCRATCH}/go-${backend}"
  wait_until 60 test -e "${SCRATCH}/ready-${backend}" || fail "${backend}: the memory was not mapped"
  "${MEMPROFILE}" status "${pid}" --output-dir "${out}" --json > "${SCRATCH}/after.json" || fail "${backend}: status"
  "${MEMPROFILE}" status "${pid}" --output-dir "${out}" > "${SCRATCH}/after.txt" || fail "${backend}: status (text)"
  name="$([[ "${backend}" == jemalloc ]] && echo jemalloc || echo glibc)"
  [[ "$(jq -r '.processes[0].allocator.name' "${SCRATCH}/after.json")" == "${name}" ]] ||
    fail "${backend}: allocator $(jq -c '.processes[0].allocator' "${SCRATCH}/after.json")"
  heap_grew=$(($(allocated "${SCRATCH}/after.json") - $(allocated "${SCRATCH}/before.json")))
  anon_grew=$(($(gap "${SCRATCH}/after.json" "anonymous memory outside the allocator") -
               $(gap "${SCRATCH}/before.json" "anonymous memory outside the allocator")))
  shared=$(gap "${SCRATCH}/after.json" "file-backed and shmem memory")
  ((heap_grew < 8)) || fail "${backend}: the allocator grew by ${heap_grew} MiB"
  ((anon_grew >= 56)) || fail "${backend}: the anonymous gap grew by ${anon_grew} MiB, not about 64: $(jq -c '.processes[0] | {memory, gap, allocator}' "${SCRATCH}/after.json")"
  ((shared >= 30)) || fail "${backend}: file-backed and shmem ${shared} MiB, not about 32"
  grep -q "^  memory: RSS .* (anonymous .*, file .*, shmem .*), swap " "${SCRATCH}/after.txt" || fail "${backend}: text: $(cat "${SCRATCH}/after.txt")"
  grep -q "^  outside the allocator's allocations: allocator overhead and fragmentation .*; anonymous memory outside the allocator .*; file-backed and shmem memory " \
    "${SCRATCH}/after.txt" || fail "${backend}: text: $(cat "${SCRATCH}/after.txt")"
  grep -Eq "^cgroup (.+ \(v[12]\): .* charged \(what the OOM killer counts\)|: )" "${SCRATCH}/after.txt" ||
    fail "${backend}: no cgroup line: $(cat "${SCRATCH}/after.txt")"
  [[ "$(jq '.tree.rss_profiled == .tree.rss and .tree.rss > 0' "${SCRATCH}/after.json")" == true ]] ||
    fail "${backend}: tree: $(jq -c .tree "${SCRATCH}/after.json")"
  kill -KILL "${pid}"
  pass "${backend}: the heap stayed flat (${heap_grew} MiB), the anonymous gap grew ${anon_grew} MiB, shmem ${shared} MiB; the cgroup and the tree's share said"
done

# Each cause of growth on the host, under the launcher (lib.sh memory_causes).
gcc -O1 -g -pthread -o "${SCRATCH}/membuckets" "${E2E_ROOT}/tests/fixtures/src/membuckets.c"
causes_start() {
  "${LAUNCHER}" exec --output-dir "$2" --min-free-mb 1 --backend jemalloc --preload "${JEMALLOC}" -- \
    "${SCRATCH}/membuckets" "$1" "$2/go" "$2/ready" > "$2.log" 2>&1 &
  track $!
}
causes_ctl() {
  local dir="$1" action="$2"
  shift 2
  "${LAUNCHER}" "${action}" "${CAUSES_PID}" --output-dir "${dir}" "$@"
}
memory_causes host --rootfs /
pass "host: $(causes_said); status agrees with /proc"
