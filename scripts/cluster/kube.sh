# Shared by the cluster helpers in scripts/cluster/ (sourced): options common
# to all of them, kubectl with --dry-run, and the refusals.
# shellcheck shell=bash
# shellcheck disable=SC2034 # the exit codes and CONSUMED are read by the helpers
set -o errexit -o nounset -o pipefail

# Exit codes, the same in every helper.
readonly EXIT_FAILED=1   # the check or the collect failed (not attached, cut short, ...)
readonly EXIT_USAGE=2    # bad or missing options
readonly EXIT_REFUSED=3  # refused before touching anything: no such namespace/pod/container, not a profilable image

KUBECTL="${KUBECTL:-kubectl}"
NAMESPACE=""
CONTEXT=""
DRY_RUN=false
readonly LAUNCHER=/usr/bin/memprofile

die() {
  local code="$1"
  shift
  echo "memprofile: $*" >&2
  exit "${code}"
}
usage_error() { die "${EXIT_USAGE}" "$* (see --help)"; }
warn() { echo "memprofile: warning: $*" >&2; }
info() { echo "memprofile: $*" >&2; }

# print_help: the comment block at the top of the calling script.
print_help() { sed -n '2,/^[^#]/{/^#/!q; s/^# \{0,1\}//p}' "$0"; }

need_tools() {
  local t
  for t in "$@"; do
    command -v "${t}" >/dev/null || die "${EXIT_REFUSED}" "${t} is needed and not on PATH"
  done
}

# common_option ARGS...: takes the options every helper has from the front of
# ARGS and sets CONSUMED to how many arguments it used (0: not one of them).
CONSUMED=0
common_option() {
  CONSUMED=0
  case "$1" in
    -n | --namespace) [[ $# -ge 2 ]] || usage_error "$1 needs a value"; NAMESPACE="$2"; CONSUMED=2 ;;
    --context) [[ $# -ge 2 ]] || usage_error "$1 needs a value"; CONTEXT="$2"; CONSUMED=2 ;;
    --dry-run) DRY_RUN=true; CONSUMED=1 ;;
  esac
}

# pod_option ARGS...: the pod options of verify and collect (POD, -l SELECTOR,
# -c CONTAINER), like common_option.
POD="" SELECTOR="" CONTAINER=""
pod_option() {
  CONSUMED=0
  case "$1" in
    -l | --selector) [[ $# -ge 2 ]] || usage_error "$1 needs a value"; SELECTOR="$2"; CONSUMED=2 ;;
    -c | --container) [[ $# -ge 2 ]] || usage_error "$1 needs a value"; CONTAINER="$2"; CONSUMED=2 ;;
    -*) ;;
    *) [[ -z "${POD}" ]] || usage_error "one pod at a time"; POD="$1"; CONSUMED=1 ;;
  esac
}

kubectl_base() {
  local base=("${KUBECTL}")
  [[ -z "${CONTEXT}" ]] || base+=(--context "${CONTEXT}")
  printf '%s\n' "${base[@]}"
}

# kc ARGS...: a read; it runs even with --dry-run (the plan depends on it).
kc() {
  local -a base
  mapfile -t base < <(kubectl_base)
  "${base[@]}" "$@"
}

# kc_write ARGS...: a change; with --dry-run only printed, shell-quoted.
kc_write() {
  local -a base
  mapfile -t base < <(kubectl_base)
  if [[ "${DRY_RUN}" == true ]]; then
    printf '%q ' "${base[@]}" "$@"
    printf '\n'
  else
    "${base[@]}" "$@"
  fi
}

need_namespace() {
  [[ -n "${NAMESPACE}" ]] || usage_error "give the namespace with -n/--namespace"
  kc get namespace "${NAMESPACE}" -o name >/dev/null 2>&1 ||
    die "${EXIT_REFUSED}" "namespace ${NAMESPACE} does not exist (or this kubeconfig cannot see it)"
}

# need_object KIND NAME: prints the object as JSON.
need_object() {
  local json
  json="$(kc get "$1" "$2" -n "${NAMESPACE}" -o json 2>/dev/null)" ||
    die "${EXIT_REFUSED}" "$1 ${2} does not exist in namespace ${NAMESPACE}"
  printf '%s\n' "${json}"
}

# pick_pod NAME|"" SELECTOR|"": the pod to use; with a selector, the first running one.
pick_pod() {
  local pod="$1" selector="$2"
  if [[ -n "${pod}" ]]; then
    kc get pod "${pod}" -n "${NAMESPACE}" -o name >/dev/null 2>&1 ||
      die "${EXIT_REFUSED}" "pod ${pod} does not exist in namespace ${NAMESPACE}"
    echo "${pod}"
    return
  fi
  [[ -n "${selector}" ]] || usage_error "name the pod, or select one with -l/--selector"
  pod="$(kc get pods -n "${NAMESPACE}" -l "${selector}" --field-selector=status.phase=Running \
    -o jsonpath='{.items[0].metadata.name}' 2>/dev/null || true)"
  [[ -n "${pod}" ]] || die "${EXIT_REFUSED}" "no running pod matches -l ${selector} in namespace ${NAMESPACE}"
  echo "${pod}"
}

# pick_container POD NAME|"": the container to use (the only one when not named).
pick_container() {
  local pod="$1" want="$2" names
  names="$(kc get pod "${pod}" -n "${NAMESPACE}" -o jsonpath='{.spec.containers[*].name}')"
  if [[ -z "${want}" ]]; then
    [[ "${names}" != *" "* ]] || die "${EXIT_REFUSED}" "pod ${pod} has several containers (${names}): name one with -c"
    echo "${names}"
  elif [[ " ${names} " == *" ${want} "* ]]; then
    echo "${want}"
  else
    die "${EXIT_REFUSED}" "pod ${pod} has no container ${want} (it has: ${names})"
  fi
}

# need_launcher POD CONTAINER: the image must carry the static memprofile.
need_launcher() {
  kc exec "$1" -n "${NAMESPACE}" -c "$2" -- "${LAUNCHER}" --version >/dev/null 2>&1 ||
    die "${EXIT_REFUSED}" "container $2 of pod $1 has no ${LAUNCHER}: not a profilable image (build one with make image-memprofile)"
}

# need_profilable_image IMAGE: the io.memprofile.backend label that images/
# puts on every profilable image, read from the registry with skopeo.
need_profilable_image() {
  local image="$1" labels backend
  command -v skopeo >/dev/null ||
    die "${EXIT_REFUSED}" "cannot check ${image} without skopeo: install it, or pass --no-image-check if you are sure"
  labels="$(skopeo inspect --no-tags "docker://${image}" 2>/dev/null)" ||
    die "${EXIT_REFUSED}" "cannot inspect ${image} in its registry (skopeo inspect failed; log in, or --no-image-check)"
  backend="$(jq -r '.Labels["io.memprofile.backend"] // empty' <<<"${labels}")"
  [[ -n "${backend}" ]] ||
    die "${EXIT_REFUSED}" "${image} is not a profilable image: no io.memprofile.backend label (build it with make image-memprofile)"
  echo "${backend}"
}
