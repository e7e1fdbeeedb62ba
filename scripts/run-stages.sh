#!/usr/bin/env bash
# Runs make targets as the stages of a run (`make test`), one after another,
# stops after the first that fails, and prints every stage's wall time at
# the end either way, and the slowest tests of the stages that ran (each
# ctest stage writes its JUnit file to JUNIT_DIR), so a slow or failing
# stage, and the test that made it so, are plain to see. Beside each
# stage's wall time it prints the CPU time its processes used (user +
# system, of every process the stage waited for): a stage near wall x cores
# is bound by the cores, one far below waits on mirrors, qemu or sleeps, and
# is where running more at once pays.
#
# A stage written "+NAME=TARGET" runs at the same time as the one before it
# (a group): the sanitizer build and its tests beside the e2e tier, which
# waits on mirrors, engines and servers more than it computes. Their lines
# are prefixed with the stage's name; the group ends when all of its stages
# have, and fails when one does. Stages that run together must share no
# state but what they lock (tests/fixtures and the preload builds take
# flock(1) locks; each test has its own scratch directory and free port).
#
# usage: scripts/run-stages.sh NAME=TARGET [+NAME=TARGET]...
#        (e.g. build=build "ASan ctest=test-asan" "+e2e=test-e2e")
set -o errexit -o nounset -o pipefail

(($#)) || { echo "usage: run-stages.sh NAME=TARGET [+NAME=TARGET]..." >&2; exit 2; }
root="$(cd "$(dirname "$0")/.." && pwd)"
export JUNIT_DIR="${JUNIT_DIR:-${root}/build/junit}"
rm -rf "${JUNIT_DIR}"
mkdir -p "${JUNIT_DIR}"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

fmt() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
# cpu_seconds FILE: the children's user + system seconds in FILE, as the
# builtin `times` wrote it (its second line).
cpu_seconds() {
  awk 'NR == 2 { n = 0; for (i = 1; i <= 2; i++) { split($i, t, /[ms]/); n += t[1] * 60 + t[2] } printf "%d\n", n }' "$1"
}

# run_stage I NAME TARGET PREFIX: make TARGET in a shell of its own, which
# then writes its wall seconds, CPU seconds (`times` there counts the
# processes that shell waited for, make and all below it) and result to
# ${work}/I. PREFIX: put the name before each line (a group's stages).
run_stage() {
  local i="$1" name="$2" target="$3" prefix="$4" start rc=0
  start=$(date +%s)
  if [[ "${prefix}" == yes ]]; then
    make -C "${root}" --no-print-directory SKIP_DEPS=true "${target}" 2>&1 | sed -u "s/^/[${name}] /" || rc=$?
  else
    make -C "${root}" --no-print-directory SKIP_DEPS=true "${target}" || rc=$?
  fi
  times > "${work}/${i}.times"
  echo "$(($(date +%s) - start)) $(cpu_seconds "${work}/${i}.times") ${rc}" > "${work}/${i}"
}

# The stages, in groups: group[i] is the group of stage i.
names=()
targets=()
group=()
g=-1
for stage in "$@"; do
  [[ "${stage}" == +* && ${g} -ge 0 ]] || g=$((g + 1))
  stage="${stage#+}"
  names+=("${stage%%=*}")
  targets+=("${stage#*=}")
  group+=("${g}")
done

failed=0
# said I: the stage's line as it ends; a failure marks the run failed.
said() {
  local wall cpu rc
  read -r wall cpu rc < "${work}/$1" || { wall=0 cpu=0 rc=1; }
  echo "== stage ${names[$1]}: $(fmt "${wall}") (cpu $(fmt "${cpu}")) $( ((rc == 0)) && echo ok || echo "FAILED (${rc})")"
  ((rc == 0)) || failed=1
}
# A group's stages run as jobs of their own process groups (set -m), so that
# they take SIGINT as they would in the foreground; an interrupt or a TERM
# of this script ends them all, not only the shells that started them.
pids=()
# shellcheck disable=SC2317 # called by the trap
stop_group() {
  local p
  for p in "${pids[@]}"; do kill -TERM -- "-${p}" 2> /dev/null || true; done
  exit 130
}
trap stop_group INT TERM
start_all=$(date +%s)
for ((cur = 0; cur <= g; cur++)); do
  members=()
  for i in "${!names[@]}"; do
    ((group[i] == cur)) && members+=("${i}")
  done
  if ((${#members[@]} == 1)); then
    # In a shell of its own too: `times` here would count earlier stages.
    (run_stage "${members[0]}" "${names[members[0]]}" "${targets[members[0]]}" no)
    said "${members[0]}"
  else
    pids=()
    declare -A stage_of=()
    set -m
    for i in "${members[@]}"; do
      run_stage "${i}" "${names[i]}" "${targets[i]}" yes &
      pids+=($!)
      stage_of[$!]="${i}"
    done
    set +m
    # Each stage's line as it ends: wait for any of those still running.
    running=("${pids[@]}")
    while ((${#running[@]})); do
      done_pid=""
      wait -n -p done_pid "${running[@]}" || true
      [[ -n "${done_pid}" ]] || break
      said "${stage_of[${done_pid}]}"
      left=()
      for p in "${running[@]}"; do [[ "${p}" == "${done_pid}" ]] || left+=("${p}"); done
      running=("${left[@]+"${left[@]}"}")
    done
    pids=()
  fi
  ((failed == 0)) || break
done

echo
echo "== wall time of each stage (and the CPU time its processes used, on $(nproc) cores; + runs beside the one before)"
for i in "${!names[@]}"; do
  mark=" "
  ((i > 0 && group[i] == group[i - 1])) && mark="+"
  if [[ -s "${work}/${i}" ]]; then
    read -r wall cpu rc < "${work}/${i}"
    printf '  %s%-14s %8s  cpu %8s  %s\n' "${mark}" "${names[i]}" "$(fmt "${wall}")" "$(fmt "${cpu}")" \
      "$( ((rc == 0)) && echo ok || echo FAILED)"
  else
    printf '  %s%-14s %8s  %s\n' "${mark}" "${names[i]}" - "not run"
  fi
done
printf '   %-14s %8s\n' total "$(fmt $(($(date +%s) - start_all)))"
mapfile -t junit < <(find "${JUNIT_DIR}" -name '*.xml' | sort)
((${#junit[@]} == 0)) || python3 "${root}/scripts/slowest-tests.py" 15 "${junit[@]}" || true
exit "${failed}"
