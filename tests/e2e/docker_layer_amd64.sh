#!/usr/bin/env bash
# Way 1 on docker, amd64: make image-memprofile CONTAINER_ENGINE=docker
# layers jemalloc (and heaptrack) and the launcher onto the example app
# image with buildx; the result is READY when exported, keeps the app's
# command and user, and `docker run` with a volume records a profile naming
# the leaking function. `memprofile collect` gets the profile out through
# `docker exec`, as `kubectl exec` would.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/docker_lib.sh
source "$(dirname "$0")/docker_lib.sh"

seed_dist jemalloc amd64
seed_dist heaptrack amd64
example_app amd64
image=localhost/leaky:amd64-memprofile
drop_at_exit "${image}" localhost/leaky:heaptrack localhost/leaky:bytehound

# --no-cache: BuildKit would otherwise skip the verify step it ran before
# with the same inputs, and its output with it.
mk image-memprofile APP_IMAGE=localhost/leaky:amd64 BACKEND=jemalloc ENGINE_BUILD_FLAGS=--no-cache > "${SCRATCH}/build.log" 2>&1 ||
  { cat "${SCRATCH}/build.log" >&2; fail "make image-memprofile CONTAINER_ENGINE=docker (jemalloc)"; }
grep -q "LOADER_TRACED" "${SCRATCH}/build.log" || fail "the build's own verify step did not trace the loader"
"${MEMPROFILE}" preflight "${SCRATCH}/image/image.tar" > "${SCRATCH}/preflight" || fail "the exported image is not READY"
grep -q "^READY: a preload profiler will attach to /usr/local/bin/leaky" "${SCRATCH}/preflight" || fail "READY for the wrong program"
[[ "$(cat "${SCRATCH}/image/judged.digest")" == "$(docker image inspect --format '{{.Id}}' "${image}")" ]] ||
  fail "the judged digest is not the image's: $(cat "${SCRATCH}/image/judged.digest")"
pass "built with buildx, verified in the build, READY when exported (docker save)"

config="$(docker image inspect "${image}" | jq -c '.[0].Config')"
[[ "$(jq -c .Entrypoint <<<"${config}")" == '["/usr/bin/memprofile","exec","--from-config","--"]' ]] || fail "entrypoint: ${config}"
[[ "$(jq -r .User <<<"${config}")" == nobody ]] || fail "the app's USER was not kept: ${config}"
if grep -q '^LD_PRELOAD=' <<<"$(jq -r '.Env[]' <<<"${config}")"; then fail "LD_PRELOAD is in the image ENV"; fi
[[ "$(jq -r '.Labels["org.opencontainers.image.base.name"]' <<<"${config}")" == localhost/leaky:amd64 ]] || fail "base.name label"
[[ "$(jq -r '.Labels["io.memprofile.backend"]' <<<"${config}")" == jemalloc ]] || fail "backend label"
[[ "$(jq -r '.Labels["io.memprofile.backend.version"]' <<<"${config}")" == 5.3.0 ]] || fail "backend version label"
pass "entrypoint, user, labels; no LD_PRELOAD in the image ENV"

# docker run: arguments replace the app's Cmd; the profile lands in the volume.
mkdir -p "${SCRATCH}/out"
chmod 1777 "${SCRATCH}/out"
docker run --rm -v "${SCRATCH}/out:/var/memprofile" "${image}" 1.5 > "${SCRATCH}/run.log" 2>&1 ||
  { cat "${SCRATCH}/run.log" >&2; fail "docker run"; }
grep -q "memprofile: info: profiling /usr/local/bin/leaky with jemalloc" "${SCRATCH}/run.log" || fail "no start line"
grep -q "leaky: leaked" "${SCRATCH}/run.log" || fail "the app did not run to its end"
heap="$(find "${SCRATCH}/out" -name 'jeprof.*.heap' -print -quit)"
[[ -s "${heap}" ]] || fail "no jemalloc profile in the volume"
[[ "$(stat -c %U "${heap}")" == nobody ]] || fail "the profile was not written by the app's user"
root="$(image_root "${image}" "${SCRATCH}/root")"
jeprof_names leaky_function "${root}" /usr/local/bin/leaky "${heap}" || fail "the jemalloc profile does not name leaky_function"
pass "docker run records a jemalloc profile naming leaky_function"

# memprofile collect through docker exec from a running container, as
# `kubectl exec` would. jemalloc writes at exit (and every 1 GiB allocated):
# the container runs the image's entrypoint for 1 s, then stays up.
mkdir -p "${SCRATCH}/out-collect"
chmod 1777 "${SCRATCH}/out-collect"
ctr="$(docker run -d -v "${SCRATCH}/out-collect:/var/memprofile" --entrypoint /bin/sh "${image}" \
  -c '/usr/bin/memprofile exec --from-config -- 1; exec sleep 120')"
at_exit "docker rm --force ${ctr} >/dev/null 2>&1"
for _ in $(seq 600); do
  [[ -z "$(find "${SCRATCH}/out-collect" -name 'jeprof.*.heap')" ]] || break
  sleep 0.1
done
docker exec "${ctr}" /usr/bin/memprofile collect > "${SCRATCH}/profile.tar" 2> "${SCRATCH}/collect.log" ||
  { cat "${SCRATCH}/collect.log" >&2; fail "memprofile collect through docker exec"; }
"${MEMPROFILE}" collect --verify "${SCRATCH}/profile.tar" > "${SCRATCH}/verify.log" 2>&1 ||
  { cat "${SCRATCH}/verify.log" >&2; fail "the collected tar does not verify"; }
grep -q 'jeprof\..*\.heap$' <<<"$(tar -tf "${SCRATCH}/profile.tar")" || fail "no heap profile in the collected tar: $(tar -tf "${SCRATCH}/profile.tar")"
pass "memprofile collect through docker exec: a verified tar with the profile"

mk image-memprofile APP_IMAGE=localhost/leaky:amd64 BACKEND=heaptrack MEMPROFILE_IMAGE_TAG=heaptrack \
  > "${SCRATCH}/build-heaptrack.log" 2>&1 || { cat "${SCRATCH}/build-heaptrack.log" >&2; fail "make image-memprofile (heaptrack)"; }
mkdir -p "${SCRATCH}/out-ht"
chmod 1777 "${SCRATCH}/out-ht"
docker run --rm -v "${SCRATCH}/out-ht:/var/memprofile" localhost/leaky:heaptrack 1 > "${SCRATCH}/run-ht.log" 2>&1 ||
  { cat "${SCRATCH}/run-ht.log" >&2; fail "docker run (heaptrack)"; }
raw="$(find "${SCRATCH}/out-ht" -name 'heaptrack.*.raw' -print -quit)"
[[ -s "${raw}" ]] || fail "no heaptrack output"
heaptrack_names leaky_function "$(image_root localhost/leaky:heaptrack "${SCRATCH}/root-ht")" "${raw}" ||
  fail "the heaptrack trace does not name leaky_function"
pass "the heaptrack image records a trace naming leaky_function under docker run"

# The default backend, bytehound (its library built offline on the host):
# docker run records a .dat, collect through docker exec carries it out,
# and report --image names the leak.
need_bytehound_bundle 77
seed_dist bytehound amd64
mk image-memprofile APP_IMAGE=localhost/leaky:amd64 MEMPROFILE_IMAGE_TAG=bytehound > "${SCRATCH}/build-bh.log" 2>&1 ||
  { cat "${SCRATCH}/build-bh.log" >&2; fail "make image-memprofile (the default backend)"; }
grep -q "LOADER_TRACED" "${SCRATCH}/build-bh.log" || fail "the bytehound build's verify step did not trace the loader"
"${MEMPROFILE}" preflight "${SCRATCH}/image/image.tar" > "${SCRATCH}/preflight-bh" || fail "the bytehound image is not READY"
mkdir -p "${SCRATCH}/out-bh"
chmod 1777 "${SCRATCH}/out-bh"
ctr="$(docker run -d -v "${SCRATCH}/out-bh:/var/memprofile" --entrypoint /bin/sh localhost/leaky:bytehound \
  -c '/usr/bin/memprofile exec --from-config -- 1.5 && echo ended > /var/memprofile/ended; exec sleep 120')"
at_exit "docker rm --force ${ctr} >/dev/null 2>&1"
for _ in $(seq 600); do
  [[ ! -e "${SCRATCH}/out-bh/ended" ]] || break
  sleep 0.1
done
[[ -e "${SCRATCH}/out-bh/ended" ]] || fail "the bytehound container's app did not end well: $(docker logs "${ctr}" 2>&1 | tail -5)"
docker exec "${ctr}" /usr/bin/memprofile collect > "${SCRATCH}/profile-bh.tar" 2> "${SCRATCH}/collect-bh.log" ||
  { cat "${SCRATCH}/collect-bh.log" >&2; fail "memprofile collect through docker exec (bytehound)"; }
"${MEMPROFILE}" report --json --image "${SCRATCH}/image/image.tar" "${SCRATCH}/profile-bh.tar" > "${SCRATCH}/report-bh.json" ||
  fail "report of the collected .dat: $(cat "${SCRATCH}/report-bh.json")"
jq -e '.backend == "bytehound" and .in_use[0].site.function == "leaky_function"' "${SCRATCH}/report-bh.json" > /dev/null ||
  fail "report: $(jq -c '{backend, top: .in_use[0].site, warnings}' "${SCRATCH}/report-bh.json")"
pass "the default backend (bytehound) under docker run: a .dat, collected through docker exec; report --image names leaky_function"
