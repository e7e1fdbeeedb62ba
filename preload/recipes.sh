# Shared by the preload recipes (sourced, not run): fetching pinned sources
# into a cache, architecture mapping, and the result's manifest.
# shellcheck shell=bash

# shellcheck source=scripts/host.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/host.sh"

# PRELOAD_CACHE: where sources are kept (reruns and offline builds use it),
# by default in the toolkit's cache, so that `make clean-cache ALL=true`
# empties it with the rest.
preload_cache() { echo "${PRELOAD_CACHE:-$(memprofile_cache)/preload}"; }

# recipe_key BACKEND: what a built library was made from (the build entry,
# these helpers and the backend's recipe files); a built library is reused
# only under the same key, which its manifest records.
recipe_key() {
  local here f
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  local -a files=("@${here}/recipes.sh" "@${here}/build.sh")
  for f in "${here}/$1"/*; do files+=("@${f}"); done
  cache_key "$1" "${files[@]}"
}

die() {
  echo "preload: $*" >&2
  exit 1
}

# Maps a Docker/OCI architecture to the GNU triplet and back-ends' names.
# Unknown platforms fail, as numaflow's Dockerfile does.
arch_triplet() {
  case "$1" in
    amd64 | linux/amd64) echo x86_64-linux-gnu ;;
    arm64 | linux/arm64 | linux/arm64/v8) echo aarch64-linux-gnu ;;
    *) die "unsupported architecture '$1' (amd64 or arm64)" ;;
  esac
}

rust_target() {
  case "$1" in
    amd64 | linux/amd64) echo x86_64-unknown-linux-gnu ;;
    arm64 | linux/arm64 | linux/arm64/v8) echo aarch64-unknown-linux-gnu ;;
    *) die "unsupported architecture '$1' (amd64 or arm64)" ;;
  esac
}

host_arch() {
  case "$(uname -m)" in
    x86_64) echo amd64 ;;
    aarch64) echo arm64 ;;
    *) die "unsupported build machine $(uname -m)" ;;
  esac
}

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

# fetch NAME SHA256 URL... : puts NAME in the cache, verified, and prints its
# path. Tries each URL in order; a cached file is used without the network.
fetch() {
  local name="$1" want="$2"
  shift 2
  local cache file tmp url
  cache="$(preload_cache)/sources"
  file="${cache}/${name}"
  mkdir -p "${cache}"
  if [[ -e "${file}" ]]; then
    if [[ "$(sha256_of "${file}")" != "${want}" ]]; then
      die "${file}: sha256 $(sha256_of "${file}") does not match the pinned ${want}; refusing it (delete the file to fetch it again)"
    fi
    echo "${file}"
    return 0
  fi
  tmp="${file}.partial.$$"
  for url in "$@"; do
    if curl --fail --silent --show-error --location --connect-timeout 20 --retry 2 -o "${tmp}" "${url}" 2>/dev/null; then
      if [[ "$(sha256_of "${tmp}")" == "${want}" ]]; then
        mv "${tmp}" "${file}"
        echo "${file}"
        return 0
      fi
      echo "preload: ${url}: sha256 $(sha256_of "${tmp}") is not the pinned ${want}; trying the next source" >&2
    else
      echo "preload: ${url}: not reachable" >&2
    fi
    rm -f "${tmp}"
  done
  die "cannot fetch ${name}: download it from one of: $* (sha256 ${want}) and put it at ${file}"
}

# write_manifest OUT KEY=VALUE... : the result's description, as JSON.
write_manifest() {
  local out="$1" first=1 kv key value
  shift
  {
    echo "{"
    for kv in "$@"; do
      key="${kv%%=*}"
      value="${kv#*=}"
      value="${value//\\/\\\\}"
      value="${value//\"/\\\"}"
      ((first)) || echo ","
      printf '  "%s": "%s"' "${key}" "${value}"
      first=0
    done
    printf '\n}\n'
  } > "${out}/manifest.json"
}

# The highest GLIBC_x.y a shared object requires (from its version needs).
glibc_requirement() {
  readelf -V --wide "$1" 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' | sort -t. -k1,1 -k2,2n -k3,3n -u | tail -1
}
