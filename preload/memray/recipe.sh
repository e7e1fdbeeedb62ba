# memray's tracker, built from Debian's source package of memray against the
# headers of an image's own interpreter (preload/memray/build.sh): for an
# image whose Python is not Debian's, or whose suite has no python3-memray
# (bookworm).
# shellcheck shell=bash
# shellcheck disable=SC2034 # the variables are read by preload/memray/build.sh
VERSION=1.17.0
DEBIAN_VERSION=1.17.0+dfsg-1+deb13u1
# Debian 13's source package: upstream's release repacked (+dfsg), and
# Debian's patches, applied as dpkg-source would (debian/patches/series).
ORIG_NAME=python-memray_1.17.0+dfsg.orig.tar.xz
ORIG_SHA256=f9ddee9cd8b4212c6326eaa4bffed0de9efe36669aafd347a198e6d7b13a8a3b
DEBIAN_NAME=python-memray_1.17.0+dfsg-1+deb13u1.debian.tar.xz
DEBIAN_SHA256=9a71f14936c50db4c621aea3cb2c627d91c64d0d90b5737a2fdb6fe34d654153
# The Cython Debian built python3-memray 1.17 with (trixie's cython3), run
# from its Python sources by this machine's python3: the C++ it writes is the
# same for every Python version and architecture (its #if's choose), so one
# translation serves each interpreter. Bookworm's cython3 is 0.29.
CYTHON_NAME=cython3_3.0.11+dfsg-2+b1_amd64.deb
CYTHON_SHA256=ca9e41c1f13b3d2b4693034b9ee7660762c78ebe6043f03eef9068cacbfe6c9c
CYTHON_VERSION=3.0.11

pool_urls() {  # NAME DIR: the file in Debian's pool, this machine's mirror first
  local mirror
  mirror="$(debian_mirror)"
  echo "${mirror%/}/pool/main/$2/$1"
  [[ "${mirror%/}" == http://deb.debian.org/debian ]] || echo "http://deb.debian.org/debian/pool/main/$2/$1"
}

# The extension's sources, as memray's setup.py lists them for Linux
# (MEMRAY_EXTENSION); build.sh checks setup.py still says so.
EXTENSION_SOURCES=(compat.cpp hooks.cpp tracking_api.cpp elf_shenanigans.cpp logging.cpp python_helpers.cpp
  source.cpp sink.cpp records.cpp record_reader.cpp record_writer.cpp snapshot.cpp socket_reader_thread.cpp
  native_resolver.cpp)
# setup.py's flags: C++17, hidden symbols but the module's init, a 64-bit
# off_t, memray's initial-exec TLS, LTO; Python's own -O2/-fwrapv/-DNDEBUG.
CXXFLAGS_MEMRAY=(-std=c++17 -Wall -O2 -fwrapv -DNDEBUG -fPIC -fvisibility=hidden -flto=auto
  -D_FILE_OFFSET_BITS=64 -DUSE_MEMRAY_TLS_MODEL=1)
# The libraries it links (setup.py: lz4, unwind, dl; debuginfod is
# no-debuginfod.c): shipped in memray.libs/ beside the package, found
# through RUNPATH, as auditwheel ships a wheel's. Slim bases have neither.
BUNDLED=(liblz4.so.1 libunwind.so.8)
