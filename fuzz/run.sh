#!/usr/bin/env bash
# Runs each fuzz target for a bounded time, from a corpus of real files and of
# hostile inputs written by fuzz/make-seeds.py, under the issue's bounds: an
# input that takes more CPU time than its bound or makes the process use more
# than FUZZ_RSS_MB MiB is a failure, like a crash.
#
# Time is CPU time, never wall time: another job on the cores makes a unit
# wait longer, not work longer. An input's bound is the larger of
# FUZZ_TIMEOUT CPU seconds and FUZZ_SLOW_RATIO times the target's baseline,
# the CPU time that the same binary takes, in this run, over the target's
# benign seeds; so a slower machine gets a proportionally larger bound, and a
# busy one the same. libFuzzer's own -timeout (wall time) is only the hang
# guard, FUZZ_HANG_SECONDS; units it finds slow (-report_slow_units) or
# timed out are replayed alone and judged by their CPU time.
#
# usage: fuzz/run.sh BUILD_DIR SECONDS_PER_TARGET SEED_DIR...
#   SEED_DIR...   real files (ELF binaries, a root filesystem with etc/ld.so.cache)
# environment:
#   TAR_SEEDS, CONFIG_SEEDS, ARCHIVE_SEEDS  more seed directories for those targets
#   REGISTRIES_CONF_SEEDS  more seeds for fuzz_registries_conf (this machine's
#                     /etc/containers is always one)
#   FUZZ_TARGETS      targets to run (default: all seven)
#   FUZZ_JOBS         targets fuzzed at once (default: one a core)
#   FUZZ_TIMEOUT=1    CPU seconds one input may take at least (see above)
#   FUZZ_SLOW_RATIO=20  times the target's benign baseline one input may take
#   FUZZ_HANG_SECONDS=60  wall seconds after which libFuzzer calls a unit hung
#   FUZZ_RSS_MB=256   MiB the process may use (also the largest single malloc)
#   FUZZ_KEEP_GOING=1 keep fuzzing after a failure (libFuzzer -fork=1 -ignore_*),
#                     collecting every reproducer; for long runs
#   FUZZ_MAX_REPLAYS=40  reproducers replayed per target (each distinct bug is
#                     reported once, with how many reproducers found it)
#   FUZZ_ARCHIVE_CLOSE_LEAKED_FDS=1  fuzz_archive closes descriptors that
#                     load_images leaks instead of failing on them
#
# Each hostile seed is first replayed on its own, so a seed that still fails
# is reported by name; the passing ones join the corpus. Then each target is
# fuzzed for SECONDS_PER_TARGET. Per target it prints executions per second
# and total executions, and for each failure its kind, reproducer and the top
# of its stack. Exits 1 when anything failed, after running every target.
set -o errexit -o nounset -o pipefail

build="${1:?usage: run.sh BUILD_DIR SECONDS SEED_DIR...}"
seconds="${2:?seconds per target}"
shift 2
here="$(cd "$(dirname "$0")" && pwd)"
work="${build}/fuzz-work"
hostile="${work}/hostile-seeds"
artifacts="${work}/artifacts"
timeout_s="${FUZZ_TIMEOUT:-1}"
slow_ratio="${FUZZ_SLOW_RATIO:-20}"
hang_s="${FUZZ_HANG_SECONDS:-60}"
rss_mb="${FUZZ_RSS_MB:-256}"
targets="${FUZZ_TARGETS:-fuzz_elf fuzz_ld_cache fuzz_tar fuzz_config fuzz_archive fuzz_profile fuzz_registries_conf}"
mkdir -p "${work}" "${artifacts}"

limits=(-timeout="${hang_s}" -rss_limit_mb="${rss_mb}" -malloc_limit_mb="${rss_mb}")
# The CPU seconds one input of the current target may take (set per target
# by calibrate).
cpu_bound="${timeout_s}"
# ASan's quarantine holds freed memory (256 MiB by default) and counts in the
# RSS: keep it small so that the RSS limit measures the code, not ASan.
export ASAN_OPTIONS="${ASAN_OPTIONS:-quarantine_size_mb=16:malloc_context_size=20:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"

python3 "${here}/make-seeds.py" "${hostile}"

failures=()
summary=()

# What a libFuzzer log says went wrong: "timeout", "out-of-memory", ...
failure_kind() {
  local log="$1"
  if grep -q 'ERROR: libFuzzer: timeout' "${log}"; then echo timeout
  elif grep -q 'ERROR: libFuzzer: out-of-memory' "${log}"; then
    grep -o -m 1 'out-of-memory ([^)]*)' "${log}" | head -n 1
  elif grep -q 'ERROR: AddressSanitizer' "${log}"; then
    echo "asan: $(grep -o -m 1 'ERROR: AddressSanitizer: [a-z-]*' "${log}" | head -n 1 | cut -d' ' -f3)"
  elif grep -q 'ERROR: LeakSanitizer' "${log}"; then echo leak
  elif grep -q 'runtime error:' "${log}"; then echo "ubsan: $(grep -o -m 1 'runtime error: .*' "${log}" | head -n 1 | cut -c16-90)"
  elif grep -q 'uncaught exception\|terminate called' "${log}"; then echo "uncaught exception"
  elif grep -q 'file descriptor(s) open' "${log}"; then echo "file descriptor leak"
  elif grep -q 'deadly signal' "${log}"; then echo "deadly signal"
  else echo "failed"
  fi
}

# The first frames of the project's own code in a sanitizer stack (the
# first stack of the report: the one that failed, or the largest allocation).
stack_top() {
  grep -m 3 -E '^ *#[0-9]+ 0x[0-9a-f]+ in .* [^ ]*(tool/src/[a-z]+|fuzz)/[^ /]+\.(cpp|h):[0-9]+' "$1" |
    sed -E 's/^ *#[0-9]+ 0x[0-9a-f]+ in /    /; s# [^ ]*/(tool/src/[a-z]+|fuzz)/# \1/#; s/\(std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >/(std::string/g' |
    cut -c1-220 || true
}

# Runs one input (or a directory of inputs) alone: prints the exit status,
# the peak RSS in MiB (a spike shorter than libFuzzer's once-a-second RSS
# check still counts) and the CPU seconds (user + system) it took. The CPU
# limit (RLIMIT_CPU, SIGXCPU) ends a unit far past its bound whatever the
# load; the wall-clock kill after 600 s only ends one blocked for good.
#   replay_one LOG BIN ARG...   (ARG: the input, or -runs=0 and a directory)
replay_one() {
  local log="$1" bin="$2" cpu_limit
  shift 2
  cpu_limit=$(( ${cpu_bound%.*} * 4 + 10 ))
  python3 -c 'import resource, subprocess, sys
limit = int(sys.argv[2])
def cap():
    resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 5))
with open(sys.argv[1], "wb") as log:
    rc = subprocess.run(sys.argv[3:], stdout=log, stderr=subprocess.STDOUT, preexec_fn=cap).returncode
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print(rc, u.ru_maxrss // 1024, "%.3f" % (u.ru_utime + u.ru_stime))' \
    "${log}" "${cpu_limit}" timeout -s KILL 600 "${bin}" "${limits[@]}" "$@"
}

# What went wrong with one replayed input, or "" when nothing did.
replay_verdict() {
  local log="$1" rc="$2" peak="$3" cpu="$4"
  if [[ ${rc} -eq 137 ]]; then echo "killed after 600 s"
  elif [[ ${rc} -eq 152 || ${rc} -eq -24 ]] || grep -q 'CPU time limit' "${log}"; then
    echo "CPU limit: far over its ${cpu_bound} s bound"
  elif [[ ${rc} -ne 0 ]]; then echo "$(failure_kind "${log}") (peak RSS ${peak} MiB)"
  elif [[ ${peak} -gt ${rss_mb} ]]; then echo "peak RSS ${peak} MiB > ${rss_mb} MiB"
  elif awk -v c="${cpu}" -v b="${cpu_bound}" 'BEGIN { exit !(c > b) }'; then
    echo "slow: ${cpu} s of CPU > its ${cpu_bound} s bound (peak RSS ${peak} MiB)"
  fi
}

# The target's CPU bound for one input: the larger of FUZZ_TIMEOUT and
# FUZZ_SLOW_RATIO times what the binary takes, measured now, on this
# machine, over the largest of the target's benign seeds (real files),
# process start included.
calibrate() {
  local target="$1" benign="$2" bin="${build}/fuzz/$1" rc peak cpu largest
  cpu_bound="${timeout_s}"
  largest="$(find "${benign}" -maxdepth 1 -type f -printf '%s %p\n' | sort -n | tail -n 1 | cut -d' ' -f2-)"
  [[ -n "${largest}" ]] || return 0
  read -r rc peak cpu < <(replay_one "${work}/${target}.baseline.log" "${bin}" "${largest}")
  if [[ ${rc} -ne 0 ]]; then
    echo "fuzz: ${target}: the benign seed ${largest} fails (exit ${rc}); see ${work}/${target}.baseline.log" >&2
    failures+=("${target}: the benign seed ${largest} fails (exit ${rc})")
    return 0
  fi
  cpu_bound="$(awk -v t="${timeout_s}" -v r="${slow_ratio}" -v c="${cpu}" \
    'BEGIN { b = r * c; printf "%.2f", (b > t ? b : t) }')"
  echo "fuzz: ${target}: baseline ${cpu} s of CPU for $(basename "${largest}") ($(stat -c %s "${largest}") bytes);" \
    "one input may take ${cpu_bound} s of CPU" >&2
}

# Replays each hostile seed of `kind` on its own; copies the passing ones
# into the corpus, reports the failing ones.
replay() {
  local target="$1" kind="$2" corpus="$3" bin="${build}/fuzz/$1"
  local dir="${work}/replay/${target}"
  mkdir -p "${dir}"
  local seed name log rc peak cpu what target_bound twin
  for seed in "${hostile}/${kind}"/*; do
    [[ -f "${seed}" ]] || continue
    name="$(basename "${seed}")"
    log="${dir}/${name}.log"
    # A seed large by design is judged against its benign twin of the same
    # size (make-seeds.py's TWINS), measured now.
    target_bound="${cpu_bound}"
    twin="${hostile}/${kind}.benign/${name}"
    if [[ -f "${twin}" ]]; then
      read -r rc peak cpu < <(replay_one "${log}.twin" "${bin}" "${twin}")
      cpu_bound="$(awk -v t="${cpu_bound}" -v r="${slow_ratio}" -v c="${cpu}" \
        'BEGIN { b = r * c; printf "%.2f", (b > t ? b : t) }')"
      echo "fuzz: ${target}: ${name}: its benign twin takes ${cpu} s of CPU; it may take ${cpu_bound} s" >&2
    fi
    read -r rc peak cpu < <(replay_one "${log}" "${bin}" "${seed}")
    what="$(replay_verdict "${log}" "${rc}" "${peak}" "${cpu}")"
    cpu_bound="${target_bound}"
    if [[ -z "${what}" && -f "${twin}" ]]; then
      # Large by design: replayed as a regression check, not fuzzed from (its
      # mutations would cost as much and be judged against the target's
      # bound).
      :
    elif [[ -z "${what}" ]]; then
      cp "${seed}" "${corpus}/"
    else
      failures+=("${target}: seed ${seed}: ${what} (log ${log})")
      echo "fuzz: ${target}: hostile seed ${name} fails: ${what}" >&2
      stack_top "${log}" >&2
    fi
  done
}

run_target() {
  local target="$1" kind="$2"
  shift 2
  local bin="${build}/fuzz/${target}"
  local corpus="${work}/${target}-corpus"
  local log="${work}/${target}.log"
  mkdir -p "${corpus}"
  # Real files; libFuzzer keeps what adds coverage.
  for dir in "$@"; do
    find "${dir}" -maxdepth 3 -type f -size -256k -print0 2>/dev/null | head -z -n 200 |
      xargs -0 -r cp -t "${corpus}" 2>/dev/null || true
  done
  calibrate "${target}" "${corpus}"
  replay "${target}" "${kind}" "${corpus}"

  local mode=()
  [[ "${FUZZ_KEEP_GOING:-0}" == 1 ]] && mode=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
  echo "fuzz: ${target} for ${seconds}s (${cpu_bound} s of CPU an input, ${rss_mb} MiB)" >&2
  local start end rc=0 stamp="${work}/${target}.stamp"
  touch "${stamp}"
  start="${EPOCHREALTIME}"
  # -report_slow_units: a unit over FUZZ_TIMEOUT wall seconds is written
  # out (slow-unit-*) and replayed below, where its CPU time decides.
  "${bin}" "${mode[@]}" -max_total_time="${seconds}" "${limits[@]}" -max_len=262144 -print_final_stats=1 \
    -report_slow_units="$(( ${timeout_s%.*} > 0 ? ${timeout_s%.*} : 1 ))" \
    -artifact_prefix="${artifacts}/${target}-" "${corpus}" > "${log}" 2>&1 || rc=$?
  end="${EPOCHREALTIME}"

  # Executions: libFuzzer's final stats, or in fork mode the last "#N:" report.
  local execs last_rate elapsed rate
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "${log}" | tail -n 1)"
  [[ -n "${execs}" ]] || execs="$(grep -oE '^#[0-9]+' "${log}" | tail -n 1 | tr -d '#' || true)"
  last_rate="$(grep -oE 'exec/s:? [0-9]+' "${log}" | tail -n 1 | grep -oE '[0-9]+$' || true)"
  elapsed="$(awk -v a="${start}" -v b="${end}" 'BEGIN { printf "%.1f", b - a }')"
  rate="$(awk -v n="${execs:-0}" -v t="${elapsed}" 'BEGIN { printf "%d", (t > 0 ? n / t : 0) }')"
  local files line
  files="$(find "${corpus}" -type f | wc -l)"
  line="${target}: ${execs:-0} executions in ${elapsed} s = ${rate} exec/s (libFuzzer's last: ${last_rate:-?} exec/s), corpus ${files} files"

  # Reproducers written by this run, each replayed alone for its kind and
  # stack (in fork mode the reports stay in libFuzzer's temporary logs).
  local found=() a alog what arc apeak acpu top sig n=0 kind
  local -A count=() example=()
  local -a order=()
  local load_slow=0 failed_before=${#failures[@]}
  mapfile -t found < <(find "${artifacts}" -maxdepth 1 -type f -name "${target}-*" -newer "${stamp}" | sort)
  if [[ ${#found[@]} -gt 0 ]]; then
    # The same bug found again and again is reported once, with a count.
    for a in "${found[@]}"; do
      if (( ++n > ${FUZZ_MAX_REPLAYS:-40} )); then
        failures+=("${target}: $(( ${#found[@]} - n + 1 )) more reproducer(s) not replayed, in ${artifacts}")
        break
      fi
      alog="${work}/replay/${target}/$(basename "${a}").log"
      read -r arc apeak acpu < <(replay_one "${alog}" "${bin}" "${a}")
      what="$(replay_verdict "${alog}" "${arc}" "${apeak}" "${acpu}")"
      # A unit libFuzzer found slow or timed out, in wall time, that runs
      # within its CPU bound alone was the machine being busy (another job
      # on the cores), not the input: said, not failed. Any other kind that
      # does not reproduce still fails.
      kind="$(basename "${a}")"
      kind="${kind#"${target}"-}"
      if [[ -z "${what}" && ( "${kind}" == timeout-* || "${kind}" == slow-unit-* ) ]]; then
        echo "fuzz: ${target}: ${a} was slow in wall time but takes ${acpu} s of CPU alone (bound ${cpu_bound} s); not a failure" >&2
        (( ++load_slow ))
        continue
      fi
      [[ -n "${what}" ]] || what="does not reproduce alone (peak RSS ${apeak} MiB)"
      top="$(stack_top "${alog}")"
      sig="${what%% (peak*} at $(grep -m 1 -oE '(tool/src|fuzz)/[^ ]+:[0-9]+' <<< "${top}" || echo '?')"
      if [[ -z "${count[${sig}]:-}" ]]; then
        order+=("${sig}")
        example[${sig}]="${a}"
        count[${sig}]=0
        echo "fuzz: ${target}: reproducer ${a}: ${what}" >&2
        [[ -z "${top}" ]] || echo "${top}" >&2
      fi
      count[${sig}]=$(( count[${sig}] + 1 ))
    done
    for sig in "${order[@]}"; do
      failures+=("${target}: ${count[${sig}]} reproducer(s): ${sig}, e.g. ${example[${sig}]}")
    done
    if (( ${#failures[@]} > failed_before )); then line+=", FAILED: ${#found[@]} reproducer(s)"
    else line+=", ok"
    fi
    (( load_slow == 0 )) || line+=" (${load_slow} unit(s) slow only in wall time: within their CPU bound alone)"
  elif [[ ${rc} -ne 0 ]]; then
    line+=", FAILED (exit ${rc}, $(failure_kind "${log}"))"
    failures+=("${target}: exit ${rc} without a reproducer (log ${log})")
    tail -n 40 "${log}" >&2
  else
    line+=", ok"
  fi
  echo "fuzz: ${line}" >&2
  summary+=("${line}")
}

# One target: its corpus, seeds, fuzzing and replays; its summary line and
# failures go to files the run collects in the targets' order.
fuzz_target() {
  local target="$1"
  shift
  case "${target}" in
    fuzz_elf) run_target fuzz_elf elf "$@" ;;
    fuzz_ld_cache)
      caches=()
      for dir in "$@"; do
        [[ -f "${dir}/etc/ld.so.cache" ]] && caches+=("${dir}/etc/ld.so.cache")
      done
      run_target fuzz_ld_cache ld_cache "${caches[@]}"
      ;;
    fuzz_tar) run_target fuzz_tar tar "${TAR_SEEDS:-}" ;;
    fuzz_config) run_target fuzz_config config "${CONFIG_SEEDS:-}" ;;
    fuzz_archive) run_target fuzz_archive archive "${ARCHIVE_SEEDS:-}" "${TAR_SEEDS:-}" ;;
    fuzz_profile) run_target fuzz_profile profile "${PROFILE_SEEDS:-}" ;;
    fuzz_registries_conf) run_target fuzz_registries_conf registries_conf /etc/containers "${REGISTRIES_CONF_SEEDS:-}" ;;
    *) echo "fuzz: unknown target ${target}" >&2; exit 2 ;;
  esac
  printf '%s\n' "${summary[@]}" > "${work}/${target}.summary"
  ((${#failures[@]} == 0)) || printf '%s\n' "${failures[@]}" > "${work}/${target}.failures"
}

# FUZZ_JOBS targets at a time (default: one a core): each libFuzzer process
# is single-threaded, and every bound is CPU time or a baseline taken in the
# same target's run, so neighbours slow a target down without failing it.
jobs_max="${FUZZ_JOBS:-$(nproc)}"
for target in ${targets}; do
  rm -f "${work}/${target}.summary" "${work}/${target}.failures"
  (fuzz_target "${target}" "$@") &
  while (($(jobs -rp | wc -l) >= jobs_max)); do wait -n || true; done
done
wait || true
for target in ${targets}; do
  if [[ -f "${work}/${target}.summary" ]]; then
    mapfile -t -O "${#summary[@]}" summary < "${work}/${target}.summary"
  else
    failures+=("${target}: did not finish (its log: ${work}/${target}.log)")
  fi
  [[ ! -f "${work}/${target}.failures" ]] || mapfile -t -O "${#failures[@]}" failures < "${work}/${target}.failures"
done

echo "fuzz: summary" >&2
for line in "${summary[@]}"; do echo "  ${line}" >&2; done
if [[ ${#failures[@]} -gt 0 ]]; then
  echo "fuzz: ${#failures[@]} failure(s):" >&2
  for f in "${failures[@]}"; do echo "  ${f}" >&2; done
  exit 1
fi
