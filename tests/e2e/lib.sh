# Helpers for the shell end-to-end tests (sourced): each test gets its own
# scratch directory and fails with a message naming what it expected.
# shellcheck shell=bash
set -o errexit -o nounset -o pipefail

E2E_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=scripts/lib.sh
source "${E2E_ROOT}/scripts/lib.sh"
BUILD_DIR="${BUILD_DIR:-${E2E_ROOT}/build}"
FIXTURES="${FIXTURES:-${BUILD_DIR}/fixtures}"
MEMPROFILE="${MEMPROFILE:-${BUILD_DIR}/tool/memprofile}"
export MEMPROFILE
SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/memprofile-e2e.XXXXXX")"
trap 'rm -rf "${SCRATCH}"' EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

pass() { echo "ok: $*"; }

# Built preload libraries are kept between runs, keyed by the recipe's content
# (the key its manifest records, so a copy of it is checked the same way).
preload_dist() {  # BACKEND ARCH -> directory with the built library
  local backend="$1" arch="$2" key dir
  key="$("${E2E_ROOT}/preload/build.sh" --key "${backend}")"
  dir="$(memprofile_cache)/preload-dist/${backend}-${arch}-${key}"
  if [[ ! -e "${dir}/manifest.json" ]]; then
    rm -rf "${dir}"
    PRELOAD_CACHE="$(memprofile_cache)/preload" \
      "${E2E_ROOT}/preload/build.sh" "${backend}" "${arch}" "${dir}" >&2
  fi
  echo "${dir}"
}
