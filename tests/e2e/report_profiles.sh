#!/usr/bin/env bash
# memprofile report on real profiles: the test program (three kinds of site:
# a steady leak, one large allocation, heavy churn) in C, C++ (namespaced,
# templated) and Rust, run under Debian's libjemalloc with interval dumps and
# under Debian's heaptrack preload library (its raw trace, read without
# heaptrack_interpret; also zstd-compressed). The growth view ranks the leak
# first, on the right file and line, as a leak suspect; the one-time
# allocation is in the in-use view but not a suspect; the churn is in
# neither. --pprof is read by go tool pprof and protoc, --flamegraph and
# --trend are opened in headless Chromium. Symbols come from a root directory
# or from an image: a stripped binary's debug file is found by build-id under
# its /usr/lib/debug, another build of the binary is refused, not misread.
# Bad input (a truncated dump, old or interpreted traces, a damaged .dat) is one
# line, exit 2.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

src="${E2E_ROOT}/tests/fixtures/src"
jemalloc="$(ldconfig -p | awk '$1 == "libjemalloc.so.2" && !n++ { print $NF }')"
[[ -n "${jemalloc}" ]] || fail "Debian's libjemalloc2 is missing (scripts/install-deps.sh installs it)"
heaptrack="$(dpkg -L libheaptrack | awk '/\/libheaptrack_preload\.so$/ && !n++')"
[[ -n "${heaptrack}" ]] || fail "Debian's libheaptrack is missing (scripts/install-deps.sh installs it)"

# record LANG BINARY: its jemalloc dumps in ${SCRATCH}/LANG (a dump every
# 16 MiB allocated, a sample every 16 KiB on average).
record() {
  mkdir -p "${SCRATCH}/$1"
  LD_PRELOAD="${jemalloc}" MALLOC_CONF="prof:true,prof_final:true,lg_prof_interval:24,lg_prof_sample:14,prof_prefix:${SCRATCH}/$1/jeprof" \
    "$2" 400 || fail "$1: the test program failed"
  (($(find "${SCRATCH}/$1" -name '*.heap' | wc -l) >= 5)) || fail "$1: fewer than 5 dumps"
}
# record_heaptrack LANG BINARY: its raw heaptrack trace in ${SCRATCH}/ht-LANG
# (2 ms between rounds: the trace's timestamps come every 10 ms).
record_heaptrack() {
  mkdir -p "${SCRATCH}/ht-$1"
  # shellcheck disable=SC2016 # heaptrack itself puts the pid for $$
  LD_PRELOAD="${heaptrack}" DUMP_HEAPTRACK_OUTPUT="${SCRATCH}/ht-$1/heaptrack.\$\$.raw" "$2" 400 2000 ||
    fail "$1: the test program failed under heaptrack"
  [[ -s "$(find "${SCRATCH}/ht-$1" -name 'heaptrack.*.raw')" ]] || fail "$1: no heaptrack trace"
}
line_of() { grep -n "SITE $2" "${src}/$1" | cut -d: -f1; }

gcc -g -O1 -o "${SCRATCH}/sites-c" "${src}/sites.c"
g++ -g -O1 -o "${SCRATCH}/sites-cpp" "${src}/sites.cpp"
rustc -g -C opt-level=0 -o "${SCRATCH}/sites-rs" "${src}/sites.rs" 2> "${SCRATCH}/rustc.log" ||
  fail "rustc: $(cat "${SCRATCH}/rustc.log")"
record c "${SCRATCH}/sites-c"
record cpp "${SCRATCH}/sites-cpp"
record rs "${SCRATCH}/sites-rs"
record_heaptrack c "${SCRATCH}/sites-c"
record_heaptrack cpp "${SCRATCH}/sites-cpp"
record_heaptrack rs "${SCRATCH}/sites-rs"

# judge PROFILE SOURCE GROW ONCE CHURN: the three views of one program.
judge() {
  local lang="$1" file="$2" grow="$3" once="$4" churn="$5" out="${SCRATCH}/${1//\//-}.json"
  "${MEMPROFILE}" report --json --rootfs / "${SCRATCH}/${lang}" > "${out}" || fail "${lang}: report failed"
  (($(jq '.snapshots | length' "${out}") >= 3)) || fail "${lang}: fewer than 3 snapshots: $(jq -c '[.snapshots[] | .file]' "${out}")"
  jq -e --arg fn "${grow}" --arg file "${file}" --argjson line "$(line_of "${file}" grow_steadily)" \
    '.growth[0].site | .function == $fn and (.file | endswith("/" + $file)) and .line == $line' "${out}" > /dev/null ||
    fail "${lang}: the first growth site is $(jq -c '.growth[0].site | {function, file, line}' "${out}"), not ${grow} at ${file}:$(line_of "${file}" grow_steadily) (notes: $(jq -c .notes "${out}"); bytes in use: $(jq -c '[.snapshots[].bytes_in_use]' "${out}"))"
  # (Other growing sites may be sampled too: the C++ Ledger's vector of
  # pointers grows with it. The large and the temporary ones never are.)
  jq -e '.growth[0].leak_suspect and .growth[0].bytes_in_use > 16000000' "${out}" > /dev/null ||
    fail "${lang}: ${grow} is not a leak suspect: $(jq -c '[.growth[] | {f: .site.function, s: .leak_suspect}]' "${out}")"
  jq -e --arg fn "${once}" --argjson line "$(line_of "${file}" allocate_once)" \
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
  pass "${lang}: ${grow} (${file}:$(line_of "${file}" grow_steadily)) grows first, a leak suspect;" \
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
# manifest in the same pass; a corrupt entry is named, not parsed.
for profile in c ht-c; do
  "${MEMPROFILE}" collect --backend "$([[ "${profile}" == ht-* ]] && echo heaptrack || echo jemalloc)" \
    --output-dir "${SCRATCH}/${profile}" --out "${SCRATCH}/${profile}.tar" --settle 0 --timeout 10 2> /dev/null ||
    fail "collect ${profile}"
  "${MEMPROFILE}" report --json --rootfs / "${SCRATCH}/${profile}.tar" > "${SCRATCH}/${profile}-tar.json"
  [[ "$(jq -c '.growth[0].site' "${SCRATCH}/${profile}-tar.json")" == "$(jq -c '.growth[0].site' "${SCRATCH}/${profile}.json")" ]] ||
    fail "${profile}: the collect archive gives another answer"
done
cp "${SCRATCH}/c.tar" "${SCRATCH}/corrupt.tar"
printf 'X' | dd of="${SCRATCH}/corrupt.tar" bs=1 seek=1100 conv=notrunc status=none
pass "memprofile collect's archive (jemalloc and heaptrack): the same answers"

# Symbols from a root directory holding the stripped binary at the path it
# ran from, its debug file under /usr/lib/debug/.build-id.
root="${SCRATCH}/root"
mkdir -p "${root}${SCRATCH}"
build_id="$(readelf -n "${SCRATCH}/sites-c" | awk '/Build ID/ { print $3 }')"
mkdir -p "${root}/usr/lib/debug/.build-id/${build_id:0:2}"
objcopy --only-keep-debug "${SCRATCH}/sites-c" "${root}/usr/lib/debug/.build-id/${build_id:0:2}/${build_id:2}.debug"
strip -o "${root}${SCRATCH}/sites-c" "${SCRATCH}/sites-c"
"${MEMPROFILE}" report --json --rootfs "${root}" "${SCRATCH}/c" > "${SCRATCH}/stripped.json"
jq -e --argjson line "$(line_of sites.c grow_steadily)" \
  '.growth[0].site | .function == "grow_steadily" and .line == $line' "${SCRATCH}/stripped.json" > /dev/null ||
  fail "stripped + build-id debug file: $(jq -c '.growth[0].site' "${SCRATCH}/stripped.json")"
jq -e '[.warnings[] | select(test("libc.so.6: not in the image"))] | length == 1' "${SCRATCH}/stripped.json" > /dev/null ||
  fail "a file missing from the root is not said: $(jq -c .warnings "${SCRATCH}/stripped.json")"
pass "a stripped binary: its debug file found by build-id in the root's /usr/lib/debug; a missing library said once"

# The same root as an image (an OCI layout, one layer): read in one pass,
# only the mapped files and the debug files kept, nothing extracted.
oci="${SCRATCH}/oci"
mkdir -p "${oci}/blobs/sha256"
tar -C "${root}" --numeric-owner -cf "${SCRATCH}/layer.tar" .
layer="$(sha256sum < "${SCRATCH}/layer.tar" | cut -d' ' -f1)"
mv "${SCRATCH}/layer.tar" "${oci}/blobs/sha256/${layer}"
blob() {  # JSON -> its digest, stored as a blob
  local d
  d="$(printf %s "$1" | sha256sum | cut -d' ' -f1)"
  printf %s "$1" > "${oci}/blobs/sha256/${d}"
  echo "${d}"
}
config="$(blob "$(jq -cn --arg d "sha256:${layer}" \
  '{architecture: "amd64", os: "linux", config: {}, rootfs: {type: "layers", diff_ids: [$d]}}')")"
manifest="$(blob "$(jq -cn --arg c "sha256:${config}" --argjson cs "$(stat -c %s "${oci}/blobs/sha256/${config}")" \
  --arg l "sha256:${layer}" --argjson ls "$(stat -c %s "${oci}/blobs/sha256/${layer}")" \
  '{schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
    config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $c, size: $cs},
    layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar", digest: $l, size: $ls}]}')")"
jq -cn --arg m "sha256:${manifest}" --argjson ms "$(stat -c %s "${oci}/blobs/sha256/${manifest}")" \
  '{schemaVersion: 2, manifests: [{mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $m, size: $ms}]}' \
  > "${oci}/index.json"
echo '{"imageLayoutVersion": "1.0.0"}' > "${oci}/oci-layout"
"${MEMPROFILE}" report --json --image "${oci}" "${SCRATCH}/c" > "${SCRATCH}/image.json"
[[ "$(jq -c '[.growth[0].site.function, .growth[0].site.line]' "${SCRATCH}/image.json")" == \
  "$(jq -c '[.growth[0].site.function, .growth[0].site.line]' "${SCRATCH}/stripped.json")" ]] ||
  fail "--image: $(jq -c '.growth[0].site' "${SCRATCH}/image.json")"
pass "--image (an OCI layout of the same root): the same answer, the debug file read from the image"

# Another build at that path: refused with a warning, nothing attributed to
# it. jemalloc records no build-id: the same layout with other code (-O2) is
# caught by its return addresses, which no longer follow calls; another
# layout by its segments.
other_build() {  # GCC FLAGS...
  gcc -g "$@" -o "${root}${SCRATCH}/sites-c" "${src}/sites.c"
  "${MEMPROFILE}" report --json --rootfs "${root}" "${SCRATCH}/c" > "${SCRATCH}/other.json"
  jq -e '[.warnings[] | select(test("sites-c: not the (build|file) the process (ran|mapped)"))] | length == 1' \
    "${SCRATCH}/other.json" > /dev/null || fail "another build ($*) is not refused: $(jq -c .warnings "${SCRATCH}/other.json")"
  jq -e '[.in_use[].stack[] | select(.function == "grow_steadily" or .function == "allocate_once")] | length == 0' \
    "${SCRATCH}/other.json" > /dev/null || fail "another build's symbols were used ($*)"
  echo "   $(jq -r '.warnings[] | select(test("sites-c"))' "${SCRATCH}/other.json")"
}
other_build -O2 -fno-inline
other_build -O0 -Wl,-z,max-page-size=0x10000 -Wl,-z,separate-code
pass "another build of the binary (same layout, or another): refused with a warning, no function attributed from it"

# Bad input: one line, exit 2.
report_error() {  # PATTERN ARGS...
  local pattern="$1" rc=0
  shift
  "${MEMPROFILE}" report "$@" > "${SCRATCH}/out" 2> "${SCRATCH}/err" || rc=$?
  [[ "${rc}" == 2 && "$(wc -l < "${SCRATCH}/err")" == 1 && ! -s "${SCRATCH}/out" ]] ||
    fail "report $*: exit ${rc}: $(cat "${SCRATCH}/err" "${SCRATCH}/out")"
  grep -Eq -- "${pattern}" "${SCRATCH}/err" || fail "report $*: said \"$(cat "${SCRATCH}/err")\", expected /${pattern}/"
  echo "   $(cat "${SCRATCH}/err")"
}
# Cut inside a line (a cut at a line's end inside the maps cannot be told).
cut=$(($(stat -c %s "${last}") / 3))
while [[ "$(head -c "${cut}" "${last}" | tail -c 1 | od -An -c | tr -d ' ')" == '\n' ]]; do cut=$((cut - 1)); done
head -c "${cut}" "${last}" > "${SCRATCH}/cut.heap"
report_error "cut.heap: truncated" --rootfs / "${SCRATCH}/cut.heap"
printf 'heap_v2/524288\n  t*: 1: 2 [0: 0]\n@ 0xzz\n' > "${SCRATCH}/bad.heap"
report_error "bad.heap: line 3: malformed stack" --rootfs / "${SCRATCH}/bad.heap"
echo "v 10100 2" > "${SCRATCH}/heaptrack.app.1.raw"
report_error "heaptrack file format 2 \(heaptrack before 1.3\).*heaptrack_print" --rootfs / "${SCRATCH}/heaptrack.app.1.raw"
/usr/lib/heaptrack/libexec/heaptrack_interpret < "${trace}" > "${SCRATCH}/heaptrack.app.2.interpreted"
report_error "an interpreted heaptrack trace" --rootfs / "${SCRATCH}/heaptrack.app.2.interpreted"
printf 'v 10400 3\nt 10 5\n' > "${SCRATCH}/heaptrack.app.3.raw"
report_error "heaptrack.app.3.raw: line 2: trace refers to trace 5, not yet defined" --rootfs / "${SCRATCH}/heaptrack.app.3.raw"
echo "MEMORY_PROFILER" > "${SCRATCH}/memory-profiling_app.dat"
report_error "memory-profiling_app.dat: byte 0: a chunk of kind 77, not 1 \(LZ4\) or 2 \(stored\): not a bytehound profile" \
  --rootfs / "${SCRATCH}/memory-profiling_app.dat"
report_error "holds no heap profile" --rootfs / "${src}"
# A memray capture's marks file (memprofile snapshot) that is not one: the
# marks file named, in a directory and beside a capture named alone.
mkdir -p "${SCRATCH}/marked"
cp "${E2E_ROOT}/tests/fixtures/memray/plain.bin" "${SCRATCH}/marked/memray.7.bin"
printf '1796403545431 m\n1796403546434 x\n' > "${SCRATCH}/marked/memray-marks.7.bin"
report_error "memray-marks.7.bin: line 2: not a mark" --rootfs / "${SCRATCH}/marked"
report_error "memray-marks.7.bin: line 2: not a mark" --rootfs / "${SCRATCH}/marked/memray.7.bin"
# memray's own name for `memray run -m marks` (memray-marks.PID.bin) is a
# capture: what the file holds says so, in a directory and named alone.
mkdir -p "${SCRATCH}/clash"
cp "${E2E_ROOT}/tests/fixtures/memray/plain.bin" "${SCRATCH}/clash/memray-marks.9.bin"
for arg in "${SCRATCH}/clash" "${SCRATCH}/clash/memray-marks.9.bin"; do
  "${MEMPROFILE}" report --rootfs / "${arg}" > "${SCRATCH}/clash.txt" 2>&1 || fail "memray-marks.9.bin, a capture: $(cat "${SCRATCH}/clash.txt")"
  grep -q "^memprofile report: memray capture memray-marks.9.bin" "${SCRATCH}/clash.txt" || fail "clash: $(head -3 "${SCRATCH}/clash.txt")"
done
# A fifo under a profile's name in a directory is no profile: it is passed
# over, never opened (the read would wait for a writer for ever).
rm "${SCRATCH}/marked/memray-marks.7.bin"
mkfifo "${SCRATCH}/marked/memray-marks.7.bin" "${SCRATCH}/marked/x.1.1.m1.heap"
timeout 600 "${MEMPROFILE}" report --rootfs / "${SCRATCH}/marked" > "${SCRATCH}/fifo.txt" 2>&1 ||
  fail "a directory with fifos under profiles' names: $(cat "${SCRATCH}/fifo.txt")"
grep -q "^memprofile report: memray capture memray.7.bin" "${SCRATCH}/fifo.txt" || fail "fifos: $(head -3 "${SCRATCH}/fifo.txt")"
report_error "corrupt.tar: entry 'jeprof.*': (sha256 differs from the manifest|size .*); the archive does not match its manifest" \
  --rootfs / "${SCRATCH}/corrupt.tar"
pass "a truncated dump, a malformed one, old and interpreted heaptrack traces, a bad trace line, a damaged bytehound profile, a damaged memray marks file, a directory without profiles; fifos under profiles' names passed over; memray's own memray-marks.PID.bin read as the capture it is"

# Input that is no profile is known by its first bytes: refused there, not
# read whole first (`yes` never ends; 537 MB of it were read before). The
# bound is a baseline of the same binary in the same run (a 3-byte file
# refused the same way), plus 64 MiB: a sanitizer build starts far larger.
peak_kib() { tail -1 "$1"; }
echo "no" > "${SCRATCH}/tiny"
/usr/bin/time -f '%M' -o "${SCRATCH}/tiny.rss" "${MEMPROFILE}" report --rootfs / "${SCRATCH}/tiny" > /dev/null 2>&1 || true
rc=0
yes | /usr/bin/time -f '%M' -o "${SCRATCH}/yes.rss" "${MEMPROFILE}" report --rootfs / /dev/stdin > /dev/null 2> "${SCRATCH}/yes.err" || rc=$?
((rc == 2)) || fail "yes | report /dev/stdin: exit ${rc}, not 2: $(cat "${SCRATCH}/yes.err")"
grep -q "^memprofile: /dev/stdin: not a heap profile memprofile reads" "${SCRATCH}/yes.err" || fail "yes: $(cat "${SCRATCH}/yes.err")"
(($(peak_kib "${SCRATCH}/yes.rss") < $(peak_kib "${SCRATCH}/tiny.rss") + 64 * 1024)) ||
  fail "yes | report: peak RSS $(peak_kib "${SCRATCH}/yes.rss") KiB, against $(peak_kib "${SCRATCH}/tiny.rss") KiB for a 3-byte file"
pass "an endless non-profile on standard input: refused from its first bytes, peak RSS $(peak_kib "${SCRATCH}/yes.rss") KiB (a 3-byte file: $(peak_kib "${SCRATCH}/tiny.rss") KiB)"

# A DWARF zlib bomb: the program's .debug_info replaced by 1 MB that
# declares 1 GiB inflated (1.06 GB of peak RSS before). Its DWARF is not
# read, a warning names it, and its names come from the symbol table.
cp "${SCRATCH}/sites-c" "${SCRATCH}/sites-c.orig"
# The baseline: the same report with the real binary, same build, same run.
/usr/bin/time -f '%M' -o "${SCRATCH}/orig.rss" "${MEMPROFILE}" report --json --rootfs / "${SCRATCH}/c" > /dev/null 2>&1 ||
  fail "report of the real binary"
/usr/bin/python3 "$(dirname "$0")/debug_bomb.py" "${SCRATCH}/sites-c.orig" "${SCRATCH}/sites-c" $((1 << 30))
(($(stat -c %s "${SCRATCH}/sites-c") < 4 * 1024 * 1024)) || fail "the bomb is $(stat -c %s "${SCRATCH}/sites-c") bytes"
/usr/bin/time -f '%M' -o "${SCRATCH}/bomb.rss" "${MEMPROFILE}" report --json --rootfs / "${SCRATCH}/c" \
  > "${SCRATCH}/bomb.json" 2> "${SCRATCH}/bomb.err" || fail "report of the bomb: $(cat "${SCRATCH}/bomb.err")"
jq -e --arg f "${SCRATCH}/sites-c" '.warnings | any(startswith($f + ": its compressed debug sections declare 1024 MiB inflated"))' \
  "${SCRATCH}/bomb.json" > /dev/null || fail "no warning for the bomb: $(jq -c .warnings "${SCRATCH}/bomb.json")"
jq -e '[.growth[].site.function] | index("grow_steadily")' "${SCRATCH}/bomb.json" > /dev/null ||
  fail "the symbol table's names are missing: $(jq -c '[.growth[].site.function]' "${SCRATCH}/bomb.json")"
(($(tail -1 "${SCRATCH}/bomb.rss") < $(tail -1 "${SCRATCH}/orig.rss") + 128 * 1024)) ||
  fail "the bomb: peak RSS $(tail -1 "${SCRATCH}/bomb.rss") KiB, against $(tail -1 "${SCRATCH}/orig.rss") KiB with the real binary"
cp "${SCRATCH}/sites-c.orig" "${SCRATCH}/sites-c"
pass "a DWARF zlib bomb (1 GiB declared): not inflated, one warning, names from the symbol table, peak RSS $(tail -1 "${SCRATCH}/bomb.rss") KiB ($(tail -1 "${SCRATCH}/orig.rss") KiB with the real binary)"

# Among several dumps, one cut short (a disk that filled while jemalloc
# wrote an interval or exit dump) is left out with a note; named alone it
# is still the error.
mkdir -p "${SCRATCH}/with-cut"
cp "${SCRATCH}"/c/*.heap "${SCRATCH}/with-cut/"
last="$(find "${SCRATCH}/with-cut" -name '*.heap' | sort -V | tail -1)"
# Cut in the middle of a line: a cut at a line's end, or past the end of a
# small dump, would leave a dump that reads as whole.
cut=$(($(stat -c %s "${last}") / 2))
while ((cut > 1)) && [[ "$(head -c "${cut}" "${last}" | tail -c 1 | od -An -tx1 | tr -d ' ')" == 0a ]]; do cut=$((cut - 1)); done
head -c "${cut}" "${last}" > "${last}.tmp" && mv "${last}.tmp" "${last}"
"${MEMPROFILE}" report --rootfs / "${SCRATCH}/with-cut" > "${SCRATCH}/with-cut.txt" 2>&1 ||
  fail "a directory with one cut dump: $(cat "${SCRATCH}/with-cut.txt")"
grep -q "^note: left out, cut short: ${last}: truncated: " "${SCRATCH}/with-cut.txt" ||
  fail "no note for the cut dump: $(grep note "${SCRATCH}/with-cut.txt")"
report_error "$(basename "${last}"): truncated" --rootfs / "${last}"
pass "a cut dump among others is left out with a note; alone, it is refused"

# Counts past what int64 holds: --pprof saturates them (go tool pprof showed
# a negative total before, from INT64_MIN), as the text report sums them.
dump="$(find "${SCRATCH}/c" -name '*.heap' | sort -V | head -1)"
awk 'NR == 2 { print "  t*: 1: 9000000000000000000 [0: 0]"; next }
     /^  t\*: / && NR > 2 { print "  t*: 9000000000000000000: 9000000000000000000 [0: 0]"; next } { print }' "${dump}" \
  > "${SCRATCH}/huge.heap"
"${MEMPROFILE}" report --rootfs / --pprof "${SCRATCH}/huge.pb.gz" "${SCRATCH}/huge.heap" > /dev/null 2> "${SCRATCH}/huge.err" ||
  fail "huge counts: $(cat "${SCRATCH}/huge.err")"
zcat "${SCRATCH}/huge.pb.gz" | protoc --decode perftools.profiles.Profile -I "${E2E_ROOT}/tool/proto" profile.proto \
  > "${SCRATCH}/huge.decoded" || fail "huge counts: protoc cannot decode the pprof file"
if grep -q "^  value: -" "${SCRATCH}/huge.decoded"; then fail "huge counts: negative values in the pprof file"; fi
grep -q "^  value: 9223372036854775807$" "${SCRATCH}/huge.decoded" || fail "huge counts: not saturated at INT64_MAX"
pass "--pprof: counts past int64 saturate at INT64_MAX, never negative"
