# jemalloc 5.3.0 with heap profiling, as a preload library.
# shellcheck shell=bash
# shellcheck disable=SC2034 # the variables are read by preload/build.sh
VERSION=5.3.0
SOURCE_NAME=jemalloc-5.3.0.tar.bz2
SOURCE_SHA256=2db82d1e7119df3e71b7640219b6dfe84789bc0537983c3b7ac4f7189aecfeaa
# Upstream's release, then Debian's pool: its .orig tarball is byte-identical.
SOURCE_URLS=(
  "https://github.com/jemalloc/jemalloc/releases/download/5.3.0/jemalloc-5.3.0.tar.bz2"
  "http://deb.debian.org/debian/pool/main/j/jemalloc/jemalloc_5.3.0.orig.tar.bz2"
)
INSTALL_PATH=/usr/lib/memprofile/libjemalloc.so.2
LIBRARY=libjemalloc.so.2
ENV_VARS="MALLOC_CONF"

# build_recipe SRC BUILD ARCH TRIPLET OUT
build_recipe() {
  local src="$1" build="$2" arch="$3" triplet="$4" out="$5"
  # No C++ operators: the library then needs no libstdc++ in the image.
  local flags=(--enable-prof --disable-static --disable-cxx)
  # 64 KiB pages: arm64 kernels may use them, and a 4 KiB-page build aborts there.
  [[ "${arch}" == arm64 ]] && flags+=(--with-lg-page=16)
  [[ "${arch}" != "$(host_arch)" ]] && flags+=(--host="${triplet}" --build="$(uname -m)-linux-gnu")
  BUILD_FLAGS="${flags[*]}"
  (cd "${build}" && CC="${CC:-$([[ "${arch}" != "$(host_arch)" ]] && echo "${triplet}-gcc" || echo gcc)}" \
    "${src}/configure" "${flags[@]}" >configure.log 2>&1) || { tail -20 "${build}/configure.log" >&2; return 1; }
  make -C "${build}" -j "$(nproc)" build_lib_shared >"${build}/make.log" 2>&1 || { tail -20 "${build}/make.log" >&2; return 1; }
  cp "${build}/lib/libjemalloc.so.2" "${out}/libjemalloc.so.2"
  install -m 0755 "${build}/bin/jeprof" "${out}/jeprof"
}
