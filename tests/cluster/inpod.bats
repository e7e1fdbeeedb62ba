#!/usr/bin/env bats
# verify.sh, collect.sh and open.sh end to end: the stub kubectl's `exec`
# runs the real static memprofile against a live process profiled by
# heaptrack (started through memprofile exec), so the verdict and the bytes
# that come back are real.

HEAPTRACK_LIB=/usr/lib/heaptrack/libheaptrack_preload.so
POD=leaky-6b8d9c7f5-x2x9z

setup_file() {
  export APP_DIR="${BATS_FILE_TMPDIR}/app"
  mkdir -p "${APP_DIR}/out"
  gcc -O1 -g -o "${APP_DIR}/leaky" "${BATS_TEST_DIRNAME}/../../examples/leaky/leaky.c"
  local launcher="${MEMPROFILE_STATIC:-${BATS_TEST_DIRNAME}/../../build/tool/memprofile-static}"
  "${launcher}" exec --backend heaptrack --preload "${HEAPTRACK_LIB}" --output-dir "${APP_DIR}/out" \
    -- "${APP_DIR}/leaky" 0 65536 >/dev/null 2>&1 &
  echo $! > "${APP_DIR}/pid"
  sleep 600 &  # until teardown_file
  echo $! > "${APP_DIR}/idle-pid"
  # Until teardown_file ends it (leaky 0: until SIGTERM); up to 60 s to
  # start on a busy machine.
  for _ in $(seq 600); do
    compgen -G "${APP_DIR}/out/heaptrack.*.raw" >/dev/null && return 0
    sleep 0.1
  done
  echo "the service wrote no ${APP_DIR}/out/heaptrack.*.raw in 60 s" >&2
  return 1
}

teardown_file() {
  kill "$(cat "${APP_DIR}/pid")" "$(cat "${APP_DIR}/idle-pid")" 2>/dev/null || true
}

setup() {
  load helpers
  setup_cluster
  export STUB_PID1
  STUB_PID1="$(cat "${APP_DIR}/pid")"
  export STUB_POD_ENV="MEMPROFILE_BACKEND=heaptrack MEMPROFILE_PRELOAD=${HEAPTRACK_LIB} MEMPROFILE_OUTPUT_DIR=${APP_DIR}/out"
}

@test "verify: ATTACHED for the profiled process, with its growing profile" {
  run "${SCRIPTS}/verify.sh" -n team "${POD}" --window 1
  assert_success
  assert_line --partial "ATTACHED: pid ${STUB_PID1} in team/${POD}/app runs ${APP_DIR}/leaky (dynamic)"
  assert_line "  heaptrack library ${HEAPTRACK_LIB} is mapped into it"
  assert_output --regexp "profile ${APP_DIR}/out/heaptrack\.[0-9]+\.raw: [0-9]+ bytes, growing"
}

@test "verify: NOT ATTACHED for an unprofiled process, exit 1" {
  STUB_PID1="$(cat "${APP_DIR}/idle-pid")"
  run "${SCRIPTS}/verify.sh" -n team "${POD}" --window 0
  assert_failure 1
  assert_line --partial "NOT ATTACHED: pid ${STUB_PID1}"
}

@test "verify: selects the pod by label; refuses images without memprofile, unknown pods and containers" {
  run "${SCRIPTS}/verify.sh" -n team -l app=leaky --window 0
  assert_success
  run "${SCRIPTS}/verify.sh" -n team plain-5f7c9d8b6-q4w7e
  assert_failure 3
  assert_output --partial "has no /usr/bin/memprofile: not a profilable image"
  run "${SCRIPTS}/verify.sh" -n team nope
  assert_failure 3
  assert_output --partial "pod nope does not exist in namespace team"
  run "${SCRIPTS}/verify.sh" -n team db-0
  assert_failure 3
  assert_output --partial "has several containers (db exporter): name one with -c"
  run "${SCRIPTS}/verify.sh" -n team db-0 -c sidecar
  assert_failure 3
  run "${SCRIPTS}/verify.sh" -n team -l app=nothing
  assert_failure 3
}

@test "verify: --dry-run prints the kubectl exec it would run" {
  run "${SCRIPTS}/verify.sh" -n team "${POD}" --dry-run
  assert_success
  assert_output "kubectl exec ${POD} -n team -c app -- /usr/bin/memprofile attached --json --window 5 1 "
}

@test "collect: the bytes that come back match the manifest, while the profiler is still writing" {
  out="${BATS_TEST_TMPDIR}/prof.tar"
  run "${SCRIPTS}/collect.sh" -n team "${POD}" -o "${out}" --settle 1 --timeout 2
  assert_success
  assert_output --partial "verified 1 file(s) against the manifest (heaptrack): ${out}"
  [[ -s "${out}" && ! -e "${out}.partial" ]]
  run calls
  assert_line "kubectl exec ${POD} -n team -c app -- /usr/bin/memprofile collect --out - --settle 1 --timeout 2"
  refute_output --partial "kubectl cp"
  # What came back is a real trace of the live process: symbolised off the
  # "cluster" with the binaries open.sh fetches through kubectl exec.
  run "${SCRIPTS}/open.sh" "${out}" --pod "team/${POD}/app" --fetch
  assert_success
  assert_output --partial "heaptrack's raw trace"
  raw="$(find "${out%.tar}" -name 'heaptrack.*.raw.rooted')"
  [[ -s "${raw}" ]]
  [[ -s "${out%.tar}/root${APP_DIR}/leaky" ]]
  /usr/lib/heaptrack/libexec/heaptrack_interpret < "${raw}" 2>/dev/null | gzip > "${BATS_TEST_TMPDIR}/trace.gz"
  run heaptrack_print "${BATS_TEST_TMPDIR}/trace.gz"
  assert_output --partial "leaky_function"
  # With the image's files at hand (here the machine's own root, where the
  # stub pod's process ran), open.sh runs memprofile report instead: nothing
  # fetched, nothing rerooted, the pictures written beside the profile.
  MEMPROFILE="${MEMPROFILE:-${ROOT}/build/tool/memprofile}" run "${SCRIPTS}/open.sh" "${out}" --rootfs / \
    --dir "${BATS_TEST_TMPDIR}/report"
  assert_success
  assert_output --partial "memprofile report: heaptrack trace"
  assert_output --partial "LEAK SUSPECT"
  assert_output --regexp "1 .* leaky_function \([^)]*leaky\.c:[0-9]+\)"
  [[ -s "${BATS_TEST_TMPDIR}/report/flame.svg" && -s "${BATS_TEST_TMPDIR}/report/trend.svg" ]]
  [[ -s "${BATS_TEST_TMPDIR}/report/profile.pb.gz" ]]
}

@test "collect: a stream cut short is refused and kept only as .partial" {
  out="${BATS_TEST_TMPDIR}/cut.tar"
  STUB_CUT_AFTER=3000 run "${SCRIPTS}/collect.sh" -n team "${POD}" -o "${out}" --settle 1 --timeout 1
  assert_failure 1
  assert_output --partial "kept as ${out}.partial"
  [[ ! -e "${out}" && -e "${out}.partial" ]]
}

@test "collect: refuses when the profile cannot fit where it would go" {
  [[ "${EUID}" == 0 ]] || skip "needs root for a small tmpfs"
  mkdir -p "${BATS_TEST_TMPDIR}/small"
  mount -t tmpfs -o size=64k tmpfs "${BATS_TEST_TMPDIR}/small"
  run "${SCRIPTS}/collect.sh" -n team "${POD}" -o "${BATS_TEST_TMPDIR}/small/prof.tar"
  umount "${BATS_TEST_TMPDIR}/small"
  assert_failure 3
  assert_output --partial "the tar would be cut short"
  run calls
  refute_output --partial "collect --out"
}

@test "collect: --dry-run and refusals" {
  run "${SCRIPTS}/collect.sh" -n team "${POD}" -o x.tar --dry-run
  assert_success
  assert_line "kubectl exec ${POD} -n team -c app -- /usr/bin/memprofile collect --out - --settle 3 --timeout 90 "
  run "${SCRIPTS}/collect.sh" -n team plain-5f7c9d8b6-q4w7e
  assert_failure 3
  run "${SCRIPTS}/collect.sh" -n nope "${POD}"
  assert_failure 3
}

@test "open: prints each backend's analysis commands; refuses what collect did not write" {
  dir="${BATS_TEST_TMPDIR}/jem"
  mkdir -p "${dir}"
  printf 'heap_v2/524288\nMAPPED_LIBRARIES:\n55d0-55d1 r-xp 00000000 fe:00 1   /usr/local/bin/app\n' > "${dir}/jeprof.1.0.f.heap"
  jq -n '{backend: "jemalloc", files: [{name: "jeprof.1.0.f.heap", size: 0, sha256: ""}]}' > "${dir}/MEMPROFILE-MANIFEST.json"
  tar -C "${dir}" -cf "${BATS_TEST_TMPDIR}/jem.tar" jeprof.1.0.f.heap MEMPROFILE-MANIFEST.json
  run "${SCRIPTS}/open.sh" "${BATS_TEST_TMPDIR}/jem.tar"
  assert_success
  assert_output --partial "a jemalloc heap profile of /usr/local/bin/app"
  assert_output --partial "jeprof --collapsed /usr/local/bin/app"
  jq -n '{backend: "bytehound", files: [{name: "memory-profiling_app_1_1.dat", size: 0, sha256: ""}]}' > "${dir}/MEMPROFILE-MANIFEST.json"
  touch "${dir}/memory-profiling_app_1_1.dat"
  tar -C "${dir}" -cf "${BATS_TEST_TMPDIR}/bh.tar" memory-profiling_app_1_1.dat MEMPROFILE-MANIFEST.json
  run "${SCRIPTS}/open.sh" "${BATS_TEST_TMPDIR}/bh.tar"
  assert_success
  assert_output --partial "bytehound server ${BATS_TEST_TMPDIR}/bh/memory-profiling_app_1_1.dat"
  assert_output --partial "memprofile report --image IMAGE ${BATS_TEST_TMPDIR}/bh/memory-profiling_app_1_1.dat"
  tar -C "${dir}" -cf "${BATS_TEST_TMPDIR}/plain.tar" jeprof.1.0.f.heap
  run "${SCRIPTS}/open.sh" "${BATS_TEST_TMPDIR}/plain.tar"
  assert_failure 3
  assert_output --partial "not from memprofile collect"
}
