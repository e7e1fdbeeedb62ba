#!/usr/bin/env bash
# Benchmark: what `memprofile exec` adds before the program starts:
# `memprofile exec -- /bin/true` (checks, then execve with the preload
# library) against a bare `/bin/true`, same run, N times each.
# usage: bench/exec_overhead.sh [MEMPROFILE-STATIC] [N]
set -o errexit -o nounset -o pipefail
launcher="${1:-build/tool/memprofile-static}"
n="${2:-300}"
out="$(mktemp -d)"
trap 'rm -rf "${out}"' EXIT
preload=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
[[ -e "${preload}" ]] || { echo "bench: ${preload} missing (apt-get install libjemalloc2)" >&2; exit 2; }

# shellcheck disable=SC2016 # the loop runs in the inner bash
run() {  # "wall cpu" seconds for n runs of "$@" (cpu: user+sys of the children)
  /usr/bin/time -f '%e %U %S' bash -c 'for ((i = 0; i < $0; i++)); do "$@" >/dev/null 2>&1; done' "${n}" "$@" 2>&1 |
    tail -1 | awk '{print $1, $2 + $3}'
}

# The preload library is loaded by /bin/true in both runs, so the difference
# is memprofile's own work.
read -r bare_wall bare_cpu < <(LD_PRELOAD="${preload}" run /bin/true)
read -r ours_wall ours_cpu < <(run "${launcher}" exec --backend jemalloc --preload "${preload}" --output-dir "${out}" -- /bin/true)
ms() { echo "scale=3; $1 * 1000 / ${n}" | bc -l; }
echo "bare exec of /bin/true (with the preload library): wall $(ms "${bare_wall}") ms, cpu $(ms "${bare_cpu}") ms per run"
echo "memprofile exec -- /bin/true:                      wall $(ms "${ours_wall}") ms, cpu $(ms "${ours_cpu}") ms per run"
echo "added: wall $(echo "scale=3; ($(ms "${ours_wall}")) - ($(ms "${bare_wall}"))" | bc -l) ms, cpu $(echo "scale=3; ($(ms "${ours_cpu}")) - ($(ms "${bare_cpu}"))" | bc -l) ms (target <= 2 ms)"
