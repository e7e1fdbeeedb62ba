#!/usr/bin/env bash
# Rust services on the allocator crates as Debian trixie packages them,
# built offline from /usr/share/cargo/registry by Debian's own cargo and
# rustc (/usr/bin in the root) in a trixie root: tests/fixtures/src/
# planted_crates, once with tikv-jemallocator (Debian links the system
# libjemalloc.a into the executable, unprefixed, its mallctl in .symtab
# only) and once with mimalloc. Each keeps 48 MiB from planted_growth. The
# oracle is the real profile:
#   - tikv-jemallocator under exec --backend jemalloc (no preload jemalloc
#     installed: the program's own records): a snapshot of the live service,
#     whose report's first site is planted_growth, not the crate's
#     GlobalAlloc; serve's profile under go tool pprof the same; stop, start
#     and --dormant reach it; stripped, exec and status say nothing reaches
#     it, and its own interval dumps (--dump-every-mb) are written;
#   - mimalloc: check with no --preload says HEAP_OWN_ALLOCATOR naming
#     mimalloc, and heaptrack preloaded by hand indeed misses planted_growth.
# (The prefixed _rjem_ build, which Debian's crate does not make, is
# coverage_own_jemalloc_symtab.sh's, from tests/fixtures/allocators.sh.)
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

if sanitized "${LAUNCHER}"; then
  echo "skip: ${LAUNCHER} is an AddressSanitizer build (it needs libasan, which the trixie root has not)"
  exit 77
fi
command -v go > /dev/null || fail "go missing: run scripts/install-deps.sh (golang-go)"
export GOCACHE="${SCRATCH}/gocache" GOPATH="${SCRATCH}/gopath" PPROF_TMPDIR="${SCRATCH}/pprof"

root="${SCRATCH}/root"
tarball="$("${E2E_ROOT}/scripts/make-rootfs.sh" amd64 --suite trixie \
  --include cargo,rustc,gcc,libc6-dev,librust-tikv-jemallocator-dev,librust-mimalloc-dev)" ||
  fail "no trixie root with cargo and the allocator crates"
mkdir -p "${root}"
tar -C "${root}" --numeric-owner -xpf "${tarball}"
cp -r "${E2E_ROOT}/tests/fixtures/src/planted_crates" "${root}/src"
for feature in jemalloc mimalloc; do
  # From /src: cargo reads .cargo/config.toml (Debian's registry) from the
  # directory it runs in.
  # shellcheck disable=SC2016 # $@ is the inner shell's
  in_root env HOME=/tmp CARGO_HOME=/tmp/cargo RUSTC=/usr/bin/rustc sh -c 'cd /src && exec "$@"' sh /usr/bin/cargo build \
    --offline --release --features "${feature}" --target-dir "/build-${feature}" \
    > "${SCRATCH}/cargo-${feature}.log" 2>&1 || fail "cargo build --features ${feature}: $(tail -20 "${SCRATCH}/cargo-${feature}.log")"
done
je=/build-jemalloc/release/planted mi=/build-mimalloc/release/planted
grep -q "Compiling tikv-jemallocator v" "${SCRATCH}/cargo-jemalloc.log" || fail "not built with the tikv-jemallocator crate"
grep -q "Compiling mimalloc v" "${SCRATCH}/cargo-mimalloc.log" || fail "not built with the mimalloc crate"
symbols="$(nm "${root}${je}")" dynamic="$(nm -D "${root}${je}")"
grep -qx "[0-9a-f]* T mallctl" <<< "${symbols}" || fail "Debian's tikv-jemallocator program has no mallctl in .symtab"
if grep -q " mallctl$" <<< "${dynamic}"; then fail "the program exports mallctl: the case is not the one shipped"; fi
pass "built offline from Debian's registry by trixie's cargo: tikv-jemallocator (mallctl in .symtab only) and mimalloc"

mkdir -p "${root}/opt/memprofile"
cp "${LAUNCHER}" "${root}/opt/memprofile/memprofile"
cp "${CTL_LIBRARY}" "$(preload_dist heaptrack amd64)"/*.so* "${root}/opt/memprofile/"

# run NAME PROGRAM [exec options]: PROGRAM under exec --backend jemalloc in
# the root, holding its heap for 2 minutes; APP is its pid.
run() {
  local name="$1" program="$2"
  shift 2
  mkdir -p "${root}/out-${name}"
  in_root env PLANTED_HOLD=120 /opt/memprofile/memprofile exec --backend jemalloc --output-dir "/out-${name}" \
    --min-free-mb 1 "$@" -- "${program}" > "${SCRATCH}/${name}.out" 2> "${SCRATCH}/${name}.log" &
  track $!
  wait_until 60 grep -q kept "${SCRATCH}/${name}.out" || fail "${name}: no heap planted: $(cat "${SCRATCH}/${name}.log")"
  APP="$(pgrep -n -f "^${program}\$")" || fail "${name}: no process ${program}"
  track "${APP}"
  OUT="${root}/out-${name}"
}
ctl() { "${MEMPROFILE}" "$1" "${APP}" --output-dir "${OUT}" "${@:2}"; }
recording() { ctl status --json | jq -e --argjson on "$1" '.processes[0].recording == $on' > /dev/null; }

# 1. tikv-jemallocator, live: the start line, a snapshot, report's first site.
run live "${je}"
grep -q "its own jemalloc, linked into it, through MALLOC_CONF; its mallctl is not exported: the control library finds it in the program's symbol table" \
  "${SCRATCH}/live.log" || fail "start line: $(cat "${SCRATCH}/live.log")"
ctl snapshot > "${SCRATCH}/snap" 2>&1 || fail "snapshot: $(cat "${SCRATCH}/snap")"
"${MEMPROFILE}" report --rootfs "${root}" "${OUT}" > "${SCRATCH}/live.txt" 2>&1 || fail "report: $(cat "${SCRATCH}/live.txt")"
"${MEMPROFILE}" report --rootfs "${root}" --json "${OUT}" > "${SCRATCH}/live.json" || fail "report --json"
jq -e '.in_use[0] | (.site.function | test("planted_growth")) and .bytes_in_use >= 40 * 1048576' "${SCRATCH}/live.json" \
  > /dev/null || fail "the first site is not planted_growth with its 48 MiB: $(jq -c '.in_use[0]' "${SCRATCH}/live.json")"
site="$(grep -m1 '^  1 ' "${SCRATCH}/live.txt")"
[[ "${site}" == *"planted::planted_growth (src/main.rs:"* ]] || fail "the text report's first site: ${site}"
if grep -E "GlobalAlloc|tikv_jemalloc|__rust_alloc|je_|_rjem_" "${SCRATCH}/live.txt"; then
  fail "the text report shows an allocator frame"
fi
pass "live: snapshot through the mallctl found in .symtab; report's first site ${site#  1 }"

# 2. serve: go tool pprof over HTTP, the planted function first.
start_serve "${SCRATCH}/serve.log" --output-dir "${OUT}" --min-interval 1 "${APP}"
go tool pprof -top "${SERVE_URL}/debug/pprof/heap" > "${SCRATCH}/top.txt" 2> "${SCRATCH}/pprof.err" ||
  fail "go tool pprof: $(cat "${SCRATCH}/pprof.err")"
first="$(awk '/flat%/ { getline; print; exit }' "${SCRATCH}/top.txt")"
[[ "${first}" == *planted_growth* ]] || fail "pprof's first function: ${first}: $(head -12 "${SCRATCH}/top.txt")"
kill -KILL "${SERVE_PID}"
pass "serve: go tool pprof -top's first function is planted_growth"

# 3. stop and start reach it; --dormant starts with recording off.
ctl stop > /dev/null 2>&1 || fail "stop"
recording false || fail "not stopped: $(ctl status 2>&1)"
ctl start > /dev/null 2>&1 || fail "start"
recording true || fail "not started: $(ctl status 2>&1)"
kill -KILL "${APP}"
run dormant "${je}" --dormant
recording false || fail "dormant: recording at start: $(ctl status 2>&1)"
ctl start > /dev/null 2>&1 || fail "dormant: start"
recording true || fail "dormant: not started: $(ctl status 2>&1)"
kill -KILL "${APP}"
pass "stop, start and --dormant reach Debian's tikv-jemallocator"

# 4. Stripped, no debug file: said so; jemalloc's own interval dumps.
cp "${root}${je}" "${root}/planted-stripped"
strip "${root}/planted-stripped"
run stripped /planted-stripped --dump-every-mb 16
grep -q "the program is stripped and does not export its mallctl.*here it dumps at exit and every 16 MiB allocated" \
  "${SCRATCH}/stripped.log" || fail "stripped: start line: $(cat "${SCRATCH}/stripped.log")"
interval="$(find "${OUT}" -name "jeprof.${APP}.*.i*.heap" | wc -l)"
((interval >= 2)) || fail "--dump-every-mb 16: ${interval} interval dumps for 48 MiB: $(ls "${OUT}")"
ctl status > "${SCRATCH}/status-stripped" 2>&1 || fail "stripped: status: $(cat "${SCRATCH}/status-stripped")"
grep -q "^  the program's own jemalloc does not export its mallctl, and neither its symbol table nor a debug file .* names it: snapshot, start and stop cannot reach it" \
  "${SCRATCH}/status-stripped" || fail "stripped: status does not say it: $(cat "${SCRATCH}/status-stripped")"
kill -KILL "${APP}"
pass "stripped: said in the start line and by status; --dump-every-mb 16 gave ${interval} interval dumps"

# 5. mimalloc: check says what the profile will miss, and heaptrack misses it.
verdict="$("${MEMPROFILE}" check --root "${root}" "${mi}" || true)"
grep -q "error HEAP_OWN_ALLOCATOR: .*calls mimalloc's own entry points" <<< "${verdict}" ||
  fail "check with no --preload: ${verdict}"
grep -q "heap coverage judged for the default backend, bytehound" <<< "${verdict}" || fail "the backend judged: ${verdict}"
mkdir -p "${root}/out-mimalloc"
# shellcheck disable=SC2016 # $$ is the inner shell's: heaptrack's file per process
in_root sh -c 'LD_PRELOAD=/opt/memprofile/libheaptrack_preload.so DUMP_HEAPTRACK_OUTPUT=/out-mimalloc/heaptrack.$$.raw \
  exec "$0"' "${mi}" > /dev/null || fail "the mimalloc program under heaptrack"
"${MEMPROFILE}" report --rootfs "${root}" --json "${root}/out-mimalloc" > "${SCRATCH}/mi.json" ||
  fail "report of heaptrack's trace: $(cat "${SCRATCH}/mi.json")"
seen="$(jq '[.in_use[] | select(.site.function | test("planted_growth")) | .bytes_in_use] | add // 0' "${SCRATCH}/mi.json")"
((seen < 1048576)) || fail "heaptrack saw ${seen} bytes from planted_growth: HEAP_OWN_ALLOCATOR would be wrong"
pass "mimalloc: check says HEAP_OWN_ALLOCATOR with no --preload, and heaptrack's own trace indeed misses planted_growth"
