# Shell helpers shared by scripts, tests and benchmarks (sourced).
# shellcheck shell=bash

# use_vfs_storage DIR: point buildah, podman and skopeo at their own vfs
# container storage under DIR (never the user's), via CONTAINERS_STORAGE_CONF.
use_vfs_storage() {
  local dir="$1"
  mkdir -p "${dir}"
  cat > "${dir}/storage.conf" <<CONF
[storage]
driver = "vfs"
graphroot = "${dir}/graph"
runroot = "${dir}/run"
CONF
  export CONTAINERS_STORAGE_CONF="${dir}/storage.conf"
}

# best_seconds RUNS CMD...: the best wall time of CMD over RUNS runs (its
# exit status ignored), printed with millisecond precision.
best_seconds() {
  local runs="$1" best="" start end t i
  shift
  for ((i = 0; i < runs; i++)); do
    start=$(date +%s.%N)
    "$@" >/dev/null 2>&1 || true
    end=$(date +%s.%N)
    t=$(echo "${end} - ${start}" | bc -l)
    if [[ -z "${best}" ]] || (($(echo "${t} < ${best}" | bc -l))); then best="${t}"; fi
  done
  printf '%.3f' "${best}"
}
