# Helpers for the image end-to-end tests (sourced after lib.sh): local Debian
# bases from `make base-image`, the example app image, and running an image's
# entrypoint with buildah. Bases, container storage and host-built artifacts
# are cached under MEMPROFILE_CACHE between runs.
# shellcheck shell=bash
# shellcheck source=scripts/host.sh
source "${E2E_ROOT}/scripts/host.sh"

CACHE="$(memprofile_cache)"
# The image tests' store (ctest's "containers" lock: one test at a time), or
# MEMPROFILE_TEST_STORE's: the Python image tests run in a lane of their own
# ("containers-python"), beside the others, each lane with its own store,
# so that pruning one never touches what the other is building.
STORE="${MEMPROFILE_TEST_STORE:-containers}"
use_container_storage "${CACHE}/${STORE}"
# One image test adds about 1 GB to an overlay store (bases, app, builder
# stages); vfs copies every layer into every image and container.
need_store_space "${CACHE}" 3000 12000 "an image test" || exit 1
export DIST="${CACHE}/image-dist${MEMPROFILE_TEST_STORE:+-${MEMPROFILE_TEST_STORE}}"
SUITE=bookworm

mk() {  # make in the repo with the test's engine and caches
  make -C "${E2E_ROOT}" --no-print-directory SKIP_DEPS=true CONTAINER_ENGINE=buildah PULL_POLICY=never \
    DIST="${DIST}" IMAGE_WORK_DIR="${SCRATCH}/image" "$@"
}


# base_images ARCH: the slim and builder bases for ARCH, made or reused by
# make base-image (which checks they were made from the same inputs). The
# amd64 builder is the default one, with Debian's cargo (way 2, and the same
# base `make example` uses). arm64's builder is the amd64 cross builder
# (cargo, gcc-aarch64-linux-gnu) labelled arm64, so that buildah 1.28, which
# runs a `FROM --platform=$BUILDPLATFORM` stage as the target, runs it
# natively and the example's Dockerfile cross-compiles there, as docker
# buildx does; installing gcc under qemu for arm64 took minutes a run.
base_images() {
  local arch="$1" cross ctr
  mk base-image ARCH="${arch}" SUITE="${SUITE}" >/dev/null
  if [[ "${arch}" == amd64 ]]; then
    mk base-image ARCH=amd64 SUITE="${SUITE}" BASE_VARIANT=builder >/dev/null
    return 0
  fi
  mk base-image ARCH=amd64 SUITE="${SUITE}" BASE_VARIANT=cross >/dev/null
  cross="$(image_id "localhost/memprofile-base:${SUITE}-cross-amd64")"
  [[ "$(buildah inspect --type image --format '{{index .OCIv1.Config.Labels "io.memprofile.test.from"}}' \
    "localhost/memprofile-base:${SUITE}-builder-${arch}" 2>/dev/null)" != "${cross}" ]] || return 0
  ctr="$(buildah from --pull=never --quiet "localhost/memprofile-base:${SUITE}-cross-amd64")"
  buildah config --arch "${arch}" --label "io.memprofile.test.from=${cross}" "${ctr}"
  buildah commit --quiet "${ctr}" "localhost/memprofile-base:${SUITE}-builder-${arch}" >/dev/null
  buildah rm "${ctr}" >/dev/null
}

# example_app ARCH: the example leaking service as an ordinary app image,
# localhost/leaky:ARCH, built by examples/leaky/Dockerfile; rebuilt only when
# the example's sources or the bases it is built from change (a label holds
# their key), so reruns do not leave a superseded copy in the store each time.
# example_app ARCH [NAME DIR]: localhost/NAME:ARCH (default leaky, from
# examples/leaky), rebuilt only when its sources or bases change.
example_app() {
  local arch="$1" name="${2:-leaky}" dir="${3:-${E2E_ROOT}/examples/leaky}" key f
  local -a sources=() app_arg=()
  # Another app than the example: one of the sources in DIR (its Dockerfile's APP).
  [[ "${name}" == leaky ]] || app_arg=(--build-arg "APP=${name}")
  base_images "${arch}"
  for f in "${dir}"/*; do sources+=("@${f}"); done
  key="$(cache_key "${sources[@]}" \
    "$(image_id "localhost/memprofile-base:${SUITE}-builder-${arch}")" "$(image_id "localhost/memprofile-base:${SUITE}-slim-${arch}")")"
  [[ "$(buildah inspect --type image --format '{{index .OCIv1.Config.Labels "io.memprofile.test.source"}}' \
    "localhost/${name}:${arch}" 2>/dev/null)" != "${key}" ]] || return 0
  buildah bud --isolation chroot --pull=never --quiet --platform "linux/${arch}" \
    --build-arg "BUILDER_IMAGE=localhost/memprofile-base:${SUITE}-builder-${arch}" \
    --build-arg "BASE_IMAGE=localhost/memprofile-base:${SUITE}-slim-${arch}" \
    --label "io.memprofile.test.source=${key}" "${app_arg[@]}" \
    -t "localhost/${name}:${arch}" "${dir}" >/dev/null
}

image_id() { buildah inspect --type image --format '{{.FromImageID}}' "$1"; }

# verify_step LOG: the build's verify step (layer.Dockerfile's preflight RUN)
# as LOG has it, to its next STEP line: what a failed check on it shows.
verify_step() { sed -n '\%STEP [0-9/]*: RUN \["/usr/bin/memprofile", "preflight"%,\%STEP [0-9/]*: ENTRYPOINT%p' "$1"; }

# run_entrypoint IMAGE OUTDIR [ARGS...]: runs the image as a container would
# (its Entrypoint, then ARGS or its Cmd, as its User), with OUTDIR mounted
# at the profile directory.
run_entrypoint() {
  local image="$1" out="$2" ctr rc=0
  shift 2
  local -a argv
  mapfile -t argv < <(buildah inspect --type image "${image}" | jq -r '.OCIv1.config.Entrypoint[]')
  if (($# == 0)); then
    mapfile -t -O "${#argv[@]}" argv < <(buildah inspect --type image "${image}" | jq -r '(.OCIv1.config.Cmd // [])[]')
  fi
  mkdir -p "${out}"
  chmod 1777 "${out}"
  ctr="$(buildah from --pull=never --quiet "${image}")"
  buildah run --isolation chroot -v "${out}:/var/memprofile" "${ctr}" -- "${argv[@]}" "$@" || rc=$?
  buildah rm "${ctr}" >/dev/null
  return "${rc}"
}

# image_root IMAGE: mounts a container of IMAGE and prints its root; the
# container goes when the test ends.
MOUNTED=()
image_root() {
  local ctr
  ctr="$(buildah from --pull=never --quiet "$1")"
  MOUNTED+=("${ctr}")
  buildah mount "${ctr}"
}

# drop_at_exit IMAGE...: images (or manifest lists) the test built for
# itself, removed when it ends, so that the store holds only the shared bases
# and app images between runs.
DROPPED=()
drop_at_exit() { DROPPED+=("$@"); }

unmount_all() {
  local ctr image
  for ctr in "${MOUNTED[@]}"; do
    buildah umount "${ctr}" >/dev/null 2>&1 || true
    buildah rm "${ctr}" >/dev/null 2>&1 || true
  done
  for image in "${DROPPED[@]}"; do
    buildah manifest rm "${image}" >/dev/null 2>&1 || buildah rmi --force "${image}" >/dev/null 2>&1 || true
  done
  # Untagged images are stage results and the per-platform images of dropped
  # lists. Safe to prune: image tests hold ctest's "containers" lock, so no
  # other build is using this store right now.
  buildah rmi --prune >/dev/null 2>&1 || true
  cleanup_scratch
}
trap unmount_all EXIT


# heaptrack_names FUNCTION ROOT RAW: heaptrack_interpret | heaptrack_print of
# a trace recorded in a container names FUNCTION, its paths read under ROOT.
heaptrack_names() {
  local fn="$1" root="$2" raw="$3"
  "${E2E_ROOT}/scripts/reroot-profile.sh" heaptrack "${root}" "${raw}" "${raw}.rooted"
  /usr/lib/heaptrack/libexec/heaptrack_interpret < "${raw}.rooted" > "${raw}.trace" 2>/dev/null
  heaptrack_print "${raw}.trace" > "${raw}.printed" 2>/dev/null
  grep -q "${fn}" "${raw}.printed"
}

# dormant_round IMAGE ARCH: the dormant service in IMAGE (built with
# DORMANT=true) runs in one container; a second container of the same image
# with the same volume plays `kubectl exec`: memprofile start, two snapshots
# with growth between them, stop. The service runs on to its own exit code,
# and report, reading symbols from the image archive, ranks the growth
# between the two snapshots to leaky_function. Sets DORMANT_SNAPSHOT to the
# second snapshot's file.
dormant_round() {
  local image="$1" arch="$2" out="${SCRATCH}/out-$2" ctr pid sock first second i
  mkdir -p "${out}"
  chmod 1777 "${out}"
  ctr="$(buildah from --pull=never --quiet "${image}")"
  MOUNTED+=("${ctr}")
  buildah run --isolation chroot -v "${out}:/var/memprofile" "${ctr}" -- \
    /usr/bin/memprofile exec --from-config -- 0 131072 > "${SCRATCH}/service-${arch}.log" 2>&1 &
  local service=$!
  for i in $(seq 1 300); do
    sock="$(find "${out}" -name 'memprofile-ctl.*.sock' -print -quit)"
    [[ -z "${sock}" ]] || break
    kill -0 "${service}" 2>/dev/null || fail "the service ended: $(cat "${SCRATCH}/service-${arch}.log")"
    sleep 0.2
    : "${i}"
  done
  [[ -n "${sock}" ]] || fail "no control socket after 60 s: $(cat "${SCRATCH}/service-${arch}.log")"
  pid="${sock##*memprofile-ctl.}"
  pid="${pid%.sock}"
  log_says "${SCRATCH}/service-${arch}.log" \
    "loaded dormant (recording off until memprofile start): /usr/local/bin/leaky with jemalloc" || fail "not dormant: $(cat "${SCRATCH}/service-${arch}.log")"

  local exec_ctr
  exec_ctr="$(buildah from --pull=never --quiet "${image}")"
  MOUNTED+=("${exec_ctr}")
  # `kubectl exec POD -- memprofile ACTION`: no PID, the only socket there.
  in_pod() { buildah run --isolation chroot -v "${out}:/var/memprofile" "${exec_ctr}" -- /usr/bin/memprofile "$@"; }
  in_pod status > "${SCRATCH}/status0-${arch}" 2> "${SCRATCH}/status.err" ||
    fail "status: $(cat "${SCRATCH}/status0-${arch}" "${SCRATCH}/status.err")"
  grep -q "^pid ${pid}: jemalloc, recording off$" "${SCRATCH}/status0-${arch}" ||
    fail "status before start: $(cat "${SCRATCH}/status0-${arch}")"
  [[ "$(in_pod start 2>/dev/null)" == *"recording on"* ]] || fail "start"
  sleep 2
  first="$(in_pod snapshot 2>/dev/null)" || fail "first snapshot"
  sleep 3
  second="$(in_pod snapshot 2>/dev/null)" || fail "second snapshot"
  in_pod status --json > "${SCRATCH}/status-${arch}.json" 2> /dev/null || fail "status --json"
  memory_seen "${SCRATCH}/status-${arch}.json" "${out}/${second##*/}.mem.json" "${arch} in a container"
  [[ "$(in_pod stop 2>/dev/null)" == *"recording off"* ]] || fail "stop"
  [[ "${first}" == /var/memprofile/jeprof."${pid}".*.m*.heap && "${second}" == /var/memprofile/jeprof."${pid}".*.m*.heap ]] ||
    fail "snapshot paths: ${first} ${second}"
  # Read by the script that sourced this library.
  export DORMANT_SNAPSHOT="${out}/${second##*/}"
  # The service is still the same process, and ends with its own exit code.
  kill -0 "${service}" 2>/dev/null || fail "the service did not survive the control commands"
  kill -TERM "${pid}"
  wait "${service}" || fail "the service's exit code changed: $?"
  grep -q "leaky: leaked" "${SCRATCH}/service-${arch}.log" || fail "the service did not end cleanly"

  "${MEMPROFILE}" report --image "${SCRATCH}/image/image.tar" --json "${out}/${first##*/}" "${out}/${second##*/}" \
    "${out}/${first##*/}.mem.json" "${out}/${second##*/}.mem.json" > "${SCRATCH}/growth-${arch}.json" ||
    fail "report on the two snapshots"
  [[ "$(jq -r '.growth[0].site.function' "${SCRATCH}/growth-${arch}.json")" == leaky_function ]] ||
    fail "the growth between the snapshots is not leaky_function: $(jq -c '.growth[0]' "${SCRATCH}/growth-${arch}.json")"
  jq -e '.memory[0].verdict | startswith("the heap grew by")' "${SCRATCH}/growth-${arch}.json" > /dev/null ||
    fail "the records beside the snapshots: $(jq -c .memory "${SCRATCH}/growth-${arch}.json")"
}

# app_image BASE NAME DIR ENTRYPOINT CMD: localhost image NAME, BASE with
# DIR's files at /app and the JSON ENTRYPOINT and CMD; dropped at exit.
app_image() {
  local base="$1" name="$2" dir="$3" entrypoint="$4" cmd="$5" work
  work="$(buildah from --pull=never --quiet "${base}")"
  MOUNTED+=("${work}")
  [[ -z "${dir}" ]] || buildah copy --quiet "${work}" "${dir}" /app > /dev/null
  buildah config --entrypoint "${entrypoint}" --cmd "${cmd}" "${work}"
  buildah commit --quiet "${work}" "${name}" > /dev/null
  drop_at_exit "${name}" "${name}-memprofile"
}

# gunicorn_memray_round IMAGE ARCHIVE [dormant]: IMAGE (built with
# BACKEND=memray from leaky_wsgi_app's gunicorn app, judged as ARCHIVE) run
# as a container under load from curl on loopback, driven from a second
# container of the same image that shares its profile volume (as kubectl
# exec into a pod's other container would): the arbiter and its 2 workers
# serve status, each recording; snapshot marks all 3 captures (memray's
# capture is continuous: report ends a span at the mark); after SIGTERM, report names the handler's line
# in each worker, and --merge sums them. dormant (an image built
# DORMANT=true): none records at first; `start` from the second container
# starts all 3 without a restart, `stop` closes their captures, and the
# workers' captures hold the requests between the two, not those before.
# ROUND: what it saw, for the test's pass line.
# shellcheck disable=SC2154 # app_line: set by leaky_wsgi_app
gunicorn_memray_round() {
  local image="$1" archive="$2" mode="${3:-active}" port out ctr service arbiter rc w capture total=0 merged
  local before=0 during=80 how="each recording from the start"
  local -a workers
  [[ "${mode}" != dormant ]] || { before=20 during=60 how="none recording until start from the second container"; }
  port="$(free_port)"
  out="${SCRATCH}/out"
  mkdir -p "${out}"
  chmod 1777 "${out}"
  ctr="$(buildah from --pull=never --quiet "${image}")"
  MOUNTED+=("${ctr}")
  in_pod() { buildah run --isolation chroot -v "${out}:/var/memprofile" "${ctr}" -- /usr/bin/memprofile "$@"; }
  requests() {
    for _ in $(seq 1 "$1"); do
      curl -fsS --max-time 30 "http://127.0.0.1:${port}/" > /dev/null || fail "gunicorn does not answer: $(tail -3 "${SCRATCH}/gunicorn.log")"
    done
  }
  buildah run --isolation chroot -v "${out}:/var/memprofile" "${ctr}" -- /usr/bin/memprofile exec --from-config -- \
    --chdir /app -w 2 --timeout 0 -b "127.0.0.1:${port}" leaky:app > "${SCRATCH}/gunicorn.log" 2>&1 &
  service=$!
  wait_sockets "${out}" 3 "${service}" "${SCRATCH}/gunicorn.log"
  arbiter="$(jq -r 'select(.parent == 0) | .pid' "${out}"/memprofile-proc.*.json)"
  [[ "${arbiter}" =~ ^[0-9]+$ ]] || fail "no arbiter among the records: $(cat "${out}"/memprofile-proc.*.json)"
  track "${arbiter}"
  mapfile -t workers < <(jq -r --argjson a "${arbiter}" 'select(.parent == $a) | .pid' "${out}"/memprofile-proc.*.json | sort -n)
  ((${#workers[@]} == 2)) || fail "not 2 workers of ${arbiter}: ${workers[*]}"
  requests "${before}"
  if [[ "${mode}" == dormant ]]; then
    in_pod status "${arbiter}" --json > "${SCRATCH}/status0.json" 2> /dev/null || fail "status: $(cat "${SCRATCH}/status0.json")"
    jq -e '.tree.served == 3 and ([.processes[] | select(.backend == "memray" and (.recording | not))] | length) == 3' \
      "${SCRATCH}/status0.json" > /dev/null || fail "dormant: status: $(jq -c '.processes' "${SCRATCH}/status0.json")"
    in_pod start "${arbiter}" > "${SCRATCH}/start" 2>&1 || fail "start: $(cat "${SCRATCH}/start")"
    [[ "$(grep -c ': memray, recording on$' "${SCRATCH}/start")" == 3 ]] || fail "start: $(cat "${SCRATCH}/start")"
  fi
  serve_each "${port}" $((during / 2)) "${workers[@]}"  # which worker accepts is the scheduler's choice
  during="${SERVED}"
  in_pod status "${arbiter}" --json > "${SCRATCH}/status.json" 2> /dev/null || fail "status: $(cat "${SCRATCH}/status.json")"
  jq -e '.tree.served == 3 and ([.processes[] | select(.backend == "memray" and .recording)] | length) == 3' \
    "${SCRATCH}/status.json" > /dev/null ||
    fail "status: $(jq -c '.tree, [.processes[] | {pid, parent, backend, recording}]' "${SCRATCH}/status.json")"
  in_pod snapshot "${arbiter}" > "${SCRATCH}/snap" 2>&1 || fail "the tree's snapshot: $(cat "${SCRATCH}/snap")"
  (($(grep -c '^/var/memprofile/memray\..* at [0-9.]* s (mark 1 in /var/memprofile/memray-marks\.' "${SCRATCH}/snap") == 3)) ||
    fail "the tree's snapshot did not mark 3 captures: $(cat "${SCRATCH}/snap")"
  if [[ "${mode}" == dormant ]]; then
    in_pod stop "${arbiter}" > "${SCRATCH}/stop" 2>&1 || fail "stop: $(cat "${SCRATCH}/stop")"
    [[ "$(grep -c ': memray, recording off$' "${SCRATCH}/stop")" == 3 ]] || fail "stop: $(cat "${SCRATCH}/stop")"
  fi
  kill -TERM "${arbiter}"
  wait "${service}" || fail "gunicorn's exit code: $? $(tail -3 "${SCRATCH}/gunicorn.log")"
  for w in "${workers[@]}"; do
    # Recording from the start, a forked worker's capture follows its
    # arbiter's; started later, each process has one of its own.
    capture="${out}/memray.${arbiter}.bin.${w}"
    [[ "${mode}" != dormant ]] || capture="${out}/memray.${w}.bin"
    [[ -s "${capture}" ]] || fail "no capture for worker ${w}: $(ls "${out}")"
    "${MEMPROFILE}" report --image "${archive}" --json "${capture}" > "${SCRATCH}/worker-${w}.json" ||
      fail "report of worker ${w}"
    [[ "$(top_site "${SCRATCH}/worker-${w}.json")" == "app (/app/leaky.py:${app_line}) "* ]] ||
      fail "worker ${w}'s top site: $(top_site "${SCRATCH}/worker-${w}.json")"
    # The snapshot's mark ends a span of the worker's capture: all the
    # requests recorded are in by then.
    jq -e '[.snapshots[] | select(.trigger == "m")] | length == 1' \
      "${SCRATCH}/worker-${w}.json" > /dev/null || fail "worker ${w}: the snapshot's mark: $(jq -c '.snapshots' "${SCRATCH}/worker-${w}.json")"
    total=$((total + $(jq '.in_use[0].bytes_in_use' "${SCRATCH}/worker-${w}.json")))
  done
  ((total >= during * 256 * 1024 && total < (before + during) * 256 * 1024 + 256 * 1024)) ||
    fail "the workers hold ${total} bytes at the handler, not the $((during / 4)) MiB of the ${during} requests recorded"
  "${MEMPROFILE}" report --image "${archive}" --json --merge "${out}" > "${SCRATCH}/merged.json" || fail "report --merge"
  merged="$(jq '.in_use[0].bytes_in_use' "${SCRATCH}/merged.json")"
  if [[ "$(top_site "${SCRATCH}/merged.json")" != "app (/app/leaky.py:${app_line}) "* ]] || ((merged < total)); then
    fail "--merge: $(top_site "${SCRATCH}/merged.json") against ${total} in the workers"
  fi
  # shellcheck disable=SC2034 # read by the test
  ROUND="the arbiter and its 2 workers served status (${how}) and snapshot (a mark in each capture); report names app (leaky.py:${app_line}) in each worker (${total} bytes together: the ${during} requests recorded), --merge sums them (${merged})"
}

# debian_packages_image BASE NAME ARCH SUITE PACKAGE...: localhost image
# NAME, BASE with PACKAGE... of SUITE for ARCH and what they need that BASE
# lacks, unpacked and recorded in its dpkg status as distroless images are
# made (no maintainer script runs, so no qemu for a foreign ARCH); apt plans
# against BASE's own status (scripts/debian-apt.sh). BASE scratch: an image
# of those packages alone (name base-files among them for its os-release),
# on a merged /usr. Dropped at exit.
debian_packages_image() {
  local base="$1" name="$2" work mnt d
  shift 2
  work="$(buildah from --pull=never --quiet "${base}")"
  MOUNTED+=("${work}")
  mnt="$(buildah mount "${work}")"
  if [[ "${base}" == scratch ]]; then
    buildah config --arch "$1" --os linux "${work}"
    for d in bin sbin lib; do mkdir -p "${mnt}/usr/${d}" && ln -s "usr/${d}" "${mnt}/${d}"; done
    mkdir -p "${mnt}/var/lib/dpkg" "${mnt}/tmp" "${mnt}/etc" "${mnt}/root" && chmod 1777 "${mnt}/tmp" &&
      touch "${mnt}/var/lib/dpkg/status"
    # What distroless writes itself (base-passwd's script would): root and nobody.
    printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' > "${mnt}/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' > "${mnt}/etc/group"
  fi
  (stage_debian_packages "${mnt}" "$@") || fail "cannot stage ${*:3} (${2}/${1}) onto ${base}"
  buildah commit --quiet "${work}" "${name}" > /dev/null
  drop_at_exit "${name}" "${name}-memprofile"
}

# stage_debian_packages ROOT ARCH SUITE PACKAGE... (in a subshell of its
# own: debian-apt.sh's settings and lock stay there).
stage_debian_packages() {
  local root="$1" arch="$2" suite="$3" deb pv plan
  shift 3
  # shellcheck source=scripts/debian-apt.sh
  source "${E2E_ROOT}/scripts/debian-apt.sh"
  mkdir -p "${SCRATCH}/apt"
  debian_apt "${suite}" "${arch}" "${root}/var/lib/dpkg/status" "${SCRATCH}/apt" || return 1
  plan="$(apt-get "${apt_opts[@]}" -s install --no-install-recommends "$@")" || return 1
  plan="$(sed -n 's/^Inst \([^ ]*\) (\([^ ]*\) .*/\1=\2/p' <<<"${plan}")"
  [[ -n "${plan}" ]] || { echo "apt plans nothing to install for $*" >&2; return 1; }
  while read -r pv; do
    deb="$(debian_deb "${pv}")" || return 1
    # Over a merged-/usr base, bookworm's /lib/... entries go through its
    # /lib link, as dpkg puts them, not over it.
    dpkg-deb --fsys-tarfile "${deb}" | tar -x --keep-directory-symlink -C "${root}" || return 1
    { echo "Status: install ok installed"; dpkg-deb -f "${deb}"; echo; } >> "${root}/var/lib/dpkg/status" || return 1
  done <<<"${plan}"
}

# fork_workers_app DIR: DIR/service.py, a script that forks two workers,
# each keeping 5 MiB of buffers to its end; sets keep_line, the line that
# keeps them.
fork_workers_app() {
  mkdir -p "$1"
  cat > "$1/service.py" <<'PY'
import os

kept = []


def keep():
    for _ in range(20):
        kept.append(bytearray(256 << 10))  # 5 MiB in each worker, kept to its end


children = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        keep()
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
print("workers done", len(children))
PY
  # shellcheck disable=SC2034 # read by the test
  keep_line="$(grep -n 'kept.append' "$1/service.py" | cut -d: -f1)"
}

# fork_workers_round IMAGE ARCHIVE OUT: IMAGE (fork_workers_app's script,
# judged as ARCHIVE) run as a container with OUT as its profile directory:
# each of the 2 workers has its capture, and report names keep_line in each.
fork_workers_round() {
  local image="$1" archive="$2" out="$3" capture
  local -a captures
  run_entrypoint "${image}" "${out}" > "${out}.log" 2>&1 || { cat "${out}.log" >&2; fail "run ${image}"; }
  grep -q "workers done 2" "${out}.log" || fail "the service did not finish: $(cat "${out}.log")"
  mapfile -t captures < <(find "${out}" -name 'memray.*.bin.*' | sort)
  ((${#captures[@]} == 2)) || fail "not a capture for each of the 2 workers: $(ls "${out}")"
  for capture in "${captures[@]}"; do
    "${MEMPROFILE}" report --image "${archive}" --json "${capture}" > "${out}.json" ||
      fail "report of ${capture}: $(cat "${out}.json")"
    [[ "$(top_site "${out}.json")" == "keep (/app/service.py:${keep_line}) "* ]] ||
      fail "$(basename "${capture}"): the top site: $(top_site "${out}.json")"
  done
}
