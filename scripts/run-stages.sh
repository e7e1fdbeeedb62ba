#!/usr/bin/env bash
# Runs make targets one after another as the stages of a run (`make test`),
# stops at the first that fails, and prints every stage's wall time at the
# end either way, so a slow or failing stage is plain to see.
#
# usage: scripts/run-stages.sh NAME=TARGET...   (e.g. build=build "ASan ctest"=test-asan)
set -o errexit -o nounset -o pipefail

(($#)) || { echo "usage: run-stages.sh NAME=TARGET..." >&2; exit 2; }
root="$(cd "$(dirname "$0")/.." && pwd)"
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
exit "${rc}"
