#!/usr/bin/env bash
# The heap coverage rules on arm64 files as on amd64, with programs
# cross-built against Debian's arm64 allocators (tests/fixtures/allocators.sh)
# and the arm64 preload libraries: tcmalloc linked in defines malloc
# (HEAP_OWN_MALLOC under both), a call to mi_malloc is missed by jemalloc
# (HEAP_OWN_ALLOCATOR) and seen by heaptrack, which interposes mimalloc's
# own names; glibc's malloc is READY under both.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

fx="$(allocator_fixtures)"
declare -A LIB=(
  [heaptrack]="$(preload_dist heaptrack arm64)/libheaptrack_preload.so"
  [jemalloc]="$(preload_dist jemalloc arm64)/libjemalloc.so.2"
)
declare -A WANT=(
  [arm64-plain:heaptrack]=yes [arm64-plain:jemalloc]=yes
  [arm64-tc-static:heaptrack]=HEAP_OWN_MALLOC [arm64-tc-static:jemalloc]=HEAP_OWN_MALLOC
  [arm64-mimalloc:heaptrack]=yes [arm64-mimalloc:jemalloc]=HEAP_OWN_ALLOCATOR
)
checked=0
for key in "${!WANT[@]}"; do
  program="${key%%:*}" backend="${key##*:}" want="${WANT[${key}]}"
  [[ "$(file "${fx}/${program}")" == *"ARM aarch64"* ]] || fail "${program} is not an arm64 file"
  verdict="$("${MEMPROFILE}" check --preload "${LIB[${backend}]}" "${fx}/${program}" || true)"
  verdict_says "${key}" "${verdict}" "${want}"
  [[ "${want}" != yes ]] || ! grep -q "HEAP_" <<< "${verdict}" || fail "${key}: a heap finding: ${verdict}"
  checked=$((checked + 1))
done
[[ "${checked}" == 6 ]] || fail "checked ${checked} of 6"
pass "arm64: 6 program/backend verdicts as on amd64 (tcmalloc linked in, mi_malloc called, glibc's malloc)"
