# Shell helpers shared by scripts, tests and benchmarks (sourced).
# shellcheck shell=bash

# memprofile_cache: the toolkit's cache directory (root filesystems, sources,
# built libraries, container stores): MEMPROFILE_CACHE, else the XDG cache.
memprofile_cache() { echo "${MEMPROFILE_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/memprofile}"; }

# cache_key WORD... : 16 hex digits naming a cached thing by everything that
# changes its content. A WORD that starts with @ stands for the content of
# the file it names (a script's version is its text); any other WORD counts
# as itself. A cache entry is reused only when its stored key is this one.
cache_key() {
  local word
  for word in "$@"; do
    if [[ "${word}" == @* ]]; then
      printf 'file %s\n' "$(basename "${word#@}")"
      cat "${word#@}"
    else
      printf 'word %s\n' "${word}"
    fi
  done | sha256sum | cut -c1-16
}

# debian_mirror: the Debian mirror mmdebstrap is given: DEBIAN_MIRROR, else
# this machine's own apt source (the security suite is not a mirror).
# Passing it explicitly keeps mmdebstrap from adding the security and updates
# suites, whose release files may be expired on a snapshot mirror.
debian_mirror() {
  local mirror="${DEBIAN_MIRROR:-}"
  if [[ -z "${mirror}" ]]; then
    mirror="$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
  fi
  echo "${mirror:-http://deb.debian.org/debian}"
}

# use_container_storage DIR: point buildah, podman and skopeo at a container
# store of our own under DIR (never the user's), via CONTAINERS_STORAGE_CONF.
# The driver is overlay when this kernel lets us mount one on DIR's
# filesystem (root, native overlayfs): image layers are then shared, not
# copied. vfs works anywhere but copies a base's whole tree into every image
# and container built on it, so a test suite's store grows by tens of GB.
# MEMPROFILE_STORAGE_DRIVER=vfs|overlay forces one. Each driver gets its own
# graph root: containers/storage refuses a root made by another driver.
use_container_storage() {
  local dir="$1" driver="${MEMPROFILE_STORAGE_DRIVER:-}"
  mkdir -p "${dir}"
  if [[ -z "${driver}" ]]; then
    driver=vfs
    if overlay_mountable "${dir}"; then driver=overlay; fi
  fi
  case "${driver}" in
    vfs | overlay) ;;
    *) echo "MEMPROFILE_STORAGE_DRIVER=${driver}: expected vfs or overlay" >&2; return 2 ;;
  esac
  cat > "${dir}/storage.conf" <<CONF
[storage]
driver = "${driver}"
graphroot = "${dir}/graph-${driver}"
runroot = "${dir}/run-${driver}"
CONF
  export CONTAINERS_STORAGE_CONF="${dir}/storage.conf"
}

# overlay_mountable DIR: can we mount an overlay whose upper layer is on DIR's
# filesystem? Only root can, and not on every filesystem (overlay on overlay,
# some network filesystems).
overlay_mountable() {
  local probe rc=1
  ((EUID == 0)) || return 1
  probe="$(mktemp -d "$1/.overlay-probe.XXXXXX")" || return 1
  mkdir "${probe}/lower" "${probe}/upper" "${probe}/work" "${probe}/merged"
  if mount -t overlay overlay \
    -o "lowerdir=${probe}/lower,upperdir=${probe}/upper,workdir=${probe}/work" \
    "${probe}/merged" 2>/dev/null; then
    umount "${probe}/merged" && rc=0
  fi
  rm -rf "${probe}"
  return "${rc}"
}

# need_free_space DIR MB WHAT: fail with one clear line when DIR's
# filesystem has less than MB free, instead of a build dying half-way with
# ENOSPC in some layer. WHAT names who needs the space.
need_free_space() {
  local dir="$1" need_mb="$2" what="$3" free_mb
  free_mb="$(df -Pm "${dir}" | awk 'NR == 2 { print $4 }')"
  if ((free_mb < need_mb)); then
    echo "memprofile: ${what} needs about ${need_mb} MB free under ${dir}; its filesystem has ${free_mb} MB" \
      "(make clean-cache frees the container stores; MEMPROFILE_CACHE moves them)" >&2
    return 1
  fi
}

# storage_driver: the driver of the store CONTAINERS_STORAGE_CONF names.
storage_driver() { sed -n 's/^driver = "\(.*\)"$/\1/p' "${CONTAINERS_STORAGE_CONF}"; }

# need_store_space DIR OVERLAY_MB VFS_MB WHAT: need_free_space for building
# images in the current store, whose driver decides how much a build costs.
need_store_space() {
  local driver need_mb
  driver="$(storage_driver)"
  need_mb="$2"
  [[ "${driver}" == overlay ]] || need_mb="$3"
  need_free_space "$1" "${need_mb}" "$4 (${driver} store)"
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

# engine_build CMD...: runs a buildah or podman build (its stderr shown as it
# comes), and runs it again, at most 3 times in all, when it failed only
# because the engine could not re-exec itself for a RUN step: it copies its
# own binary into a memfd and seals it, and the kernel refuses the seal
# (EBUSY) while pages of the copy are still briefly pinned, which a busy
# machine makes likelier. Any other failure is returned at once.
engine_build() {
  local log try rc=0
  log="$(mktemp)"
  for try in 1 2 3; do
    # stdout as it is; stderr shown and kept in the log.
    { "$@" 2>&1 >&3 3>&- | tee "${log}" >&2 3>&-; } 3>&1 && rc=0 || rc="${PIPESTATUS[0]}"
    ((rc != 0)) || break
    grep -q "sealing memfd copy: Device or resource busy" "${log}" || break
    ((try == 3)) || echo "memprofile: ${1} could not seal the copy of itself it re-executes (EBUSY, a busy machine): building again (${try} of 3 tries failed)" >&2
  done
  rm -f "${log}"
  return "${rc}"
}
