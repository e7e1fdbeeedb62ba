#!/usr/bin/env bash
# The main job, end to end, on the built-in example (`make example`):
#   1. local Debian bases from Debian's archive (no registry needed),
#   2. the example leaking service as an ordinary app image,
#   3. make image-memprofile: jemalloc + the launcher layered on, verified in
#      the build, exported and judged READY by memprofile preflight,
#   4. the image run as a container would run it, profile on a mounted dir,
#   5. memprofile report: the allocation sites that grew, and what holds the
#      memory, symbolised from the image's own files.
# Environment: CONTAINER_ENGINE (detected when empty), BACKEND (jemalloc),
# MEMPROFILE (the host's memprofile, build/tool/memprofile),
# EXAMPLE_SECONDS (3), MEMPROFILE_CACHE, DIST (host-built artifacts: dist/),
# EXAMPLE_WORK_DIR (build/example).
set -o errexit -o nounset -o pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/host.sh
source "${root}/scripts/host.sh"
# podman and buildah get a store of the example's own (overlay where the
# kernel allows it, else vfs), unless the caller chose one.
own_store=false
if [[ -z "${CONTAINERS_STORAGE_CONF:-}" ]]; then
  use_container_storage "$(memprofile_cache)/containers"
  own_store=true
fi
engine="${CONTAINER_ENGINE:-$("${root}/scripts/container-engine.sh")}"
backend="${BACKEND:-jemalloc}"
seconds="${EXAMPLE_SECONDS:-3}"
arch="$(dpkg --print-architecture 2>/dev/null || echo amd64)"
suite=bookworm
work="$(realpath -m "${EXAMPLE_WORK_DIR:-${root}/build/example}")"
dist="$(realpath -m "${DIST:-${root}/dist}")"
memprofile="${MEMPROFILE:-${root}/build/tool/memprofile}"
# 2 MiB kept and 4 MiB churned per 10 ms tick: past jemalloc's dump
# interval (1 GiB allocated) in the first seconds, so the profile holds
# dumps to compare, not only the one at exit.
per_tick=$((2 << 20))
say() { printf '\n== %s\n' "$*"; }
mk() { make -C "${root}" --no-print-directory SKIP_DEPS=true CONTAINER_ENGINE="${engine}" DIST="${dist}" "$@"; }

case "${backend}" in
  jemalloc | heaptrack) ;;
  *) echo "example: BACKEND=${backend}: the example runs jemalloc or heaptrack (bytehound needs its offline bundle to build; tests/e2e/images_bytehound.sh runs it the same way)" >&2; exit 2 ;;
esac
rm -rf "${work}"
mkdir -p "${work}/profile"
chmod 1777 "${work}/profile"

say "Debian ${suite} bases for ${arch}, from Debian's archive with mmdebstrap (${engine})"
# make base-image reuses a base only when it was made from the same inputs
# (suite, packages, mirror, scripts), so the tests' bases and ours never mix.
slim="localhost/memprofile-base:${suite}-slim-${arch}"
builder="localhost/memprofile-base:${suite}-builder-${arch}"
mk base-image ARCH="${arch}" SUITE="${suite}" >/dev/null
mk base-image ARCH="${arch}" SUITE="${suite}" BASE_VARIANT=builder >/dev/null
echo "${slim}, ${builder}"

say "The example app image: a service that leaks in leaky_function (examples/leaky)"
app=localhost/leaky:example
case "${engine}" in
  docker) docker buildx build --quiet --load --platform "linux/${arch}" -t "${app}" \
            --build-arg "BUILDER_IMAGE=${builder}" --build-arg "BASE_IMAGE=${slim}" "${root}/examples/leaky" >/dev/null ;;
  podman) engine_build podman build --isolation chroot --pull=never --quiet -t "${app}" \
            --build-arg "BUILDER_IMAGE=${builder}" --build-arg "BASE_IMAGE=${slim}" "${root}/examples/leaky" >/dev/null ;;
  buildah) engine_build buildah bud --isolation chroot --pull=never --quiet -t "${app}" \
             --build-arg "BUILDER_IMAGE=${builder}" --build-arg "BASE_IMAGE=${slim}" "${root}/examples/leaky" >/dev/null ;;
esac
echo "${app}"

say "make image-memprofile APP_IMAGE=${app} BACKEND=${backend}"
pull=never
[[ "${engine}" != docker ]] || pull=""
mk image-memprofile APP_IMAGE="${app}" BACKEND="${backend}" PULL_POLICY="${pull}" IMAGE_WORK_DIR="${work}/image" \
  > "${work}/build.log" 2>&1 || { tail -40 "${work}/build.log" >&2; echo "example: the image build failed (log: ${work}/build.log)" >&2; exit 1; }
image=localhost/leaky:example-memprofile
grep '^== ' "${work}/build.log"

say "memprofile preflight ${work}/image/image.tar"
"${dist}/memprofile/${arch}/memprofile" preflight "${work}/image/image.tar" | sed -n '1,8p'

say "Running ${image} for ${seconds} s (its entrypoint: memprofile exec, then the app)"
mapfile -t entrypoint < <(case "${engine}" in
  docker) docker image inspect "${image}" | jq -r '.[0].Config.Entrypoint[]' ;;
  *) buildah inspect --type image "${image}" | jq -r '.OCIv1.config.Entrypoint[]' ;;
esac)
case "${engine}" in
  docker)
    docker run --rm -v "${work}/profile:/var/memprofile" "${image}" "${seconds}" "${per_tick}" ;;
  *)
    # `podman run` needs rlimits some sandboxes refuse; buildah run does not.
    ctr="$(buildah from --pull=never --quiet "${image}")"
    trap 'buildah rm "${ctr}" >/dev/null 2>&1 || true' EXIT
    buildah run --isolation chroot -v "${work}/profile:/var/memprofile" "${ctr}" -- "${entrypoint[@]}" "${seconds}" "${per_tick}" ;;
esac
ls -l "${work}/profile"

say "memprofile report: what grew, and what holds the memory (symbols from the image's files)"
case "${backend}" in
  jemalloc)
    [[ -n "$(find "${work}/profile" -name 'jeprof.*.heap')" ]] || { echo "example: no profile was recorded" >&2; exit 1; }
    # Symbols from the image preflight judged, read in one pass.
    "${memprofile}" report --top 5 --image "${work}/image/image.tar" "${work}/profile" | tee "${work}/top.txt"
    grep -Eq '^  1 .*leaky_function \([^)]*leaky\.c:[0-9]+\)' "${work}/top.txt" ||
      { echo "example: leaky_function is not the first site" >&2; exit 1; } ;;
  heaptrack)
    raw="$(find "${work}/profile" -name 'heaptrack.*.raw' -print -quit)"
    [[ -s "${raw}" ]] || { echo "example: no trace was recorded" >&2; exit 1; }
    "${memprofile}" report --top 5 --image "${work}/image/image.tar" "${raw}" | tee "${work}/top.txt"
    grep -Eq '^  1 .*leaky_function \([^)]*leaky\.c:[0-9]+\)' "${work}/top.txt" ||
      { echo "example: leaky_function is not the first site" >&2; exit 1; } ;;
esac
# Rebuilds leave the superseded image and stage results untagged; in our
# own store they are ours to drop (never in a store the caller chose).
if [[ "${own_store}" == true ]]; then
  case "${engine}" in
    podman) podman image prune --force >/dev/null 2>&1 || true ;;
    buildah) buildah rmi --prune >/dev/null 2>&1 || true ;;
  esac
fi
say "Done: ${image} is profilable, and its profile names leaky_function."
