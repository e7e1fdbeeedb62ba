#!/usr/bin/env bash
# report's outputs on real profiles (tests/e2e/lib.sh's sites program under
# Debian's libjemalloc and heaptrack): the text view; --pprof read by go
# tool pprof and protoc; --flamegraph and --trend opened in headless
# Chromium; --base EARLIER LATER; and what memprofile collect writes, read
# with the same answers.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

sites_build c cpp
sites_record c
sites_record_heaptrack c
sites_record_heaptrack cpp
for profile in c ht-c ht-cpp; do
  "${MEMPROFILE}" report --json --rootfs / "${SCRATCH}/${profile}" > "${SCRATCH}/${profile}.json" || fail "${profile}: report failed"
done

# The text report says the same.
"${MEMPROFILE}" report --rootfs / "${SCRATCH}/c" > "${SCRATCH}/c.txt"
grep -Eq '^  1 +\+[0-9.]+ MiB .* grow_steadily \(src/sites.c:[0-9]+\)  LEAK SUSPECT' "${SCRATCH}/c.txt" ||
  fail "text report: $(cat "${SCRATCH}/c.txt")"
# --pprof: pprof's own tool ranks the same function first, and protoc reads
# the file without memprofile (report is not the only reader of its output).
for profile in c ht-cpp; do
  "${MEMPROFILE}" report --rootfs / --pprof "${SCRATCH}/${profile}.pb.gz" "${SCRATCH}/${profile}" > /dev/null
  want="$(jq -r '.in_use[0].site.function' "${SCRATCH}/${profile}.json")"
  go tool pprof -top "${SCRATCH}/${profile}.pb.gz" > "${SCRATCH}/${profile}.top" 2> "${SCRATCH}/pprof.err" ||
    fail "go tool pprof: $(cat "${SCRATCH}/pprof.err")"
  # pprof drops template arguments from names (shop::Ledger<long>:: -> shop::Ledger::).
  first="$(awk '/flat%/ { getline; print $6; exit }' "${SCRATCH}/${profile}.top")"
  [[ "${first}" == "${want//<*>/}" ]] ||
    fail "${profile}: go tool pprof -top ranks ${first} first, report ${want}: $(head -12 "${SCRATCH}/${profile}.top")"
  zcat "${SCRATCH}/${profile}.pb.gz" | protoc --decode perftools.profiles.Profile -I "${E2E_ROOT}/tool/proto" profile.proto \
    > "${SCRATCH}/${profile}.decoded" || fail "${profile}: protoc cannot decode the pprof file"
  grep -q "string_table: \"inuse_space\"" "${SCRATCH}/${profile}.decoded" || fail "${profile}: no inuse_space sample type"
  grep -qF "string_table: \"${want}\"" "${SCRATCH}/${profile}.decoded" || fail "${profile}: ${want} is not in the string table"
done
# heaptrack counts every allocation: alloc_space ranks the churn first.
go tool pprof -sample_index=alloc_space -top "${SCRATCH}/ht-cpp.pb.gz" > "${SCRATCH}/alloc.top" 2> "${SCRATCH}/pprof.err" ||
  fail "go tool pprof -sample_index=alloc_space: $(cat "${SCRATCH}/pprof.err")"
[[ "$(awk '/flat%/ { getline; print $6; exit }' "${SCRATCH}/alloc.top")" == shop::churn ]] ||
  fail "alloc_space does not rank shop::churn first: $(head -12 "${SCRATCH}/alloc.top")"
pass "--pprof: go tool pprof -top ranks the same function first (jemalloc and heaptrack), alloc_space the churn; protoc decodes it"

# --flamegraph and --trend, opened in a real browser (headless Chromium):
# they render, search highlights, a click zooms (driven by the URL fragment,
# the same code as the click), and the growth view holds only what grew.
browser() {  # ARGS... (chromium's, one page)
  timeout 120 chromium --headless --no-sandbox --disable-gpu --user-data-dir="${SCRATCH}/chromium" "$@" 2>/dev/null
}
"${MEMPROFILE}" report --rootfs / --flamegraph "${SCRATCH}/flame.svg" --trend "${SCRATCH}/trend.svg" "${SCRATCH}/c" > /dev/null
browser --screenshot="${SCRATCH}/flame.png" --window-size=1200,400 "file://${SCRATCH}/flame.svg" > /dev/null
browser --screenshot="${SCRATCH}/trend.png" --window-size=1000,460 "file://${SCRATCH}/trend.svg" > /dev/null
[[ "$(file "${SCRATCH}/flame.png")" == *"PNG image data, 1200 x 400"* ]] || fail "no flame graph screenshot: $(file "${SCRATCH}/flame.png")"
[[ "$(file "${SCRATCH}/trend.png")" == *"PNG image data, 1000 x 460"* ]] || fail "no trend screenshot: $(file "${SCRATCH}/trend.png")"
(($(stat -c %s "${SCRATCH}/flame.png") > 5000)) || fail "the flame graph screenshot is blank"
state() { browser --dump-dom "file://${SCRATCH}/$1" | grep -o 'data-state="[^"]*"' | awk 'NR == 1' | cut -d'"' -f2; }
[[ "$(state flame.svg)" == ready ]] || fail "the flame graph's script did not run: $(state flame.svg)"
searched="$(state 'flame.svg#search=grow_steadily')"
[[ "${searched}" =~ ^search:1:(7[0-9]|8[0-9])\. ]] || fail "search for grow_steadily: ${searched} (expected ~75%)"
at="$(grep -o 'class="f" [^>]*data-n="[^"]*"' "${SCRATCH}/flame.svg" | grep -n 'data-n="grow_steadily"' | cut -d: -f1)"
zoomed="$(state "flame.svg#zoom=$((at - 1))")"
[[ "${zoomed}" == "zoom:$((at - 1)):grow_steadily:"* ]] || fail "zoom on grow_steadily: ${zoomed}"
grep -q 'data-name="grow_steadily (.*) \*"' "${SCRATCH}/trend.svg" || fail "the trend does not mark grow_steadily as a suspect"
pass "--flamegraph and --trend render in Chromium; search (${searched}) and zoom (${zoomed}) work there"

# --base: an earlier dump and a later one.
first="$(find "${SCRATCH}/c" -name 'jeprof.*.0.i0.heap')"
last="$(find "${SCRATCH}/c" -name 'jeprof.*.i*.heap' | sort -t. -k3 -n | tail -1)"
"${MEMPROFILE}" report --json --rootfs / --base "${first}" "${last}" > "${SCRATCH}/base.json"
jq -e '.growth[0].site.function == "grow_steadily" and (.snapshots | length) == 2' "${SCRATCH}/base.json" > /dev/null ||
  fail "--base: $(jq -c '.growth[0].site' "${SCRATCH}/base.json")"
pass "the text view, and --base EARLIER LATER"
"${MEMPROFILE}" report --rootfs / --base "${first}" --flamegraph "${SCRATCH}/grown.svg" "${last}" > /dev/null
{ grep -q 'Bytes gained since' "${SCRATCH}/grown.svg" && grep -q 'data-n="grow_steadily"' "${SCRATCH}/grown.svg"; } ||
  fail "the growth flame graph does not show grow_steadily"
! grep -q 'data-n="allocate_once"' "${SCRATCH}/grown.svg" || fail "the growth flame graph shows allocate_once, which did not grow"
pass "--flamegraph with --base: only what grew"

# What memprofile collect writes: the same answers, checked against the
# manifest in the same pass (a corrupt entry: report_bad_input.sh).
for profile in c ht-c; do
  "${MEMPROFILE}" collect --backend "$([[ "${profile}" == ht-* ]] && echo heaptrack || echo jemalloc)" \
    --output-dir "${SCRATCH}/${profile}" --out "${SCRATCH}/${profile}.tar" --settle 0 --timeout 10 2> /dev/null ||
    fail "collect ${profile}"
  "${MEMPROFILE}" report --json --rootfs / "${SCRATCH}/${profile}.tar" > "${SCRATCH}/${profile}-tar.json"
  [[ "$(jq -c '.growth[0].site' "${SCRATCH}/${profile}-tar.json")" == "$(jq -c '.growth[0].site' "${SCRATCH}/${profile}.json")" ]] ||
    fail "${profile}: the collect archive gives another answer"
done
pass "memprofile collect's archive (jemalloc and heaptrack): the same answers"
