#!/usr/bin/env bash
# Benchmark: `memprofile check` classifying every regular file under a tree
# (default /usr) against `scanelf -R -i -n -b` over the same tree, in the same
# run, warm cache, best of N. Prints both times and the speed-up.
# usage: bench/check_vs_scanelf.sh [MEMPROFILE] [TREE] [RUNS]
set -o errexit -o nounset -o pipefail

memprofile="${1:-build/tool/memprofile}"
tree="${2:-/usr}"
runs="${3:-3}"
command -v scanelf >/dev/null || { echo "bench: scanelf not found (apt-get install pax-utils)" >&2; exit 2; }

# shellcheck source=scripts/host.sh
source "$(dirname "$0")/../scripts/host.sh"
best() { best_seconds "${runs}" "$@"; }

# Warm the page cache for both.
scanelf -R -i -n -b "${tree}" >/dev/null 2>&1 || true
elf_files=$("${memprofile}" check --json "${tree}" 2>/dev/null | wc -l || true)

t_scanelf=$(best scanelf -R -i -n -b "${tree}")
t_ours=$(best "${memprofile}" check --json "${tree}")
t_ours_1=$(best "${memprofile}" check -j1 --json "${tree}")
echo "tree: ${tree} (${elf_files} ELF files)"
echo "scanelf -R -i -n -b:         ${t_scanelf} s"
echo "memprofile check --json:     ${t_ours} s   speed-up $(echo "scale=2; ${t_scanelf} / ${t_ours}" | bc -l)x"
echo "memprofile check -j1 --json: ${t_ours_1} s   speed-up $(echo "scale=2; ${t_scanelf} / ${t_ours_1}" | bc -l)x"
