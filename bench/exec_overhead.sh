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

launch=("${launcher}" exec --backend jemalloc --preload "${preload}" --output-dir "${out}" --)
# The baseline gets exactly the environment the launcher hands the program
# (LD_PRELOAD and MALLOC_CONF with prof:true): jemalloc's profiling start-up
# and its final dump belong to the profiler, not to memprofile.
mapfile -t injected < <("${launch[@]}" /usr/bin/env 2>/dev/null | grep -E '^(LD_PRELOAD|MALLOC_CONF)=')
[[ "${#injected[@]}" -eq 2 ]] || { echo "bench: the launcher did not inject LD_PRELOAD and MALLOC_CONF" >&2; exit 1; }
read -r bare_wall bare_cpu < <(env "${injected[@]}" bash -c "$(declare -f run); n=${n}; run /bin/true")
read -r ours_wall ours_cpu < <(run "${launch[@]}" /bin/true)
ms() { echo "scale=3; $1 * 1000 / ${n}" | bc -l; }
echo "bare exec of /bin/true (with the preload library): wall $(ms "${bare_wall}") ms, cpu $(ms "${bare_cpu}") ms per run"
echo "memprofile exec -- /bin/true:                      wall $(ms "${ours_wall}") ms, cpu $(ms "${ours_cpu}") ms per run"
echo "added: wall $(echo "scale=3; ($(ms "${ours_wall}")) - ($(ms "${bare_wall}"))" | bc -l) ms, cpu $(echo "scale=3; ($(ms "${ours_cpu}")) - ($(ms "${bare_cpu}"))" | bc -l) ms (target <= 2 ms)"
echo "ratio: wall $(echo "scale=2; ${ours_wall} / ${bare_wall}" | bc -l)x, cpu $(echo "scale=2; ${ours_cpu} / ${bare_cpu}" | bc -l)x"
