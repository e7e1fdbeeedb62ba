#!/usr/bin/env bash
# Way 2 with the default backend: the Rust example rebuilt as a dynamic glibc
# program, packaged with the offline-built libbytehound.so; READY, and run as
# a container would, its .dat names the leak as Rust source does: the
# demangled path, without the symbol's hash, at the file and line.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/images_lib.sh
source "$(dirname "$0")/images_lib.sh"

need_bytehound_bundle 77
seed_dist bytehound amd64
base_images amd64
image=localhost/leaky-rs:bytehound
drop_at_exit "${image}"
mk image-memprofile APP_SRC="${E2E_ROOT}/examples/leaky-rs" APP_BIN=leaky-rs CARGO_PROFILE=dev MEMPROFILE_IMAGE_TAG=bytehound \
  PLATFORM=linux/amd64 BASE_IMAGE="localhost/memprofile-base:${SUITE}-slim-amd64" \
  RUST_BUILDER_IMAGE="localhost/memprofile-base:${SUITE}-builder-amd64" > "${SCRATCH}/build.log" 2>&1 ||
  { cat "${SCRATCH}/build.log" >&2; fail "make image-memprofile APP_SRC=... (way 2, the default backend)"; }
grep -q "LOADER_TRACED" "${SCRATCH}/build.log" || fail "the build's own verify step did not trace the loader"
"${MEMPROFILE}" preflight "${SCRATCH}/image/image.tar" > "${SCRATCH}/preflight" || fail "not READY: $(cat "${SCRATCH}/preflight")"
[[ "$(buildah inspect --type image "${image}" | jq -r '.OCIv1.config.Labels["io.memprofile.backend"]')" == bytehound ]] ||
  fail "the image's backend label is not bytehound"
pass "the Rust app rebuilt dynamically with bytehound, verified in the build, READY"

run_entrypoint "${image}" "${SCRATCH}/out" 1 > "${SCRATCH}/run.log" 2>&1 || { cat "${SCRATCH}/run.log" >&2; fail "run"; }
grep -q "leaky-rs: leaked" "${SCRATCH}/run.log" || fail "the app did not run to its end: $(cat "${SCRATCH}/run.log")"
dat="$(find "${SCRATCH}/out" -name 'memory-profiling_leaky-rs_*.dat' -size +1k -print -quit)"
[[ -n "${dat}" ]] || fail "no .dat of leaky-rs: $(ls -l "${SCRATCH}/out")"
"${MEMPROFILE}" report --json --image "${SCRATCH}/image/image.tar" "${SCRATCH}/out" > "${SCRATCH}/report.json" ||
  fail "report: $(cat "${SCRATCH}/report.json")"
line="$(grep -n 'kept.push(vec!\[0xab; size\]);' "${E2E_ROOT}/examples/leaky-rs/src/main.rs" | cut -d: -f1)"
jq -e --argjson line "${line}" '.in_use[0].site | .function == "leaky_rs::leaky_function"
    and (.file | endswith("src/main.rs")) and .line == $line' "${SCRATCH}/report.json" > /dev/null ||
  fail "report: $(jq -c '{top: .in_use[0].site, warnings}' "${SCRATCH}/report.json"), expected leaky_rs::leaky_function at src/main.rs:${line}"
"${MEMPROFILE}" report --image "${SCRATCH}/image/image.tar" "${SCRATCH}/out" > "${SCRATCH}/report.txt"
grep -q "leaky_rs::leaky_function (.*src/main.rs:${line})" "${SCRATCH}/report.txt" || fail "the text report: $(head -12 "${SCRATCH}/report.txt")"
! grep -Eq '_ZN|::h[0-9a-f]{16}' "${SCRATCH}/report.txt" || fail "a mangled or hashed Rust name is left: $(grep -E '_ZN|::h[0-9a-f]{16}' "${SCRATCH}/report.txt" | head -3)"
pass "the rebuilt image records a .dat ($(stat -c %s "${dat}") bytes); report --image names leaky_rs::leaky_function (src/main.rs:${line}), demangled"
