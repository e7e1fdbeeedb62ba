#!/usr/bin/env bash
# Benchmark: `memprofile preflight` on a large multi-layer image (built once
# from this machine's /usr with buildah, cached) against decompressing the
# same layer blobs with `gzip -dc` (and `zstd -dc` for a zstd copy), in the
# same run. Prints the times, the ratios and memprofile's peak RSS.
# usage: bench/preflight_vs_gzip.sh [MEMPROFILE]
set -o errexit -o nounset -o pipefail

memprofile="$(realpath "${1:-build/tool/memprofile}")"
# shellcheck source=scripts/host.sh
source "$(dirname "$0")/../scripts/host.sh"
bench="$(memprofile_cache)/bench"
use_container_storage "${bench}/containers"

# Three layers of real files from this machine: libraries, shared data, programs.
if [[ ! -e "${bench}/gzip/index.json" || ! -e "${bench}/zstd/index.json" ]]; then
  echo "bench: building the benchmark image from /usr (once)..." >&2
  # One container per layer: committing the same container again would
  # squash everything into one layer.
  base=scratch
  for dir in /usr/lib/x86_64-linux-gnu /usr/share /usr/bin; do
    ctr="$(buildah from --pull=never "${base}")"
    buildah copy --quiet "${ctr}" "${dir}" "${dir}" >/dev/null
    buildah config --entrypoint '["/usr/bin/ls"]' "${ctr}"
    buildah commit --quiet "${ctr}" localhost/memprofile-bench >/dev/null
    buildah rm "${ctr}" >/dev/null
    base=localhost/memprofile-bench
  done
  rm -rf "${bench}/gzip" "${bench}/zstd"
  buildah push --quiet localhost/memprofile-bench "oci:${bench}/gzip" >/dev/null
  buildah push --quiet --compression-format zstd localhost/memprofile-bench "oci:${bench}/zstd" >/dev/null
fi

layers() {  # the layer blobs of an OCI layout, in order
  local dir="$1" manifest
  manifest="$(grep -o '"digest":"sha256:[0-9a-f]*"' "${dir}/index.json" | awk 'NR == 1' | cut -d: -f3 | tr -d '"')"
  grep -o '"digest":"sha256:[0-9a-f]*"' "${dir}/blobs/sha256/${manifest}" | tail -n +2 | cut -d: -f3 | tr -d '"' |
    sed "s|^|${dir}/blobs/sha256/|"
}

seconds() { best_seconds 3 "$@"; }

gzip_all() { local b; for b in "${gz_layers[@]}"; do gzip -dc "${b}"; done >/dev/null; }
zstd_all() { local b; for b in $(layers "${bench}/zstd"); do zstd -dcq "${b}"; done >/dev/null; }

mapfile -t gz_layers < <(layers "${bench}/gzip")
stored=$(du -cb "${gz_layers[@]}" | tail -1 | cut -f1)
entries=$(for b in "${gz_layers[@]}"; do gzip -dc "${b}" | tar -t | wc -l; done | paste -sd+ | bc)
t_gzip=$(seconds gzip_all)
t_ours=$(seconds "${memprofile}" preflight --json "${bench}/gzip")
rss=$( { /usr/bin/time -f '%M' "${memprofile}" preflight --json "${bench}/gzip" >/dev/null || true; } 2>&1 | tail -1)
echo "image: ${bench}/gzip (${#gz_layers[@]} layers, $((stored / 1000000)) MB of gzip blobs, ${entries} tar entries)"
echo "gzip -dc over the layers:      ${t_gzip} s"
echo "memprofile preflight:          ${t_ours} s   ratio $(echo "scale=2; ${t_ours} / ${t_gzip}" | bc -l) (target <= 0.6)"
echo "memprofile peak RSS:           $((rss / 1024)) MiB (target <= 64)"
if command -v zstd >/dev/null; then
  t_zstd=$(seconds zstd_all)
  t_ours_z=$(seconds "${memprofile}" preflight --json "${bench}/zstd")
  echo "zstd -dc over the layers:      ${t_zstd} s"
  echo "memprofile preflight (zstd):   ${t_ours_z} s   ratio $(echo "scale=2; ${t_ours_z} / ${t_zstd}" | bc -l) (target <= 1.2)"
fi
