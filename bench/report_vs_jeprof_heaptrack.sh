#!/usr/bin/env bash
# Benchmark: memprofile report against the tools it replaces, same inputs,
# same run.
#   jemalloc:  one heap dump of a large binary (memprofile itself, 70 MB with
#              DWARF, checking every library of /usr/lib), `jeprof --text`
#              against `memprofile report --rootfs /`. Target <= 0.2x.
#   heaptrack: a ~100 MB raw trace of an allocation-heavy program
#              (bench/src/alloc_churn.c), `heaptrack_interpret | heaptrack_print`
#              against `memprofile report --rootfs /`. Target <= 0.5x.
#   streaming: peak RSS of report on a ~1 GB trace. Target <= 256 MiB.
# usage: bench/report_vs_jeprof_heaptrack.sh [MEMPROFILE] [BIG_TRACE_MB]
set -o errexit -o nounset -o pipefail

memprofile="$(realpath "${1:-build/tool/memprofile}")"
big_mb="${2:-1000}"
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
jemalloc="$(ldconfig -p | awk '$1 == "libjemalloc.so.2" && !n++ { print $NF }')"
heaptrack="$(dpkg -L libheaptrack | awk '/\/libheaptrack_preload\.so$/ && !n++')"
for tool in jeprof heaptrack_print; do
  command -v "${tool}" >/dev/null || { echo "bench: ${tool} missing (scripts/install-deps.sh)" >&2; exit 2; }
done

# measure NAME CMD...: wall seconds and peak RSS (KiB) into ${work}/NAME.
measure() {
  local name="$1"
  shift
  /usr/bin/time -o "${work}/${name}.time" -f '%e %M' "$@" > "${work}/${name}.out" 2>/dev/null
}
wall() { cut -d' ' -f1 "${work}/$1.time"; }
rss_mib() { awk '{ printf "%d", $2 / 1024 }' "${work}/$1.time"; }
ratio() { awk -v a="$(wall "$1")" -v b="$(wall "$2")" 'BEGIN { printf "%.2f", a / b }'; }

# jemalloc: a dump taken while memprofile holds the ELF facts of every library.
cp "${memprofile}" "${work}/big"
mkdir -p "${work}/jemalloc"
mapfile -t libs < <(find /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu -maxdepth 1 -name '*.so*' -type f 2>/dev/null | head -2000)
LD_PRELOAD="${jemalloc}" MALLOC_CONF="prof:true,lg_prof_sample:10,lg_prof_interval:22,prof_prefix:${work}/jemalloc/p" \
  "${work}/big" check --root / "${libs[@]}" > /dev/null 2>&1 || true
heap="$(find "${work}/jemalloc" -name '*.heap' -printf '%s %p\n' | sort -n | tail -1 | cut -d' ' -f2)"
[[ -s "${heap}" ]] || { echo "bench: no jemalloc dump was written" >&2; exit 1; }
measure jeprof jeprof --text "${work}/big" "${heap}"
measure report_jemalloc "${memprofile}" report --rootfs / "${heap}"
echo "jemalloc, one dump of a $(($(stat -c %s "${work}/big") >> 20)) MB binary ($(grep -c '^@' "${heap}") stacks):"
echo "  jeprof --text:     $(wall jeprof) s, $(rss_mib jeprof) MiB"
echo "  memprofile report: $(wall report_jemalloc) s, $(rss_mib report_jemalloc) MiB  -> $(ratio report_jemalloc jeprof)x (target <= 0.2)"

# heaptrack: a ~100 MB trace (about 36 bytes per allocation and free).
gcc -O2 -g -o "${work}/churn" "${here}/src/alloc_churn.c"
record() {  # MB DIR
  mkdir -p "$2"
  # shellcheck disable=SC2016 # heaptrack itself puts the pid for $$
  LD_PRELOAD="${heaptrack}" DUMP_HEAPTRACK_OUTPUT="$2/heaptrack.\$\$.raw" "${work}/churn" "$(($1 * 1000000 / 36))"
  find "$2" -name 'heaptrack.*.raw'
}
trace="$(record 100 "${work}/ht")"
measure interpret_print bash -c "/usr/lib/heaptrack/libexec/heaptrack_interpret < '${trace}' | gzip -1 > '${work}/trace.gz' &&
  heaptrack_print '${work}/trace.gz'"
measure report_heaptrack "${memprofile}" report --rootfs / "${trace}"
echo "heaptrack, a $(($(stat -c %s "${trace}") >> 20)) MiB raw trace:"
echo "  heaptrack_interpret | heaptrack_print: $(wall interpret_print) s"
echo "  memprofile report:                     $(wall report_heaptrack) s, $(rss_mib report_heaptrack) MiB  -> $(ratio report_heaptrack interpret_print)x (target <= 0.5)"
rm -f "${trace}" "${work}/trace.gz"

# Streaming: peak RSS on a big trace.
big="$(record "${big_mb}" "${work}/big-ht")"
measure report_big "${memprofile}" report --rootfs / "${big}"
echo "streaming: a $(($(stat -c %s "${big}") >> 20)) MiB trace in $(wall report_big) s, peak RSS $(rss_mib report_big) MiB (target <= 256)"
