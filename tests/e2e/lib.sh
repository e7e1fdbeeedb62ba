# Helpers for the shell end-to-end tests (sourced): each test gets its own
# scratch directory and fails with a message naming what it expected.
# shellcheck shell=bash
set -o errexit -o nounset -o pipefail

E2E_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=scripts/host.sh
source "${E2E_ROOT}/scripts/host.sh"
BUILD_DIR="${BUILD_DIR:-${E2E_ROOT}/build}"
FIXTURES="${FIXTURES:-${E2E_ROOT}/build-fixtures/elf}"
MEMPROFILE="${MEMPROFILE:-${BUILD_DIR}/tool/memprofile}"
export MEMPROFILE
SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/memprofile-e2e.XXXXXX")"
# MEMPROFILE_KEEP_SCRATCH=1 keeps it for a look after a failure (as for the
# C++ tests' Scratch).
# Every test's exit trap calls it: it also removes a private cgroup a failed
# test left (memory_causes).
cleanup_scratch() {
  drop_private_cgroup
  [[ -n "${MEMPROFILE_KEEP_SCRATCH:-}" ]] || rm -rf "${SCRATCH}"
}
trap cleanup_scratch EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

pass() { echo "ok: $*"; }

# top_site REPORT.json: report's first in-use site as FUNCTION (FILE:LINE)
# and its bytes, one line.
top_site() { jq -r '.in_use[0] | "\(.site.function) (\(.site.file):\(.site.line)) \(.bytes_in_use)"' "$1"; }

# sanitized BINARY: whether it is an AddressSanitizer build. Not `ldd | grep
# -q`: grep leaves at the first match, ldd then dies of SIGPIPE, and under
# pipefail the pipeline fails now and then.
sanitized() {
  local libs
  libs="$(ldd "$1" 2>/dev/null || true)"
  [[ "${libs}" == *libasan* ]]
}

# Built preload libraries are kept between runs, keyed by the recipe's content
# (the key its manifest records, so a copy of it is checked the same way).
# Tests that run at the same time (the buildah and the docker image tests)
# may ask for the same one: the first builds it, under a lock of its own,
# into a directory renamed into place; the others wait and reuse it.
preload_dist() {  # BACKEND ARCH -> directory with the built library
  local backend="$1" arch="$2" key dir lock
  key="$("${E2E_ROOT}/preload/build.sh" --key "${backend}")"
  dir="$(memprofile_cache)/preload-dist/${backend}-${arch}-${key}"
  if [[ ! -e "${dir}/manifest.json" ]]; then
    mkdir -p "${dir%/*}"
    exec {lock}>"${dir}.lock"
    # A bytehound build on a busy machine takes tens of minutes; ctest's
    # timeout ends a test that waits longer anyway, this says why.
    flock -w 3000 "${lock}" || fail "another test held ${dir}.lock for too long"
    if [[ ! -e "${dir}/manifest.json" ]]; then
      rm -rf "${dir}" "${dir}.partial"
      PRELOAD_CACHE="$(memprofile_cache)/preload" \
        "${E2E_ROOT}/preload/build.sh" "${backend}" "${arch}" "${dir}.partial" >&2
      mv "${dir}.partial" "${dir}"
    fi
    exec {lock}>&-
  fi
  echo "${dir}"
}

# allocator_fixtures: the heap coverage fixtures (tests/fixtures/allocators.sh),
# built into this test's scratch; the prefixed jemalloc they link is built
# once into the cache. Prints their directory.
allocator_fixtures() {
  local dir="${SCRATCH}/allocators"
  "${E2E_ROOT}/tests/fixtures/allocators.sh" "${dir}" "$(memprofile_cache)/fixtures" >&2 ||
    fail "cannot build the allocator fixtures"
  echo "${dir}"
}

# verdict_says KEY VERDICT WANT: check's text VERDICT is READY where WANT is
# "yes", else not profilable with the error finding WANT; a failure names KEY.
verdict_says() {
  if [[ "$3" == yes ]]; then
    grep -q "profilable: yes" <<< "$2" || fail "$1: not READY, expected READY: $2"
  else
    grep -q "profilable: no" <<< "$2" || fail "$1: READY, expected $3: $2"
    grep -q "error $3:" <<< "$2" || fail "$1: not $3: $2"
  fi
}

# free_port: a free TCP port on loopback, outside the kernel's ephemeral
# range (ip_local_port_range): a port from inside it can be taken by any
# outgoing connection on the machine before the server, slow to start on a
# busy machine, binds it.
free_port() {
  # A port handed out before is not free yet even if its server has not
  # bound it (python starting): remembered in a file, as this runs in $(...).
  local p given="${SCRATCH}/.ports-given" lo=32768 hi=60999 range="20000-60000"
  read -r lo hi < /proc/sys/net/ipv4/ip_local_port_range || true
  if ((lo > 11024)); then
    range="10000-$((lo - 1))"
  elif ((hi < 64000)); then
    range="$((hi + 1))-65000"
  fi
  for p in $(shuf -i "${range}" -n 50); do
    grep -qx "${p}" "${given}" 2>/dev/null && continue
    if ! (exec 3<>"/dev/tcp/127.0.0.1/${p}") 2>/dev/null; then
      echo "${p}" >> "${given}"
      echo "${p}"
      return
    fi
  done
  fail "no free port"
}

# A verdict without what names where it came from: the source, its format,
# and the blob names in anomalies.
verdicts() {
  jq -c 'del(.source, .format, .reference)
         | .anomalies |= map(sub("^[^ ]*: "; "LAYER: "))'
}

# same_verdicts ARCHIVE SOURCE [preflight args]: preflight says the same of
# SOURCE (a registry, a daemon) as of ARCHIVE, for every platform. ARCHIVE's
# verdicts are judged once per test and kept: a test compares many sources
# (credentials, mirrors, redirects) with the same archive, and judging a
# 126 MB image again for each was a third of a registry test's time under
# ASan (35 of 93 s in registry_basic_tls).
declare -A ARCHIVE_VERDICTS=()
same_verdicts() {
  local archive="$1" ref="$2"
  shift 2
  local a b
  a="$("${MEMPROFILE}" preflight --json --all-platforms "$@" "${ref}" | verdicts)" || true
  # Kept by path and what the file is now: a test may write another archive
  # to the same path (docker save of the same name, later).
  local key
  key="${archive} $(stat -c '%i %s %.9Y' "${archive}")" || fail "${archive}: no such archive"
  if [[ -z "${ARCHIVE_VERDICTS[${key}]:-}" ]]; then
    ARCHIVE_VERDICTS["${key}"]="$("${MEMPROFILE}" preflight --json --all-platforms "${archive}" | verdicts)" || true
  fi
  b="${ARCHIVE_VERDICTS[${key}]}"
  [[ -n "${a}" && "${a}" == "${b}" ]] || {
    diff <(jq . <<<"${a}") <(jq . <<<"${b}") | head -20 >&2
    fail "${ref}: verdicts differ from ${archive}"
  }
}

# expect_error PATTERN -- preflight args: exit 2, one line on stderr matching
# PATTERN (grep -E), nothing on stdout.
expect_error() {
  local pattern="$1" rc=0
  shift
  "${MEMPROFILE}" preflight "$@" > "${SCRATCH}/out" 2> "${SCRATCH}/err" || rc=$?
  [[ "${rc}" == 2 ]] || fail "preflight $*: exit ${rc}, not 2: $(cat "${SCRATCH}/err")"
  [[ ! -s "${SCRATCH}/out" ]] || fail "preflight $*: printed on stdout: $(head -3 "${SCRATCH}/out")"
  [[ "$(wc -l < "${SCRATCH}/err")" == 1 ]] || fail "preflight $*: not one line: $(cat "${SCRATCH}/err")"
  grep -Eq -- "${pattern}" "${SCRATCH}/err" || fail "preflight $*: said \"$(cat "${SCRATCH}/err")\", expected /${pattern}/"
  echo "   $(cat "${SCRATCH}/err")"
}

# The preload libraries the recipe tests build (cached by recipe content) are
# the ones the images get, in ${DIST}: no second build of the same thing.
seed_dist() {  # BACKEND ARCH
  local from
  from="$(preload_dist "$1" "$2")"
  if ! cmp -s "${from}/manifest.json" "${DIST}/preload/$1/$2/manifest.json" 2>/dev/null; then
    rm -rf "${DIST}/preload/$1/$2"
    mkdir -p "${DIST}/preload/$1"
    cp -a "${from}" "${DIST}/preload/$1/$2"
  fi
}

# start_local_registry: Debian's docker-registry (plain HTTP) on a free
# loopback port for this test alone, bounded in time; sets REGISTRY
# (host:port) and REGISTRY_PID, which the test kills when it ends.
start_local_registry() {
  local port attempt
  command -v docker-registry >/dev/null || fail "docker-registry missing (scripts/install-deps.sh installs it)"
  # A free port can be taken by another test's server before this one binds
  # it: then another port, at most 5 times.
  for attempt in 1 2 3 4 5; do
    port="$(free_port)"
    try_local_registry "${port}" && break
    grep -q "address already in use" "${SCRATCH}/registry.log" || break
    echo "note: port ${port} was taken before the registry bound it (attempt ${attempt}); another"
  done
  if ! curl -fsS "http://127.0.0.1:${port}/v2/" >/dev/null || ! kill -0 "${REGISTRY_PID}" 2>/dev/null; then
    fail "the registry did not start: $(cat "${SCRATCH}/registry.log")"
  fi
  # shellcheck disable=SC2034 # for the test that started it
  REGISTRY="127.0.0.1:${port}"
}

# try_local_registry PORT: docker-registry on PORT, serving within 60 s (0),
# or ended (1).
try_local_registry() {
  local port="$1"
  cat > "${SCRATCH}/registry.yml" <<YAML
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: ${SCRATCH}/registry
http:
  addr: 127.0.0.1:${port}
YAML
  timeout 1800 docker-registry serve "${SCRATCH}/registry.yml" > "${SCRATCH}/registry.log" 2>&1 &
  REGISTRY_PID=$!
  # Up to 60 s: a loaded CI machine has made a Go server take over 10 s. It
  # is ours only while our process lives (another may answer on the port).
  for _ in $(seq 300); do
    kill -0 "${REGISTRY_PID}" 2>/dev/null || return 1
    curl -fsS --max-time 5 "http://127.0.0.1:${port}/v2/" >/dev/null 2>&1 && kill -0 "${REGISTRY_PID}" 2>/dev/null && return 0
    sleep 0.2
  done
  return 1
}

# jeprof_names FUNCTION ROOT PROGRAM HEAP [arm64]: jeprof's text report of a
# profile recorded in a container names FUNCTION. The mapped paths are the
# container's: they are read under ROOT, the image's root (an arm64 one ran
# under qemu, whose maps jeprof needs rerooted). jeprof is ${DIST}'s.
jeprof_names() {
  local fn="$1" root="$2" program="$3" heap="$4" arch="${5:-amd64}" tools=() qemu=()
  if [[ "${arch}" == arm64 ]]; then
    tools=(--tools=/usr/bin/aarch64-linux-gnu-)
    qemu=(--qemu-maps)
  fi
  "${E2E_ROOT}/scripts/reroot-profile.sh" jemalloc "${root}" "${heap}" "${heap}.rooted" "${qemu[@]}"
  "${DIST}/preload/jemalloc/amd64/jeprof" "${tools[@]}" --text "${root}${program}" "${heap}.rooted" > "${heap}.text" 2>/dev/null
  grep -q "${fn}" "${heap}.text"
}

# memory_seen STATUS_JSON RECORD WHERE: `memprofile status --json` of a
# jemalloc service that leaks, run where the service runs (a container),
# and the record beside its last snapshot: RSS, the allocator's view, the
# profile's bytes in use and the cgroup (or why it cannot be read), each said.
memory_seen() {
  jq -e '.processes[0] | .memory.rss > 0 and .allocator.name == "jemalloc" and .allocator.allocated > 0 and
      .profile.bytes_in_use > 0' "$1" > /dev/null ||
    fail "$3: status: $(jq -c '.processes[0] | {memory, allocator, profile}' "$1")"
  jq -e '.cgroup | has("current") or has("error")' "$1" > /dev/null || fail "$3: status says nothing of the cgroup"
  jq -e '.rss > 0 and .allocator == "jemalloc" and .allocated > 0' "$2" > /dev/null ||
    fail "$3: the record $2: $(cat "$2" 2>&1)"
}

# memory_causes WHERE REPORT_ARGS...: tests/fixtures/src/membuckets.c under the
# launcher (jemalloc), one service per cause of growth, with a snapshot
# before the growth and one after, each checked against a stated tolerance:
#   heap     the allocator's allocated +60..68 MiB, RSS with it; the report
#            blames the site (heap)
#   frag     resident - allocated +80..115 MiB (100 MiB of blocks, 1/64 kept)
#   mmap     anonymous +60..68 MiB, the heap under 1 MiB: "outside the allocator"
#   threads  anonymous +56..72 MiB (16 stacks x 4 MiB), the heap under 1 MiB
#   tmpfs    RSS under 2 MiB, the cgroup's shmem +24 MiB or more (32 written)
# and status, asked where the service runs, against /proc (RSS within 2 MiB)
# and the cgroup (read, or why not said). The caller defines
#   causes_start MODE DIR  starts membuckets MODE GO READY under the launcher
#                          (GO and READY in DIR as the service sees it), in
#                          the background, its log in DIR.log
#   causes_ctl DIR ARGS... memprofile ARGS where the service runs (the only
#                          socket in DIR)
# and may define (the defaults: the socket's pid is the host's)
#   causes_proc_status     the service's /proc/PID/status, as it sees it
#   causes_stop            ends the service
#   causes_own_cgroup      gives the service a memory cgroup of its own, as
#                          a pod has, or fails (default: private_cgroup)
#   causes_cgroup_current  the charge of the service's cgroup as its files
#                          say, for status's to be within 8 MiB of (default:
#                          the private cgroup's; none without one: a cgroup
#                          shared with other jobs moves by more between two
#                          reads)
# Without a cgroup of its own the cgroup's shmem is not checked (a note says
# so): a job beside the test that frees shared memory or deletes a tmpfs
# file takes it down in the shared cgroup while the service's grows.
# REPORT_ARGS: what report reads symbols from (--rootfs / or --image FILE).
causes_proc_status() { cat "/proc/${CAUSES_PID}/status"; }
causes_cgroup_current() {
  [[ -z "${CAUSES_CGROUP}" ]] || cat "${CAUSES_CGROUP}/memory.usage_in_bytes" 2> /dev/null ||
    cat "${CAUSES_CGROUP}/memory.current"
}
causes_stop() { kill -KILL "${CAUSES_PID}" 2> /dev/null || true; }
causes_own_cgroup() { private_cgroup "${CAUSES_PID}"; }

# private_cgroup PID: moves PID into a new memory cgroup (v1's memory
# controller under the test's own cgroup, or a child of v2's root with the
# memory controller), named in CAUSES_CGROUP; fails, CAUSES_CGROUP empty,
# where the test may not make one. Charges made before the move stay where
# they were: move it before the first look.
CAUSES_CGROUP=""
private_cgroup() {
  local pid="$1" v1_path dir=""
  v1_path="$(awk -F: '$2 ~ /(^|,)memory(,|$)/ { print $3 }' /proc/self/cgroup)"
  if [[ -n "${v1_path}" && -d "/sys/fs/cgroup/memory${v1_path%/}" ]]; then
    dir="/sys/fs/cgroup/memory${v1_path%/}/memprofile-e2e.$$.${pid}"
  elif grep -qw memory /sys/fs/cgroup/cgroup.subtree_control 2> /dev/null; then
    dir="/sys/fs/cgroup/memprofile-e2e.$$.${pid}"
  fi
  if [[ -z "${dir}" ]] || ! mkdir "${dir}" 2> /dev/null; then return 1; fi
  CAUSES_CGROUP="${dir}"
  echo "${pid}" > "${dir}/cgroup.procs" 2> /dev/null || { drop_private_cgroup; return 1; }
}

# drop_private_cgroup: ends what is left in CAUSES_CGROUP and removes it
# (a cgroup goes once its last process has exited: at most 10 s).
drop_private_cgroup() {
  [[ -n "${CAUSES_CGROUP}" && -d "${CAUSES_CGROUP}" ]] || { CAUSES_CGROUP=""; return 0; }
  local i pid
  for ((i = 0; i < 100; i++)); do
    while read -r pid; do kill -KILL "${pid}" 2> /dev/null || true; done < "${CAUSES_CGROUP}/cgroup.procs"
    rmdir "${CAUSES_CGROUP}" 2> /dev/null && break
    sleep 0.1
  done
  [[ ! -d "${CAUSES_CGROUP}" ]] || echo "note: ${CAUSES_CGROUP} could not be removed" >&2
  CAUSES_CGROUP=""
}
# shellcheck disable=SC2016 # the $a and $b are jq's
memory_causes() {
  local where="$1" mode dir first second sock
  shift
  CAUSES_CGROUP_CHECKED=0  # causes whose cgroup charge was compared
  CAUSES_SHMEM_CHECKED=0   # 1 once tmpfs's growth was seen in the cgroup's shmem
  for mode in heap frag mmap threads tmpfs; do
    dir="${SCRATCH}/causes-${mode}"
    mkdir -p "${dir}"
    chmod 1777 "${dir}"
    causes_start "${mode}" "${dir}"
    local i
    for ((i = 0; i < 600; i++)); do
      sock="$(find "${dir}" -maxdepth 1 -name 'memprofile-ctl.*.sock' -print -quit)"
      [[ -n "${sock}" ]] && break
      sleep 0.1
    done
    [[ -n "${sock}" ]] || fail "${where} ${mode}: no control socket after 60 s: $(cat "${dir}.log" 2>&1)"
    sock="${sock##*memprofile-ctl.}"
    CAUSES_PID="${sock%.sock}"
    local own=1
    causes_own_cgroup || own=0
    first="$(causes_ctl "${dir}" snapshot)" || fail "${where} ${mode}: the first snapshot"
    touch "${dir}/go"
    for ((i = 0; i < 1200; i++)); do
      [[ -e "${dir}/ready" ]] && break
      sleep 0.1
    done
    [[ -e "${dir}/ready" ]] || fail "${where} ${mode}: the memory did not grow"
    second="$(causes_ctl "${dir}" snapshot)" || fail "${where} ${mode}: the second snapshot"
    causes_ctl "${dir}" status --json > "${dir}.status.json" || fail "${where} ${mode}: status"
    local proc_rss status_rss
    proc_rss="$(causes_proc_status | awk '/^VmRSS/ { print $2 * 1024 }')"
    status_rss="$(jq '.processes[0].memory.rss' "${dir}.status.json")"
    (( status_rss - proc_rss < 2097152 && proc_rss - status_rss < 2097152 )) ||
      fail "${where} ${mode}: status says RSS ${status_rss}, /proc ${proc_rss}"
    jq -e '(.cgroup.current // 0) > 0 or (.cgroup.error // "") != ""' "${dir}.status.json" > /dev/null ||
      fail "${where} ${mode}: status says nothing of the cgroup: $(jq -c .cgroup "${dir}.status.json")"
    local cg_file cg_status
    cg_file="$(causes_cgroup_current)"
    if [[ -n "${cg_file}" ]]; then
      cg_status="$(jq '.cgroup.current // -1' "${dir}.status.json")"
      (( cg_status - cg_file < 8388608 && cg_file - cg_status < 8388608 )) ||
        fail "${where} ${mode}: status says the cgroup holds ${cg_status}, its file ${cg_file}"
      CAUSES_CGROUP_CHECKED=$((CAUSES_CGROUP_CHECKED + 1))
    fi
    causes_stop
    drop_private_cgroup
    rm -f "/dev/shm/membuckets.${CAUSES_PID}"
    "${MEMPROFILE}" report --json "$@" "${dir}/${first##*/}" "${dir}/${second##*/}" "${dir}/${first##*/}.mem.json" \
      "${dir}/${second##*/}.mem.json" > "${dir}.report.json" || fail "${where} ${mode}: report"
    rec() {  # the change of a record's number in MiB, first to last
      jq "(.memory[0].last as \$b | .memory[0].first as \$a | ($1)) / 1048576 | floor" "${dir}.report.json"
    }
    local verdict
    verdict="$(jq -r '.memory[0].verdict' "${dir}.report.json")"
    within_mib() { (($2 >= $3 && $2 <= $4)) || fail "${where} ${mode}: $1 ${2} MiB, not ${3}..${4} (${verdict})"; }
    case "${mode}" in
      heap)
        within_mib "allocated" "$(rec '$b.allocator.allocated - $a.allocator.allocated')" 60 68
        within_mib "RSS" "$(rec '$b.rss - $a.rss')" 56 80
        [[ "${verdict}" == "the heap grew by "* ]] || fail "${where} heap: ${verdict}"
        [[ "$(jq -r '.growth[0].site.function' "${dir}.report.json")" == heap ]] ||
          fail "${where} heap: the report blames $(jq -c '.growth[0].site' "${dir}.report.json")" ;;
      frag)
        within_mib "resident - allocated" \
          "$(rec '($b.allocator.resident - $b.allocator.allocated) - ($a.allocator.resident - $a.allocator.allocated)')" 80 115
        [[ "${verdict}" == *"fragmentation or retention"* ]] || fail "${where} frag: ${verdict}" ;;
      mmap | threads)
        if [[ "${mode}" == mmap ]]; then
          within_mib "anonymous" "$(rec '$b.anon - $a.anon')" 60 68
        else
          within_mib "anonymous" "$(rec '$b.anon - $a.anon')" 56 72
        fi
        within_mib "allocated" "$(rec '$b.allocator.allocated - $a.allocator.allocated')" 0 0
        [[ "${verdict}" == *"outside the allocator: anonymous mappings"* ]] || fail "${where} ${mode}: ${verdict}" ;;
      tmpfs)
        within_mib "RSS" "$(rec '$b.rss - $a.rss')" 0 1
        if ((!own)); then
          echo "note: ${where} tmpfs: no memory cgroup of its own could be made; the shared cgroup's shmem is not checked"
        elif jq -e '.memory[0].last.cgroup_split' "${dir}.report.json" > /dev/null; then
          within_mib "the cgroup's shmem" "$(rec '$b.cgroup_split.shmem - $a.cgroup_split.shmem')" 24 100000
          [[ "${verdict}" == *"the cgroup's shmem grew by"* ]] || fail "${where} tmpfs: ${verdict}"
          CAUSES_SHMEM_CHECKED=1
        else
          echo "note: ${where} tmpfs: no memory cgroup where the service runs; the record says so by its absence"
        fi ;;
    esac
  done
}

# causes_said: what memory_causes checked, for a pass line: tmpfs "in its own
# bucket" only where its growth was seen in the cgroup's shmem.
causes_said() {
  if ((CAUSES_SHMEM_CHECKED)); then
    echo "heap, fragmentation, mmap, thread stacks and tmpfs each in its own bucket, within tolerance"
  else
    echo "heap, fragmentation, mmap and thread stacks each in its own bucket, within tolerance; tmpfs outside RSS only (no memory cgroup of its own to see its shmem in)"
  fi
}

# serve_each PORT N PID...: GET / on 127.0.0.1:PORT, whose body is the pid
# of the worker that served it, until each PID has served N requests (which
# worker accepts is the scheduler's choice, skewed on a busy machine); at
# most 400 + N x PIDs requests. Sets SERVED to how many were made; fails on
# a failed request or when one PID never got its N.
SERVED=0
serve_each() {
  local port="$1" n="$2" body pid i left
  shift 2
  local -A got=()
  for pid in "$@"; do got["${pid}"]=0; done
  SERVED=0
  for ((i = 0; i < 400 + n * $#; i++)); do
    body="$(curl -fsS --max-time 30 "http://127.0.0.1:${port}/")" || fail "a request to port ${port} failed"
    SERVED=$((SERVED + 1))
    body="${body//[^0-9]/}"
    [[ -n "${body}" && -n "${got[${body}]+set}" ]] && got["${body}"]=$((got["${body}"] + 1))
    left=0
    for pid in "$@"; do ((got["${pid}"] >= n)) || left=1; done
    ((left)) || return 0
  done
  fail "not ${n} requests served by each of $* in ${SERVED}: $(for pid in "$@"; do printf '%s:%s ' "${pid}" "${got[${pid}]}"; done)"
}

# wait_until SECONDS CMD...: CMD succeeds within SECONDS (polled every 0.1 s;
# a cap, not a measure: it returns as soon as CMD does).
wait_until() {
  local i limit=$(( $1 * 10 ))
  shift
  for ((i = 0; i < limit; i++)); do
    "$@" && return 0
    sleep 0.1
  done
  return 1
}

# log_says FILE TEXT: FILE holds the fixed TEXT within 60 s. A service's log
# reaches its file through the engine's relay (buildah run, docker logs),
# which can lag behind the control socket the service made on the volume
# itself.
log_says() { wait_until 60 grep -qF -- "$2" "$1" 2> /dev/null; }

# wait_sockets DIR N [PID LOG]: DIR holds N control sockets (memprofile-ctl.*.sock)
# within 60 s (a cap: it returns as soon as they are there); fails naming
# what is there, or LOG when PID, the service, ended first.
wait_sockets() {
  local dir="$1" want="$2" pid="${3:-}" log="${4:-/dev/null}" i
  for ((i = 0; i < 600; i++)); do
    (($(find "${dir}" -maxdepth 1 -name 'memprofile-ctl.*.sock' | wc -l) == want)) && return 0
    [[ -z "${pid}" ]] || kill -0 "${pid}" 2> /dev/null || fail "the service ended: $(tail -5 "${log}")"
    sleep 0.1
  done
  fail "not ${want} sockets in ${dir} after 60 s: $(ls "${dir}"): $(tail -5 "${log}")"
}

# need_bytehound_bundle CODE: when bytehound's offline bundle is nowhere to
# be found (preload/README.md), says what is skipped and exits CODE (77: the
# test does not apply; 0: the rest of a test that has done its part). The
# recipe is read in a subshell: its names stay out of the test.
need_bytehound_bundle() {
  local found
  found="$(
    # shellcheck source=preload/recipes.sh
    source "${E2E_ROOT}/preload/recipes.sh"
    # shellcheck source=preload/bytehound/recipe.sh
    source "${E2E_ROOT}/preload/bytehound/recipe.sh"
    PRELOAD_CACHE="$(memprofile_cache)/preload" find_bundle || true
  )"
  [[ -z "${found}" ]] || return 0
  echo "skip: no offline bundle for bytehound (bytehound-0.11.0-offline.tar.gz; preload/README.md): the bytehound image is not built here"
  exit "$1"
}

# trixie_python_root: the tarball of a Debian trixie root with Python 3.13,
# gunicorn and python3-memray (built once, from the mirror, by
# scripts/make-rootfs.sh), for the tests of Python services.
trixie_python_root() {
  "${E2E_ROOT}/scripts/make-rootfs.sh" amd64 --suite trixie --include gunicorn,python3-memray
}

# unpack_trixie_python_root DIR: that root, unpacked into DIR (made here).
unpack_trixie_python_root() {
  local tarball
  tarball="$(trixie_python_root)" || fail "no trixie root with gunicorn and python3-memray"
  mkdir -p "$1"
  tar -C "$1" --numeric-owner -xpf "${tarball}"
}

# The sites test program (tests/fixtures/src/sites.{c,cpp,rs}: a steady
# leak, one large allocation, heavy churn) and its profiles, for report's
# tests. sites_build LANG...: ${SCRATCH}/sites-LANG (c, cpp, rs).
# sites_record LANG: its jemalloc dumps in ${SCRATCH}/LANG (a dump every
# 16 MiB allocated, a sample every 16 KiB on average), under Debian's
# libjemalloc. sites_record_heaptrack LANG: its raw heaptrack trace in
# ${SCRATCH}/ht-LANG (2 ms between rounds: the trace's timestamps come every
# 10 ms), under Debian's heaptrack preload. sites_line_of FILE SITE: the
# line of "SITE name" in the source.
SITES_SRC="${E2E_ROOT}/tests/fixtures/src"
sites_build() {
  local lang
  for lang in "$@"; do
    case "${lang}" in
      c) gcc -g -O1 -o "${SCRATCH}/sites-c" "${SITES_SRC}/sites.c" ;;
      cpp) g++ -g -O1 -o "${SCRATCH}/sites-cpp" "${SITES_SRC}/sites.cpp" ;;
      rs) /usr/bin/rustc -g -C opt-level=0 -o "${SCRATCH}/sites-rs" "${SITES_SRC}/sites.rs" 2> "${SCRATCH}/rustc.log" ||
        fail "rustc: $(cat "${SCRATCH}/rustc.log")" ;;
      *) fail "sites_build: no language ${lang}" ;;
    esac
  done
}
sites_record() {
  local jemalloc
  jemalloc="$(ldconfig -p | awk '$1 == "libjemalloc.so.2" && !n++ { print $NF }')"
  [[ -n "${jemalloc}" ]] || fail "Debian's libjemalloc2 is missing (scripts/install-deps.sh installs it)"
  mkdir -p "${SCRATCH}/$1"
  LD_PRELOAD="${jemalloc}" MALLOC_CONF="prof:true,prof_final:true,lg_prof_interval:24,lg_prof_sample:14,prof_prefix:${SCRATCH}/$1/jeprof" \
    "${SCRATCH}/sites-$1" 400 || fail "$1: the test program failed"
  (($(find "${SCRATCH}/$1" -name '*.heap' | wc -l) >= 5)) || fail "$1: fewer than 5 dumps"
}
sites_record_heaptrack() {
  local heaptrack
  heaptrack="$(dpkg -L libheaptrack | awk '/\/libheaptrack_preload\.so$/ && !n++')"
  [[ -n "${heaptrack}" ]] || fail "Debian's libheaptrack is missing (scripts/install-deps.sh installs it)"
  mkdir -p "${SCRATCH}/ht-$1"
  # shellcheck disable=SC2016 # heaptrack itself puts the pid for $$
  LD_PRELOAD="${heaptrack}" DUMP_HEAPTRACK_OUTPUT="${SCRATCH}/ht-$1/heaptrack.\$\$.raw" "${SCRATCH}/sites-$1" 400 2000 ||
    fail "$1: the test program failed under heaptrack"
  [[ -s "$(find "${SCRATCH}/ht-$1" -name 'heaptrack.*.raw')" ]] || fail "$1: no heaptrack trace"
}
sites_line_of() { grep -n "SITE $2" "${SITES_SRC}/$1" | cut -d: -f1; }
