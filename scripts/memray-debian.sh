#!/usr/bin/env bash
# Stages Debian's memray for an app image whose Python is Debian's, as a root
# tree the layer Dockerfile copies with the launcher: python3-memray of the
# image's own suite and architecture, and of what it depends on only what the
# image lacks. apt resolves it on this machine, against the image's own dpkg
# database (from `memprofile preflight --json --backend memray`), so the
# image needs neither apt nor a network in its build; apt checks every
# package against the suite's signed index, and this script checks each
# file's SHA-256 again and records them in the manifest.
#
# usage: scripts/memray-debian.sh FACTS.json ARCH OUT
#   FACTS.json: the app image's preflight --json --backend memray (one line,
#   for ARCH); OUT: the root tree to add to (made if missing).
# Nothing in the image is replaced: a package the image has at another
# version than memray needs is refused, in one line (exit 1). Exit 3, before
# anything is written: Debian's package is not for this interpreter (not
# Debian's, a venv without the system's packages, a suite without memray for
# its Python); scripts/memray-stage.sh then builds memray from source.
set -o errexit -o nounset -o pipefail

# shellcheck source=scripts/debian-apt.sh
source "$(dirname "$0")/debian-apt.sh"
die() {
  echo "memprofile: $*" >&2
  exit 1
}

facts="${1:?usage: memray-debian.sh FACTS.json ARCH OUT}"
arch="${2:?usage: memray-debian.sh FACTS.json ARCH OUT}"
out="${3:?usage: memray-debian.sh FACTS.json ARCH OUT}"
[[ -s "${facts}" ]] || die "${facts}: no preflight facts"
case "${arch}" in amd64 | arm64) ;; *) die "unsupported arch '${arch}' (amd64, arm64)" ;; esac

py="$(head -n 1 "${facts}" | jq -c '.python // empty')" || die "${facts}: not preflight --json output"
[[ -n "${py}" ]] || die "${facts}: preflight found no CPython interpreter to install memray for"
interpreter="$(jq -r .interpreter <<<"${py}")"
codename="$(jq -r '.debian.codename // empty' <<<"${py}")"
package="$(jq -r '.debian.python_package // empty' <<<"${py}")"
version="$(jq -r .version <<<"${py}")"
# Where Debian's package would not be imported, memray-source.sh builds one
# for the interpreter (exit 3).
not_for() {
  echo "memray-debian: $*: Debian's python3-memray is not for it" >&2
  exit 3
}
[[ "$(jq -r .isolated_venv <<<"${py}")" != true ]] ||
  not_for "$(jq -r .invoked <<<"${py}") is a venv made without the system's site-packages, where /usr/lib/python3/dist-packages is not imported"
id="$(jq -r '.debian.id // empty' <<<"${py}")"
[[ -z "$(jq -r '.debian // empty' <<<"${py}")" || "${id}" == debian ]] ||
  not_for "the image is ${id:-of no distribution os-release names}, not Debian"
[[ -n "${package}" ]] || not_for "${interpreter} (${version}) is not Debian's python"
[[ -n "${codename}" ]] || die "the image's /etc/os-release names no VERSION_CODENAME: which Debian suite's memray to install is unknown"
[[ "${codename}" =~ ^[a-z][a-z0-9-]*$ ]] || die "the image's /etc/os-release has VERSION_CODENAME '${codename}', which names no Debian suite"
[[ "$(jq -r .debian.complete <<<"${py}")" == true ]] || die "the image's dpkg status is over 4 MiB and was not read whole"

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
jq -r '.debian.installed[] | .stanza + "\n"' <<<"${py}" > "${work}/status"
# Whole stanzas: apt takes an installed package for the index's version
# only when their relations match, and would otherwise install it again.
debian_apt "${codename}" "${arch}" "${work}/status" "${work}" || exit 1

# The suite's memray is built for its default Python (bookworm has none;
# an image's python3.X may not be its suite's default): else
# memray-source.sh builds one from Debian's source package (exit 3).
apt-cache "${apt_opts[@]}" show python3-memray >/dev/null 2>&1 || not_for "${codename} has no python3-memray, and ${interpreter}"
default="$(apt-cache "${apt_opts[@]}" show python3 2>/dev/null | sed -n 's/^Version: //p' | head -n 1)"
[[ "${default}" == "${version}".* ]] ||
  not_for "${codename}'s python3-memray is built for its python3 ${default:-(none)}, and ${interpreter} is ${version}"

# The plan: each "Inst NAME [OLD] (NEW ...)" line; [OLD] is an upgrade of
# what the image has, which extracting files cannot do right.
plan="$(apt-get "${apt_opts[@]}" -s install --no-install-recommends python3-memray 2>&1)" ||
  die "apt cannot install python3-memray for ${interpreter} from ${codename}: $(tail -n 3 <<<"${plan}" | paste -sd' ')"
upgrades="$(sed -n 's/^Inst \([^ ]*\) \[\([^]]*\)\] (\([^ ]*\).*/\1 \2 -> \3/p' <<<"${plan}" | paste -sd, -)"
[[ -z "${upgrades}" ]] || die "python3-memray of ${codename} needs newer packages than the image has (${upgrades}): rebuild the app on an up-to-date ${codename} base, or apt-get install python3-memray in its Dockerfile"
removals="$(sed -n 's/^Remv \([^ ]*\).*/\1/p' <<<"${plan}" | paste -sd, -)"
[[ -z "${removals}" ]] || die "installing python3-memray from ${codename} would remove ${removals} from the image: apt-get install python3-memray in its Dockerfile instead, where apt can say why"
mapfile -t planned < <(sed -n 's/^Inst \([^ ]*\) (\([^ ]*\) .*/\1=\2/p' <<<"${plan}")
((${#planned[@]})) || die "python3-memray is installed in the image already, yet preflight found no memray for ${interpreter}"
apt-get "${apt_opts[@]}" -qq -y --download-only install --no-install-recommends python3-memray >&2 ||
  die "apt cannot download python3-memray and what it needs from $(debian_mirror)"

# Each planned package: its file in apt's cache whose SHA-256 is the
# index's, unpacked into OUT.
mkdir -p "${out}"
records=()
for pv in "${planned[@]}"; do
  name="${pv%%=*}"
  [[ "${name}" != *:* ]] || die "apt planned ${name}, of another architecture than the image's ${arch}"
  deb="$(debian_deb "${pv}")" || exit 1
  sum="$(sha256sum "${deb}" | cut -d' ' -f1)"
  dpkg-deb -x "${deb}" "${out}"
  # Known to the image's scanners (they read status.d, as distroless keeps
  # its database), though no maintainer script ran.
  mkdir -p "${out}/var/lib/dpkg/status.d"
  { echo "Status: install ok installed"; dpkg-deb -f "${deb}"; } > "${out}/var/lib/dpkg/status.d/${name}"
  records+=("${name} ${pv#*=} ${sum}")
done
# Each package's copyright stays (what shipping it needs); the rest of its
# documentation goes.
[[ ! -d "${out}/usr/share/doc" ]] || find "${out}/usr/share/doc" ! -type d ! -name copyright -delete
rm -rf "${out}/usr/share/man" "${out}/usr/share/lintian"

version="$(printf '%s\n' "${records[@]}" | awk '$1 == "python3-memray" {print $2}')"
[[ -n "${version}" ]] || die "python3-memray was not among what apt fetched"
mkdir -p "${out}/usr/share/memprofile"
printf '%s\n' "${records[@]}" | jq -R 'split(" ") | {package: .[0], version: .[1], sha256: .[2]}' |
  jq -s --arg v "${version}" --arg s "${codename}" --arg a "${arch}" --arg p "${interpreter}" \
    '{backend: "memray", version: $v, source: "debian", suite: $s, arch: $a, interpreter: $p, packages: .}' \
    > "${out}/usr/share/memprofile/backend-memray.json"
echo "memray-debian: python3-memray ${version} for ${interpreter} (${codename}/${arch}), with ${#records[@]} package(s) the image lacked" >&2
