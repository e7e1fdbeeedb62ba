#!/usr/bin/env bash
# memprofile serve's HTTP, as clients other than a scraper meet it: a path
# it does not serve is 404, a method other than GET 405 (HEAD gets the
# headers alone), the absolute form of a target is served, two pipelined
# requests get two answers, ?seconds= that is not a number of 1 to the
# maximum is 400 (one under the minimum interval is answered over the
# interval, and says so); an address other than
# loopback without a token is refused at start, in one line, as is an
# empty token file. SIGTERM during a growth profile ends serve promptly and
# takes no snapshot more. A member that does not answer (stopped) is left
# out of /metrics' served series within serve's own --timeout, not the
# scraper's. Grafana Alloy's own requests in delta mode (seconds = its
# scrape interval - 1, at 5, 10 and 15 s) are answered, and the bearer
# token's scheme is matched in any case (RFC 7235).
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

gcc -O1 -g -o "${SCRATCH}/serve_app" "${E2E_ROOT}/tests/fixtures/src/serve_app.c"
out="${SCRATCH}/out"
start_service "${out}" "${SCRATCH}/app.log" --backend jemalloc --preload "$(preload_dist jemalloc amd64)/libjemalloc.so.2" -- \
  "${SCRATCH}/serve_app" 2 4
app="${SERVICE_PID}"
wait_until 60 sockets_are "${out}" 3 || fail "not 3 sockets: $(ls "${out}")"
mapfile -t workers < <(workers_of "${app}")

# 1. Refused at start, one line each, exit 2.
"${MEMPROFILE}" serve --listen 0.0.0.0:0 --output-dir "${out}" "${app}" > /dev/null 2> "${SCRATCH}/open.err" && fail "0.0.0.0 without a token started"
rc=$?
if [[ "${rc}" != 2 || "$(wc -l < "${SCRATCH}/open.err")" != 1 ]] || ! grep -q "needs a bearer token: --token-file" "${SCRATCH}/open.err"; then
  fail "0.0.0.0 without a token: exit ${rc}: $(cat "${SCRATCH}/open.err")"
fi
: > "${SCRATCH}/empty-token"
"${MEMPROFILE}" serve --listen 0.0.0.0:0 --token-file "${SCRATCH}/empty-token" "${app}" > /dev/null 2> "${SCRATCH}/empty.err" &&
  fail "an empty token file was taken"
grep -q "empty-token: the token file's first line is empty" "${SCRATCH}/empty.err" || fail "empty token: $(cat "${SCRATCH}/empty.err")"
pass "serve refuses an address other than loopback without a token, and an empty token file, in one line"

# 2. Paths, methods, targets, pipelining, seconds.
start_serve "${SCRATCH}/serve.log" --output-dir "${out}" --min-interval 2 --max-seconds 30 "${app}"
status() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
[[ "$(status "${SERVE_URL}/debug/pprof/goroutine")" == 404 ]] || fail "an unknown path is not 404"
[[ "$(status -X POST "${SERVE_URL}/metrics")" == 405 ]] || fail "POST /metrics is not 405"
curl -s -I "${SERVE_URL}/metrics" > "${SCRATCH}/head.txt"
grep -q "^HTTP/1.1 405" "${SCRATCH}/head.txt" || fail "HEAD: $(cat "${SCRATCH}/head.txt")"
grep -qi "^allow: GET" "${SCRATCH}/head.txt" || fail "HEAD: no Allow: $(cat "${SCRATCH}/head.txt")"
for q in seconds=0 seconds=abc seconds=31; do
  [[ "$(status "${SERVE_URL}/debug/pprof/heap?${q}")" == 400 ]] || fail "?${q} is not 400"
done
at="${SERVE_URL#http://}"
python3 - "${at%:*}" "${at##*:}" > "${SCRATCH}/pipelined.txt" <<'PY'
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=20)
s.sendall(b"GET http://any.example/debug/pprof/ HTTP/1.1\r\nHost: x\r\n\r\n"
          b"GET /debug/pprof/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
data = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
print(data.count(b"HTTP/1.1 200 OK"))
PY
[[ "$(cat "${SCRATCH}/pipelined.txt")" == 2 ]] || fail "two pipelined requests (the first in absolute form): $(cat "${SCRATCH}/pipelined.txt") answers"
pass "404, 405 (HEAD: headers only), 400 for ?seconds out of range; absolute form and pipelining served"

# 3. A stopped worker: /metrics answers within serve's --timeout (5 s),
# the worker's served series 0 with the same labels as before.
curl -fsS --max-time 30 "${SERVE_URL}/metrics" > "${SCRATCH}/before.txt" || fail "/metrics"
kill -STOP "${workers[0]}"
curl -fsS --max-time 30 "${SERVE_URL}/metrics" > "${SCRATCH}/stopped.txt" || { kill -CONT "${workers[0]}"; fail "/metrics with a stopped worker"; }
sleep 1.5  # past /metrics' one-second sharing
curl -fsS --max-time 30 "${SERVE_URL}/metrics" > "${SCRATCH}/stopped.txt" || { kill -CONT "${workers[0]}"; fail "/metrics with a stopped worker"; }
kill -CONT "${workers[0]}"
id="$(grep "^memprofile_process_served{pid=\"${workers[0]}\"" "${SCRATCH}/before.txt" | cut -d' ' -f1)"
[[ -n "${id}" ]] || fail "no served series of ${workers[0]}"
grep -q "^${id} 0$" "${SCRATCH}/stopped.txt" ||
  fail "the stopped worker's served series: $(grep "pid=\"${workers[0]}\"" "${SCRATCH}/stopped.txt" | head -3)"
pass "a stopped worker is served 0 under the same labels, and /metrics still answers"

# 4. SIGTERM while a growth profile waits: serve ends, and takes no
# snapshot after it.
curl -s --max-time 60 -o /dev/null "${SERVE_URL}/debug/pprof/heap?seconds=30" &
client=$!
first_taken() { [[ -n "$(find "${out}" -newer "${SCRATCH}/stopped.txt" -name "jeprof.${app}.*.heap")" ]]; }
wait_until 30 first_taken || fail "the growth's first snapshot: $(ls "${out}")"
count="$(find "${out}" -name 'jeprof.*.heap' | wc -l)"
kill -TERM "${SERVE_PID}"
gone() { ! kill -0 "$1" 2> /dev/null; }
wait_until 30 gone "${SERVE_PID}" || fail "serve still runs 30 s after SIGTERM during a growth"
wait "${SERVE_PID}" || fail "serve's exit code after SIGTERM: $?"
wait "${client}" || true
[[ "$(find "${out}" -name 'jeprof.*.heap' | wc -l)" == "${count}" ]] || fail "a snapshot was taken after SIGTERM"
pass "SIGTERM during a growth profile: serve ends at once, exit 0, no snapshot after it"

# 5. The bearer token's scheme in any case, and Grafana Alloy's requests:
# pyroscope.scrape with profile.memory's delta = true asks
# /debug/pprof/allocs?seconds=INTERVAL-1 (4, 9 and 14 at 5, 10 and 15 s),
# with its own User-Agent and no Accept-Encoding, and wants 200 and
# application/octet-stream. Under serve's default 10 s minimum interval,
# 4 and 9 are answered over 10 s, said in a header and in the profile.
printf 'the-token\n' > "${SCRATCH}/token"
start_serve "${SCRATCH}/serve-token.log" --output-dir "${out}" --token-file "${SCRATCH}/token" "${app}"
for auth in "Bearer the-token" "bearer the-token" "BEARER the-token" "bEaReR  the-token"; do
  [[ "$(status -H "Authorization: ${auth}" "${SERVE_URL}/debug/pprof/")" == 200 ]] || fail "Authorization: ${auth} is refused"
done
for auth in "Bearer wrong" "Basic dGhlLXRva2Vu" "Bearerthe-token" "the-token"; do
  [[ "$(status -H "Authorization: ${auth}" "${SERVE_URL}/debug/pprof/")" == 401 ]] || fail "Authorization: ${auth} is taken"
done
pass "the bearer scheme is matched in any case; another token, scheme or form is 401"
for interval in 5 10 15; do
  seconds=$((interval - 1))
  curl -s --max-time $((10 + seconds + 10)) -H "User-Agent: Alloy/v1.11.0 (linux)" -H "Authorization: Bearer the-token" \
    -D "${SCRATCH}/alloy-${seconds}.headers" -o "${SCRATCH}/alloy-${seconds}.pb.gz" -w '%{http_code}' \
    "${SERVE_URL}/debug/pprof/allocs?seconds=${seconds}" > "${SCRATCH}/alloy-${seconds}.status" || fail "seconds=${seconds}: curl: $?"
  [[ "$(cat "${SCRATCH}/alloy-${seconds}.status")" == 200 ]] ||
    fail "Alloy at ${interval} s (seconds=${seconds}): HTTP $(cat "${SCRATCH}/alloy-${seconds}.status"): $(head -c 300 "${SCRATCH}/alloy-${seconds}.pb.gz")"
  grep -qi "^content-type: application/octet-stream" "${SCRATCH}/alloy-${seconds}.headers" ||
    fail "seconds=${seconds}: $(grep -i content-type "${SCRATCH}/alloy-${seconds}.headers")"
  gzip -t "${SCRATCH}/alloy-${seconds}.pb.gz" || fail "seconds=${seconds}: not a gzipped profile"
  raised="$(grep -i '^x-memprofile-seconds-raised:' "${SCRATCH}/alloy-${seconds}.headers" || true)"
  if ((seconds < 10)); then
    [[ "${raised}" == *"${seconds} to 10"* ]] || fail "seconds=${seconds}: no header says the span was raised: ${raised}"
    zcat "${SCRATCH}/alloy-${seconds}.pb.gz" > "${SCRATCH}/alloy-${seconds}.pb"
    grep -aq "seconds=${seconds} was asked; the growth is over at least the minimum interval" "${SCRATCH}/alloy-${seconds}.pb" ||
      fail "seconds=${seconds}: the profile's comments do not say the span was raised"
  else
    [[ -z "${raised}" ]] || fail "seconds=${seconds}: raised: ${raised}"
  fi
done
pass "Grafana Alloy's delta requests at 5, 10 and 15 s (seconds=4, 9, 14): 200, application/octet-stream, gzipped; 4 and 9 answered over the 10 s interval, said in a header and the profile"
