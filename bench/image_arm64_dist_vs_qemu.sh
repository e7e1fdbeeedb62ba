#!/usr/bin/env bash
# Benchmark: time to a profilable arm64 image from a warm cache (bases,
# sources and the app image present), two ways, same run:
#   dist:   launcher and jemalloc cross-built on the host (already in DIST),
#           layered on; only the verify step runs under qemu;
#   source: both compiled inside the build, in an arm64 builder stage that
#           buildah runs under qemu (it ignores --platform=$BUILDPLATFORM).
# usage: bench/image_arm64_dist_vs_qemu.sh   (needs the test bases: see tests/e2e/images_lib.sh)
set -o errexit -o nounset -o pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
export E2E_ROOT="${here}"
SCRATCH="$(mktemp -d)"
# shellcheck source=tests/e2e/images_lib.sh
source "${here}/tests/e2e/images_lib.sh"

example_app arm64
mk base-image ARCH=arm64 BASE_VARIANT=toolchain >/dev/null
# Warm: the host-built artifacts exist before the clock starts.
mk image-artifacts ARCH=arm64 BACKEND=jemalloc ARTIFACTS_OUT="${SCRATCH}/warm" >/dev/null 2>&1

timed() {  # NAME make-args...: prints seconds
  local name="$1" start end
  shift
  start=$(date +%s.%N)
  mk image-memprofile APP_IMAGE=localhost/leaky:arm64 BACKEND=jemalloc MEMPROFILE_IMAGE_TAG="bench-${name}" "$@" \
    > "${SCRATCH}/${name}.log" 2>&1 || { tail -30 "${SCRATCH}/${name}.log" >&2; echo "bench: ${name} failed" >&2; exit 1; }
  end=$(date +%s.%N)
  echo "${end} - ${start}" | bc -l
}
dist=$(timed dist ARTIFACTS=dist)
source_s=$(timed source ARTIFACTS=source BUILDER_IMAGE="localhost/memprofile-base:${SUITE}-toolchain-arm64")
printf 'arm64 image, host-built artifacts:        %7.1f s\n' "${dist}"
printf 'arm64 image, compiled in-build under qemu: %7.1f s\n' "${source_s}"
printf 'ratio (qemu / host-built): %.1fx\n' "$(echo "${source_s} / ${dist}" | bc -l)"
