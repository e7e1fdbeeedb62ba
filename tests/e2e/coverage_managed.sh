#!/usr/bin/env bash
# Managed runtimes keep their objects in heaps of their own: check warns
# that a preload profiler shows the native heap only (HEAP_MANAGED_V8 for
# node, HEAP_MANAGED_JVM for Java), and the verdict is still READY for that
# native heap. The oracle for node: 96 MiB of JavaScript objects are not in
# heaptrack's trace.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

NODE="$(command -v node || true)"
JAVA="$(readlink -f /usr/lib/jvm/java-17-openjdk-*/bin/java 2>/dev/null | head -n 1 || true)"
[[ -x "${NODE}" && -x "${JAVA}" ]] || fail "node or java missing: run scripts/install-deps.sh"
HEAPTRACK="$(preload_dist heaptrack amd64)/libheaptrack_preload.so"

# said PROGRAM CODE: check under heaptrack gives the warning and READY.
said() {
  local verdict
  verdict="$("${MEMPROFILE}" check --root / --preload "${HEAPTRACK}" "$1")"
  grep -q "warning $2: .*native heap only" <<< "${verdict}" || fail "$1: no $2: ${verdict}"
  grep -q "profilable: yes" <<< "${verdict}" || fail "$1: not profilable: ${verdict}"
}
said "$(readlink -f "${NODE}")" HEAP_MANAGED_V8
said "${JAVA}" HEAP_MANAGED_JVM
pass "check: node is READY with HEAP_MANAGED_V8, java with HEAP_MANAGED_JVM"

mkdir "${SCRATCH}/out"
# 1.5 M small objects (about 96 MiB in V8's heap), kept until exit.
"${LAUNCHER}" exec --backend heaptrack --preload "${HEAPTRACK}" --output-dir "${SCRATCH}/out" --min-free-mb 1 -- \
  "${NODE}" -e 'globalThis.keep = Array.from({length: 1500000}, (_, i) => ({i, s: "x" + i})); console.log(keep.length)' \
  > /dev/null 2> "${SCRATCH}/exec.log" || fail "exec node: $(cat "${SCRATCH}/exec.log")"
"${MEMPROFILE}" report --json --rootfs / "${SCRATCH}/out" > "${SCRATCH}/report.json" ||
  fail "report: $(cat "${SCRATCH}/report.json")"
seen="$(jq '[.in_use[].bytes_in_use] | add / 1048576 | floor' "${SCRATCH}/report.json")"
((seen < 48)) || fail "heaptrack saw ${seen} MiB of node's JavaScript objects: the warning would be wrong"
pass "node's JavaScript objects are not in heaptrack's trace (${seen} MiB in use at exit): the warning holds"
