#!/usr/bin/env bash
# The profiler stays with the profiled program (ctl/spawn.c). A service that
# runs a shell through system(), cat through posix_spawnp and tar through
# execvp in a forked child, then re-execs itself as a worker: under
# jemalloc, heaptrack and bytehound the shell, cat and tar map neither the profiler
# nor the control library and leave no profile, while the worker (the same
# program exec'd again) is profiled and served as the first process is.
# The worker is exec'd with an environment of its own (PATH alone), as
# subprocess's env= does: it is served all the same, and its shell is not
# profiled either. The service's exit code is its own.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

gcc -O1 -g -pthread -o "${SCRATCH}/spawner" "${E2E_ROOT}/tests/fixtures/src/spawner.c"
JEMALLOC="$(preload_dist jemalloc amd64)/libjemalloc.so.2"
HEAPTRACK="$(preload_dist heaptrack amd64)/libheaptrack_preload.so"

backends=(jemalloc heaptrack)
# bytehound where its offline bundle is (preload/README.md).
# shellcheck source=preload/bytehound/recipe.sh
if (source "${E2E_ROOT}/preload/recipes.sh" && source "${E2E_ROOT}/preload/bytehound/recipe.sh" &&
    [[ -n "$(PRELOAD_CACHE="$(memprofile_cache)/preload" find_bundle)" ]]); then
  BYTEHOUND="$(preload_dist bytehound amd64)/libbytehound.so"
  backends+=(bytehound)
else
  echo "skip: bytehound (no offline bundle to build it)"
fi

for backend in "${backends[@]}"; do
  lib="${JEMALLOC}"
  [[ "${backend}" == heaptrack ]] && lib="${HEAPTRACK}"
  [[ "${backend}" == bytehound ]] && lib="${BYTEHOUND}"
  out="${SCRATCH}/out-${backend}" maps="${SCRATCH}/maps-${backend}"
  mkdir -p "${out}" "${maps}"
  "${LAUNCHER}" exec --output-dir "${out}" --min-free-mb 1 --backend "${backend}" --preload "${lib}" -- \
    "${SCRATCH}/spawner" "${maps}" > "${SCRATCH}/${backend}.log" 2>&1 || fail "${backend}: exit code $?: $(cat "${SCRATCH}/${backend}.log")"
  for f in sh cat worker-sh; do
    [[ -s "${maps}/${f}.maps" ]] || fail "${backend}: ${f} wrote no maps"
    if grep -E "${lib##*/}|libmemprofile_ctl" "${maps}/${f}.maps"; then fail "${backend}: ${f} carries the profiler"; fi
  done
  grep -q "${lib##*/}" "${maps}/worker.maps" || fail "${backend}: the worker (this program again) is not profiled"
  grep -q libmemprofile_ctl "${maps}/worker.maps" || fail "${backend}: the worker has no control library"
  worker="$(cat "${maps}/worker.pid")" tar="$(cat "${maps}/tar.pid")"
  # Profiles: the first process's and the worker's, no other pid's.
  mapfile -t pids < <(find "${out}" -maxdepth 1 \( -name 'jeprof.*.heap' -o -name 'heaptrack.*.raw' -o -name 'memory-profiling_*.dat' \) \
    -printf '%f\n' | sed -E 's/^(jeprof|heaptrack)\.([0-9]+)\..*/\2/; s/^memory-profiling_.*_([0-9]+)\.dat$/\1/' | sort -un)
  [[ "${#pids[@]}" == 2 && " ${pids[*]} " == *" ${worker} "* && " ${pids[*]} " != *" ${tar} "* ]] ||
    fail "${backend}: profiles of pids ${pids[*]} (the worker is ${worker}, tar ${tar}): $(ls "${out}")"
  [[ -e "${out}/memprofile-proc.${worker}.json" ]] || fail "${backend}: the worker was not served: $(ls "${out}")"
  pass "${backend}: sh, cat and tar start without the profiler and leave no profile; the re-exec'd worker ${worker} (an environment of its own) is profiled and served, and its shell is not"
done

# The exec family's own calls need little stack: a thread of 32 KiB execs
# a shell, in the target and in a process the library only loads into.
for ctl in target bystander; do
  rc=0
  if [[ "${ctl}" == target ]]; then
    mkdir -p "${SCRATCH}/out-small"
    "${LAUNCHER}" exec --output-dir "${SCRATCH}/out-small" --min-free-mb 1 --backend jemalloc --preload "${JEMALLOC}" -- \
      "${SCRATCH}/spawner" "${SCRATCH}" smallstack > "${SCRATCH}/small.log" 2>&1 || rc=$?
  else
    LD_PRELOAD="${CTL_LIBRARY}" "${SCRATCH}/spawner" "${SCRATCH}" smallstack || rc=$?
  fi
  ((rc == 7)) || fail "exec from a 32 KiB thread stack (${ctl}): exit ${rc}: $(cat "${SCRATCH}/small.log" 2>/dev/null)"
done
pass "exec from a thread with a 32 KiB stack, in the target and in a bystander: the shell's own exit code (7)"
# Said, not passed: a run without bytehound did not check what it claims for it.
if [[ " ${backends[*]} " != *" bytehound "* ]]; then
  echo "skip: bytehound was not checked (no offline bundle): jemalloc and heaptrack passed"
  exit 77
fi
