#!/usr/bin/env bash
# make image-memprofile-multi CONTAINER_ENGINE=docker: a multi-platform app
# image (linux/amd64 + linux/arm64, the containerd image store) made
# profilable for both in one OCI index that buildx writes, judged READY per
# platform, and that very archive pushed to a registry on loopback (Debian's
# docker-registry); pulled back by digest it is READY for each platform, and
# it runs under docker on each (arm64 under qemu) and records a profile.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/docker_lib.sh
source "$(dirname "$0")/docker_lib.sh"

seed_dist jemalloc amd64
seed_dist jemalloc arm64
example_app multi
start_registry
ns="${REGISTRY}/memprofile"
ref="${ns}/leaky:multi-memprofile"
drop_at_exit localhost/leaky:pulled

mk image-memprofile-multi APP_IMAGE=localhost/leaky:multi BACKEND=jemalloc DOCKER_PUSH=true IMAGE_NAMESPACE="${ns}" \
  TLS_VERIFY=false ENGINE_BUILD_FLAGS=--no-cache > "${SCRATCH}/build.log" 2>&1 ||
  { cat "${SCRATCH}/build.log" >&2; fail "make image-memprofile-multi CONTAINER_ENGINE=docker"; }
[[ "$(grep -c "LOADER_TRACED" "${SCRATCH}/build.log")" -ge 2 ]] || fail "not every platform was verified in the build"
judged="$(cat "${SCRATCH}/image/judged.digest")"
[[ "${judged}" == "$(tar -xOf "${SCRATCH}/image/image-multi.tar" index.json | jq -r '.manifests[0].digest')" ]] ||
  fail "judged.digest is not the archive's"
pass "built for both platforms with buildx (OCI archive), each verified in its build"

skopeo inspect --raw --tls-verify=false "docker://${ref}" > "${SCRATCH}/index.json" || fail "nothing at ${ref}"
[[ "sha256:$(sha256sum < "${SCRATCH}/index.json" | cut -d' ' -f1)" == "${judged}" ]] ||
  fail "the registry does not serve the judged index ${judged}"
platforms="$(jq -r '[.manifests[] | select(.platform.os != "unknown") | .platform.os + "/" + .platform.architecture] | sort | join(",")' \
  "${SCRATCH}/index.json")"
[[ "${platforms}" == "linux/amd64,linux/arm64" ]] || fail "the pushed index has ${platforms}"
pass "the registry serves the judged index (${judged}) with linux/amd64 and linux/arm64"

skopeo copy --quiet --all --src-tls-verify=false "docker://${ns}/leaky@${judged}" \
  "oci-archive:${SCRATCH}/pulled.tar:localhost/leaky:pulled" >/dev/null
"${MEMPROFILE}" preflight --all-platforms "${SCRATCH}/pulled.tar" > "${SCRATCH}/preflight" || fail "pulled image not READY"
[[ "$(grep -c "^READY: a preload profiler will attach to /usr/local/bin/leaky" "${SCRATCH}/preflight")" == 2 ]] ||
  fail "not READY for both platforms: $(cat "${SCRATCH}/preflight")"
pass "pulled back by digest: READY for both platforms"

# Run what the registry served (the daemon has no route to the machine's
# loopback: the pulled archive is loaded instead), on each platform.
docker load -i "${SCRATCH}/pulled.tar" >/dev/null || fail "docker load of the pulled archive"
for platform in linux/amd64 linux/arm64; do
  out="${SCRATCH}/out-${platform#linux/}"
  mkdir -p "${out}"
  chmod 1777 "${out}"
  docker run --rm --platform "${platform}" -v "${out}:/var/memprofile" localhost/leaky:pulled 1 > "${out}.log" 2>&1 ||
    { cat "${out}.log" >&2; fail "docker run --platform ${platform} of the pulled image"; }
  [[ -s "$(find "${out}" -name 'jeprof.*.heap' -print -quit)" ]] || fail "the pulled image recorded no profile on ${platform}"
done
pass "the image pulled by digest runs under docker on both platforms and records a profile"
