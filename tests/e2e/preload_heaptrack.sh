#!/usr/bin/env bash
# heaptrack's preload library from pinned source for amd64 and arm64; a
# leaking program under the amd64 build records a trace that
# heaptrack_interpret | heaptrack_print shows with the leaking function.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

amd64="$(preload_dist heaptrack amd64)"
arm64="$(preload_dist heaptrack arm64)"
grep -q '"source_pin": "sha256 576d83385cfbc255cb50d285ef756a0f76653f96d99ad81219c95757dda9942d"' "${amd64}/manifest.json" ||
  fail "source pin"
"${MEMPROFILE}" check --preload "${arm64}/libheaptrack_preload.so" "${FIXTURES}/arm64-dynamic" >/dev/null ||
  fail "arm64 library rejected for an arm64 program"
pass "built and verified for amd64 and arm64"

DUMP_HEAPTRACK_OUTPUT="${SCRATCH}/heaptrack.\$\$.raw" LD_PRELOAD="${amd64}/libheaptrack_preload.so" "${FIXTURES}/leak" leak 8
raw=$(find "${SCRATCH}" -maxdepth 1 -name "heaptrack.*.raw" -print -quit)
[[ -s "${raw}" ]] || fail "no heaptrack output"
# The raw file is not for heaptrack_print: heaptrack_interpret turns it into one.
/usr/lib/heaptrack/libexec/heaptrack_interpret < "${raw}" > "${SCRATCH}/trace"
heaptrack_print "${SCRATCH}/trace" > "${SCRATCH}/printed"
grep -q leaky_function "${SCRATCH}/printed" || fail "the trace does not name leaky_function"
pass "amd64 trace names leaky_function"
