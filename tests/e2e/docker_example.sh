#!/usr/bin/env bash
# The README's main job on docker: make example CONTAINER_ENGINE=docker runs
# to its last line (bases imported into docker, the app built with buildx,
# make image-memprofile, docker run, memprofile report) and names leaky_function.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/docker_lib.sh
source "$(dirname "$0")/docker_lib.sh"

seed_dist jemalloc amd64
drop_at_exit localhost/leaky:example localhost/leaky:example-memprofile
make -C "${E2E_ROOT}" --no-print-directory SKIP_DEPS=true example CONTAINER_ENGINE=docker BUILD_DIR="${BUILD_DIR}" \
  DIST="${DIST}" EXAMPLE_WORK_DIR="${SCRATCH}/example" > "${SCRATCH}/example.log" 2>&1 ||
  { tail -60 "${SCRATCH}/example.log" >&2; fail "make example CONTAINER_ENGINE=docker"; }
grep -q "^== make image-memprofile APP_IMAGE=localhost/leaky:example BACKEND=jemalloc" "${SCRATCH}/example.log" ||
  fail "the example did not build the profilable image"
grep -q "^READY: a preload profiler will attach to /usr/local/bin/leaky" "${SCRATCH}/example.log" || fail "the example's image was not READY"
grep -q "leaky_function" "${SCRATCH}/example/top.txt" ||
  fail "the example's top sites do not name leaky_function"
grep -q "names leaky_function" <<<"$(tail -1 "${SCRATCH}/example.log")" || fail "the last line: $(tail -1 "${SCRATCH}/example.log")"
pass "make example CONTAINER_ENGINE=docker: $(tail -1 "${SCRATCH}/example.log")"
