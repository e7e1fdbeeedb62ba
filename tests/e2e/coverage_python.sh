#!/usr/bin/env bash
# CPython keeps small objects in pymalloc's arenas, which a preload profiler
# never sees: check warns HEAP_PYMALLOC, and memprofile exec sets
# PYTHONMALLOC=malloc, so the profile holds them. The oracle is heaptrack's
# own trace: a program keeping about 75 MiB of small strings shows them under
# exec, and not when heaptrack is preloaded by hand without the setting.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

PYTHON=/usr/bin/python3
[[ -x "${PYTHON}" ]] || fail "${PYTHON} missing: run scripts/install-deps.sh"
HEAPTRACK="$(preload_dist heaptrack amd64)/libheaptrack_preload.so"
cp "${E2E_ROOT}/tests/fixtures/src/small_objects.py" "${SCRATCH}/small.py"

verdict="$("${MEMPROFILE}" check --root / --preload "${HEAPTRACK}" "$(readlink -f "${PYTHON}")")"
grep -q "warning HEAP_PYMALLOC: .* runs CPython: pymalloc keeps small objects" <<< "${verdict}" ||
  fail "no HEAP_PYMALLOC: ${verdict}"
grep -q "profilable: yes" <<< "${verdict}" || fail "not profilable: ${verdict}"
pass "check: CPython is READY with the HEAP_PYMALLOC warning"

# in_use_mib DIR: what report says is in use at heaptrack's last look, in MiB.
in_use_mib() {
  "${MEMPROFILE}" report --json --rootfs / "$1" > "$1.json" || fail "report $1: $(cat "$1.json")"
  jq '[.in_use[].bytes_in_use] | add / 1048576 | floor' "$1.json"
}

mkdir "${SCRATCH}/exec" "${SCRATCH}/bare"
"${LAUNCHER}" exec --backend heaptrack --preload "${HEAPTRACK}" --output-dir "${SCRATCH}/exec" --min-free-mb 1 -- \
  "${PYTHON}" "${SCRATCH}/small.py" > /dev/null 2> "${SCRATCH}/exec.log" || fail "exec: $(cat "${SCRATCH}/exec.log")"
grep -q "PYTHONMALLOC=malloc so that every Python object goes through malloc" "${SCRATCH}/exec.log" ||
  fail "the start line does not say PYTHONMALLOC: $(cat "${SCRATCH}/exec.log")"
env -u PYTHONMALLOC LD_PRELOAD="${HEAPTRACK}" DUMP_HEAPTRACK_OUTPUT="${SCRATCH}/bare/heaptrack.\$\$.raw" \
  "${PYTHON}" "${SCRATCH}/small.py" > /dev/null
seen="$(in_use_mib "${SCRATCH}/exec")" missed="$(in_use_mib "${SCRATCH}/bare")"
((seen >= 60)) || fail "under exec heaptrack saw ${seen} MiB of the ~75 MiB kept"
((missed <= 30)) || fail "without PYTHONMALLOC heaptrack saw ${missed} MiB: the warning would be wrong"
pass "heaptrack saw ${seen} MiB of small objects under exec (PYTHONMALLOC=malloc), ${missed} MiB without it"
