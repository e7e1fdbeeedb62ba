#!/usr/bin/env bash
# Makes the offline source of bytehound once, where GitHub and crates.io are
# reachable: the pinned tree plus `cargo vendor`, as one tarball in the
# preload cache. Later builds (CI, air-gapped machines) use it offline.
# usage: preload/bytehound/vendor.sh
set -o errexit -o nounset -o pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=preload/recipes.sh
source "${here}/../recipes.sh"
# shellcheck source=preload/bytehound/recipe.sh
source "${here}/recipe.sh"

cache="$(preload_cache)/sources"
mkdir -p "${cache}"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
curl --fail --location --silent --show-error -o "${work}/src.tar.gz" "${SOURCE_URLS[0]}"
mkdir "${work}/src"
tar -C "${work}/src" --strip-components=1 -xzf "${work}/src.tar.gz"
verify_source "${work}/src"
(cd "${work}/src" && RUSTUP_TOOLCHAIN="${TOOLCHAIN}" cargo vendor --locked vendor >/dev/null)
tar -C "${work}" -czf "${cache}/${VENDORED_NAME}" src
echo "${cache}/${VENDORED_NAME} sha256 $(sha256_of "${cache}/${VENDORED_NAME}")"
