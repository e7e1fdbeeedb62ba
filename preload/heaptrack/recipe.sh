# heaptrack's preload library only (no GUI, no print, no interpret).
# shellcheck shell=bash
# shellcheck disable=SC2034 # the variables are read by preload/build.sh
VERSION=1.5.0
# Debian repacks upstream's tarball (+dfsg1: non-free files removed); both are
# accepted, each with its own checksum.
SOURCE_NAME=heaptrack_1.5.0+dfsg1.orig.tar.xz
SOURCE_SHA256=576d83385cfbc255cb50d285ef756a0f76653f96d99ad81219c95757dda9942d
SOURCE_URLS=(
  "http://deb.debian.org/debian/pool/main/h/heaptrack/heaptrack_1.5.0+dfsg1.orig.tar.xz"
)
INSTALL_PATH=/usr/lib/memprofile/libheaptrack_preload.so
LIBRARY=libheaptrack_preload.so
ENV_VARS="DUMP_HEAPTRACK_OUTPUT"
# libunwind is not in slim bases (debian:*-slim has no libunwind8): it ships
# beside the library, found through RUNPATH $ORIGIN.
BUNDLED="libunwind.so.8"

build_recipe() {
  local src="$1" build="$2" arch="$3" triplet="$4" out="$5"
  # heaptrack 1.5.0's fork handlers leave its lock to chance: a child forked
  # while the timer thread (every 10 ms) or another thread holds it inherits
  # it held, and waits for it for ever, in exit() (heaptrack_stop) or in
  # dlopen() (its module cache): 8 to 27 of 2,000 forked children hung here,
  # a PostgreSQL backend among them. The patch takes the lock around fork,
  # lets a forked child's exit skip it (the child records nothing), puts the
  # forking thread's tracking back as it was (a child that forks again), and
  # exports memprofile_heaptrack_fork_safe, by which check, preflight and
  # exec tell this build from one without the fix (Debian's 1.4.0).
  patch -d "${src}" -p1 --quiet < "$(dirname "${BASH_SOURCE[0]}")/fork-lock.patch" ||
    { echo "preload: heaptrack: fork-lock.patch does not apply" >&2; return 1; }
  # shellcheck disable=SC2016 # $ORIGIN is for the loader, not the shell
  local flags=(-DCMAKE_BUILD_TYPE=Release -DHEAPTRACK_BUILD_GUI=OFF -DHEAPTRACK_BUILD_PRINT=OFF
    -DHEAPTRACK_BUILD_INTERPRET=OFF -DBUILD_TESTING=OFF
    -DCMAKE_INSTALL_RPATH='$ORIGIN' -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON)
  if [[ "${arch}" != "$(host_arch)" ]]; then
    flags+=(-DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR="${triplet%%-*}"
      -DCMAKE_C_COMPILER="${triplet}-gcc" -DCMAKE_CXX_COMPILER="${triplet}-g++"
      -DCMAKE_LIBRARY_ARCHITECTURE="${triplet}" -DCMAKE_FIND_ROOT_PATH_MODE_PROGRAM=NEVER)
  fi
  BUILD_FLAGS="${flags[*]}"
  cmake -S "${src}" -B "${build}" "${flags[@]}" >"${build}.configure.log" 2>&1 ||
    { tail -20 "${build}.configure.log" >&2; return 1; }
  cmake --build "${build}" -j "$(nproc)" --target heaptrack_preload >"${build}.make.log" 2>&1 ||
    { tail -20 "${build}.make.log" >&2; return 1; }
  cp "$(find "${build}" -name libheaptrack_preload.so | head -1)" "${out}/libheaptrack_preload.so"
  local lib
  for lib in ${BUNDLED}; do
    [[ -e "/usr/lib/${triplet}/${lib}" ]] || { echo "preload: /usr/lib/${triplet}/${lib} missing (apt-get install libunwind-dev:${arch})" >&2; return 1; }
    cp "$(readlink -f "/usr/lib/${triplet}/${lib}")" "${out}/${lib}"
  done
}
