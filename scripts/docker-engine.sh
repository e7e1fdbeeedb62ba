#!/usr/bin/env bash
# A Docker engine of the toolkit's own, for the tests and for machines with
# none: Debian trixie's dockerd, containerd, runc and buildx (docker.io
# 26.1.5, docker-buildx 0.13.1 when written) in a root made by mmdebstrap,
# in network, mount and PID namespaces of its own. The machine's network and
# mount table are never touched.
#
# usage: scripts/docker-engine.sh start|stop|env|status
#   start   make (or reuse) the root, start the daemon, wait until `docker
#           version` answers (DOCKER_ENGINE_TIMEOUT seconds, 90); idempotent
#   stop    stop the daemon, containerd and the container shims, and undo
#           every mount; safe to run after any failure, and when nothing runs
#   env     print the exports that point docker at it (eval "$(... env)"):
#           DOCKER_HOST, DOCKER_CONFIG (cli-plugins/docker-buildx) and PATH
#           (the trixie docker CLI, which runs on Debian 12 as it is)
#   status  exit 0 when the daemon answers
#
# DOCKER_ENGINE_STORE=classic starts it with the graph-driver image store
# (docker's default before the containerd one) instead; start restarts a
# daemon running with the other store.
#
# The root is scripts/make-rootfs.sh's trixie tarball with docker.io,
# docker-cli, docker-buildx, containerd, runc, iptables and ca-certificates,
# extracted once under MEMPROFILE_CACHE/docker-engine/root-KEY, KEY being the
# tarball's key (suite, packages, mirror, make-rootfs.sh); the daemon's images
# live in that root, so they stay between runs and go with it when the key
# changes.
#
# The daemon runs in network, mount and PID namespaces of its own (unshare),
# under tini (docker-init) as the namespace's init. In the mount namespace
# the root is bind-mounted onto itself, gets a proc of its own, and /sys and
# /dev rbind-mounted, and so do the host directories `docker run -v` may
# name, at their own paths: the repository, TMPDIR (or /tmp) and the
# colon-separated MEMPROFILE_DOCKER_SHARE. Then the root becomes the
# namespace's root with pivot_root, not chroot: `docker exec` enters a
# container through its mount namespace, whose root would otherwise be the
# machine's. The network namespace has only lo: dockerd's docker0 bridge
# and its NAT stay inside (--iptables=false --ip6tables=false). When the
# init exits (stop sends it SIGTERM, tini passes it on to dockerd), the
# kernel kills whatever is left in the PID namespace, containers included,
# and every mount goes with the mount namespace: nothing can stay behind.
# /etc/docker/daemon.json turns on the containerd image store, whose default
# builder makes multi-platform images and exports OCI.
set -o errexit -o nounset -o pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "${here}/.." && pwd)"
# shellcheck source=scripts/host.sh
source "${here}/host.sh"

usage() { sed -n '8,17s/^# \{0,1\}//p' "$0"; }
die() {
  echo "docker-engine: $*" >&2
  exit 1
}

state="$(memprofile_cache)/docker-engine"
suite=trixie
packages=docker.io,docker-cli,docker-buildx,containerd,runc,iptables,ca-certificates
timeout="${DOCKER_ENGINE_TIMEOUT:-90}"
store="${DOCKER_ENGINE_STORE:-containerd}"
[[ "${store}" == containerd || "${store}" == classic ]] ||
  die "DOCKER_ENGINE_STORE=${store}: containerd or classic"
socket="${state}/docker.sock"

# The exports, for env and for this script's own docker calls.
exports() {
  printf 'export DOCKER_HOST=%q\n' "unix://${socket}"
  printf 'export DOCKER_CONFIG=%q\n' "${state}/config"
  # shellcheck disable=SC2016 # PATH expands where the output is evaluated
  printf 'export PATH=%q"${PATH:+:${PATH}}"\n' "${state}/bin"
}
use_engine() { eval "$(exports)"; }

# in_namespace INODE: the host pids of the processes in PID namespace INODE.
in_namespace() {
  { stat -L -c '%n %i' /proc/[0-9]*/ns/pid 2>/dev/null || true; } |
    awk -v i="$1" '$2 == i { split($1, p, "/"); print p[3] }'
}

# mounts_under DIR: host mounts at or below DIR, deepest first.
mounts_under() {
  awk -v d="$1" '$2 == d || index($2, d "/") == 1 { print $2 }' /proc/self/mounts | sort -r
}

answers() { timeout 10 docker version >/dev/null 2>&1; }

# The current root: the tarball's key names it.
current_root() {
  local tarball
  tarball="$("${here}/make-rootfs.sh" "$(dpkg --print-architecture 2>/dev/null || echo amd64)" \
    --suite "${suite}" --include "${packages}")"
  root="${state}/root-$(cat "${tarball}.key")"
  if [[ "$(cat "${root}.extracted" 2>/dev/null)" != "$(cat "${tarball}.key")" ]]; then
    echo "docker-engine: extracting ${tarball##*/} into ${root}" >&2
    rm -rf "${root}" "${root}.partial"
    mkdir -p "${root}.partial"
    tar -C "${root}.partial" --numeric-owner -xpf "${tarball}"
    mv "${root}.partial" "${root}"
    cat "${tarball}.key" > "${root}.extracted"
  fi
}

# The daemon's configuration and the host side: the docker CLI and the
# buildx plugin from the root, a socket path that does not change with it.
configure() {
  mkdir -p "${root}/etc/docker" "${state}/bin" "${state}/config/cli-plugins"
  local snapshotter=true
  [[ "${store}" == containerd ]] || snapshotter=false
  printf '{"features":{"containerd-snapshotter":%s}}\n' "${snapshotter}" > "${root}/etc/docker/daemon.json"
  echo "${store}" > "${state}/engine.store"
  ln -sfn "${root}/usr/bin/docker" "${state}/bin/docker"
  ln -sfn "${root}/usr/libexec/docker/cli-plugins/docker-buildx" "${state}/config/cli-plugins/docker-buildx"
  ln -sfn "${root}/run/docker.sock" "${socket}"
  [[ -s "${state}/config/config.json" ]] || echo '{}' > "${state}/config/config.json"
  # What a killed daemon left in the root's /run (no process uses it now).
  rm -rf "${root}/run/docker" "${root}/run/docker.sock" "${root}/run/docker.pid" "${root}/run/containerd" \
    "${root}/run/runc"
}

# Roots made from other inputs: nothing runs in them (stop ran), drop them.
drop_old_roots() {
  local old
  for old in "${state}"/root-*; do
    [[ -d "${old}" && "${old}" != "${root}" ]] || continue
    [[ -z "$(mounts_under "${old}")" ]] || continue
    echo "docker-engine: removing ${old} (made from other inputs)" >&2
    rm -rf "${old}" "${old}.extracted"
  done
}

# The engine's init, when it runs: its host pid (recorded by start, checked
# against the PID namespace recorded with it, so a reused pid is not ours).
engine_pid() {
  local pid ns
  pid="$(cat "${state}/engine.pid" 2>/dev/null)" || return 1
  ns="$(cat "${state}/engine.pidns" 2>/dev/null)" || return 1
  [[ -n "${pid}" && "$(stat -L -c %i "/proc/${pid}/ns/pid" 2>/dev/null)" == "${ns}" ]] || return 1
  echo "${pid}"
}

start() {
  local unshare_pid init="" waited=0
  use_engine
  if init="$(engine_pid)" && answers && [[ "$(cat "${state}/engine.store" 2>/dev/null)" == "${store}" ]]; then
    echo "docker-engine: running (init ${init}, docker $(docker version --format '{{.Server.Version}}'))" >&2
    return 0
  fi
  init=""
  stop_all
  need_free_space "$(dirname "${state}")" 3000 "the docker engine" || exit 1
  current_root
  drop_old_roots
  configure
  local -a shares=("${repo}" "${TMPDIR:-/tmp}")
  local share extra
  if [[ -n "${MEMPROFILE_DOCKER_SHARE:-}" ]]; then
    IFS=: read -r -a extra <<<"${MEMPROFILE_DOCKER_SHARE}"
    for share in "${extra[@]}"; do [[ -z "${share}" ]] || shares+=("$(realpath -m "${share}")"); done
  fi
  rm -f "${state}/engine.pid" "${state}/engine.pidns"
  # setsid: the engine outlives this script and its terminal's signals;
  # --kill-child: killing unshare kills the init, and so the namespace. It
  # keeps nothing its caller had open (our lock, a test's lock, make's
  # jobserver): it outlives the caller.
  (
    for fd in /proc/self/fd/*; do
      fd="${fd##*/}"
      ((fd > 2)) || continue
      eval "exec ${fd}>&-" 2>/dev/null || true
    done
    exec setsid unshare --net --mount --pid --kill-child --propagation private -- \
      "${here}/${0##*/}" _daemon "${root}" "${state}/engine.pid" "${shares[@]}"
  ) < /dev/null > "${state}/dockerd.log" 2>&1 &
  unshare_pid=$!
  # Giving up: unshare dies, its --kill-child kills the init, and with it the
  # namespace (also when the init has not written its pid yet).
  # The init dies of unshare's death signal, asynchronously: wait until it
  # is gone (a cap, not a measure), or a start right after this one would
  # meet it.
  give_up() {
    tail -n 20 "${state}/dockerd.log" >&2
    kill -KILL "${unshare_pid}" 2>/dev/null || true
    wait "${unshare_pid}" 2>/dev/null || true
    local i
    for i in $(seq 300); do
      pgrep -f -- "_daemon ${root} ${state}/engine.pid" > /dev/null || break
      sleep 0.1
      : "${i}"
    done
    stop_all
    die "$@"
  }
  while ! answers; do
    kill -0 "${unshare_pid}" 2>/dev/null || give_up "dockerd exited before it answered (log: ${state}/dockerd.log)"
    if [[ -z "${init}" && -s "${state}/engine.pid" ]]; then
      init="$(cat "${state}/engine.pid")"
      stat -L -c %i "/proc/${init}/ns/pid" > "${state}/engine.pidns"
    fi
    ((waited < timeout * 2)) || give_up "dockerd did not answer within ${timeout} s (log: ${state}/dockerd.log)"
    sleep 0.5
    waited=$((waited + 1))
  done
  if [[ -z "${init}" ]]; then
    init="$(cat "${state}/engine.pid")"
    stat -L -c %i "/proc/${init}/ns/pid" > "${state}/engine.pidns"
  fi
  echo "docker-engine: started (init ${init}, docker $(docker version --format '{{.Server.Version}}')," \
    "$(docker buildx version | cut -d' ' -f1,2); ${DOCKER_HOST})" >&2
}

# In the new namespaces (run by start, as the PID namespace's init): the
# mounts, loopback, pivot_root into the root, then tini and dockerd.
daemon() {
  local root="$1" pidfile="$2" share self
  shift 2
  # /proc is still the machine's: self is the host pid, which stop needs.
  read -r self _ < /proc/self/stat
  echo "${self}" > "${pidfile}"
  mount --bind "${root}" "${root}"
  mount -t proc proc "${root}/proc"
  mount --rbind /sys "${root}/sys"
  mount --rbind /dev "${root}/dev"
  for share in "$@"; do
    [[ -d "${share}" ]] || continue
    mkdir -p "${root}${share}"
    mount --rbind "${share}" "${root}${share}"
  done
  ip link set lo up
  cd "${root}"
  pivot_root . mnt
  # From here on the root's own programs; the machine's root goes.
  exec env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    sh -c 'cd / && umount -l /mnt && exec /usr/bin/docker-init -- /usr/sbin/dockerd --iptables=false --ip6tables=false'
}

# Stop the engine: SIGTERM to its init (tini hands it to dockerd, which
# stops the containers and containerd); SIGKILL after 30 s. The kernel then
# kills what is left in its PID namespace. Then make sure nothing stays.
stop_all() {
  local init ns waited=0 dir mounts
  ns="$(cat "${state}/engine.pidns" 2>/dev/null || true)"
  if init="$(engine_pid)"; then
    # A namespace's init ignores signals it has no handler for: until it is
    # tini (still setting up), only SIGKILL stops it.
    if [[ "$(cat "/proc/${init}/comm" 2>/dev/null)" == docker-init ]]; then
      kill -TERM "${init}" 2>/dev/null || true
    else
      kill -KILL "${init}" 2>/dev/null || true
    fi
    while kill -0 "${init}" 2>/dev/null && ((waited < 300)); do sleep 0.1; waited=$((waited + 1)); done
    if kill -0 "${init}" 2>/dev/null; then
      echo "docker-engine: the daemon did not stop in 30 s; killing it" >&2
      kill -KILL "${init}" 2>/dev/null || true
    fi
    echo "docker-engine: stopped" >&2
  fi
  if [[ -n "${ns}" ]]; then
    # Killed by the kernel with their init, but one in uninterruptible I/O
    # on a busy machine goes only when that I/O ends: a cap of 60 s.
    waited=0
    while [[ -n "$(in_namespace "${ns}")" ]] && ((waited < 600)); do sleep 0.1; waited=$((waited + 1)); done
    [[ -z "$(in_namespace "${ns}")" ]] || die "processes of the engine did not stop: $(in_namespace "${ns}" | paste -sd' ')"
  fi
  # The mounts were the namespace's and went with it; any on the host (an
  # engine started otherwise) are undone here.
  for dir in "${state}"/root-*; do
    [[ -d "${dir}" ]] || continue
    mounts="$(mounts_under "${dir}")"
    [[ -z "${mounts}" ]] || xargs -r -d '\n' umount -l <<<"${mounts}"
  done
  rm -f "${state}/engine.pid" "${state}/engine.pidns"
}

mkdir -p "${state}"
case "${1:-}" in
  start | stop)
    # One start or stop at a time.
    exec 9>"${state}/lock"
    flock -w 300 9 || die "another start or stop holds ${state}/lock"
    if [[ "$1" == start ]]; then start; else stop_all; fi ;;
  env) exports ;;
  status) use_engine; engine_pid >/dev/null && answers ;;
  _daemon) shift; daemon "$@" ;;
  -h | --help) usage ;;
  *) usage >&2; exit 2 ;;
esac
