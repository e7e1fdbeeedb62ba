# A private apt on this machine for an image's Debian suite and
# architecture (sourced, not run): the suite's index, cached in the toolkit's
# cache, and the image's own dpkg database as apt's status, so that apt
# plans against what the image has, and fetches only files whose SHA-256 the
# suite's signed index gives. The image needs neither apt nor a network.
# Used by the memray image build (scripts/memray-debian.sh, memray-source.sh).
# shellcheck shell=bash

# shellcheck source=scripts/host.sh
source "$(dirname "${BASH_SOURCE[0]}")/host.sh"

# debian_apt CODENAME ARCH STATUS WORK: sets apt_opts (apt-get's options)
# and apt_cache (its directory), and reads the index: the release, its
# updates and its security updates (an image built on an up-to-date base has
# those); DEBIAN_SECURITY_MIRROR, else this machine's security source, else
# Debian's. Holds the suite's cache for this process (fd 9): one build at a
# time uses it (apt's own locks are off: it is not the system's apt).
debian_apt() {
  local codename="$1" arch="$2" status="$3" work="$4" security signed
  [[ "${codename}" =~ ^[a-z][a-z0-9-]*$ ]] || { echo "memprofile: '${codename}' names no Debian suite" >&2; return 1; }
  apt_cache="$(memprofile_cache)/apt/${codename}-${arch}"
  mkdir -p "${apt_cache}/lists/partial" "${apt_cache}/archives/partial" "${work}/parts"
  exec 9> "${apt_cache}/.lock"
  flock 9
  security="${DEBIAN_SECURITY_MIRROR:-$(awk '/^URIs:/ && $2 ~ /security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)}"
  security="${security:-http://deb.debian.org/debian-security}"
  signed="[arch=${arch} signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]"
  {
    echo "deb ${signed} $(debian_mirror) ${codename} main"
    echo "deb ${signed} $(debian_mirror) ${codename}-updates main"
    echo "deb ${signed} ${security} ${codename}-security main"
  } > "${work}/sources.list"
  apt_opts=(-o "Dir::State::status=${status}" -o "Dir::State::Lists=${apt_cache}/lists" -o "Dir::Cache=${apt_cache}"
    -o "Dir::Cache::archives=${apt_cache}/archives" -o "Dir::Etc::SourceList=${work}/sources.list" -o "Dir::Etc::SourceParts=${work}/parts"
    -o "Dir::Etc::Preferences=/dev/null" -o "Dir::Etc::PreferencesParts=${work}/parts" -o APT::Sandbox::User=root
    -o "APT::Architecture=${arch}" -o "APT::Architectures::=${arch}" -o Debug::NoLocking=1 -o APT::Get::List-Cleanup=0)
  echo "debian-apt: ${codename}/${arch} index from $(debian_mirror) and ${security}" >&2
  if ! apt-get "${apt_opts[@]}" -qq update >&2; then
    # A mirror that has the release but not its updates (a snapshot, a
    # partial mirror): the release alone, said.
    echo "debian-apt: ${codename}-updates or ${codename}-security cannot be read: ${codename} alone" >&2
    head -n 1 "${work}/sources.list" > "${work}/sources.list.release" && mv "${work}/sources.list.release" "${work}/sources.list"
    apt-get "${apt_opts[@]}" -qq update >&2 || { echo "memprofile: apt cannot read ${codename}'s index for ${arch} from $(debian_mirror)" >&2; return 1; }
  fi
}

# debian_deb NAME=VERSION: the package's file in apt's cache (fetched first
# when missing) whose SHA-256 is the index's; fails, said, when there is none.
debian_deb() {
  local pv="$1" name="${1%%=*}" sum f
  sum="$(apt-cache "${apt_opts[@]}" show "${pv}" 2>/dev/null | sed -n 's/^SHA256: //p' | head -n 1)"
  [[ -n "${sum}" ]] || { echo "memprofile: the suite's index has no ${pv}" >&2; return 1; }
  for f in "${apt_cache}/archives/${name}_"*.deb; do
    [[ -f "${f}" && "$(sha256sum "${f}" | cut -d' ' -f1)" == "${sum}" ]] && { echo "${f}"; return 0; }
  done
  (cd "${apt_cache}/archives" && apt-get "${apt_opts[@]}" -qq download "${pv}" >&2) ||
    { echo "memprofile: apt cannot download ${pv} from $(debian_mirror)" >&2; return 1; }
  for f in "${apt_cache}/archives/${name}_"*.deb; do
    [[ -f "${f}" && "$(sha256sum "${f}" | cut -d' ' -f1)" == "${sum}" ]] && { echo "${f}"; return 0; }
  done
  echo "memprofile: no file in ${apt_cache}/archives has the index's SHA-256 for ${pv}" >&2
  return 1
}
