#!/usr/bin/env bash
# A Rust toolchain new enough for bytehound (>= 1.66), from Debian's own
# archive, unpacked privately: bookworm's rustc is 1.63, and installing
# rustc-web with apt would remove it (the Go/Rust fixtures are built with it).
# rustc-web/cargo-web (bookworm, or bookworm-security's newer build), the
# standard library for amd64 and arm64 (cross builds) and the libLLVM rustc
# links are downloaded with apt-get download and unpacked with dpkg-deb -x.
# Idempotent: a toolchain already unpacked at the archive's candidate version
# is kept.
# usage: scripts/rust-web.sh [DIR]   (default /opt/memprofile/rust-web;
#        prints DIR; DIR/usr/bin/cargo and DIR/usr/bin/rustc are the tools)
set -o errexit -o nounset -o pipefail

dir="${1:-/opt/memprofile/rust-web}"
die() { echo "rust-web: $*" >&2; exit 1; }

# depends_on PACKAGE PATTERN: the name of PACKAGE's dependency matching PATTERN.
depends_on() {
  apt-cache depends "$1" 2>/dev/null | awk -v re="$2" '$1 == "Depends:" && $2 ~ re { print $2; exit }'
}

candidate() { apt-cache policy rustc-web 2>/dev/null | awk '$1 == "Candidate:" && $2 != "(none)" { print $2 }'; }
version="$(candidate)"
if [[ -z "${version}" ]]; then
  # No package lists (a machine or image that cleaned them): fetch them.
  apt-get update -qq || true
  version="$(candidate)"
fi
if [[ -x "${dir}/usr/bin/cargo" && -f "${dir}/.version" ]] &&
   [[ -z "${version}" || "$(cat "${dir}/.version")" == "${version}" ]]; then
  echo "${dir}"
  exit 0
fi
[[ -n "${version}" ]] || die "the archive has no rustc-web (bookworm main or bookworm-security)"
std="$(depends_on libstd-rust-web-dev '^libstd-rust-web-[0-9]')"
llvm="$(depends_on "${std}" '^libllvm[0-9]+$')"
[[ -n "${std}" && -n "${llvm}" ]] || die "cannot tell which libstd-rust-web/libllvm rustc-web ${version} needs"
packages=(rustc-web cargo-web libstd-rust-web-dev "${std}" "${llvm}")
# The arm64 standard library, for cross builds (only its rlibs are used).
dpkg --print-foreign-architectures | grep -qx arm64 && packages+=("libstd-rust-web-dev:arm64" "${std}:arm64")

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
chmod 0755 "${work}"  # apt's sandbox user writes the downloads
(cd "${work}" && apt-get download -qq "${packages[@]}" 2>/dev/null) || die "apt-get download ${packages[*]} failed"
rm -rf "${dir}.new"
mkdir -p "${dir}.new"
for deb in "${work}"/*.deb; do dpkg-deb -x "${deb}" "${dir}.new"; done
echo "${version}" > "${dir}.new/.version"
rm -rf "${dir}"
mv "${dir}.new" "${dir}"
echo "${dir}"
