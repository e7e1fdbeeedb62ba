#!/usr/bin/env bash
# report's bad input: a truncated dump, old or interpreted traces, a damaged
# .dat, an endless non-profile on standard input, a DWARF zlib bomb, a cut
# dump among others, counts past int64: one line and exit 2, or a note,
# within bounded memory.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

sites_build c
sites_record c
sites_record_heaptrack c
trace="$(find "${SCRATCH}/ht-c" -name 'heaptrack.*.raw')"
last="$(find "${SCRATCH}/c" -name 'jeprof.*.i*.heap' | sort -t. -k3 -n | tail -1)"
"${MEMPROFILE}" collect --backend jemalloc --output-dir "${SCRATCH}/c" --out "${SCRATCH}/c.tar" --settle 0 --timeout 10 \
  2> /dev/null || fail "collect c"
cp "${SCRATCH}/c.tar" "${SCRATCH}/corrupt.tar"
printf 'X' | dd of="${SCRATCH}/corrupt.tar" bs=1 seek=1100 conv=notrunc status=none


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
report_error "holds no heap profile" --rootfs / "${SITES_SRC}"
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
