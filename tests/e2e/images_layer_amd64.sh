#!/usr/bin/env bash
# Way 1 on amd64: make image-memprofile layers jemalloc and the launcher
# onto the example app image; the result is READY, keeps the app's command
# and user, and running it records a profile that names the leaking
# function. (heaptrack's image: images_from_source.sh, built from source,
# and docker_layer_amd64.sh from host-built artifacts.)
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/images_lib.sh
source "$(dirname "$0")/images_lib.sh"

seed_dist jemalloc amd64
example_app amd64
drop_at_exit localhost/leaky:amd64-memprofile

containers_before="$(buildah containers -q | wc -l)"
mk image-memprofile APP_IMAGE=localhost/leaky:amd64 BACKEND=jemalloc > "${SCRATCH}/build.log" 2>&1 ||
  { cat "${SCRATCH}/build.log" >&2; fail "make image-memprofile (jemalloc)"; }
# buildah 1.28 left a mounted working container behind for each build (the
# Dockerfile's FROM-only stage): none may stay.
[[ "$(buildah containers -q | wc -l)" == "${containers_before}" ]] ||
  fail "the build left containers behind: $(buildah containers | tail -n +2)"
image=localhost/leaky:amd64-memprofile
grep -q "LOADER_TRACED" "${SCRATCH}/build.log" || fail "the build's own verify step did not trace the loader"
"${MEMPROFILE}" preflight "${SCRATCH}/image/image.tar" > "${SCRATCH}/preflight" || fail "exported image is not READY"
grep -q "^READY: a preload profiler will attach to /usr/local/bin/leaky" "${SCRATCH}/preflight" || fail "READY for the wrong program"
pass "built, verified in the build and READY when exported"

config="$(buildah inspect --type image "${image}" | jq -c .OCIv1.config)"
[[ "$(jq -c .Entrypoint <<<"${config}")" == '["/usr/bin/memprofile","exec","--from-config","--"]' ]] || fail "entrypoint: ${config}"
[[ "$(jq -r .User <<<"${config}")" == nobody ]] || fail "the app's USER was not kept: ${config}"
if jq -r '.Env[]' <<<"${config}" | grep '^LD_PRELOAD=' > /dev/null; then fail "LD_PRELOAD is in the image ENV"; fi
[[ "$(jq -r '.Labels["org.opencontainers.image.base.name"]' <<<"${config}")" == localhost/leaky:amd64 ]] || fail "base.name label"
[[ "$(jq -r '.Labels["io.memprofile.backend"]' <<<"${config}")" == jemalloc ]] || fail "backend label"
[[ "$(jq -r '.Labels["io.memprofile.backend.version"]' <<<"${config}")" == 5.3.0 ]] || fail "backend version label"
[[ "$(jq -r '.Labels["org.opencontainers.image.revision"]' <<<"${config}")" =~ ^[0-9a-f]{40}$ ]] || fail "revision label"
pass "entrypoint, user, labels; no LD_PRELOAD in the image ENV"

# Arguments at run time replace the app's Cmd, as with the original image.
run_entrypoint "${image}" "${SCRATCH}/out" 1.5 > "${SCRATCH}/run.log" 2>&1 || { cat "${SCRATCH}/run.log" >&2; fail "run"; }
grep -q "memprofile: info: profiling /usr/local/bin/leaky with jemalloc" "${SCRATCH}/run.log" || fail "no start line"
grep -q "leaky: leaked" "${SCRATCH}/run.log" || fail "the app did not run to its end"
heap="$(find "${SCRATCH}/out" -name 'jeprof.*.heap' -print -quit)"
[[ -s "${heap}" ]] || fail "no jemalloc profile in the output directory"
[[ "$(stat -c %U "${heap}")" == nobody ]] || fail "the profile was not written by the app's user"
jeprof_names leaky_function "$(image_root "${image}")" /usr/local/bin/leaky "${heap}" || fail "the jemalloc profile does not name leaky_function"
pass "the image records a jemalloc profile naming leaky_function"
