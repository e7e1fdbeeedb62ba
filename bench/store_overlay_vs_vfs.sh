#!/usr/bin/env bash
# Benchmark: disk and time to build the example app and profilable images of
# it (amd64, jemalloc, host-built artifacts) into an empty container store,
# with the overlay driver and with vfs, same run: first one image, then
# BENCH_IMAGES (4) more on the same base, the tests' pattern. The store's size
# is what the tests, the example and CI pay: vfs copies a base's whole tree
# into every image and container built on it.
# usage: bench/store_overlay_vs_vfs.sh   (root: overlay needs a mount)
set -o errexit -o nounset -o pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/host.sh
source "${here}/scripts/host.sh"
cache="$(memprofile_cache)"
dist="${cache}/image-dist"
scratch="$(mktemp -d)"
trap 'MEMPROFILE_CACHE="${scratch}" "${here}/scripts/clean-cache.sh" --all >/dev/null 2>&1 || true' EXIT

overlay_mountable "${cache}" || { echo "bench: overlay cannot be mounted here (needs root)" >&2; exit 2; }
slim="$("${here}/scripts/make-rootfs.sh" amd64)"
builder="$("${here}/scripts/make-rootfs.sh" amd64 --include gcc,libc6-dev)"
# Warm: the launcher and the library exist before the clock starts.
make -C "${here}" --no-print-directory SKIP_DEPS=true DIST="${dist}" image-artifacts ARCH=amd64 BACKEND=jemalloc \
  ARTIFACTS_OUT="${scratch}/warm" >/dev/null 2>&1

build() {  # DRIVER TAG
  make -C "${here}" --no-print-directory SKIP_DEPS=true CONTAINER_ENGINE=buildah PULL_POLICY=never DIST="${dist}" \
    IMAGE_WORK_DIR="${scratch}/work-$1" image-memprofile APP_IMAGE=localhost/leaky:bench BACKEND=jemalloc \
    MEMPROFILE_IMAGE_TAG="$2" > "${scratch}/$1.log" 2>&1 ||
    { tail -30 "${scratch}/$1.log" >&2; echo "bench: $1 build failed" >&2; exit 1; }
}

run() {  # DRIVER: prints "MB_FIRST SECONDS_FIRST MB_ALL SECONDS_ALL"
  local driver="$1" start first_mb first_s i
  MEMPROFILE_STORAGE_DRIVER="${driver}" use_container_storage "${scratch}/containers-${driver}"
  start=$(date +%s.%N)
  podman import --quiet --arch amd64 "${slim}" localhost/bench-slim >/dev/null
  podman import --quiet --arch amd64 "${builder}" localhost/bench-builder >/dev/null
  buildah bud --isolation chroot --pull=never --quiet --platform linux/amd64 \
    --build-arg BUILDER_IMAGE=localhost/bench-builder --build-arg BASE_IMAGE=localhost/bench-slim \
    -t localhost/leaky:bench "${here}/examples/leaky" >/dev/null
  build "${driver}" bench-0
  first_s="$(echo "$(date +%s.%N) - ${start}" | bc -l)"
  first_mb="$(du -sm "${scratch}/containers-${driver}/graph-${driver}" | cut -f1)"
  for ((i = 1; i <= ${BENCH_IMAGES:-4}; i++)); do build "${driver}" "bench-${i}"; done
  echo "${first_mb} ${first_s} $(du -sm "${scratch}/containers-${driver}/graph-${driver}" | cut -f1)" \
    "$(echo "$(date +%s.%N) - ${start}" | bc -l)"
}
read -r o1_mb o1_s on_mb on_s < <(run overlay)
read -r v1_mb v1_s vn_mb vn_s < <(run vfs)
n=$((1 + ${BENCH_IMAGES:-4}))
printf '%-28s %8s %8s %10s %8s\n' "" "1 image" "" "${n} images" ""
printf '%-28s %6d MB %6.1f s %8d MB %6.1f s\n' "overlay store" "${o1_mb}" "${o1_s}" "${on_mb}" "${on_s}"
printf '%-28s %6d MB %6.1f s %8d MB %6.1f s\n' "vfs store" "${v1_mb}" "${v1_s}" "${vn_mb}" "${vn_s}"
printf 'ratio vfs / overlay: 1 image disk %.1fx time %.1fx; %d images disk %.1fx time %.1fx\n' \
  "$(echo "${v1_mb} / ${o1_mb}" | bc -l)" "$(echo "${v1_s} / ${o1_s}" | bc -l)" "${n}" \
  "$(echo "${vn_mb} / ${on_mb}" | bc -l)" "$(echo "${vn_s} / ${on_s}" | bc -l)"
printf 'each further image: overlay %d MB, vfs %d MB\n' "$(((on_mb - o1_mb) / (n - 1)))" "$(((vn_mb - v1_mb) / (n - 1)))"
