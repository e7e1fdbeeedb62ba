#!/usr/bin/env bash
# No backend takes nginx down (#57): Debian's nginx (a master and two
# workers) under memprofile exec with each backend that applies: the control
# library alone, jemalloc dormant and recording, heaptrack (memprofile's
# build), bytehound (where its offline bundle is). gperftools' tcmalloc does
# not apply: its heap profiler must be linked into the program. Each one
# starts, answers 2,000 keep-alive requests and 1,000 on new connections
# (ab) with none failed, reloads (SIGHUP: new workers, the old ones end),
# answers again, and ends on SIGQUIT within a minute.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

NGINX=/usr/sbin/nginx
AB=/usr/bin/ab
[[ -x "${NGINX}" && -x "${AB}" ]] || fail "nginx or ab missing: run scripts/install-deps.sh (nginx-light, apache2-utils)"
JEMALLOC="$(preload_dist jemalloc amd64)/libjemalloc.so.2"
HEAPTRACK="$(preload_dist heaptrack amd64)/libheaptrack_preload.so"
gone() { ! kill -0 "$1" 2> /dev/null; }
workers_are() { [[ "$(workers_of "$1" | wc -l)" -eq 2 ]]; }

# served NAME PORT LABEL AB_OPTIONS...: ab's run, every request answered.
served() {
  local name="$1" port="$2" label="$3"
  shift 3
  "${AB}" -q "$@" "http://127.0.0.1:${port}/" > "${SCRATCH}/${name}-${label}.ab" 2>&1 ||
    fail "${name}: ab ${label}: $(tail -5 "${SCRATCH}/${name}-${label}.ab")"
  if ! grep -q "^Failed requests: *0$" "${SCRATCH}/${name}-${label}.ab" || grep -q "^Non-2xx responses" "${SCRATCH}/${name}-${label}.ab"; then
    fail "${name}: ab ${label}: $(grep -E '^(Complete|Failed|Non-2xx)' "${SCRATCH}/${name}-${label}.ab")"
  fi
}

round() {
  local name="$1" prefix="${SCRATCH}/nginx-$1" port old
  shift
  port="$(free_port)"
  nginx_conf "${prefix}" "${port}"
  start_service "${SCRATCH}/out-${name}" "${SCRATCH}/${name}.log" --max-profile-mb 64 "$@" -- \
    "${NGINX}" -p "${prefix}" -c "${prefix}/nginx.conf"
  local master="${SERVICE_PID}"
  wait_until 60 workers_are "${master}" || fail "${name}: no workers: $(cat "${SCRATCH}/${name}.log")"
  served "${name}" "${port}" keepalive -k -n 2000 -c 4
  served "${name}" "${port}" connections -n 1000 -c 4
  old="$(workers_of "${master}" | paste -sd ' ')"
  kill -HUP "${master}"
  reloaded() { workers_are "${master}" && [[ "$(workers_of "${master}" | paste -sd ' ')" != "${old}" ]]; }
  wait_until 60 reloaded || fail "${name}: no new workers after SIGHUP: $(workers_of "${master}" | paste -sd ' '), before ${old}"
  local w
  for w in ${old}; do wait_until 60 gone "${w}" || fail "${name}: old worker ${w} did not end after the reload"; done
  served "${name}" "${port}" after-reload -n 500 -c 4
  kill -QUIT "${master}"
  wait_until 60 gone "${master}" || fail "${name}: nginx is still running 60 s after SIGQUIT"
  pass "${name}: nginx answered 3,500 requests (keep-alive and not), reloaded, and quit"
}

round none --backend none
round jemalloc-dormant --backend jemalloc --dormant --preload "${JEMALLOC}"
round jemalloc --backend jemalloc --preload "${JEMALLOC}"
round heaptrack --backend heaptrack --preload "${HEAPTRACK}"
need_bytehound_bundle 0
round bytehound --backend bytehound --preload "$(preload_dist bytehound amd64)/libbytehound.so"
