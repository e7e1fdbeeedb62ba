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
# usage: scripts/memray-source.sh FACTS.json ARCH OUT [HEADERS]
# A build is kept in the cache under a key of the recipe, the architecture,
# the interpreter's tag and its headers' bytes, and reused only under it.
set -o errexit -o nounset -o pipefail

here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=scripts/debian-apt.sh
source "${here}/debian-apt.sh"
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
tag="cpython-3${BASH_REMATCH[1]}${BASH_REMATCH[2]}"
[[ "${site}" == /* && "${site}" != *..* ]] || die "${facts}: no site-packages directory for ${interpreter}"

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

# 1. The interpreter's headers.
if [[ -n "${headers}" ]]; then
  [[ -f "${headers}/Python.h" ]] || die "${headers}: no Python.h (the image's ${include_dir})"
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

# 2. The build, or the one the cache holds for the same inputs.
headers_digest="$(IFS=:; for d in ${include_dirs}; do (cd "${d}" && find . -name '*.h' -type f -print0 | sort -z | xargs -0 sha256sum); done | sha256sum | cut -c1-16)"
key="$("${here}/../preload/build.sh" --key memray)"
built="$(memprofile_cache)/memray-build/$(cache_key "${key}" "${arch}" "${tag}" "${headers_digest}")"
if [[ ! -f "${built}/build.json" ]]; then
  echo "memray-source: building memray for ${interpreter} (${tag}, ${arch}) against ${from}" >&2
  mkdir -p "$(dirname "${built}")"
  rm -rf "${built}.partial.$$"
  "${here}/../preload/memray/build.sh" "${arch}" "${tag}" "${include_dirs}" "${built}.partial.$$"
  rm -rf "${built}"
  mv "${built}.partial.$$" "${built}"
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
