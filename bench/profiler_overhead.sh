#!/usr/bin/env bash
# Benchmark: what a loaded profiler costs a service, so users can decide
# whether to leave one in production. Two allocation-heavy workloads:
#   threads  bench/src/alloc_threads.cpp: 2 threads, mixed sizes and frees,
#            C++ strings and vectors
#   cc1plus  Debian's own C++ compiler proper (gcc's cc1plus, allocation-
#            heavy) compiling a preprocessed translation unit of the standard
#            library at -O2
# and six configurations, all in this run, each median of REPS interleaved
# runs: glibc malloc (the baseline), plain jemalloc, jemalloc with profiling
# set up but inactive and nothing else (prof-off), jemalloc dormant (exec
# --dormant, the control library loaded), jemalloc recording (exec:
# lg_prof_sample:19, the control library checking the budget), heaptrack
# (exec --backend heaptrack), and, where it is built (make preload
# BACKEND=bytehound), bytehound dormant (exec --dormant: its
# DISABLE_BY_DEFAULT) and recording (exec --backend bytehound: every
# allocation, temporary ones culled). Wall time, CPU (user+sys) and peak RSS, as
# ratios against glibc; the jemalloc variants also against plain jemalloc.
# Targets: dormant <= 1.02x plain jemalloc, recording <= 1.10x.
# usage: bench/profiler_overhead.sh [LAUNCHER] [REPS]
#   LAUNCHER: the static memprofile (default build/tool/memprofile-static);
#   the control library is taken from beside it (build/ctl) unless
#   MEMPROFILE_CTL_LIBRARY is set. jemalloc is the one images ship
#   (dist/preload/jemalloc/amd64) when built, else Debian's libjemalloc2;
#   heaptrack is Debian's libheaptrack; bytehound is BYTEHOUND, else
#   dist/preload/bytehound/amd64/libbytehound.so.
set -o errexit -o nounset -o pipefail

here="$(cd "$(dirname "$0")" && pwd)"
launcher="$(realpath "${1:-build/tool/memprofile-static}")"
reps="${2:-5}"
export MEMPROFILE_CTL_LIBRARY="${MEMPROFILE_CTL_LIBRARY:-$(dirname "$(dirname "${launcher}")")/ctl/libmemprofile_ctl.so}"
[[ -f "${MEMPROFILE_CTL_LIBRARY}" ]] || { echo "bench: ${MEMPROFILE_CTL_LIBRARY} missing (make build)" >&2; exit 2; }
jemalloc="${here}/../dist/preload/jemalloc/amd64/libjemalloc.so.2"
[[ -f "${jemalloc}" ]] || jemalloc="$(ldconfig -p | awk '$1 == "libjemalloc.so.2" && !n++ { print $NF }')"
heaptrack="$(dpkg -L libheaptrack | awk '/\/libheaptrack_preload\.so$/ && !n++')"
cc1plus="$(g++ -print-prog-name=cc1plus)"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

g++ -O2 -g -pthread -o "${work}/threads" "${here}/src/alloc_threads.cpp"
printf '%s\n' '#include <regex>' '#include <map>' '#include <unordered_map>' '#include <iostream>' \
  '#include <sstream>' '#include <algorithm>' '#include <functional>' \
  'int run(const std::string& s) { std::regex r("(a+)(b*)"); std::map<std::string, int> m;' \
  '  std::unordered_map<int, std::string> u; std::smatch x; std::regex_search(s, x, r);' \
  '  std::ostringstream o; o << x.size(); m[o.str()] = 1; u[1] = s; return int(m.size() + u.size()); }' |
  g++ -E -x c++ - -o "${work}/tu.ii"
declare -A workload=(
  [threads]="${work}/threads 2 12000000"
  [cc1plus]="${cc1plus} -quiet -O2 ${work}/tu.ii -o /dev/null"
)
# prof-off: jemalloc with profiling set up and inactive, without the launcher
# or the control library: it tells jemalloc's own cost of being ready to
# record from the control library's.
configs=(glibc jemalloc prof-off dormant recording heaptrack)
bytehound="${BYTEHOUND:-${here}/../dist/preload/bytehound/amd64/libbytehound.so}"
if [[ -f "${bytehound}" ]]; then
  configs+=(bh-dormant bytehound)
else
  echo "bench: no bytehound library (${bytehound}; make preload BACKEND=bytehound): its rows are left out" >&2
fi

# run CONFIG WORKLOAD N: one timed run into ${work}/CONFIG.WORKLOAD.N.
run() {
  local config="$1" name="$2" n="$3" out="${work}/out-$1"
  local -a cmd
  read -r -a cmd <<<"${workload[${name}]}"
  rm -rf "${out}" && mkdir -p "${out}"
  local -a exec=("${launcher}" exec --output-dir "${out}" --min-free-mb 0)
  case "${config}" in
    glibc) ;;
    jemalloc) cmd=(env LD_PRELOAD="${jemalloc}" "${cmd[@]}") ;;
    prof-off) cmd=(env LD_PRELOAD="${jemalloc}" MALLOC_CONF="prof:true,prof_active:false" "${cmd[@]}") ;;
    dormant) cmd=("${exec[@]}" --dormant --backend jemalloc --preload "${jemalloc}" -- "${cmd[@]}") ;;
    recording) cmd=("${exec[@]}" --backend jemalloc --preload "${jemalloc}" -- "${cmd[@]}") ;;
    heaptrack) cmd=("${exec[@]}" --backend heaptrack --preload "${heaptrack}" -- "${cmd[@]}") ;;
    bh-dormant) cmd=("${exec[@]}" --dormant --backend bytehound --preload "${bytehound}" -- "${cmd[@]}") ;;
    bytehound) cmd=("${exec[@]}" --backend bytehound --preload "${bytehound}" -- "${cmd[@]}") ;;
  esac
  /usr/bin/time -o "${work}/${config}.${name}.${n}" -f '%e %U %S %M' "${cmd[@]}" > /dev/null 2> "${work}/err" ||
    { cat "${work}/err" >&2; echo "bench: ${config} ${name} failed" >&2; exit 1; }
}

# median CONFIG WORKLOAD FIELD: wall (1), cpu (user+sys), rss (KiB).
median() {
  local f
  for f in "${work}/$1.$2".*; do
    case "$3" in
      wall) awk '{ print $1 }' "${f}" ;;
      cpu) awk '{ print $2 + $3 }' "${f}" ;;
      rss) awk '{ print $4 }' "${f}" ;;
    esac
  done | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }

for name in threads cc1plus; do
  for n in $(seq 1 "${reps}"); do
    for config in "${configs[@]}"; do run "${config}" "${name}" "${n}"; done
  done
done

echo "Profiler overhead: median of ${reps} interleaved runs; ratios against glibc malloc (and plain jemalloc)"
echo "jemalloc: ${jemalloc}; heaptrack: ${heaptrack}; $(nproc) cores"
echo
echo "| workload | configuration | wall s | wall | CPU | peak RSS | wall vs plain jemalloc |"
echo "|---|---|---|---|---|---|---|"
for name in threads cc1plus; do
  for config in "${configs[@]}"; do
    vs=""
    [[ "${config}" == glibc || "${config}" == jemalloc || "${config}" == heaptrack || "${config}" == bh-* ||
       "${config}" == bytehound ]] ||
      vs="$(ratio "$(median "${config}" "${name}" wall)" "$(median jemalloc "${name}" wall)")x"
    echo "| ${name} | ${config} | $(median "${config}" "${name}" wall) | $(ratio "$(median "${config}" "${name}" wall)" "$(median glibc "${name}" wall)")x | $(ratio "$(median "${config}" "${name}" cpu)" "$(median glibc "${name}" cpu)")x | $(ratio "$(median "${config}" "${name}" rss)" "$(median glibc "${name}" rss)")x | ${vs} |"
  done
done
echo
echo "targets: dormant <= 1.02x plain jemalloc, recording <= 1.10x plain jemalloc"
