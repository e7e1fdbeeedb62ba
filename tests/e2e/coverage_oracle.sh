#!/usr/bin/env bash
# Attached is not seeing: for each program that keeps 48 MiB from
# planted_growth through a different allocator (tests/fixtures/allocators.sh),
# the verdict of `check` under heaptrack and jemalloc is held against what
# the real profiler recorded. READY (profilable: yes): memprofile exec runs
# it and report must name planted_growth. NOT READY: the profiler, preloaded
# as a user would without memprofile, must indeed miss it. Either mismatch
# fails. The expected verdicts are written out too, so that a rule that
# drifts both ways at once is caught.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

fx="$(allocator_fixtures)"
declare -A LIB=(
  [heaptrack]="$(preload_dist heaptrack amd64)/libheaptrack_preload.so"
  [jemalloc]="$(preload_dist jemalloc amd64)/libjemalloc.so.2"
)
# PROGRAM:BACKEND -> the verdict, and the code that says why when it is no.
declare -A WANT=(
  [plain:heaptrack]=yes [plain:jemalloc]=yes
  [je-needed:heaptrack]=yes [je-needed:jemalloc]=yes
  [weak-sdallocx:heaptrack]=yes [weak-sdallocx:jemalloc]=yes
  [cxx-plain:heaptrack]=yes [cxx-plain:jemalloc]=yes
  [cxx-je-needed:heaptrack]=HEAP_OWN_ALLOCATOR
  [je-static:heaptrack]=HEAP_OWN_MALLOC [je-static:jemalloc]=yes
  [tc-static:heaptrack]=HEAP_OWN_MALLOC [tc-static:jemalloc]=HEAP_OWN_MALLOC
  [tc-heapprof:heaptrack]=yes [tc-heapprof:jemalloc]=yes
  [tc-needed:heaptrack]=yes [tc-needed:jemalloc]=yes
  [rjem-c:heaptrack]=HEAP_OWN_ALLOCATOR [rjem-c:jemalloc]=yes
  [rust-rjem:heaptrack]=HEAP_OWN_ALLOCATOR [rust-rjem:jemalloc]=yes
  [rust-mimalloc:heaptrack]=HEAP_OWN_ALLOCATOR [rust-mimalloc:jemalloc]=HEAP_OWN_ALLOCATOR
)

# preloaded BACKEND PROGRAM OUT: the profiler as a user preloads it by hand.
preloaded() {
  case "$1" in
    heaptrack) env LD_PRELOAD="${LIB[heaptrack]}" DUMP_HEAPTRACK_OUTPUT="$3/heaptrack.\$\$.raw" "$2" ;;
    jemalloc) env LD_PRELOAD="${LIB[jemalloc]}" MALLOC_CONF="prof:true,prof_final:true,prof_prefix:$3/jeprof" "$2" ;;
  esac > /dev/null
}

checked=0
for key in "${!WANT[@]}"; do
  program="${key%%:*}" backend="${key##*:}" want="${WANT[${key}]}"
  out="${SCRATCH}/out-${program}-${backend}"
  mkdir -p "${out}"
  # (check exits 1 for a file that is not profilable: the text says which.)
  verdict="$("${MEMPROFILE}" check --root / --preload "${LIB[${backend}]}" "${fx}/${program}" || true)"
  verdict_says "${key}" "${verdict}" "${want}"
  if [[ "${want}" == yes ]]; then
    "${LAUNCHER}" exec --backend "${backend}" --preload "${LIB[${backend}]}" --output-dir "${out}" --min-free-mb 1 \
      -- "${fx}/${program}" > /dev/null 2> "${out}.log" || fail "${key}: exec failed: $(cat "${out}.log")"
    "${MEMPROFILE}" report --rootfs / "${out}" > "${out}.report" 2>&1 ||
      fail "${key}: READY, but report found no profile: $(cat "${out}.report" "${out}.log")"
    grep -q "planted_growth" "${out}.report" ||
      fail "${key}: READY, but the profile misses planted_growth: $(head -20 "${out}.report")"
  else
    preloaded "${backend}" "${fx}/${program}" "${out}"
    if "${MEMPROFILE}" report --rootfs / "${out}" > "${out}.report" 2>&1; then
      ! grep -q "planted_growth" "${out}.report" ||
        fail "${key}: said ${want}, but ${backend} did see planted_growth: $(head -12 "${out}.report")"
    fi
  fi
  checked=$((checked + 1))
done
[[ "${checked}" == 23 ]] || fail "checked ${checked} of 23 pairs"
pass "23 program/backend pairs: every READY profile names planted_growth, every NOT READY one misses it"

# check with no --preload (a user's first command) judges the heap for the
# default backend, whose library defines malloc and none of an allocator's
# own names, as heaptrack's does: the heaptrack column's verdicts, held
# against what heaptrack recorded above, and a line that says which backend.
defaulted=0
for key in "${!WANT[@]}"; do
  [[ "${key}" == *:heaptrack ]] || continue
  program="${key%%:*}"
  verdict="$("${MEMPROFILE}" check --root / "${fx}/${program}" || true)"
  verdict_says "${program} with no --preload" "${verdict}" "${WANT[${key}]}"
  grep -q "heap coverage judged for the default backend, bytehound" <<< "${verdict}" ||
    fail "${program} with no --preload: the backend judged for is not said: ${verdict}"
  defaulted=$((defaulted + 1))
done
[[ "${defaulted}" == 12 ]] || fail "checked ${defaulted} of 12 programs with no --preload"
pass "check with no --preload: the 12 programs judged for the default backend as heaptrack's profiles bear out, and said so"

# The program's own jemalloc, driven: the start line says which variable,
# and that the control library finds its unexported mallctl in the program's
# symbol table (coverage_own_jemalloc_symtab.sh drives it, and the stripped
# case).
grep -q "its own jemalloc, linked into it, through _RJEM_MALLOC_CONF; its _rjem_mallctl is not exported: the control library finds it in the program's symbol table" \
  "${SCRATCH}/out-rust-rjem-jemalloc.log" || fail "start line: $(cat "${SCRATCH}/out-rust-rjem-jemalloc.log")"
pass "the program's own jemalloc: driven through _RJEM_MALLOC_CONF, its unexported mallctl found in its symbol table"
