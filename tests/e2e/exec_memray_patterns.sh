#!/usr/bin/env bash
# The four leak patterns of memray's users (a stateful batch worker, as in
# a Ray actor or a Geneva UDF: examples/python-udf/udf.py), run as a user
# would, by memprofile exec --backend memray in a Debian trixie root
# (python3-memray 1.17, Python 3.13), and read by report: each pattern's
# allocating line is a leak suspect (an unbounded cache, a retained
# per-batch buffer, a buffer a closure captures, the activations a kept
# result holds), and neither the bounded lru_cache nor the temporary work
# is blamed. docs/python.md shows this report.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

memray_root  # sets root: the trixie root with the launcher and the bootstrap in /opt/memprofile
mkdir -p "${root}/out"
udf="${E2E_ROOT}/examples/python-udf/udf.py"
cp "${udf}" "${root}/app/"

# 60 batches, a tenth of a second apart: memray's capture has a clock of
# RSS records only, so report's snapshots are spans of it (from 1 s).
in_root env -C /app /opt/memprofile/memprofile exec --backend memray --min-free-mb 1 --output-dir /out \
  -- python3 udf.py 60 0.1 > "${SCRATCH}/exec.log" 2>&1 || fail "exec: $(cat "${SCRATCH}/exec.log")"
"${MEMPROFILE}" report --rootfs "${root}" --json "${root}/out" > "${SCRATCH}/report.json" || fail "report"
"${MEMPROFILE}" report --rootfs "${root}" "${root}/out" > "${SCRATCH}/report.txt" || fail "report (text)"

line_of() { grep -n -F "$1" "${udf}" | cut -d: -f1; }
# suspect FUNCTION LINE: a leak suspect at udf.py:LINE in FUNCTION.
suspect() {
  jq -e --arg f "$1" --argjson l "$2" \
    '[.growth[] | select(.site.function == $f and .site.line == $l and .site.file == "/app/udf.py"
      and .leak_suspect)] | length == 1' "${SCRATCH}/report.json" > /dev/null ||
    fail "$1 (udf.py:$2) is no leak suspect: $(grep -A12 '^Growth' "${SCRATCH}/report.txt")"
}
suspect embed "$(line_of 'pattern 1: unbounded cache')"
suspect buffer "$(line_of 'pattern 2: retained per-batch buffer')"
suspect make_buffer "$(line_of 'pattern 3: the buffer a closure captures')"
suspect forward "$(line_of 'pattern 4: activations a kept result holds')"
pass "the four patterns are leak suspects: an unbounded cache, retained per-batch buffers, a closure's capture, a kept result's activations"

for quiet in 'bounded: at most 8 kept' 'temporary: freed when the batch ends'; do
  l="$(line_of "${quiet}")"
  jq -e --argjson l "${l}" '[.growth[] | select(.site.file == "/app/udf.py" and .site.line == $l and .leak_suspect)]
      | length == 0' "${SCRATCH}/report.json" > /dev/null || fail "udf.py:${l} (${quiet}) is blamed"
done
pass "neither the bounded lru_cache nor the temporary buffer is blamed"
