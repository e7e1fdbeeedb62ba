#!/usr/bin/env bash
# Runs make targets one after another as the stages of a run (`make test`),
# stops at the first that fails, and prints every stage's wall time at the
# end either way, and the slowest tests of the stages that ran (each ctest
# stage writes its JUnit file to JUNIT_DIR), so a slow or failing stage, and
# the test that made it so, are plain to see.
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
results=()
rc=0
start_all=$(date +%s)
for stage in "$@"; do
  name="${stage%%=*}"
  target="${stage#*=}"
  start=$(date +%s)
  if make -C "${root}" --no-print-directory SKIP_DEPS=true "${target}"; then
    results+=(ok)
  else
    rc=$?
    results+=(FAILED)
  fi
  names+=("${name}")
  times+=($(($(date +%s) - start)))
  ((rc == 0)) || break
done

fmt() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
echo
echo "== wall time of each stage"
for i in "${!names[@]}"; do
  printf '  %-14s %8s  %s\n' "${names[i]}" "$(fmt "${times[i]}")" "${results[i]}"
done
for stage in "${@:$((${#names[@]} + 1))}"; do printf '  %-14s %8s  %s\n' "${stage%%=*}" - "not run"; done
printf '  %-14s %8s\n' total "$(fmt $(($(date +%s) - start_all)))"
mapfile -t junit < <(find "${JUNIT_DIR}" -name '*.xml' | sort)
((${#junit[@]} == 0)) || python3 "${root}/scripts/slowest-tests.py" 15 "${junit[@]}" || true
exit "${rc}"
