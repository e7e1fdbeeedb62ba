#!/usr/bin/env bash
# Builds memray's tracker from Debian's source package (preload/memray/recipe.sh)
# for one interpreter: its extension tag and its headers, natively or
# cross-compiled with the gcc-<triplet> toolchain, as a site-packages tree a
# Python image can take as it is: memray/ (the package, and
# _memray.TAG-TRIPLET.so), memray.libs/ (what the extension links and slim
# images lack) and memray-VERSION.dist-info/ (pip sees it; RECORD has every
# file's digest). Writes OUT/build.json: what went in and what the
# extension needs.
#
# usage: preload/memray/build.sh ARCH TAG INCLUDE_DIRS OUT
#   ARCH          amd64 or arm64
#   TAG           the interpreter's extension tag: cpython-311, cpython-313t
#   INCLUDE_DIRS  where its Python.h and pyconfig.h are, ':'-separated
#   OUT           made anew
# env: PRELOAD_CACHE (sources), PYTHON3 (the Python that runs Cython: python3)
set -o errexit -o nounset -o pipefail
umask 022

here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=preload/recipes.sh
source "${here}/../recipes.sh"
# shellcheck source=preload/memray/recipe.sh
source "${here}/recipe.sh"

usage="usage: preload/memray/build.sh ARCH TAG INCLUDE_DIRS OUT"
arch="${1:?${usage}}"
tag="${2:?${usage}}"
includes="${3:?${usage}}"
out="${4:?${usage}}"
triplet="$(arch_triplet "${arch}")"
[[ "${tag}" =~ ^cpython-3([0-9]+)(t?d?)$ ]] || die "memray: '${tag}' is no CPython 3 extension tag (cpython-311, cpython-313t)"
minor="${BASH_REMATCH[1]}"
abiflags="${BASH_REMATCH[2]}"
((minor >= 7)) || die "memray: ${VERSION} supports CPython 3.7 and later, not 3.${minor}"
cross=()
if [[ "${arch}" != "$(host_arch)" ]]; then
  command -v "${triplet}-g++" >/dev/null || die "memray: cross-compiling for ${arch} needs ${triplet}-g++ (apt-get install g++-${triplet})"
  cross=(--host="${triplet}")
fi
cxx="${triplet}-g++"
cc="${triplet}-gcc"
[[ -n "${cross[*]}" ]] || { cxx=g++; cc=gcc; }
python3="${PYTHON3:-python3}"

# The headers: both files, and of the interpreter named (a 3.12 Python.h
# builds a module 3.11 will not load).
inc_flags=()
IFS=: read -r -a include_dirs <<<"${includes}"
for d in "${include_dirs[@]}"; do
  [[ -d "${d}" ]] || die "memray: ${d}: no such directory (the interpreter's headers)"
  inc_flags+=(-I "${d}")
done
header() {  # NAME: the first of the include dirs that has it
  local d
  for d in "${include_dirs[@]}"; do [[ -f "${d}/$1" ]] && { echo "${d}/$1"; return 0; }; done
  die "memray: no $1 in ${includes}: the interpreter's headers (Debian's libpython3.X-dev, or the image's include/python3.X) are needed"
}
python_h="$(header Python.h)"
have_minor="$(sed -n 's/^#define PY_MINOR_VERSION[[:space:]]*\([0-9]*\).*/\1/p' "$(dirname "${python_h}")/patchlevel.h" 2>/dev/null || true)"
[[ "${have_minor}" == "${minor}" ]] || die "memray: ${python_h} is Python 3.${have_minor:-?}'s, not 3.${minor}'s"
# The pyconfig.h the compiler takes (Debian's is a wrapper that includes
# <TRIPLET/python3.X/pyconfig.h>): one of these headers', never this
# machine's own Python's.
pyconfig_h="$(printf '#include <Python.h>\n' | "${cxx}" -M -x c++ "${inc_flags[@]}" - 2>/dev/null |
  tr -s '[:space:]' '\n' | grep '/pyconfig\.h$' | tail -n 1 || true)"
[[ -n "${pyconfig_h}" ]] || die "memray: ${includes}: no pyconfig.h that Python.h reaches for ${triplet}"
inside=""
for d in "${include_dirs[@]}"; do [[ "$(realpath -m "${pyconfig_h}")" == "$(realpath -m "${d}")"/* ]] && inside=yes; done
[[ -n "${inside}" ]] || die "memray: the pyconfig.h Python.h reaches is ${pyconfig_h}, not one of ${includes}: the interpreter's own is needed"
if grep -q '^#define Py_GIL_DISABLED 1' "${pyconfig_h}"; then
  [[ "${abiflags}" == *t* ]] || die "memray: ${pyconfig_h} is a free-threaded build's: its tag is cpython-3${minor}t"
elif [[ "${abiflags}" == *t* ]]; then
  die "memray: ${pyconfig_h} is not a free-threaded build's, but the tag is ${tag}"
fi

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
src="${work}/src"
mkdir -p "${src}" "${work}/obj"

# 1. Debian's source package, patched as dpkg-source does, then ours.
orig="$(mapfile -t u < <(pool_urls "${ORIG_NAME}" p/python-memray) && fetch "${ORIG_NAME}" "${ORIG_SHA256}" "${u[@]}")"
deb_tar="$(mapfile -t u < <(pool_urls "${DEBIAN_NAME}" p/python-memray) && fetch "${DEBIAN_NAME}" "${DEBIAN_SHA256}" "${u[@]}")"
tar -C "${src}" --strip-components=1 -xf "${orig}"
tar -C "${src}" -xf "${deb_tar}"
while read -r p; do
  [[ -z "${p}" || "${p}" == \#* ]] && continue
  patch -d "${src}" -p1 --quiet --forward < "${src}/debian/patches/${p}" >/dev/null ||
    die "memray: Debian's patch ${p} does not apply to ${ORIG_NAME}"
done < "${src}/debian/patches/series"
patch -d "${src}" -p1 --quiet --forward < "${here}/lazy-rich.patch" >/dev/null ||
  die "memray: lazy-rich.patch does not apply"
listed="$(sed -n '/^MEMRAY_EXTENSION = Extension(/,/^)/s#.*"src/memray/_memray/\([a-z_{}A-Z]*\)\.cpp".*#\1.cpp#p' "${src}/setup.py" |
  sed 's/{BINARY_FORMAT}/elf/' | sort | paste -sd' ')"
[[ "${listed}" == "$(printf '%s\n' "${EXTENSION_SOURCES[@]}" | sort | paste -sd' ')" ]] ||
  die "memray: setup.py's extension sources (${listed}) are not the recipe's"

# 2. Cython's C++ for _memray.pyx, with setup.py's directives.
cython="$(mapfile -t u < <(pool_urls "${CYTHON_NAME}" c/cython) && fetch "${CYTHON_NAME}" "${CYTHON_SHA256}" "${u[@]}")"
dpkg-deb -x "${cython}" "${work}/cython"
cy_path="${work}/cython/usr/lib/python3/dist-packages"
have_cython="$(PYTHONPATH="${cy_path}" "${python3}" -c 'import Cython; print(Cython.__version__)')" ||
  die "memray: ${python3} cannot run Cython from ${CYTHON_NAME}"
[[ "${have_cython}" == "${CYTHON_VERSION}" ]] || die "memray: ${CYTHON_NAME} is Cython ${have_cython}, not ${CYTHON_VERSION}"
directives=(language_level=3 embedsignature=True boundscheck=False wraparound=False cdivision=True profile=False
  linetrace=False c_string_type=unicode c_string_encoding=utf8)
(cd "${src}" && PYTHONPATH="${cy_path}" "${python3}" -m cython --cplus "${directives[@]/#/-X}" -I src/memray \
  -o "${work}/_memray.cpp" src/memray/_memray.pyx) > "${work}/cython.log" 2>&1 ||
  { tail -n 20 "${work}/cython.log" >&2; die "memray: Cython failed on _memray.pyx"; }

# 3. The vendored libbacktrace (memray's native frames), static and PIC.
lbt="${src}/src/vendor/libbacktrace"
mkdir -p "${work}/lbt"
(cd "${work}/lbt" && CC="${cc}" "${lbt}/configure" --with-pic "${cross[@]}" --prefix="${work}/lbt/install" \
  --includedir="${work}/lbt/install/include/libbacktrace" && make -j "$(nproc)" && make install) \
  > "${work}/libbacktrace.log" 2>&1 || { tail -n 20 "${work}/libbacktrace.log" >&2; die "memray: libbacktrace did not build for ${arch}"; }

# 4. The extension.
flags=("${CXXFLAGS_MEMRAY[@]}" -I "${src}/src" -I "${src}/src/memray" -I "${src}/src/memray/_memray"
  -I "${work}/lbt/install/include" "${inc_flags[@]}")
objs=()
for f in "${work}/_memray.cpp" "${EXTENSION_SOURCES[@]/#/${src}/src/memray/_memray/}"; do
  o="${work}/obj/$(basename "${f}" .cpp).o"
  "${cxx}" "${flags[@]}" -c -o "${o}" "${f}" 2>> "${work}/compile.log" ||
    { tail -n 20 "${work}/compile.log" >&2; die "memray: $(basename "${f}") does not compile for ${tag} on ${arch}"; }
  objs+=("${o}")
done
"${cc}" -O2 -fPIC -c -o "${work}/obj/no-debuginfod.o" "${here}/no-debuginfod.c"
ext="_memray.${tag}-${triplet}.so"
rm -rf "${out}"
mkdir -p "${out}/memray" "${out}/memray.libs"
# shellcheck disable=SC2016 # $ORIGIN is for the loader, not the shell
"${cxx}" -shared "${flags[@]}" -o "${out}/memray/${ext}" "${objs[@]}" "${work}/obj/no-debuginfod.o" \
  "${work}/lbt/install/lib/libbacktrace.a" -llz4 -lunwind -ldl -Wl,--as-needed -Wl,-z,relro,-z,now \
  -Wl,-rpath,'$ORIGIN/../memray.libs' 2>> "${work}/compile.log" ||
  { tail -n 20 "${work}/compile.log" >&2; die "memray: ${ext} does not link"; }
strip="strip"
[[ -z "${cross[*]}" ]] || strip="${triplet}-strip"
"${strip}" --strip-unneeded "${out}/memray/${ext}"
for lib in "${BUNDLED[@]}"; do
  [[ -e "/usr/lib/${triplet}/${lib}" ]] || die "memray: /usr/lib/${triplet}/${lib} missing (apt-get install ${lib%%.so*}-dev:${arch})"
  cp "$(readlink -f "/usr/lib/${triplet}/${lib}")" "${out}/memray.libs/${lib}"
done

# 5. memray's Python package (the tracker's part of it needs nothing else).
(cd "${src}/src/memray" && find . -type f \( -name '*.py' -o -name '*.pyi' -o -name py.typed -o -path './reporters/templates/*' \) \
  ! -path './_memray/*' -exec cp --parents -t "${out}/memray" {} +)

# 6. Checked: the machine, the init function, what it needs.
machine="$(readelf -h "${out}/memray/${ext}" | sed -n 's/^ *Machine: *//p')"
case "${arch}" in
  amd64) [[ "${machine}" == *X86-64* ]] ;;
  arm64) [[ "${machine}" == *AArch64* ]] ;;
esac || die "memray: ${ext} is ${machine}, not ${arch}: the cross toolchain was not used"
readelf --dyn-syms --wide "${out}/memray/${ext}" | awk '$7 != "UND" && $5 == "GLOBAL"' | grep -w PyInit__memray > /dev/null ||
  die "memray: ${ext} exports no PyInit__memray"
! readelf --dyn-syms --wide "${out}/memray/${ext}" | grep 'debuginfod_' > /dev/null ||
  die "memray: ${ext} still needs libdebuginfod"
needed="$(readelf -d "${out}/memray/${ext}" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | paste -sd' ')"

# 7. A dist-info, so pip and importlib.metadata know what is there.
dist="${out}/memray-${VERSION}.dist-info"
mkdir -p "${dist}"
printf 'Metadata-Version: 2.1\nName: memray\nVersion: %s\nSummary: A memory profiler for Python applications (tracker only: built by memprofile from Debian %s)\nLicense: Apache 2.0\n' \
  "${VERSION}" "${DEBIAN_VERSION}" > "${dist}/METADATA"
echo memprofile > "${dist}/INSTALLER"
echo memray > "${dist}/top_level.txt"
cp "${src}/LICENSE" "${dist}/LICENSE"
"${python3}" - "${out}" "${dist##*/}" <<'PY'
import base64, hashlib, os, sys
root, dist = sys.argv[1], sys.argv[2]
rows = []
for d, _, files in os.walk(root):
    for f in sorted(files):
        p = os.path.join(d, f)
        rel = os.path.relpath(p, root)
        if rel in (dist + "/RECORD", "build.json"):
            continue
        data = open(p, "rb").read()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{rel},sha256={digest},{len(data)}")
rows.append(f"{dist}/RECORD,,")
open(os.path.join(root, dist, "RECORD"), "w").write("\n".join(sorted(rows)) + "\n")
PY

jq -n --arg v "${VERSION}" --arg dv "${DEBIAN_VERSION}" --arg tag "${tag}" --arg arch "${arch}" --arg triplet "${triplet}" \
  --arg ext "memray/${ext}" --arg needed "${needed}" --arg glibc "$(glibc_requirement "${out}/memray/${ext}")" \
  --arg cython "${CYTHON_VERSION}" --arg flags "${CXXFLAGS_MEMRAY[*]}" --arg orig "${ORIG_NAME} sha256 ${ORIG_SHA256}" \
  --arg debian "${DEBIAN_NAME} sha256 ${DEBIAN_SHA256}" --arg cy "${CYTHON_NAME} sha256 ${CYTHON_SHA256}" \
  --arg bundled "${BUNDLED[*]}" --arg key "$(recipe_key memray)" --arg machine "${MEMRAY_MACHINE:-}" \
  '{backend: "memray", version: $v, source: "debian-source", debian_version: $dv, tag: $tag, arch: $arch,
    triplet: $triplet, extension: $ext, needed: ($needed | split(" ")), glibc_required: $glibc,
    bundled: ($bundled | split(" ")), cython: $cython, build_flags: $flags, built_with: $machine,
    sources: [$orig, $debian, $cy], patches: ["debian/patches/series", "lazy-rich.patch", "no-debuginfod.c"],
    recipe_key: $key}' > "${out}/build.json"
echo "memray: ${out}/memray/${ext} (${arch}, needs ${needed})" >&2
