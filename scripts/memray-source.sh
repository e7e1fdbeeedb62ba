#!/usr/bin/env bash
# Stages memray for an app image's interpreter when Debian's package is not
# for it (scripts/memray-debian.sh said so: a Python not Debian's, as the
# python: images' /usr/local one; bookworm, which has no python3-memray; a
# venv without the system's packages): memray built from Debian's source
# package against that interpreter's own headers (preload/memray/build.sh),
# installed where pip would put it (preflight's site_packages), as a root
# tree the layer Dockerfile copies with the launcher.
#
# The headers: the image's own (HEADERS, copied out of it by
# scripts/build-image.sh from preflight's include_dir), else, for Debian's
# python, Debian's libpython3.X-dev of the image's suite at the version of
# its python3.X-minimal.
#
# usage: scripts/memray-source.sh FACTS.json ARCH OUT [HEADERS[:MULTIARCH]]
# A build is kept in the cache under a key of the recipe, the architecture,
# the interpreter's tag and its headers' bytes, and reused only under it.
set -o errexit -o nounset -o pipefail
# What is staged is read by the app's user, whatever this shell's umask.
umask 022

here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=scripts/debian-apt.sh
source "${here}/debian-apt.sh"
# shellcheck source=preload/recipes.sh
source "${here}/../preload/recipes.sh"
die() {
  echo "memprofile: $*" >&2
  exit 1
}

usage="usage: memray-source.sh FACTS.json ARCH OUT [HEADERS]"
facts="${1:?${usage}}"
arch="${2:?${usage}}"
out="${3:?${usage}}"
headers="${4:-}"
[[ -s "${facts}" ]] || die "${facts}: no preflight facts"
case "${arch}" in amd64 | arm64) ;; *) die "unsupported arch '${arch}' (amd64, arm64)" ;; esac
py="$(head -n 1 "${facts}" | jq -c '.python // empty')" || die "${facts}: not preflight --json output"
[[ -n "${py}" ]] || die "${facts}: preflight found no CPython interpreter to build memray for"
field() { jq -r "$1 // empty" <<<"${py}"; }
interpreter="$(field .interpreter)"
version="$(field .version)"
site="$(field .site_packages)"
include_dir="$(field .include_dir)"
[[ "${version}" =~ ^3\.([0-9]+)([a-z]*)$ ]] || die "${facts}: '${version}' is no CPython 3 version"
minor="${BASH_REMATCH[1]}"
tag="cpython-3${minor}${BASH_REMATCH[2]}"
# What memray 1.17 and the Cython it is built with (3.0.11) support: 3.9 to
# 3.13 with the GIL (memray's NEWS: no free-threaded builds yet; 3.14 came
# after both). Said before anything is fetched.
if [[ "${BASH_REMATCH[2]}" == *t* ]]; then
  die "${interpreter} is a free-threaded build (${version}): memray 1.17 does not support those (its NEWS), and importing it would turn the GIL back on in the app; profile a build with the GIL"
fi
((minor >= 9 && minor <= 13)) ||
  die "${interpreter} is Python ${version}: memray 1.17, built by memprofile with Cython 3.0.11, supports 3.9 to 3.13; install a memray for it in the app image (pip install memray) and keep BACKEND=memray"
[[ "${site}" == /* && "${site}" != *..* ]] || die "${facts}: no site-packages directory for ${interpreter}"

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

# 1. The interpreter's headers.
if [[ -n "${headers}" ]]; then
  # DIR[:DIR]: the image's include_dir, and the multiarch directory a
  # Debian-style pyconfig.h wrapper includes, when there is one.
  [[ -f "${headers%%:*}/Python.h" ]] || die "${headers%%:*}: no Python.h (the image's ${include_dir})"
  include_dirs="${headers}"
  from="the image's ${include_dir}"
elif [[ -n "$(field .debian.python_package)" ]]; then
  codename="$(field .debian.codename)"
  minimal="$(field .debian.python_version)"
  jq -r '.debian.installed[] | .stanza + "\n"' <<<"${py}" > "${work}/status"
  debian_apt "${codename}" "${arch}" "${work}/status" "${work}" || exit 1
  dev="libpython${version}-dev"
  # The very version of the image's python; a point release the mirror no
  # longer has: the suite's (the same minor's headers, one ABI), said.
  if ! deb="$(debian_deb "${dev}=${minimal}" 2>/dev/null)"; then
    candidate="$(apt-cache "${apt_opts[@]}" policy "${dev}" 2>/dev/null | sed -n 's/^ *Candidate: //p')"
    [[ -n "${candidate}" && "${candidate}" != "(none)" ]] ||
      die "${codename} has no ${dev} for ${arch}: memray cannot be built for ${interpreter}"
    echo "memray-source: ${codename} no longer has ${dev} ${minimal}, the image's python's: its ${candidate} instead" >&2
    deb="$(debian_deb "${dev}=${candidate}")" || exit 1
    minimal="${candidate}"
  fi
  dpkg-deb -x "${deb}" "${work}/dev"
  include_dirs="${work}/dev/usr/include/python${version}:${work}/dev/usr/include"
  from="Debian's ${dev} ${minimal} (${codename}/${arch})"
else
  die "${interpreter} (${version}) has no C headers in the image (no ${include_dir}/Python.h), and it is not Debian's python, whose headers memprofile would fetch: memray's extension is built against the interpreter's own headers; keep them in the app image (the python: images do), or pip install memray there"
fi

# 2. The build, or the one the cache holds for the same inputs: the recipe,
# the target, the headers' bytes, and what this machine builds and bundles
# with (its compiler, its glibc, the libraries memray.libs/ gets).
headers_digest="$(IFS=:; for d in ${include_dirs}; do (cd "${d}" && find . -name '*.h' \( -type f -o -type l \) -print0 | sort -z |
  xargs -0 -r sha256sum); done | sha256sum | cut -c1-16)"
triplet="$(arch_triplet "${arch}")"
compiler="$("$([[ "${arch}" == "$(host_arch)" ]] && echo g++ || echo "${triplet}-g++")" --version | head -n 1)"
machine="$(ldd --version 2>/dev/null | head -n 1); ${compiler}; $(cd "/usr/lib/${triplet}" && sha256sum liblz4.so.1 libunwind.so.8 2>/dev/null | paste -sd' ')"
key="$("${here}/../preload/build.sh" --key memray)"
built="$(memprofile_cache)/memray-build/$(cache_key "${key}" "${arch}" "${tag}" "${headers_digest}" "${machine}")"
mkdir -p "$(dirname "${built}")"
# One build per key at a time: a second build of the same waits and takes it.
exec {lock}> "${built}.lock"
flock "${lock}"
if [[ ! -f "${built}/build.json" ]]; then
  echo "memray-source: building memray for ${interpreter} (${tag}, ${arch}) against ${from}" >&2
  partial="${built}.partial.$$"
  trap 'rm -rf "${work}" "${partial}"' EXIT
  rm -rf "${built}" "${partial}"
  MEMRAY_MACHINE="${machine}" "${here}/../preload/memray/build.sh" "${arch}" "${tag}" "${include_dirs}" "${partial}"
  mv -T "${partial}" "${built}"
else
  echo "memray-source: memray for ${tag} (${arch}) built before from the same inputs: ${built}" >&2
fi

# 3. Installed where pip would put it, and recorded.
mkdir -p "${out}${site}" "${out}/usr/share/memprofile"
cp -a "${built}/memray" "${built}/memray.libs" "${built}"/memray-*.dist-info "${out}${site}/"
(cd "${out}${site}" && find memray memray.libs memray-*.dist-info -type f -print0 | sort -z | xargs -0 sha256sum) |
  jq -R 'capture("^(?<sha256>[0-9a-f]+)  (?<path>.*)$")' |
  jq -s --slurpfile b "${built}/build.json" --arg p "${interpreter}" --arg site "${site}" --arg from "${from}" \
    '$b[0] + {interpreter: $p, site_packages: $site, headers: $from, files: map(.path = ($site + "/" + .path))}' \
    > "${out}/usr/share/memprofile/backend-memray.json"
echo "memray-source: memray $(jq -r .version "${built}/build.json") for ${interpreter} in ${site} (${arch}; built against ${from})" >&2
