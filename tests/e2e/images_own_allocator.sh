#!/usr/bin/env bash
# make image-memprofile on an app whose program brings its own allocator
# (jemalloc linked in, libjemalloc_pic.a: it defines malloc): with heaptrack
# it stops at the app's preflight with HEAP_OWN_MALLOC and builds nothing;
# with jemalloc the verdict is HEAP_OWN_JEMALLOC, the image is built READY,
# and a run of it records the program's own jemalloc: report names
# planted_growth.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/images_lib.sh
source "$(dirname "$0")/images_lib.sh"

fx="$(allocator_fixtures)"
seed_dist jemalloc amd64
seed_dist heaptrack amd64
base_images amd64
mkdir -p "${SCRATCH}/app"
cp "${fx}/je-static" "${SCRATCH}/app/"
app=localhost/own-jemalloc:amd64
app_image "localhost/memprofile-base:${SUITE}-slim-amd64" "${app}" "${SCRATCH}/app" '["/app/je-static"]' '[]'

# heaptrack: no preload sees this heap. Stopped before any build.
if mk image-memprofile APP_IMAGE="${app}" BACKEND=heaptrack > "${SCRATCH}/heaptrack.log" 2>&1; then
  fail "heaptrack: an image was built for a program whose malloc no preload sees"
fi
grep -q "error HEAP_OWN_MALLOC: /app/je-static defines malloc itself" "${SCRATCH}/heaptrack.log" ||
  fail "heaptrack: not stopped by HEAP_OWN_MALLOC: $(tail -20 "${SCRATCH}/heaptrack.log")"
if buildah inspect --type image "${app}-memprofile" > /dev/null 2>&1; then fail "heaptrack: an image was built anyway"; fi
pass "BACKEND=heaptrack stops at the preflight with HEAP_OWN_MALLOC, and builds nothing"

# jemalloc: the program's own jemalloc, driven.
mk image-memprofile APP_IMAGE="${app}" BACKEND=jemalloc > "${SCRATCH}/jemalloc.log" 2>&1 ||
  { cat "${SCRATCH}/jemalloc.log" >&2; fail "make image-memprofile BACKEND=jemalloc"; }
grep -q "info HEAP_OWN_JEMALLOC: /app/je-static carries its own jemalloc" "${SCRATCH}/jemalloc.log" ||
  fail "no HEAP_OWN_JEMALLOC in the build: $(tail -20 "${SCRATCH}/jemalloc.log")"
"${MEMPROFILE}" preflight "${SCRATCH}/image/image.tar" > "${SCRATCH}/preflight" ||
  fail "the image is not READY: $(cat "${SCRATCH}/preflight")"
run_entrypoint "${app}-memprofile" "${SCRATCH}/out" > "${SCRATCH}/run.log" 2>&1 || fail "run: $(cat "${SCRATCH}/run.log")"
grep -q "its own jemalloc, linked into it, through MALLOC_CONF" "${SCRATCH}/run.log" ||
  fail "the start line: $(cat "${SCRATCH}/run.log")"
"${MEMPROFILE}" report --image "${SCRATCH}/image/image.tar" "${SCRATCH}/out" > "${SCRATCH}/report" 2>&1 ||
  fail "report: $(cat "${SCRATCH}/report")"
grep -q "planted_growth" "${SCRATCH}/report" || fail "the profile misses planted_growth: $(head -20 "${SCRATCH}/report")"
pass "BACKEND=jemalloc builds an image READY with HEAP_OWN_JEMALLOC, and its run's profile names planted_growth"
