# Helpers for the registry tests (sourced after lib.sh): Debian's
# docker-registry and the tests' own servers (registry_servers.py), each on
# a free loopback port, bounded in time and stopped when the test ends.
# shellcheck shell=bash

command -v docker-registry >/dev/null || fail "docker-registry missing (scripts/install-deps.sh installs it)"
command -v skopeo >/dev/null || fail "skopeo missing (scripts/install-deps.sh installs it)"
IMAGES="${IMAGES:-${E2E_ROOT}/build-fixtures/images}"
[[ -e "${IMAGES}/multi.oci.tar" ]] || fail "no test images in ${IMAGES} (the fixtures.images test builds them)"
SERVERS="$(dirname "${BASH_SOURCE[0]}")/registry_servers.py"
# Every server this test starts, stopped at exit by its pid.
server_pids=()
stop_servers() {
  local pid
  for pid in "${server_pids[@]}"; do kill "${pid}" 2>/dev/null || true; done
  for pid in "${server_pids[@]}"; do wait "${pid}" 2>/dev/null || true; done
  rm -rf "${SCRATCH}"
}
trap stop_servers EXIT

# wait_http URL [curl args]: until it answers at all (any status), for up to
# 60 s: a Go registry or a python server starting on a loaded CI machine
# (the ASan stage runs beside other tests) has taken more than 10 s.
wait_http() {
  local url="$1"
  shift
  for _ in $(seq 600); do
    curl -s -o /dev/null --max-time 5 "$@" "${url}" && return 0
    sleep 0.1
  done
  return 1
}

# start_registry NAME PORT [YAML lines for http: and auth:] -> storage in ${SCRATCH}/NAME
start_registry() {
  local name="$1" port="$2" extra="${3:-}"
  mkdir -p "${SCRATCH}/${name}"
  cat > "${SCRATCH}/${name}.yml" <<YAML
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: ${SCRATCH}/${name}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:${port}
${extra}
YAML
  timeout 1200 docker-registry serve "${SCRATCH}/${name}.yml" > "${SCRATCH}/${name}.log" 2>&1 &
  server_pids+=($!)
}

# start_server NAME KIND ARGS...: one of registry_servers.py's servers, on a
# port the kernel picks (no race with other tests for a chosen one); waits
# until it serves and sets SERVED_PORT.
start_server() {
  local name="$1" kind="$2" i
  shift 2
  # The log exists before the server starts: the background job opens it
  # later than this shell may first read it.
  : > "${SCRATCH}/${name}.log"
  timeout 1200 /usr/bin/python3 "${SERVERS}" "${kind}" 0 "$@" > "${SCRATCH}/${name}.log" 2>&1 &
  server_pids+=($!)
  for ((i = 0; i < 600; i++)); do
    SERVED_PORT="$(awk '$1 == "listening" { print $2; exit }' "${SCRATCH}/${name}.log")"
    [[ -n "${SERVED_PORT}" ]] && return 0
    kill -0 "${server_pids[-1]}" 2> /dev/null || break
    sleep 0.1
  done
  fail "the ${name} server did not start: $(cat "${SCRATCH}/${name}.log")"
}


# start_redirect: a blob server for the blobs under STORE and, in front of
# REGISTRY, the fault proxy that redirects blobs to it (on another host name,
# localhost); sets BLOB_PORT and PROXY (host:port).
start_redirect() {  # REGISTRY STORE
  start_server blobs blobs "$2" "${SCRATCH}/blob-requests"
  BLOB_PORT="${SERVED_PORT}"
  local proxy_port
  start_server proxy proxy "http://$1" "http://localhost:${BLOB_PORT}"
  proxy_port="${SERVED_PORT}"
  wait_http "http://127.0.0.1:${proxy_port}/v2/" || fail "the proxy did not start: $(cat "${SCRATCH}/proxy.log")"
  wait_http "http://127.0.0.1:${BLOB_PORT}/" || fail "the blob server did not start: $(cat "${SCRATCH}/blobs.log")"
  # shellcheck disable=SC2034 # for the test that started it
  PROXY="127.0.0.1:${proxy_port}"
}
