#!/usr/bin/env bash
# Builds one profiler's preload library from pinned, verified source for one
# architecture (natively, or cross-compiled with the gcc-<triplet> toolchain),
# writes a manifest beside it and verifies it with `memprofile check`.
# The same entry serves the host, Dockerfile builder stages and CI.
# usage: preload/build.sh BACKEND ARCH [OUT]   (default OUT: dist/preload/BACKEND/ARCH)
#        preload/build.sh --key BACKEND     the recipe key a build's manifest records
# env:   PRELOAD_CACHE (sources), MEMPROFILE (the memprofile binary used to verify)
set -o errexit -o nounset -o pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "${here}/.." && pwd)"
# shellcheck source=preload/recipes.sh
source "${here}/recipes.sh"

# The backends: a recipe each.
recipes() { local r; for r in "${here}"/*/recipe.sh; do r="${r%/recipe.sh}"; printf '%s ' "${r##*/}"; done; }

if [[ "${1:-}" == --key ]]; then
  [[ -f "${here}/${2:-}/recipe.sh" ]] || die "unknown backend '${2:-}' (one of: $(recipes))"
  recipe_key "$2"
  exit 0
fi

backend="${1:-}"
arch="${2:-}"
[[ -n "${backend}" && -n "${arch}" ]] || die "usage: preload/build.sh BACKEND ARCH [OUT] (BACKEND: $(recipes); ARCH: amd64, arm64)"
[[ -f "${here}/${backend}/recipe.sh" ]] || die "unknown backend '${backend}' (one of: $(recipes))"
triplet="$(arch_triplet "${arch}")"
case "${arch}" in linux/*) arch="${arch#linux/}"; arch="${arch%%/*}" ;; esac
out="${3:-${root}/dist/preload/${backend}/${arch}}"
memprofile="${MEMPROFILE:-${root}/build/tool/memprofile}"
[[ -x "${memprofile}" ]] || die "${memprofile} not found: build memprofile first (make build), or set MEMPROFILE"
if [[ "${arch}" != "$(host_arch)" ]] && ! command -v "${triplet}-gcc" >/dev/null; then
  die "cross-compiling for ${arch} needs ${triplet}-gcc (apt-get install gcc-${triplet})"
fi

BUNDLED=""  # libraries the recipe ships beside its own (RUNPATH $ORIGIN)
# shellcheck source=preload/jemalloc/recipe.sh
source "${here}/${backend}/recipe.sh"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
mkdir -p "${work}/src" "${work}/build" "${out}"

# A recipe with a source of its own (bytehound: a git tree id, two build
# paths) prepares it; the others are one pinned tarball.
BUILD_PATH=""
if declare -F prepare_source >/dev/null; then
  SOURCE_PIN=""
  prepare_source "${work}/src"  # sets SOURCE_PIN, BUILD_PATH
  source_pin="${SOURCE_PIN}"
else
  tarball="$(fetch "${SOURCE_NAME}" "${SOURCE_SHA256}" "${SOURCE_URLS[@]}")"
  tar -C "${work}/src" --strip-components=1 -xf "${tarball}"
  source_pin="sha256 ${SOURCE_SHA256}"
fi

BUILD_FLAGS=""
echo "preload: building ${backend} ${VERSION} for ${arch}..." >&2
build_recipe "${work}/src" "${work}/build" "${arch}" "${triplet}" "${out}"

lib="${out}/${LIBRARY}"
report="$("${memprofile}" check --json --preload "${lib}" "${lib}")" ||
  die "${lib} fails memprofile check --preload: ${report}"
machine="$(printf '%s' "${report}" | grep -o '"arch":"[^"]*"' | cut -d'"' -f4)"
[[ "${machine}" == "${triplet%%-*}" ]] || die "${lib} is ${machine}, not ${triplet%%-*}: the cross toolchain was not used"
glibc="$(glibc_requirement "${lib}")"
needed="$(printf '%s' "${report}" | grep -o '"needed":\[[^]]*\]' | sed 's/"needed"://; s/[]["]//g')"
write_manifest "${out}" backend="${backend}" version="${VERSION}" source="${SOURCE_NAME}" source_pin="${source_pin}" \
  arch="${arch}" triplet="${triplet}" glibc_required="${glibc}" needed="${needed}" build_flags="${BUILD_FLAGS}" \
  library="${LIBRARY}" install_path="${INSTALL_PATH}" env="${ENV_VARS}" bundled="${BUNDLED:-}" \
  build_path="${BUILD_PATH:-from source}" \
  recipe_key="$(recipe_key "${backend}")"
echo "preload: ${lib} (${arch}, needs ${glibc:-no GLIBC_ version}; ${needed})" >&2
