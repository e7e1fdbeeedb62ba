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
# version than memray needs is refused, in one line (exit 1).
set -o errexit -o nounset -o pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
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
if [[ "$(jq -r .isolated_venv <<<"${py}")" == true ]]; then
  die "$(jq -r .invoked <<<"${py}") is a venv made without the system's site-packages: Debian's memray, in /usr/lib/python3/dist-packages, would not be imported there; make the venv with --system-site-packages, or pip install memray into it"
fi
id="$(jq -r '.debian.id // empty' <<<"${py}")"
if [[ -n "$(jq -r '.debian // empty' <<<"${py}")" && "${id}" != debian ]]; then
  die "the image is ${id:-of no distribution os-release names}, not Debian: memprofile installs Debian's memray only; install memray in the app image (its own package, or pip install memray)"
fi
if [[ -z "${package}" ]]; then
  die "${interpreter} ($(jq -r .version <<<"${py}")) is not Debian's python: memray for it would be built from Debian's source package against its own headers, which memprofile does not do yet; install memray in the app image (pip install memray) and keep BACKEND=memray"
fi
[[ -n "${codename}" ]] || die "the image's /etc/os-release names no VERSION_CODENAME: which Debian suite's memray to install is unknown"
[[ "${codename}" =~ ^[a-z][a-z0-9-]*$ ]] || die "the image's /etc/os-release has VERSION_CODENAME '${codename}', which names no Debian suite"
[[ "$(jq -r .debian.complete <<<"${py}")" == true ]] || die "the image's dpkg status is over 4 MiB and was not read whole"

# A private apt: the suite's index for ARCH, cached (apt refreshes it), and
# the image's database as apt's status.
# Its suites: the release, its updates and its security updates (an image
# built on an up-to-date base has those); DEBIAN_SECURITY_MIRROR, else this
# machine's security source, else Debian's.
cache="$(memprofile_cache)/apt/${codename}-${arch}"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
mkdir -p "${cache}/lists/partial" "${cache}/archives/partial" "${work}/parts"
# One build at a time uses a suite's cache (apt's own locks are off: it is
# not the system's apt).
exec 9> "${cache}/.lock"
flock 9
security="${DEBIAN_SECURITY_MIRROR:-$(awk '/^URIs:/ && $2 ~ /security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)}"
security="${security:-http://deb.debian.org/debian-security}"
signed="[arch=${arch} signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]"
sources() {
  echo "deb ${signed} $(debian_mirror) ${codename} main"
  [[ "${1:-}" == main ]] && return 0
  echo "deb ${signed} $(debian_mirror) ${codename}-updates main"
  echo "deb ${signed} ${security} ${codename}-security main"
}
sources > "${work}/sources.list"
# Whole stanzas: apt takes an installed package for the index's version
# only when their relations match, and would otherwise install it again.
jq -r '.debian.installed[] | .stanza + "\n"' <<<"${py}" > "${work}/status"
apt_opts=(-o "Dir::State::status=${work}/status" -o "Dir::State::Lists=${cache}/lists" -o "Dir::Cache=${cache}"
  -o "Dir::Cache::archives=${cache}/archives" -o "Dir::Etc::SourceList=${work}/sources.list" -o "Dir::Etc::SourceParts=${work}/parts"
  -o "Dir::Etc::Preferences=/dev/null" -o "Dir::Etc::PreferencesParts=${work}/parts" -o APT::Sandbox::User=root
  -o "APT::Architecture=${arch}" -o "APT::Architectures::=${arch}" -o Debug::NoLocking=1 -o APT::Get::List-Cleanup=0)
echo "memray-debian: ${codename}/${arch} index from $(debian_mirror) and ${security}" >&2
if ! apt-get "${apt_opts[@]}" -qq update >&2; then
  # A mirror that has the release but not its updates (a snapshot, a
  # partial mirror): the release alone, said.
  echo "memray-debian: ${codename}-updates or ${codename}-security cannot be read: ${codename} alone" >&2
  sources main > "${work}/sources.list"
  apt-get "${apt_opts[@]}" -qq update >&2 || die "apt cannot read ${codename}'s index for ${arch} from $(debian_mirror)"
fi

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
  sum="$(apt-cache "${apt_opts[@]}" show "${pv}" | sed -n 's/^SHA256: //p' | head -n 1)"
  [[ -n "${sum}" ]] || die "${codename}'s index has no SHA-256 for ${pv}"
  deb=""
  for f in "${cache}/archives/${name}_"*.deb; do
    [[ -f "${f}" && "$(sha256sum "${f}" | cut -d' ' -f1)" == "${sum}" ]] && { deb="${f}"; break; }
  done
  [[ -n "${deb}" ]] || die "no file in ${cache}/archives has the index's SHA-256 for ${pv}"
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
