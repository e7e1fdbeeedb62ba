#!/usr/bin/env bash
# Way 2: a Rust app rebuilt as a dynamic glibc program (crt-static off) with
# Debian's cargo in a local builder image, packaged on a slim base with the
# launcher and jemalloc; READY, and run as a container would, its profile
# names the leak as Rust source does: report --image gives the demangled
# path, without the symbol's hash, at the file and line.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/images_lib.sh
source "$(dirname "$0")/images_lib.sh"

seed_dist jemalloc amd64
base_images amd64
drop_at_exit localhost/leaky-rs:latest-memprofile
mk image-memprofile APP_SRC="${E2E_ROOT}/examples/leaky-rs" APP_BIN=leaky-rs BACKEND=jemalloc CARGO_PROFILE=dev \
  PLATFORM=linux/amd64 BASE_IMAGE="localhost/memprofile-base:${SUITE}-slim-amd64" \
  RUST_BUILDER_IMAGE="localhost/memprofile-base:${SUITE}-builder-amd64" > "${SCRATCH}/build.log" 2>&1 ||
  { cat "${SCRATCH}/build.log" >&2; fail "make image-memprofile APP_SRC=... (way 2)"; }
image=localhost/leaky-rs:latest-memprofile
grep -q "LOADER_TRACED" "${SCRATCH}/build.log" || fail "the verify step did not trace the loader"
"${MEMPROFILE}" preflight "${SCRATCH}/image/image.tar" > "${SCRATCH}/preflight" || fail "not READY"
root="$(image_root "${image}")"
"${MEMPROFILE}" check "${root}/usr/local/bin/leaky-rs" > "${SCRATCH}/app" || true
grep -q "dynamic, interpreter" "${SCRATCH}/app" || fail "the rebuilt app is not dynamic: $(cat "${SCRATCH}/app")"
[[ "$(buildah inspect --type image "${image}" | jq -r '.OCIv1.config.Labels["org.opencontainers.image.base.name"]')" == \
  "localhost/memprofile-base:${SUITE}-slim-amd64" ]] || fail "base.name label"
# The app's entrypoint goes into the launcher config, not the runtime ENV.
! buildah inspect --type image "${image}" | jq -e '.OCIv1.config.Env[] | select(startswith("APP_ENTRYPOINT="))' >/dev/null ||
  fail "APP_ENTRYPOINT is left in the image's runtime ENV"
grep -q 'leaky-rs' "${root}/etc/memprofile/exec.conf" || fail "the launcher config does not name the app"
pass "the Rust app rebuilt dynamically, packaged and READY"

run_entrypoint "${image}" "${SCRATCH}/out" 1 > "${SCRATCH}/run.log" 2>&1 || { cat "${SCRATCH}/run.log" >&2; fail "run"; }
heap="$(find "${SCRATCH}/out" -name 'jeprof.*.heap' -print -quit)"
[[ -s "${heap}" ]] || fail "no profile: $(cat "${SCRATCH}/run.log")"
jeprof_names leaky_function "${root}" /usr/local/bin/leaky-rs "${heap}" || fail "the profile does not name leaky_function"
"${MEMPROFILE}" report --json --image "${SCRATCH}/image/image.tar" "${SCRATCH}/out" > "${SCRATCH}/report.json" ||
  fail "report: $(cat "${SCRATCH}/report.json")"
line="$(grep -n 'kept.push(vec!\[0xab; size\]);' "${E2E_ROOT}/examples/leaky-rs/src/main.rs" | cut -d: -f1)"
jq -e --argjson line "${line}" '.in_use[0].site | .function == "leaky_rs::leaky_function"
    and (.file | endswith("src/main.rs")) and .line == $line' "${SCRATCH}/report.json" > /dev/null ||
  fail "report: $(jq -c '{top: .in_use[0].site, warnings}' "${SCRATCH}/report.json"), expected leaky_rs::leaky_function at src/main.rs:${line}"
"${MEMPROFILE}" report --image "${SCRATCH}/image/image.tar" "${SCRATCH}/out" > "${SCRATCH}/report.txt"
grep -q "leaky_rs::leaky_function (.*src/main.rs:${line})" "${SCRATCH}/report.txt" || fail "the text report: $(head -12 "${SCRATCH}/report.txt")"
! grep -Eq '_ZN|::h[0-9a-f]{16}' "${SCRATCH}/report.txt" || fail "a mangled or hashed Rust name is left: $(grep -E '_ZN|::h[0-9a-f]{16}' "${SCRATCH}/report.txt" | head -3)"
pass "the rebuilt image records a profile naming leaky_function; report --image names leaky_rs::leaky_function (src/main.rs:${line}), demangled"
