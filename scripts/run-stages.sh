#!/usr/bin/env bash
# Runs make targets one after another as the stages of a run (`make test`),
# stops at the first that fails, and prints every stage's wall time at the
# end either way, and the slowest tests of the stages that ran (each ctest
# stage writes its JUnit file to JUNIT_DIR), so a slow or failing stage, and
# the test that made it so, are plain to see. Beside each stage's wall time
# it prints the CPU time its processes used (user + system, of every process
# the stage waited for): a stage near wall x cores is bound by the cores, one
# far below waits on mirrors, qemu or sleeps, and is where running more at
# once pays.
#
# usage: scripts/run-stages.sh NAME=TARGET...   (e.g. build=build "ASan ctest"=test-asan)
set -o errexit -o nounset -o pipefail

(($#)) || { echo "usage: run-stages.sh NAME=TARGET..." >&2; exit 2; }
root="$(cd "$(dirname "$0")/.." && pwd)"
export JUNIT_DIR="${JUNIT_DIR:-${root}/build/junit}"
rm -rf "${JUNIT_DIR}"
mkdir -p "${JUNIT_DIR}"
names=()
times=()
cpus=()
cpu_file="$(mktemp)"
trap 'rm -f "${cpu_file}"' EXIT
# children_cpu: CPU seconds of the processes this shell has waited for. The
# builtin `times` runs in this shell (a subshell would count its own
# children), so it writes to a file.
children_cpu() {
  times > "${cpu_file}"
  awk 'NR == 2 { n = 0; for (i = 1; i <= 2; i++) { split($i, t, /[ms]/); n += t[1] * 60 + t[2] } printf "%d\n", n }' "${cpu_file}"
}
results=()
rc=0
start_all=$(date +%s)
for stage in "$@"; do
  name="${stage%%=*}"
  target="${stage#*=}"
  start=$(date +%s)
  cpu_start="$(children_cpu)"
  if make -C "${root}" --no-print-directory SKIP_DEPS=true "${target}"; then
    results+=(ok)
  else
    rc=$?
    results+=(FAILED)
  fi
  names+=("${name}")
  times+=($(($(date +%s) - start)))
  cpus+=($(($(children_cpu) - cpu_start)))
  ((rc == 0)) || break
done

fmt() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
echo
echo "== wall time of each stage (and the CPU time its processes used, on $(nproc) cores)"
for i in "${!names[@]}"; do
  printf '  %-14s %8s  cpu %8s  %s\n' "${names[i]}" "$(fmt "${times[i]}")" "$(fmt "${cpus[i]}")" "${results[i]}"
done
for stage in "${@:$((${#names[@]} + 1))}"; do printf '  %-14s %8s  %s\n' "${stage%%=*}" - "not run"; done
printf '  %-14s %8s\n' total "$(fmt $(($(date +%s) - start_all)))"
mapfile -t junit < <(find "${JUNIT_DIR}" -name '*.xml' | sort)
((${#junit[@]} == 0)) || python3 "${root}/scripts/slowest-tests.py" 15 "${junit[@]}" || true
exit "${rc}"
