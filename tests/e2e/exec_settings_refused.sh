#!/usr/bin/env bash
# A value the backend's own settings format cannot hold never reaches it:
# an output directory with a comma would end jemalloc's prof_prefix in
# MALLOC_CONF, turn dormant recording on and send dumps outside the
# directory. exec refuses it with LAUNCHER_CONFIG and runs the app
# unprofiled (its own exit code), and preflight says the same of an image
# whose environment sets it. A directory with a tab or a newline is refused
# the same way, for every backend, naming the character: a tab would turn
# the control library off and let MALLOC_CONF reach the programs the
# service runs.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

build_workloads
JEMALLOC="$(preload_dist jemalloc amd64)/libjemalloc.so.2"
mkdir -p "${SCRATCH}/w"
odd="${SCRATCH}/w/o,prof_active:true,x"
mkdir -p "${odd}"
rc=0
MEMPROFILE_OUTPUT_DIR="${odd}" "${LAUNCHER}" exec --dormant --backend jemalloc --preload "${JEMALLOC}" --min-free-mb 1 -- \
  "${SCRATCH}/leaky" 2 > "${SCRATCH}/run.log" 2>&1 || rc=$?
((rc == 0)) || fail "the app's exit code changed: ${rc}: $(cat "${SCRATCH}/run.log")"
grep -q "running unprofiled: .*LAUNCHER_CONFIG: .*holds ',' or ':', which jemalloc's MALLOC_CONF reads" "${SCRATCH}/run.log" ||
  fail "not refused with LAUNCHER_CONFIG: $(cat "${SCRATCH}/run.log")"
grep -q "leaky: leaked" "${SCRATCH}/run.log" || fail "the app did not run: $(cat "${SCRATCH}/run.log")"
[[ -z "$(find "${SCRATCH}/w" -name '*.heap')" ]] || fail "jemalloc dumped: $(find "${SCRATCH}/w" -name '*.heap')"
pass "exec: an output directory with a comma is refused (LAUNCHER_CONFIG), the app runs unprofiled, no dump anywhere"

rc=0
"${MEMPROFILE}" preflight --rootfs / --entrypoint "[\"${MEMPROFILE}\", \"exec\", \"--backend\", \"jemalloc\", \"--\", \"/bin/sleep\"]" \
  --preload "${JEMALLOC}" --env "MEMPROFILE_OUTPUT_DIR=/w/o,prof_active:true" > "${SCRATCH}/preflight" 2>&1 || rc=$?
{ grep -q "LAUNCHER_CONFIG" "${SCRATCH}/preflight" && grep -q "MALLOC_CONF" "${SCRATCH}/preflight"; } ||
  fail "preflight: $(cat "${SCRATCH}/preflight")"
((rc != 0)) || fail "preflight said READY: $(cat "${SCRATCH}/preflight")"
pass "preflight: the same value in the image's environment is LAUNCHER_CONFIG"

# A tab and a newline, under jemalloc and under the control library alone:
# refused in one line naming the character; the service and the programs it
# runs never see the profiler's settings.
for name in tab newline; do
  case "${name}" in
    tab) char=$'\t' shown="a tab (U+0009)" ;;
    newline) char=$'\n' shown="a newline (U+000A)" ;;
  esac
  dir="${SCRATCH}/w/with${char}${name}"
  mkdir -p "${dir}"
  for backend in jemalloc none; do
    rc=0
    preload=()
    [[ "${backend}" == none ]] || preload=(--preload "${JEMALLOC}")
    # shellcheck disable=SC2016 # expanded by the program's shell
    MEMPROFILE_OUTPUT_DIR="${dir}" "${LAUNCHER}" exec --backend "${backend}" "${preload[@]}" --min-free-mb 1 -- \
      /bin/sh -c 'echo "MALLOC_CONF=${MALLOC_CONF:-unset} LD_PRELOAD=${LD_PRELOAD:-unset}"' > "${SCRATCH}/${name}.log" 2>&1 || rc=$?
    ((rc == 0)) || fail "${name}, ${backend}: the app's exit code changed: ${rc}: $(cat "${SCRATCH}/${name}.log")"
    grep -q "running unprofiled: .*LAUNCHER_CONFIG: .*holds ${shown} at byte" "${SCRATCH}/${name}.log" ||
      fail "${name}, ${backend}: not refused naming the character: $(cat "${SCRATCH}/${name}.log")"
    grep -q "^MALLOC_CONF=unset LD_PRELOAD=unset$" "${SCRATCH}/${name}.log" ||
      fail "${name}, ${backend}: the profiler's settings reached the program: $(grep -a "MALLOC_CONF\|LD_PRELOAD" "${SCRATCH}/${name}.log")"
  done
done
pass "exec: an output directory with a tab or a newline is refused for jemalloc and the control library alone, naming the character; no setting reaches the program"
