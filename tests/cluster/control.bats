#!/usr/bin/env bats
# start.sh, snapshot.sh, stop.sh and status.sh (scripts/cluster/control.sh)
# end to end: the stub kubectl's `exec` runs the real static memprofile
# against a live dormant process (Debian's jemalloc, this build's control
# library, started through memprofile exec), so every answer is the
# process's own.

JEMALLOC_LIB=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
POD=leaky-6b8d9c7f5-x2x9z

setup_file() {
  export APP_DIR="${BATS_FILE_TMPDIR}/app"
  mkdir -p "${APP_DIR}/out"
  gcc -O1 -g -o "${APP_DIR}/leaky" "${BATS_TEST_DIRNAME}/../../examples/leaky/leaky.c"
  local launcher="${MEMPROFILE_STATIC:-${BATS_TEST_DIRNAME}/../../build/tool/memprofile-static}"
  MEMPROFILE_CTL_LIBRARY="$(dirname "$(dirname "${launcher}")")/ctl/libmemprofile_ctl.so" \
    "${launcher}" exec --dormant --backend jemalloc --preload "${JEMALLOC_LIB}" --output-dir "${APP_DIR}/out" \
    --min-free-mb 1 -- "${APP_DIR}/leaky" 0 65536 >/dev/null 2>&1 &
  echo $! > "${APP_DIR}/pid"
  # Until teardown_file ends it (leaky 0: until SIGTERM); up to 60 s to
  # start on a busy machine.
  for _ in $(seq 600); do
    compgen -G "${APP_DIR}/out/memprofile-ctl.*.sock" >/dev/null && return 0
    sleep 0.1
  done
  echo "the service wrote no ${APP_DIR}/out/memprofile-ctl.*.sock in 60 s" >&2
  return 1
}

teardown_file() {
  kill "$(cat "${APP_DIR}/pid")" 2>/dev/null || true
}

setup() {
  load helpers
  setup_cluster
  export STUB_POD_ENV="MEMPROFILE_OUTPUT_DIR=${APP_DIR}/out"
  PID="$(cat "${APP_DIR}/pid")"
}

@test "status: the dormant process answers, recording off" {
  run "${SCRIPTS}/status.sh" -n team "${POD}"
  assert_success
  assert_line "pid ${PID}: jemalloc, recording off"
  assert_line --partial "process 1 has no control socket; using process ${PID}'s"
}

@test "start, snapshot, stop: the process records in between, and the snapshot is a real heap profile" {
  run "${SCRIPTS}/start.sh" -n team "${POD}"
  assert_success
  assert_line "pid ${PID}: jemalloc, recording on"
  sleep 1
  run "${SCRIPTS}/snapshot.sh" -n team "${POD}"
  assert_success
  assert_line --regexp "^${APP_DIR}/out/jeprof\.${PID}\.[0-9]+\.m[0-9]+\.heap$"
  assert_line --partial "get it out with scripts/cluster/collect.sh -n team ${POD}"
  heap="$(grep '\.heap$' <<<"${output}")"
  grep -q '^heap_v2/' "${heap}"
  run "${SCRIPTS}/stop.sh" -n team "${POD}" --json
  assert_success
  json="$(tail -1 <<<"${output}")"
  [[ "$(jq -r .recording <<<"${json}")" == false ]]
  [[ "$(jq '.snapshots | length' <<<"${json}")" -ge 1 ]]
}

@test "--pid names the process; calls are what kubectl exec gets" {
  run "${SCRIPTS}/control.sh" status -n team "${POD}" --pid "${PID}"
  assert_success
  assert_line "pid ${PID}: jemalloc, recording off"
  calls | grep -q "exec ${POD} -n team -c app -- /usr/bin/memprofile status ${PID}"
}

@test "--dry-run prints the kubectl exec and runs nothing" {
  run "${SCRIPTS}/snapshot.sh" -n team "${POD}" --dry-run
  assert_success
  assert_output --partial "exec ${POD} -n team -c app -- /usr/bin/memprofile snapshot"
  ! calls | grep -q "memprofile snapshot"
}

@test "a process without the control library: refused with the launcher's reason" {
  export STUB_POD_ENV="MEMPROFILE_OUTPUT_DIR=${BATS_TEST_TMPDIR}/empty"
  mkdir -p "${BATS_TEST_TMPDIR}/empty"
  run "${SCRIPTS}/start.sh" -n team "${POD}"
  assert_failure 3
  assert_output --partial "no control socket: process 1 was not started by memprofile exec with the control library"
}

@test "a bad action or option is a usage error" {
  run "${SCRIPTS}/control.sh" restart -n team "${POD}"
  assert_failure 2
  assert_output --partial "the action is start, stop, snapshot or status, not 'restart'"
  run "${SCRIPTS}/start.sh" -n team "${POD}" --pid one
  assert_failure 2
}

@test "verify: a dormant process is attached, and says it records nothing yet" {
  export STUB_PID1="${PID}"
  run "${SCRIPTS}/verify.sh" -n team "${POD}" --window 0
  assert_success
  assert_line --partial "ATTACHED: pid ${PID}"
  assert_line "  recording: off (dormant or stopped: scripts/cluster/start.sh turns it on)"
}
