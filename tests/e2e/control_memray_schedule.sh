#!/usr/bin/env bash
# memray's --snapshot-every in the trixie root: a process and its forked
# child each mark their own capture on schedule; status counts them;
# collect carries the marks, and the report of the archive ends its spans
# there as the directory's.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

memray_root  # sets root: the trixie root with the launcher and the bootstrap in /opt/memprofile

# 1b. --snapshot-every: each process marks its own capture on schedule.
out="${root}/out-every"
mkdir -p "${out}"
cat > "${root}/app/every.py" <<'PY'
import os
import sys
import time

# 64 KiB kept every 100 ms, in this process and in one forked child, until
# the file /app/every.stop appears (at most 60 s).
child = os.fork()
kept = []
for _ in range(600):
    kept.append(bytearray(64 << 10))
    if os.path.exists("/app/every.stop"):
        break
    time.sleep(0.1)
if child:
    os.waitpid(child, 0)
PY
rm -f "${root}/app/every.stop"
memray_exec --snapshot-every 1s --output-dir /out-every -- python3 every.py > "${SCRATCH}/every.log" 2>&1 &
every_launcher=$!
track "${every_launcher}"
every="$(interpreter_of "${every_launcher}")" || fail "every: the launcher started nothing"
track "${every}"
wait_for_socket "${out}" "${every}"
grep -q "a snapshot mark every 1 s while recording" "${SCRATCH}/every.log" ||
  fail "every: the start line does not say the schedule: $(head -3 "${SCRATCH}/every.log")"
# scheduled N: status answers for both processes, each with N marks made.
scheduled() {
  memray_ctl status "${every}" --output-dir /out-every --json > "${SCRATCH}/every.json" 2>/dev/null &&
    jq -e --argjson n "$1" '.tree.served == 2 and
      ([.processes[] | select(.snapshot_every_ms == 1000 and .snapshots_scheduled >= $n)] | length) == 2' \
      "${SCRATCH}/every.json" > /dev/null
}
wait_until 120 scheduled 3 || fail "every: not 3 marks in each process: $(jq -c '.processes' "${SCRATCH}/every.json")"
touch "${root}/app/every.stop"
wait "${every_launcher}" || fail "every: the app failed: $(cat "${SCRATCH}/every.log")"
every_child="$(jq -r --argjson p "${every}" '.processes[] | select(.pid != $p) | .pid' "${SCRATCH}/every.json")"
for c in "memray.${every}.bin" "memray.${every}.bin.${every_child}"; do
  m="${out}/memray-marks.${c#memray.}"
  (($(grep -c '^[0-9]* i$' "${m}") >= 3)) || fail "every: ${m}: $(cat "${m}" 2>&1)"
  "${MEMPROFILE}" report --rootfs "${root}" --json "${out}/${c}" > "${SCRATCH}/every-${c}.json" ||
    fail "every: report of ${c}: $(cat "${SCRATCH}/every-${c}.json")"
  # Each of the first 3 scheduled marks holds more at the kept line than the
  # one before (64 KiB every 100 ms, a mark every second): all 3 came before
  # every.stop. Marks after it (the parent waits for its child, longer on a
  # busy machine) may hold the same, and the span after the last mark ends
  # where the capture does.
  jq -e '[.snapshots | to_entries[] | select(.value.trigger == "i") | .key] as $i |
    .in_use[0].bytes_per_snapshot as $b |
    ($i | length) >= 3 and ([range(1; 3)] | all($b[$i[.]] > $b[$i[. - 1]]))' \
    "${SCRATCH}/every-${c}.json" > /dev/null ||
    fail "every: ${c}: $(jq -c '{snapshots, top: .in_use[0] | {site, bytes_per_snapshot}}' "${SCRATCH}/every-${c}.json")"
done
# collect carries the marks (they sort before their captures), and the
# report of the archive ends its spans where the directory's does.
"${MEMPROFILE}" collect --backend memray --output-dir "${out}" --settle 0.5 --out "${SCRATCH}/every.tar" \
  > "${SCRATCH}/collect.log" 2>&1 || fail "every: collect: $(cat "${SCRATCH}/collect.log")"
tar -tf "${SCRATCH}/every.tar" | grep -x "memray-marks.${every}.bin" > /dev/null || fail "every: the archive: $(tar -tf "${SCRATCH}/every.tar")"
"${MEMPROFILE}" report --rootfs "${root}" --json "${SCRATCH}/every.tar" > "${SCRATCH}/every-tar.json" ||
  fail "every: report of the archive: $(cat "${SCRATCH}/every-tar.json")"
"${MEMPROFILE}" report --rootfs "${root}" --json "${out}" > "${SCRATCH}/every-dir.json" ||
  fail "every: report of the directory: $(cat "${SCRATCH}/every-dir.json")"
spans() { jq -c '[.views[].snapshots[] | [.time_ms, .trigger, .bytes_in_use]]' "$1"; }
if [[ "$(spans "${SCRATCH}/every-tar.json")" != "$(spans "${SCRATCH}/every-dir.json")" ]] ||
  (($(spans "${SCRATCH}/every-tar.json" | grep -o '"i"' | wc -l) < 6)); then
  fail "every: the archive's spans are not the directory's: $(spans "${SCRATCH}/every-tar.json") against $(spans "${SCRATCH}/every-dir.json")"
fi
pass "--snapshot-every 1s: the process and its forked child each marked their own capture (status counted them), each report's spans end there, the kept line growing at each; collect carried the marks"
