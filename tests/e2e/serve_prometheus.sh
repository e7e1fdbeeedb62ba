#!/usr/bin/env bash
# memprofile serve's /metrics, scraped by a real Prometheus (Debian's
# prometheus 2.42) that the test starts on loopback, with a bearer token
# (serve --token-file; Prometheus' authorization.credentials_file): after
# its scrapes, Prometheus' HTTP query API returns each process's series
# with its pid, program and backend labels, and the RSS series of a growing
# worker rises. Without the token serve answers 401.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

command -v prometheus > /dev/null || fail "prometheus missing: run scripts/install-deps.sh"
gcc -O1 -g -o "${SCRATCH}/serve_app" "${E2E_ROOT}/tests/fixtures/src/serve_app.c"
JEMALLOC="$(preload_dist jemalloc amd64)/libjemalloc.so.2"
out="${SCRATCH}/out"
start_service "${out}" "${SCRATCH}/app.log" --backend jemalloc --preload "${JEMALLOC}" -- "${SCRATCH}/serve_app" 2 8
app="${SERVICE_PID}"
wait_until 60 sockets_are "${out}" 3 || fail "not 3 sockets: $(ls "${out}")"
mapfile -t workers < <(workers_of "${app}")
head -c 24 /dev/urandom | base64 > "${SCRATCH}/token"
start_serve "${SCRATCH}/serve.log" --output-dir "${out}" --token-file "${SCRATCH}/token" "${app}"
code="$(curl -s -o /dev/null -w '%{http_code}' "${SERVE_URL}/metrics")"
[[ "${code}" == 401 ]] || fail "/metrics without the token: HTTP ${code}"
pass "without its bearer token serve answers 401"

port="$(free_port)"
cat > "${SCRATCH}/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: memprofile
    metrics_path: /metrics
    authorization:
      credentials_file: ${SCRATCH}/token
    static_configs:
      - targets: ['${SERVE_URL#http://}']
YML
prometheus --config.file="${SCRATCH}/prometheus.yml" --storage.tsdb.path="${SCRATCH}/tsdb" \
  --web.listen-address="127.0.0.1:${port}" > "${SCRATCH}/prometheus.log" 2>&1 &
track $!
api="http://127.0.0.1:${port}/api/v1"
query() { curl -s --get --data-urlencode "query=$1" "${api}/query"; }
# One series of a worker's RSS with at least 4 samples (4 scrapes), whose
# last is above its first: the worker keeps 64 KiB every 100 ms.
rss_rose() {
  query "memprofile_process_resident_memory_bytes{pid=\"${workers[0]}\"}[60s]" > "${SCRATCH}/rss.json" 2> /dev/null || return 1
  jq -e '.data.result | length == 1 and (.[0].values | length >= 4)
         and ((.[0].values[-1][1] | tonumber) > (.[0].values[0][1] | tonumber))' "${SCRATCH}/rss.json" > /dev/null
}
wait_until 120 rss_rose || fail "no rising RSS series: $(cat "${SCRATCH}/rss.json"; tail -5 "${SCRATCH}/prometheus.log")"
query 'up{job="memprofile"}' | jq -e '.data.result[0].value[1] == "1"' > /dev/null || fail "the target is not up"
pass "Prometheus scraped serve with the token; ${workers[0]}'s RSS series rises"

query 'memprofile_process_served' > "${SCRATCH}/served.json"
[[ "$(jq -r '[.data.result[] | .metric.pid] | sort | join(" ")' "${SCRATCH}/served.json")" == \
   "$(printf '%s\n' "${app}" "${workers[@]}" | sort | paste -sd ' ')" ]] ||
  fail "not one series per process: $(jq -c '.data.result' "${SCRATCH}/served.json")"
jq -e --arg p "${SCRATCH}/serve_app" '.data.result | all(.metric.program == $p and .metric.backend == "jemalloc" and .value[1] == "1")' \
  "${SCRATCH}/served.json" > /dev/null || fail "labels: $(jq -c '.data.result' "${SCRATCH}/served.json")"
for m in memprofile_process_memory_bytes memprofile_process_allocator_bytes memprofile_process_gap_bytes \
         memprofile_tree_resident_memory_bytes memprofile_profiles_disk_bytes memprofile_process_recording; do
  query "${m}" | jq -e '.data.result | length > 0' > /dev/null || fail "no ${m} series"
done
query 'memprofile_process_allocator_bytes{state="allocated"}' |
  jq -e '[.data.result[] | .value[1] | tonumber] | min > 0' > /dev/null || fail "the allocator's bytes are 0"
pass "every process has its series, labelled pid, program and backend; the kernel's split, the allocator's view, the gap and the budget are there"
