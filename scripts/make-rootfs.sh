#!/usr/bin/env bash
# Build (or reuse from the cache) a minimal Debian root filesystem tarball for
# one architecture with mmdebstrap. Used by the tests, and by `make base-image`.
#
# usage: scripts/make-rootfs.sh ARCH [OUT.tar] [--include pkg,pkg] [--suite SUITE]
#          [--foreign ARCH2]   (ARCH2 packages installable too: pkg:ARCH2)
# prints the path of the tarball on stdout.
set -o errexit -o nounset -o pipefail

usage() { sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; }

arch="${1:-}"
[[ -n "${arch}" && "${arch}" != -* ]] || { usage >&2; exit 2; }
shift
out=""
include=""
foreign=""
suite="${ROOTFS_SUITE:-bookworm}"
while (($#)); do
  case "$1" in
    --include) include="$2"; shift 2 ;;
    --suite) suite="$2"; shift 2 ;;
    --foreign) foreign="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "make-rootfs: unknown option $1" >&2; exit 2 ;;
    *) out="$1"; shift ;;
  esac
done
for a in "${arch}" ${foreign:+"${foreign}"}; do
  case "${a}" in
    amd64|arm64) ;;
    *) echo "make-rootfs: unsupported arch '${a}' (amd64 or arm64)" >&2; exit 2 ;;
  esac
done

# shellcheck source=scripts/host.sh
source "$(dirname "$0")/host.sh"
cache="$(memprofile_cache)"
mirror="$(debian_mirror)"
# The package set in one order, so that the same set is the same root.
packages="$(tr ',' '\n' <<<"${include}" | sed '/^$/d' | sort -u | paste -sd, -)"
# The key says what the root is made of: the suite, architectures, packages,
# mirror and this script's own text. A tarball is reused only under the same
# key (kept beside it); the default name holds it too, so roots made from
# other inputs sit side by side instead of replacing each other.
key="$(cache_key "${suite}" "${arch}" "${foreign}" "${packages}" "${mirror}" "@$0")"
if [[ -z "${out}" ]]; then
  tag="${packages//[,:]/-}"
  out="${cache}/rootfs/debian-${suite}-${arch}${foreign:++${foreign}}${tag:+-${tag:0:40}}-${key}.tar"
fi
if [[ -s "${out}" && "$(cat "${out}.key" 2>/dev/null)" == "${key}" ]]; then
  echo "${out}"
  exit 0
fi
mkdir -p "$(dirname "${out}")"
# Two builds that want the same root at once (the image and the Docker
# tests, a user's two terminals): the first makes it, the other waits and
# takes it, instead of a second mmdebstrap of the same packages.
exec {lock}> "${out}.lock"
flock "${lock}"
if [[ -s "${out}" && "$(cat "${out}.key" 2>/dev/null)" == "${key}" ]]; then
  echo "${out}"
  exit 0
fi

# mmdebstrap picks the output format from the name, so keep the .tar suffix.
tmp="${out%.tar}.partial-$$.tar"
trap 'rm -f "${tmp}"' EXIT
mmdebstrap --quiet --arch="${arch}${foreign:+,${foreign}}" --variant=minbase ${packages:+--include="${packages}"} \
  "${suite}" "${tmp}" "${mirror}" >&2
mv "${tmp}" "${out}"
echo "${key}" > "${out}.key"
trap - EXIT
echo "${out}"
