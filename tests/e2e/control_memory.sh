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
// argv[1]: a file to create once the memory outside the heap is in use.
int main(int argc, char** argv) {
  if (argc < 2) return 2;
  char* heap = malloc(8 << 20);
  memset(heap, 1, 8 << 20);
  sleep(3);
  char* anon = mmap(NULL, 64 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  int fd = memfd_create("offheap", 0);
  if (anon == MAP_FAILED || fd < 0 || ftruncate(fd, 32 << 20) != 0) return 3;
  char* shm = mmap(NULL, 32 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (shm == MAP_FAILED) return 3;
  memset(anon, 1, 64 << 20);
  memset(shm, 1, 32 << 20);
  fclose(fopen(argv[1], "w"));
  sleep(30);
  free(heap);
  return 0;
}
C
gcc -O1 -g -o "${SCRATCH}/offheap" "${SCRATCH}/offheap.c"

# gap JSON WHAT: the bytes of one cause of the gap, in MiB.
gap() { jq --arg w "$2" '[.processes[0].gap[] | select(.what == $w) | .bytes][0] / 1048576 | floor' "$1"; }
allocated() { jq '.processes[0].allocator | (.allocated // .in_use) / 1048576 | floor' "$1"; }

for backend in jemalloc heaptrack; do
  lib="${JEMALLOC}"
  [[ "${backend}" == heaptrack ]] && lib="${HEAPTRACK}"
  out="${SCRATCH}/out-${backend}"
  start_service "${out}" "${SCRATCH}/${backend}.log" --backend "${backend}" --preload "${lib}" -- \
    "${SCRATCH}/offheap" "${SCRATCH}/ready-${backend}"
  pid="${SERVICE_PID}"
  "${MEMPROFILE}" status "${pid}" --output-dir "${out}" --json > "${SCRATCH}/before.json" || fail "${backend}: status"
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
