# Helpers for the registry tests (sourced after lib.sh): Debian's
# docker-registry and the tests' own servers (registry_servers.py), each on
# a free loopback port, bounded in time and stopped when the test ends.
# shellcheck shell=bash

command -v docker-registry >/dev/null || fail "docker-registry missing (scripts/install-deps.sh installs it)"
command -v skopeo >/dev/null || fail "skopeo missing (scripts/install-deps.sh installs it)"
IMAGES="${IMAGES:-${BUILD_DIR}/images}"
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

free_port() {
  local p
  for p in $(shuf -i 20000-60000 -n 50); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/${p}") 2>/dev/null; then echo "${p}"; return; fi
  done
  fail "no free port"
}

# wait_http URL [curl args]: until it answers at all (any status).
wait_http() {
  local url="$1"
  shift
  for _ in $(seq 100); do
    curl -s -o /dev/null "$@" "${url}" && return 0
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

# start_server NAME ARGS...: one of registry_servers.py's servers.
start_server() {
  local name="$1"
  shift
  timeout 1200 /usr/bin/python3 "${SERVERS}" "$@" > "${SCRATCH}/${name}.log" 2>&1 &
  server_pids+=($!)
}

# A verdict without what names where it came from: the source, its format,
# and the blob names in anomalies.
verdicts() {
  jq -c 'del(.source, .format, .reference)
         | .anomalies |= map(sub("^[^ ]*: "; "LAYER: "))'
}

# same_verdicts ARCHIVE REF [preflight args]: registry and archive agree.
same_verdicts() {
  local archive="$1" ref="$2"
  shift 2
  local a b
  a="$("${MEMPROFILE}" preflight --json --all-platforms "$@" "${ref}" | verdicts)" || true
  b="$("${MEMPROFILE}" preflight --json --all-platforms "${archive}" | verdicts)" || true
  [[ -n "${a}" && "${a}" == "${b}" ]] || {
    diff <(jq . <<<"${a}") <(jq . <<<"${b}") | head -20 >&2
    fail "${ref}: verdicts differ from ${archive}"
  }
}

# expect_error PATTERN -- preflight args: exit 2, one line on stderr matching
# PATTERN (grep -E), nothing on stdout.
expect_error() {
  local pattern="$1" rc=0
  shift
  "${MEMPROFILE}" preflight "$@" > "${SCRATCH}/out" 2> "${SCRATCH}/err" || rc=$?
  [[ "${rc}" == 2 ]] || fail "preflight $*: exit ${rc}, not 2: $(cat "${SCRATCH}/err")"
  [[ ! -s "${SCRATCH}/out" ]] || fail "preflight $*: printed on stdout: $(head -3 "${SCRATCH}/out")"
  [[ "$(wc -l < "${SCRATCH}/err")" == 1 ]] || fail "preflight $*: not one line: $(cat "${SCRATCH}/err")"
  grep -Eq -- "${pattern}" "${SCRATCH}/err" || fail "preflight $*: said \"$(cat "${SCRATCH}/err")\", expected /${pattern}/"
  echo "   $(cat "${SCRATCH}/err")"
}
