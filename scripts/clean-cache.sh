#!/usr/bin/env bash
# Frees the disk the toolkit's caches take under MEMPROFILE_CACHE (default
# ~/.cache/memprofile): `make clean-cache`.
#
#   clean-cache.sh            the container stores (tests, example, benchmark,
#                             and the Docker engine of scripts/docker-engine.sh,
#                             stopped first): the bulk, rebuilt from the cached
#                             root filesystems in a minute or two
#   clean-cache.sh --all      everything: also the Debian root filesystems,
#                             fetched sources and built preload libraries
#
# A store's containers may still be mounted (an interrupted test): those
# mounts are undone first, or rm would fail half-way on a busy mount.
set -o errexit -o nounset -o pipefail

# shellcheck source=scripts/host.sh
source "$(dirname "$0")/host.sh"
cache="$(memprofile_cache)"
all=false
case "${1:-}" in
  "") ;;
  --all) all=true ;;
  -h | --help) sed -n '2,13s/^# \{0,1\}//p' "$0"; exit 0 ;;
  *) echo "clean-cache.sh: unknown option '$1' (expected --all)" >&2; exit 2 ;;
esac
[[ -d "${cache}" ]] || { echo "clean-cache.sh: nothing to clean (${cache} does not exist)"; exit 0; }

targets=("${cache}/containers" "${cache}/containers-python" "${cache}/bench/containers" "${cache}/docker-engine")
if [[ "${all}" == true ]]; then targets=("${cache}"); fi
# The Docker engine's images live in its root: stop it before removing it.
if [[ -d "${cache}/docker-engine" ]]; then "$(dirname "$0")/docker-engine.sh" stop; fi

unmount_under() {  # DIR: every mount below DIR, deepest first
  local dir mounts
  dir="$(realpath -m "$1")"
  mounts="$(awk -v d="${dir}/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts | sort -r)"
  [[ -z "${mounts}" ]] || xargs -r -d '\n' umount -l <<<"${mounts}"
}

before="$(du -sh "${cache}" 2>/dev/null | cut -f1)"
for target in "${targets[@]}"; do
  [[ -e "${target}" ]] || continue
  unmount_under "${target}"
  rm -rf "${target}"
done
echo "clean-cache.sh: ${cache}: ${before} before, $(du -sh "${cache}" 2>/dev/null | cut -f1 || echo 0) after"
