#!/usr/bin/env bash
# Runs each fuzz target for a bounded time from a seed corpus of real files.
# usage: fuzz/run.sh BUILD_DIR SECONDS_PER_TARGET SEED_DIR...
set -o errexit -o nounset -o pipefail

build="${1:?usage: run.sh BUILD_DIR SECONDS SEED_DIR...}"
seconds="${2:?seconds per target}"
shift 2
work="${build}/fuzz-work"
mkdir -p "${work}"

run_target() {
  local target="$1"
  shift
  local corpus="${work}/${target}-corpus"
  mkdir -p "${corpus}"
  # Seeds are small real files; libFuzzer keeps what adds coverage.
  for dir in "$@"; do
    find "${dir}" -maxdepth 3 -type f -size -256k -print0 2>/dev/null | head -z -n 200 |
      xargs -0 -r cp -t "${corpus}" 2>/dev/null || true
  done
  echo "fuzz: ${target} for ${seconds}s" >&2
  "${build}/fuzz/${target}" -max_total_time="${seconds}" -rss_limit_mb=2048 -timeout=10 \
    -max_len=262144 -print_final_stats=1 "${corpus}" 2> "${work}/${target}.log" || {
    tail -n 50 "${work}/${target}.log" >&2
    echo "fuzz: ${target} found a crash (see ${work})" >&2
    return 1
  }
  grep -E '^stat::number_of_executed_units' "${work}/${target}.log" >&2 || true
}

run_target fuzz_elf "$@"
elf_cache_seeds=()
for dir in "$@"; do
  [[ -f "${dir}/etc/ld.so.cache" ]] && elf_cache_seeds+=("${dir}/etc")
done
run_target fuzz_ld_cache "${elf_cache_seeds[@]}"
run_target fuzz_tar "${TAR_SEEDS:-${work}/no-tar-seeds}"
run_target fuzz_config "${CONFIG_SEEDS:-${work}/no-config-seeds}"
