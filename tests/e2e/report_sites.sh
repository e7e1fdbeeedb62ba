#!/usr/bin/env bash
# memprofile report on real profiles: the test program (three kinds of site:
# a steady leak, one large allocation, heavy churn) in C, C++ (namespaced,
# templated) and Rust, run under Debian's libjemalloc with interval dumps and
# under Debian's heaptrack preload library (its raw trace, read without
# heaptrack_interpret; also zstd-compressed). The growth view ranks the leak
# first, on the right file and line, as a leak suspect; the one-time
# allocation is in the in-use view but not a suspect; the churn is in
# neither. A heaptrack trace's earlier copy is a --base.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

sites_build c cpp rs
for lang in c cpp rs; do
  sites_record "${lang}"
  sites_record_heaptrack "${lang}"
done

# judge PROFILE SOURCE GROW ONCE CHURN: the three views of one program.
judge() {
  local lang="$1" file="$2" grow="$3" once="$4" churn="$5" out="${SCRATCH}/${1//\//-}.json"
  "${MEMPROFILE}" report --json --rootfs / "${SCRATCH}/${lang}" > "${out}" || fail "${lang}: report failed"
  (($(jq '.snapshots | length' "${out}") >= 3)) || fail "${lang}: fewer than 3 snapshots: $(jq -c '[.snapshots[] | .file]' "${out}")"
  jq -e --arg fn "${grow}" --arg file "${file}" --argjson line "$(sites_line_of "${file}" grow_steadily)" \
    '.growth[0].site | .function == $fn and (.file | endswith("/" + $file)) and .line == $line' "${out}" > /dev/null ||
    fail "${lang}: the first growth site is $(jq -c '.growth[0].site | {function, file, line}' "${out}"), not ${grow} at ${file}:$(sites_line_of "${file}" grow_steadily) (notes: $(jq -c .notes "${out}"); bytes in use: $(jq -c '[.snapshots[].bytes_in_use]' "${out}"))"
  # (Other growing sites may be sampled too: the C++ Ledger's vector of
  # pointers grows with it. The large and the temporary ones never are.)
  jq -e '.growth[0].leak_suspect and .growth[0].bytes_in_use > 16000000' "${out}" > /dev/null ||
    fail "${lang}: ${grow} is not a leak suspect: $(jq -c '[.growth[] | {f: .site.function, s: .leak_suspect}]' "${out}")"
  jq -e --arg fn "${once}" --argjson line "$(sites_line_of "${file}" allocate_once)" \
    '[.in_use[] | select(.site.function == $fn and .site.line == $line and (.leak_suspect | not)
      and .bytes_in_use > 8000000)] | length == 1' "${out}" > /dev/null ||
    fail "${lang}: ${once} (8 MiB, steady) is not in the in-use view, or is a suspect"
  # heaptrack's first snapshot is its timer's first tick, 10 ms after it
  # starts: a busy machine may run main later than that, and then the 8 MiB
  # is one step in the first interval, flat after it: growth, never a suspect.
  jq -e --arg fn "${once}" --arg lang "${lang}" '[.growth[] | select(.site.function == $fn) |
      select(.leak_suspect or $lang[0:3] != "ht-" or (.bytes_per_snapshot[1:] | unique | length) != 1)]
    | length == 0' "${out}" > /dev/null ||
    fail "${lang}: ${once} is in the growth view: $(jq -c --arg fn "${once}" '[.growth[] | select(.site.function == $fn)
      | {growth, leak_suspect, b: .bytes_per_snapshot}]' "${out}")"
  # The churn's temporary block may be live at the last snapshot (heaptrack's
  # are exact): then it shows a few of its 32 KiB blocks gained, never as a
  # suspect.
  jq -e --arg fn "${churn}" '[.growth[] | select(.site.function == $fn and (.leak_suspect or .growth > 1000000))]
      | length == 0' "${out}" > /dev/null ||
    fail "${lang}: the churn grows in the growth view: $(jq -c --arg fn "${churn}" '[.growth[] | select(.site.function == $fn)
      | {growth, leak_suspect, b: .bytes_per_snapshot}]' "${out}")"
  jq -e --arg fn "${churn}" '[.in_use[] | select(.site.function == $fn and .bytes_in_use > 1000000)] | length == 0' \
    "${out}" > /dev/null || fail "${lang}: the churn holds memory in the in-use view"
  pass "${lang}: ${grow} (${file}:$(sites_line_of "${file}" grow_steadily)) grows first, a leak suspect;" \
    "${once} is in use, not a suspect; ${churn} is in neither"
}
judge c sites.c grow_steadily allocate_once churn
judge cpp sites.cpp 'shop::Ledger<long>::grow_steadily' shop::allocate_once shop::churn
judge rs sites.rs sites::grow_steadily sites::allocate_once sites::churn
judge ht-c sites.c grow_steadily allocate_once churn
judge ht-cpp sites.cpp 'shop::Ledger<long>::grow_steadily' shop::allocate_once shop::churn
judge ht-rs sites.rs sites::grow_steadily sites::allocate_once sites::churn
jq -e '.backend == "heaptrack" and (.snapshots | length) >= 5' "${SCRATCH}/ht-c.json" > /dev/null ||
  fail "heaptrack: $(jq -c '{backend, n: (.snapshots | length)}' "${SCRATCH}/ht-c.json")"
# Compressed as heaptrack -r would: the same answer.
trace="$(find "${SCRATCH}/ht-c" -name 'heaptrack.*.raw')"
zstd -q -o "${SCRATCH}/heaptrack.c.raw.zst" "${trace}"
"${MEMPROFILE}" report --json --rootfs / "${SCRATCH}/heaptrack.c.raw.zst" > "${SCRATCH}/zst.json"
[[ "$(jq -c '.growth[0].site' "${SCRATCH}/zst.json")" == "$(jq -c '.growth[0].site' "${SCRATCH}/ht-c.json")" ]] ||
  fail "the zstd-compressed trace differs"
pass "heaptrack: the raw trace read without heaptrack_interpret ($(jq '.snapshots | length' "${SCRATCH}/ht-c.json") snapshots), also zstd-compressed"
# --base of a whole-run trace: an earlier copy of it (here its first half,
# cut at a line as a copy of a running process's trace is) is the state
# growth is measured from: its last snapshot comes first.
mkdir -p "${SCRATCH}/ht-early"
early="${SCRATCH}/ht-early/$(basename "${trace}")"
head -c "$(($(stat -c %s "${trace}") / 2))" "${trace}" | sed '$d' > "${early}"
"${MEMPROFILE}" report --json --rootfs / --base "${early}" "${trace}" > "${SCRATCH}/ht-base.json" ||
  fail "heaptrack --base: $(cat "${SCRATCH}/ht-base.json")"
jq -e --slurpfile all "${SCRATCH}/ht-c.json" --arg early "${early}" '.growth[0].site.function == "grow_steadily"
    and .snapshots[0].file == $early and (.snapshots | length) == ($all[0].snapshots | length) + 1
    and .growth[0].growth < $all[0].growth[0].growth' "${SCRATCH}/ht-base.json" > /dev/null ||
  fail "heaptrack --base: $(jq -c '{g: .growth[0], s: [.snapshots[] | .file]}' "${SCRATCH}/ht-base.json")"
if "${MEMPROFILE}" report --rootfs / --base "$(find "${SCRATCH}/c" -name 'jeprof.*.heap' -print -quit)" "${trace}" \
    > /dev/null 2> "${SCRATCH}/mixed.err"; then fail "a jemalloc base of a heaptrack trace was taken"; fi
grep -q "the profiles are heaptrack's" "${SCRATCH}/mixed.err" || fail "a jemalloc base: $(cat "${SCRATCH}/mixed.err")"
pass "heaptrack --base EARLIER-COPY TRACE: growth from the copy's end (grow_steadily first, less than over the whole run); a jemalloc base refused"

