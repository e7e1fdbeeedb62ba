#!/usr/bin/env bash
# Benchmark: what memprofile serve costs the service it serves. An
# allocation-heavy workload (bench/src/alloc_threads.cpp: 2 threads, a fixed
# amount of work) under exec --backend jemalloc (recording), three ways, all
# in this run, each the median of REPS interleaved runs:
#   none    no serve
#   15s     serve beside it, /debug/pprof/heap scraped every 15 s (a
#           Pyroscope or Parca default) and /metrics with it
#   1s      the same every second (--min-interval 1): fifteen times the rate
# The app's throughput is its work over its wall time; its peak RSS is
# /usr/bin/time's. Ratios against none. Targets for 15s: throughput >= 0.98x
# and peak RSS within 1 MiB. serve's own peak RSS is printed beside.
# usage: bench/serve_overhead.sh [LAUNCHER] [REPS]
#   LAUNCHER: the static memprofile (default build/tool/memprofile-static),
#   which also serves; jemalloc as bench/profiler_overhead.sh finds it.
set -o errexit -o nounset -o pipefail

here="$(cd "$(dirname "$0")" && pwd)"
launcher="$(realpath "${1:-build/tool/memprofile-static}")"
reps="${2:-3}"
export MEMPROFILE_CTL_LIBRARY="${MEMPROFILE_CTL_LIBRARY:-$(dirname "$(dirname "${launcher}")")/ctl/libmemprofile_ctl.so}"
[[ -f "${MEMPROFILE_CTL_LIBRARY}" ]] || { echo "bench: ${MEMPROFILE_CTL_LIBRARY} missing (make build)" >&2; exit 2; }
jemalloc="${here}/../dist/preload/jemalloc/amd64/libjemalloc.so.2"
[[ -f "${jemalloc}" ]] || jemalloc="$(ldconfig -p | awk '$1 == "libjemalloc.so.2" && !n++ { print $NF }')"
[[ -f "${jemalloc}" ]] || { echo "bench: no jemalloc (make preload BACKEND=jemalloc, or libjemalloc2)" >&2; exit 2; }
work="$(mktemp -d)"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "${work}"' EXIT
g++ -O2 -g -pthread -o "${work}/threads" "${here}/src/alloc_threads.cpp"

# run CONFIG N: one timed run into ${work}/CONFIG.N ("wall user sys rss"),
# and serve's peak RSS (KiB) into ${work}/CONFIG.N.serve.
run() {
  local config="$1" n="$2" out="${work}/out-$1-$2" app serve="" every scraper="" port
  mkdir -p "${out}"
  /usr/bin/time -o "${work}/${config}.${n}" -f '%e %U %S %M' "${launcher}" exec --output-dir "${out}" --min-free-mb 0 \
    --backend jemalloc --preload "${jemalloc}" -- "${work}/threads" 2 120000000 > /dev/null 2> "${work}/err" &
  app=$!
  pids+=("${app}")
  if [[ "${config}" != none ]]; then
    every="${config%s}"
    local target=""
    for _ in $(seq 1 300); do
      target="$(pgrep -P "${app}" -x threads || true)"
      [[ -n "${target}" && -S "${out}/memprofile-ctl.${target}.sock" ]] && break
      sleep 0.1
    done
    "${launcher}" serve --listen 127.0.0.1:0 --output-dir "${out}" --min-interval "${every}" "${target}" \
      > "${work}/serve.log" 2>&1 &
    serve=$!
    pids+=("${serve}")
    for _ in $(seq 1 100); do
      port="$(sed -n 's/^memprofile serve: listening on 127.0.0.1:\([0-9]*\) .*/\1/p' "${work}/serve.log")"
      [[ -n "${port}" ]] && break
      sleep 0.1
    done
    (
      while kill -0 "${app}" 2> /dev/null; do
        curl -s -o /dev/null --max-time 30 "http://127.0.0.1:${port}/debug/pprof/heap" || true
        curl -s -o /dev/null --max-time 30 "http://127.0.0.1:${port}/metrics" || true
        sleep "${every}"
      done
    ) &
    scraper=$!
  fi
  wait "${app}" || { cat "${work}/err" >&2; echo "bench: ${config} failed" >&2; exit 1; }
  if [[ -n "${serve}" ]]; then
    awk '/^VmHWM:/ { print $2 }' "/proc/${serve}/status" > "${work}/${config}.${n}.serve"
    kill "${serve}"
    wait "${scraper}" 2> /dev/null || true
    wait "${serve}" 2> /dev/null || true
  fi
}

median() {  # CONFIG FIELD: wall (1), cpu (user+sys) or rss (4) of ${work}/CONFIG.*, or serve
  local f
  for f in "${work}/$1".[0-9]*; do
    case "$2" in
      wall) [[ "${f}" == *.serve ]] || awk '{ print $1 }' "${f}" ;;
      cpu) [[ "${f}" == *.serve ]] || awk '{ print $2 + $3 }' "${f}" ;;
      rss) [[ "${f}" == *.serve ]] || awk '{ print $4 }' "${f}" ;;
      serve) [[ "${f}" != *.serve ]] || cat "${f}" ;;
    esac
  done | sort -g | awk -v spread="${3:-}" '{ v[NR] = $1 } END { print spread ? v[1] "-" v[NR] : v[int((NR + 1) / 2)] }'
}

configs=(none 15s 1s)
for n in $(seq 1 "${reps}"); do
  for config in "${configs[@]}"; do run "${config}" "${n}"; done
done
base_wall="$(median none wall)" base_cpu="$(median none cpu)" base_rss="$(median none rss)"
printf '%-6s %10s %12s %10s %12s %14s %14s %14s\n' config wall_s throughput cpu_s cpu_ratio rss_delta_KiB serve_rss_KiB wall_range_s
for config in "${configs[@]}"; do
  wall="$(median "${config}" wall)" cpu="$(median "${config}" cpu)" rss="$(median "${config}" rss)"
  serve_rss="-"
  [[ "${config}" == none ]] || serve_rss="$(median "${config}" serve)"
  printf '%-6s %10s %11sx %10s %11sx %14s %14s %14s\n' "${config}" "${wall}" \
    "$(awk -v a="${base_wall}" -v b="${wall}" 'BEGIN { printf "%.3f", a / b }')" "${cpu}" \
    "$(awk -v a="${cpu}" -v b="${base_cpu}" 'BEGIN { printf "%.3f", a / b }')" "$((rss - base_rss))" "${serve_rss}" \
    "$(median "${config}" wall spread)"
done
# The app's CPU (user+sys) is the steadier measure on a shared machine: the
# snapshots' work is done in its threads; serve's own is in its process.
echo "targets (15s): throughput >= 0.98x (cpu_ratio <= 1.02x), rss_delta <= 1024 KiB"
