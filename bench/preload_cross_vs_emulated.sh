#!/usr/bin/env bash
# Benchmark: building jemalloc's preload library for arm64 by cross-compiling
# (gcc-aarch64-linux-gnu) against the native amd64 build, in the same run,
# and (with --emulated) against the same arm64 build run under qemu in an
# arm64 Debian root, as an in-image `RUN` step on an amd64 builder would.
# usage: bench/preload_cross_vs_emulated.sh [--emulated]
set -o errexit -o nounset -o pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
emulated=false
[[ "${1:-}" == --emulated ]] && emulated=true
# shellcheck source=scripts/host.sh
source "${root}/scripts/host.sh"
PRELOAD_CACHE="$(memprofile_cache)/preload"
export PRELOAD_CACHE
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

elapsed() {  # seconds of "$@"
  local start end
  start=$(date +%s.%N)
  "$@" >/dev/null 2>&1
  end=$(date +%s.%N)
  printf '%.1f' "$(echo "${end} - ${start}" | bc -l)"
}

t_native=$(elapsed "${root}/preload/build.sh" jemalloc amd64 "${work}/amd64")
t_cross=$(elapsed "${root}/preload/build.sh" jemalloc arm64 "${work}/arm64")
echo "jemalloc native amd64 build:        ${t_native} s"
echo "jemalloc arm64 cross build:         ${t_cross} s   ratio $(echo "scale=2; ${t_cross} / ${t_native}" | bc -l) (target <= 1.5)"

if ${emulated}; then
  # An arm64 Debian root with a compiler, and the same configure + make
  # inside it under qemu-user (binfmt).
  rootfs_tar="$("${root}/scripts/make-rootfs.sh" arm64 --include build-essential,bzip2)"
  chroot_dir="${work}/root"
  mkdir -p "${chroot_dir}"
  tar -C "${chroot_dir}" -xf "${rootfs_tar}"
  tarball="${PRELOAD_CACHE}/sources/jemalloc-5.3.0.tar.bz2"
  cp "${tarball}" "${chroot_dir}/tmp/"
  build() {
    # shellcheck disable=SC2016 # $(nproc) runs inside the arm64 root
    chroot "${chroot_dir}" /bin/sh -c 'cd /tmp && tar xjf jemalloc-5.3.0.tar.bz2 && cd jemalloc-5.3.0 &&
      ./configure --enable-prof --disable-static --disable-cxx --with-lg-page=16 && make -j"$(nproc)" build_lib_shared'
  }
  t_emulated=$(elapsed build)
  echo "jemalloc arm64 build under qemu:    ${t_emulated} s   cross is $(echo "scale=1; ${t_emulated} / ${t_cross}" | bc -l)x faster"
fi
