#!/usr/bin/env bash
# Dormant bytehound in a profilable image: make image-memprofile DORMANT=true
# with the default backend starts the service with recording off
# (MEMORY_PROFILER_DISABLE_BY_DEFAULT); from a second container, as kubectl
# exec would run them, attached and status say so, start turns recording on
# through bytehound's SIGUSR1 toggle, snapshot says in one line that bytehound
# writes one file, stop turns it off, without a restart. The .dat holds the
# leak of the recording window alone, and report names leaky_function.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/images_lib.sh
source "$(dirname "$0")/images_lib.sh"

need_bytehound_bundle 77
seed_dist bytehound amd64
example_app amd64
image=localhost/leaky:dormant-bytehound
drop_at_exit "${image}"
mk image-memprofile APP_IMAGE=localhost/leaky:amd64 DORMANT=true MEMPROFILE_IMAGE_TAG=dormant-bytehound \
  > "${SCRATCH}/build.log" 2>&1 || { cat "${SCRATCH}/build.log" >&2; fail "make image-memprofile DORMANT=true (bytehound)"; }
root="$(image_root "${image}")"
grep -qx "dormant = 1" "${root}/etc/memprofile/exec.conf" || fail "exec.conf: $(cat "${root}/etc/memprofile/exec.conf")"
"${MEMPROFILE}" preflight "${SCRATCH}/image/image.tar" > "${SCRATCH}/preflight" ||
  fail "the dormant image is not READY: $(cat "${SCRATCH}/preflight")"
pass "DORMANT=true with bytehound: in the launcher config, READY"

out="${SCRATCH}/out"
mkdir -p "${out}"
chmod 1777 "${out}"
ctr="$(buildah from --pull=never --quiet "${image}")"
MOUNTED+=("${ctr}")
buildah run --isolation chroot -v "${out}:/var/memprofile" "${ctr}" -- \
  /usr/bin/memprofile exec --from-config -- 0 65536 > "${SCRATCH}/service.log" 2>&1 &
service=$!
wait_sockets "${out}" 1 "${service}" "${SCRATCH}/service.log"
sock="$(find "${out}" -name 'memprofile-ctl.*.sock' -print -quit)"
pid="${sock##*memprofile-ctl.}"
pid="${pid%.sock}"
log_says "${SCRATCH}/service.log" "loaded dormant (recording off until memprofile start): /usr/local/bin/leaky with bytehound" ||
  fail "not dormant: $(cat "${SCRATCH}/service.log")"

exec_ctr="$(buildah from --pull=never --quiet "${image}")"
MOUNTED+=("${exec_ctr}")
in_pod() { buildah run --isolation chroot -v "${out}:/var/memprofile" "${exec_ctr}" -- /usr/bin/memprofile "$@"; }
in_pod attached "${pid}" --window 0 --json > "${SCRATCH}/attached0.json" 2> /dev/null || true
jq -e '.mapped and .backend == "bytehound" and .recording == false' "${SCRATCH}/attached0.json" > /dev/null ||
  fail "attached while dormant: $(cat "${SCRATCH}/attached0.json")"
in_pod status > "${SCRATCH}/status0" 2> "${SCRATCH}/status.err" ||
  fail "status: $(cat "${SCRATCH}/status0" "${SCRATCH}/status.err")"
grep -q "^pid ${pid}: bytehound, recording off" "${SCRATCH}/status0" || fail "status before start: $(cat "${SCRATCH}/status0")"
[[ "$(in_pod start 2> /dev/null)" == *"recording on"* ]] || fail "start"
in_pod attached "${pid}" --window 0 --json > "${SCRATCH}/attached1.json" 2> /dev/null || true
jq -e '.mapped and .recording == true' "${SCRATCH}/attached1.json" > /dev/null ||
  fail "attached after start: $(cat "${SCRATCH}/attached1.json")"
sleep 2
rc=0
in_pod snapshot "${pid}" > /dev/null 2> "${SCRATCH}/snap.err" || rc=$?
# (buildah run adds its own lines about the exit status.)
[[ "${rc}" == 1 && "$(grep -c '^memprofile: ' "${SCRATCH}/snap.err")" == 1 &&
   "$(cat "${SCRATCH}/snap.err")" == *"bytehound writes one continuous file, not snapshots"* ]] ||
  fail "snapshot: exit ${rc}: $(cat "${SCRATCH}/snap.err")"
in_pod status > "${SCRATCH}/status1" 2> "${SCRATCH}/status.err" ||
  fail "status: $(cat "${SCRATCH}/status1" "${SCRATCH}/status.err")"
grep -q "^pid ${pid}: bytehound, recording on" "${SCRATCH}/status1" || fail "status after start: $(cat "${SCRATCH}/status1")"
[[ "$(in_pod stop 2> /dev/null)" == *"recording off"* ]] || fail "stop"
in_pod status > "${SCRATCH}/status2" 2> "${SCRATCH}/status.err" ||
  fail "status: $(cat "${SCRATCH}/status2" "${SCRATCH}/status.err")"
grep -q "^pid ${pid}: bytehound, recording off" "${SCRATCH}/status2" || fail "status after stop: $(cat "${SCRATCH}/status2")"
# The service is still the same process, and ends with its own exit code.
kill -0 "${service}" 2> /dev/null || fail "the service did not survive the control commands"
kill -TERM "${pid}"
wait "${service}" || fail "the service's exit code changed: $?"
leaked="$(sed -n 's/^leaky: leaked \([0-9]*\) bytes.*/\1/p' "${SCRATCH}/service.log")"
[[ -n "${leaked}" ]] || fail "the service did not end cleanly: $(cat "${SCRATCH}/service.log")"
pass "started dormant; attached, status, start, a snapshot refused in one line, stop, from another container; exit code 0"

dat="$(find "${out}" -name "memory-profiling_leaky_*_${pid}.dat" -size +1k -print -quit)"
[[ -n "${dat}" ]] || fail "no .dat of process ${pid}: $(ls -l "${out}")"
"${MEMPROFILE}" report --json --image "${SCRATCH}/image/image.tar" "${dat}" > "${SCRATCH}/report.json" ||
  fail "report: $(cat "${SCRATCH}/report.json")"
held="$(jq '.in_use[0].bytes_in_use' "${SCRATCH}/report.json")"
jq -e '.in_use[0].site.function == "leaky_function"' "${SCRATCH}/report.json" > /dev/null ||
  fail "report: $(jq -c '{top: .in_use[0].site, warnings}' "${SCRATCH}/report.json")"
# Recording was off before start and after stop: the .dat holds part of
# the leak, never all of it.
((held > 0 && held < leaked)) || fail "the .dat holds ${held} bytes of leaky_function's ${leaked}: not the recording window alone"
pass "the .dat holds ${held} of the ${leaked} bytes leaked (the recording window); report names leaky_function"
