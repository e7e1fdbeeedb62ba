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
# What is unpacked: the version and whether arm64's standard library is
# there (dpkg may have gained arm64 since), kept in .version.
arm64=no
dpkg --print-foreign-architectures | grep -x arm64 > /dev/null && arm64=yes
if [[ -x "${dir}/usr/bin/cargo" && -f "${dir}/.version" ]] &&
   [[ -z "${version}" || "$(cat "${dir}/.version")" == "${version} arm64=${arm64}" ]]; then
  echo "${dir}"
  exit 0
fi
[[ -n "${version}" ]] || die "the archive has no rustc-web (bookworm main or bookworm-security)"
std="$(depends_on libstd-rust-web-dev '^libstd-rust-web-[0-9]')"
llvm="$(depends_on "${std}" '^libllvm[0-9]+$')"
[[ -n "${std}" && -n "${llvm}" ]] || die "cannot tell which libstd-rust-web/libllvm rustc-web ${version} needs"
# One version for all: the arm64 index of bookworm-security can lag behind.
packages=("rustc-web=${version}" "cargo-web=${version}" "libstd-rust-web-dev=${version}" "${std}=${version}" "${llvm}")
# The arm64 standard library, for cross builds (only its rlibs are used).
[[ "${arm64}" == yes ]] && packages+=("libstd-rust-web-dev:arm64=${version}" "${std}:arm64=${version}")

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
# apt downloads as its sandbox user when it may write there.
if ((EUID == 0)) && id _apt > /dev/null 2>&1; then chown _apt "${work}"; fi
(cd "${work}" && apt-get download -qq "${packages[@]}" > "${work}/apt.log" 2>&1) ||
  die "apt-get download ${packages[*]} failed: $(grep -m1 '^E:' "${work}/apt.log" || tail -1 "${work}/apt.log")"
rm -rf "${dir}.new"
mkdir -p "${dir}.new"
for deb in "${work}"/*.deb; do dpkg-deb -x "${deb}" "${dir}.new"; done
echo "${version} arm64=${arm64}" > "${dir}.new/.version"
rm -rf "${dir}"
mv "${dir}.new" "${dir}"
echo "${dir}"
