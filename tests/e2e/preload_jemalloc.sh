#!/usr/bin/env bash
# jemalloc from pinned source, natively for amd64 and cross-compiled for
# arm64; a leaking program under each records a heap profile that names the
# leaking function (arm64 under qemu-aarch64).
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

amd64="$(preload_dist jemalloc amd64)"
arm64="$(preload_dist jemalloc arm64)"
grep -q '"arch": "arm64"' "${arm64}/manifest.json" || fail "arm64 manifest"
grep -q '"build_flags": ".*--with-lg-page=16' "${arm64}/manifest.json" || fail "arm64 build without 64 KiB pages"
grep -q '"source_pin": "sha256 2db82d1e7119df3e71b7640219b6dfe84789bc0537983c3b7ac4f7189aecfeaa"' "${amd64}/manifest.json" || fail "source pin"
"${MEMPROFILE}" check --preload "${arm64}/libjemalloc.so.2" "${FIXTURES}/arm64-dynamic" >/dev/null || fail "arm64 library rejected for an arm64 program"
if "${MEMPROFILE}" check --preload "${arm64}/libjemalloc.so.2" "${FIXTURES}/dynamic" >/dev/null; then fail "arm64 library accepted for amd64"; fi
pass "built and verified for amd64 and arm64"

mkdir -p "${SCRATCH}/amd64" "${SCRATCH}/arm64"
LD_PRELOAD="${amd64}/libjemalloc.so.2" MALLOC_CONF="prof:true,prof_final:true,prof_prefix:${SCRATCH}/amd64/jeprof" \
  "${FIXTURES}/leak" leak 32
heap=$(find "${SCRATCH}/amd64" -name "jeprof.*.heap" | sort | tail -1)
"${amd64}/jeprof" --text "${FIXTURES}/leak" "${heap}" > "${SCRATCH}/amd64/text" 2>/dev/null
grep -q leaky_function "${SCRATCH}/amd64/text" || fail "amd64 profile does not name leaky_function"
pass "amd64 profile names leaky_function"

# qemu-aarch64 through binfmt; QEMU_LD_PREFIX finds the arm64 loader and libc.
QEMU_LD_PREFIX=/usr/aarch64-linux-gnu LD_PRELOAD="${arm64}/libjemalloc.so.2" \
  MALLOC_CONF="prof:true,prof_final:true,prof_prefix:${SCRATCH}/arm64/jeprof" "${FIXTURES}/arm64-leak" leak 32
heap=$(find "${SCRATCH}/arm64" -name "jeprof.*.heap" | sort | tail -1)
# qemu 7.2 shows guest code as r--p in /proc/self/maps, and jeprof skips maps
# that are not executable: mark the program's and libraries' maps executable.
sed -E '/^MAPPED_LIBRARIES:/,$ s/ r--p / r-xp /' "${heap}" > "${SCRATCH}/arm64/fixed.heap"
"${arm64}/jeprof" --tools=/usr/bin/aarch64-linux-gnu- --text "${FIXTURES}/arm64-leak" "${SCRATCH}/arm64/fixed.heap" \
  > "${SCRATCH}/arm64/text" 2>/dev/null
grep -q leaky_function "${SCRATCH}/arm64/text" || fail "arm64 profile does not name leaky_function"
pass "arm64 profile (under qemu) names leaky_function"
