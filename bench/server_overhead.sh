#!/usr/bin/env bash
# Benchmark: what leaving a backend on costs a real server, measured so that
# a busy machine cannot disturb the primary figure. Debian's PostgreSQL 15
# (pgbench -S: read-only transactions, 4 clients) and nginx (ab -k: 4
# keep-alive clients), each under every configuration, rounds interleaved
# (the order rotates each round), all in this run:
#   plain             no memprofile at all (the baseline)
#   none              exec --backend none: the control library alone
#   jemalloc-dormant  exec --backend jemalloc --dormant: loaded, recording off
#   jemalloc          exec --backend jemalloc: recording at its default
#                     sampling (lg_prof_sample:19, one sample every 512 KiB)
#   jemalloc+serve    the same, with memprofile serve beside it and
#                     /debug/pprof/heap and /metrics scraped every 15 s
#   heaptrack         exec --backend heaptrack (memprofile's build)
#   bytehound         exec --backend bytehound, where its library is built
# The primary figure is the server's own CPU time per transaction or
# request: PostgreSQL's postmaster with its reaped children (utime, stime,
# cutime, cstime of /proc/PID/stat, the backends having ended), nginx's
# master and workers' own; CPU time is what the work cost, whatever else
# the cores did meanwhile. Throughput is the secondary figure. Beside them:
# each worker's private memory (smaps_rollup's Private_Clean + Private_Dirty,
# PostgreSQL's backends sampled mid-run, nginx's workers at the end), and
# serve's own CPU. Medians of ROUNDS, with the spread (min-max), as ratios
# and differences against plain.
# usage: bench/server_overhead.sh [LAUNCHER] [ROUNDS] [SECONDS]
#   LAUNCHER: the static memprofile (default build/tool/memprofile-static),
#   its control library beside it (build/ctl); the libraries are the ones the
#   tests build (MEMPROFILE_CACHE's preload-dist), found by their recipes'
#   keys; ROUNDS (default 3), SECONDS of load a round (default 20).
set -o errexit -o nounset -o pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "${here}/.." && pwd)"
launcher="$(realpath "${1:-build/tool/memprofile-static}")"
rounds="${2:-3}"
seconds="${3:-20}"
ctl="${MEMPROFILE_CTL_LIBRARY:-$(dirname "$(dirname "${launcher}")")/ctl/libmemprofile_ctl.so}"
[[ -f "${ctl}" ]] || { echo "bench: ${ctl} missing (make build)" >&2; exit 2; }
PG_BIN=/usr/lib/postgresql/15/bin
[[ -x "${PG_BIN}/postgres" && -x /usr/sbin/nginx && -x /usr/bin/ab ]] ||
  { echo "bench: PostgreSQL 15, nginx and ab are needed (scripts/install-deps.sh)" >&2; exit 2; }
[[ "${EUID}" == 0 ]] || { echo "bench: PostgreSQL runs as its own user: run as root" >&2; exit 2; }
# shellcheck source=scripts/host.sh
source "${root}/scripts/host.sh"
# shellcheck source=tests/e2e/nginx_lib.sh
source "${root}/tests/e2e/nginx_lib.sh"
library() {  # BACKEND FILE: the library the tests built, by its recipe's key
  local dir
  dir="$(memprofile_cache)/preload-dist/$1-amd64-$("${root}/preload/build.sh" --key "$1")"
  [[ -f "${dir}/$2" ]] && echo "${dir}/$2"
}
jemalloc="$(library jemalloc libjemalloc.so.2 || true)"
heaptrack="$(library heaptrack libheaptrack_preload.so || true)"
bytehound="$(library bytehound libbytehound.so || true)"
[[ -n "${jemalloc}" && -n "${heaptrack}" ]] ||
  { echo "bench: build the preload libraries first (make test, or the preload tests)" >&2; exit 2; }

work="$(mktemp -d)"
chmod 0755 "${work}"
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -KILL "${p}" 2> /dev/null || true; done
  rm -rf "${work}"
}
trap cleanup EXIT
mkdir -p "${work}/bin"
cp "${launcher}" "${work}/bin/memprofile"
cp "${ctl}" "${work}/bin/"
for lib in "${jemalloc}" "${heaptrack}" "${bytehound}"; do [[ -z "${lib}" ]] || cp "$(dirname "${lib}")"/* "${work}/bin/"; done
chown -R postgres:postgres "${work}"
configs=(plain none jemalloc-dormant jemalloc jemalloc+serve heaptrack)
[[ -z "${bytehound}" ]] || configs+=(bytehound)

exec_options() {  # CONFIG: exec's options, one a line (none for plain)
  case "$1" in
    none) printf '%s\n' --backend none ;;
    jemalloc-dormant) printf '%s\n' --backend jemalloc --dormant --preload "${work}/bin/libjemalloc.so.2" ;;
    jemalloc | jemalloc+serve) printf '%s\n' --backend jemalloc --preload "${work}/bin/libjemalloc.so.2" ;;
    heaptrack) printf '%s\n' --backend heaptrack --preload "${work}/bin/libheaptrack_preload.so" ;;
    bytehound) printf '%s\n' --backend bytehound --preload "${work}/bin/libbytehound.so" ;;
  esac
}
# wrapped CONFIG OUT -- COMMAND: the command as the configuration runs it.
wrapped() {
  local config="$1" out="$2" opts
  shift 3
  mapfile -t opts < <(exec_options "${config}")
  if [[ "${config}" == plain ]]; then
    exec "$@"
  fi
  mkdir -p "${out}"
  MEMPROFILE_CTL_LIBRARY="${work}/bin/libmemprofile_ctl.so" exec "${work}/bin/memprofile" exec --output-dir "${out}" \
    --min-free-mb 1 --max-profile-mb 256 "${opts[@]}" -- "$@"
}
cpu_of() {  # PID: utime+stime+cutime+cstime in clock ticks
  awk '{ print $14 + $15 + $16 + $17 }' "/proc/$1/stat"
}
private_kib() {  # PID: Private_Clean + Private_Dirty, KiB
  awk '/^Private_(Clean|Dirty):/ { s += $2 } END { print s + 0 }' "/proc/$1/smaps_rollup" 2> /dev/null || echo 0
}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# serve_beside PID OUT: memprofile serve of PID's tree, scraped every 15 s
# (heap and metrics) until the round ends; its pid in SERVE.
serve_beside() {
  local port
  port="$(free_port)"
  "${work}/bin/memprofile" serve --listen "127.0.0.1:${port}" --output-dir "$2" "$1" > "${work}/serve.log" 2>&1 &
  SERVE=$!
  pids+=("${SERVE}")
  (
    sleep 1
    while kill -0 "${SERVE}" 2> /dev/null; do
      curl -s -o /dev/null --max-time 30 "http://127.0.0.1:${port}/debug/pprof/heap" || true
      curl -s -o /dev/null --max-time 30 "http://127.0.0.1:${port}/metrics" || true
      sleep 15
    done
  ) &
  pids+=($!)
}

# --- PostgreSQL: one cluster, started under each configuration in turn.
as_pg() { runuser -u postgres -- "$@"; }
as_pg "${PG_BIN}/initdb" -D "${work}/pg" -U postgres --auth=trust > /dev/null
pg_round() {  # CONFIG N: one round into results
  local config="$1" n="$2" port pm before after txns tps mem serve_cpu=0
  port="$(free_port)"
  mkdir -p "${work}/sock"
  chown postgres "${work}/sock"
  as_pg bash -c "$(declare -f wrapped exec_options); work='${work}'; wrapped '${config}' '${work}/out-pg-${config}-${n}' -- \
    '${PG_BIN}/postgres' -D '${work}/pg' -p '${port}' -k '${work}/sock' -c listen_addresses=127.0.0.1" \
    > "${work}/pg.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 600); do as_pg "${PG_BIN}/pg_isready" -q -h "${work}/sock" -p "${port}" && break; sleep 0.1; done
  pm="$(head -1 "${work}/pg/postmaster.pid")"
  [[ -f "${work}/pg.scaled" ]] || { as_pg "${PG_BIN}/pgbench" -i -s 10 -q -h "${work}/sock" -p "${port}" postgres > /dev/null 2>&1; touch "${work}/pg.scaled"; }
  [[ "${config}" != jemalloc+serve ]] || serve_beside "${pm}" "${work}/out-pg-${config}-${n}"
  before="$(cpu_of "${pm}")"
  as_pg "${PG_BIN}/pgbench" -S -c 4 -j 2 -T "${seconds}" -h "${work}/sock" -p "${port}" postgres > "${work}/bench.out" 2>&1 &
  local bench=$!
  sleep "$((seconds / 2))"
  mem="$(for b in $(pgrep -P "${pm}" -f '^postgres: postgres postgres'); do private_kib "${b}"; done | sort -n |
    awk '{ a[NR] = $1 } END { print (NR ? a[int((NR + 1) / 2)] : 0) }')"
  wait "${bench}"
  for _ in $(seq 100); do [[ -z "$(pgrep -P "${pm}" -f '^postgres: postgres postgres')" ]] && break; sleep 0.1; done
  after="$(cpu_of "${pm}")"
  txns="$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "${work}/bench.out")"
  tps="$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "${work}/bench.out")"
  if [[ "${config}" == jemalloc+serve ]]; then
    serve_cpu="$(awk '{ print $14 + $15 }' "/proc/${SERVE}/stat")"
    kill -TERM "${SERVE}"
  fi
  as_pg "${PG_BIN}/pg_ctl" stop -D "${work}/pg" -m fast -t 60 > /dev/null
  echo "postgres ${config} ${n} $((after - before)) ${txns} ${tps} ${mem} ${serve_cpu}" >> "${work}/results"
}

# --- nginx: a master and two workers.
ng_round() {  # CONFIG N
  local config="$1" n="$2" port prefix="${work}/nginx" master workers before=0 after=0 w reqs rps mem serve_cpu=0
  port="$(free_port)"
  nginx_conf "${prefix}" "${port}" 256
  ( wrapped "${config}" "${work}/out-ng-${config}-${n}" -- /usr/sbin/nginx -p "${prefix}" -c "${prefix}/nginx.conf" ) \
    > "${work}/nginx.log" 2>&1 &
  master=$!
  pids+=("${master}")
  for _ in $(seq 600); do [[ "$(pgrep -P "${master}" | wc -l)" == 2 ]] && break; sleep 0.1; done
  mapfile -t workers < <(pgrep -P "${master}")
  [[ "${config}" != jemalloc+serve ]] || serve_beside "${master}" "${work}/out-ng-${config}-${n}"
  for w in "${master}" "${workers[@]}"; do before=$((before + $(awk '{ print $14 + $15 }' "/proc/${w}/stat"))); done
  ab -q -k -c 4 -t "${seconds}" -n 100000000 "http://127.0.0.1:${port}/" > "${work}/ab.out" 2>&1 || true
  for w in "${master}" "${workers[@]}"; do after=$((after + $(awk '{ print $14 + $15 }' "/proc/${w}/stat"))); done
  reqs="$(sed -n 's/^Complete requests: *\([0-9]*\)/\1/p' "${work}/ab.out")"
  rps="$(sed -n 's/^Requests per second: *\([0-9.]*\).*/\1/p' "${work}/ab.out")"
  mem="$(for w in "${workers[@]}"; do private_kib "${w}"; done | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')"
  if [[ "${config}" == jemalloc+serve ]]; then
    serve_cpu="$(awk '{ print $14 + $15 }' "/proc/${SERVE}/stat")"
    kill -TERM "${SERVE}"
  fi
  kill -QUIT "${master}"
  wait "${master}" 2> /dev/null || true
  echo "nginx ${config} ${n} $((after - before)) ${reqs} ${rps} ${mem} ${serve_cpu}" >> "${work}/results"
}

echo "server_overhead: ${rounds} rounds of ${seconds} s, configurations: ${configs[*]}"
for ((n = 0; n < rounds; n++)); do
  for ((i = 0; i < ${#configs[@]}; i++)); do
    config="${configs[$(((i + n) % ${#configs[@]}))]}"
    pg_round "${config}" "${n}"
    ng_round "${config}" "${n}"
  done
done

python3 - "${work}/results" "$(getconf CLK_TCK)" "${configs[@]}" <<'PY'
import statistics, sys
path, tick, configs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rows = {}
for line in open(path):
    server, config, n, cpu, work, rate, mem, serve_cpu = line.split()
    rows.setdefault((server, config), []).append(
        (int(cpu) / tick / max(int(work or 0), 1) * 1e6, float(rate or 0), int(mem or 0) / 1024, int(serve_cpu) / tick))
def med(xs):
    return statistics.median(xs)
for server, unit in (("postgres", "transaction"), ("nginx", "request")):
    base = rows.get((server, "plain"))
    if not base:
        continue
    b_cpu, b_rate, b_mem = med([r[0] for r in base]), med([r[1] for r in base]), med([r[2] for r in base])
    print("\n%s: CPU per %s (median, min-max), throughput, private memory per worker" % (server, unit))
    print("| configuration | CPU per %s | vs plain | throughput vs plain | private MiB per worker | vs plain | serve's CPU per round |" % unit)
    print("|---|---|---|---|---|---|---|")
    for c in configs:
        r = rows.get((server, c))
        if not r:
            continue
        cpu = [x[0] for x in r]
        print("| %s | %.1f us (%.1f-%.1f) | %.3fx | %.3fx | %.2f | %+.2f | %s |" % (
            c, med(cpu), min(cpu), max(cpu), med(cpu) / b_cpu, med([x[1] for x in r]) / b_rate,
            med([x[2] for x in r]), med([x[2] for x in r]) - b_mem,
            "%.2f s" % med([x[3] for x in r]) if c.endswith("serve") else "-"))
PY
