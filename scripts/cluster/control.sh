#!/usr/bin/env bash
# Drives the profiler in a running pod without restarting it: runs
# `memprofile start|stop|snapshot|status` in the container (the static
# binary: an LD_PRELOAD in the pod env cannot reach it), which asks the
# control library in the profiled process (docs/launcher.md). start.sh,
# stop.sh, snapshot.sh and status.sh are this script under the action's name.
#
# usage: scripts/cluster/start.sh    -n NAMESPACE (POD | -l SELECTOR) [-c CONTAINER] [options]
#        scripts/cluster/snapshot.sh -n NAMESPACE (POD | -l SELECTOR) [-c CONTAINER] [options]
#        scripts/cluster/stop.sh     ...
#        scripts/cluster/status.sh   ...
#        scripts/cluster/control.sh ACTION ...
#
#   --pid      the profiled process (default 1: the container's entrypoint,
#              which memprofile exec has become)
#   --json     print the process's answer as JSON
#   --context CTX, --dry-run as for the other helpers
# start turns recording on in a pod started dormant (make image-memprofile
# DORMANT=true), stop turns it off, snapshot writes a heap profile now
# (jemalloc) and prints its path in the pod, status says whether it records,
# its snapshots and the disk they use. Get the snapshots out with collect.sh
# and read them with open.sh.
# Exit codes: 0 done, 1 the process could not do it (the reason is printed),
# 2 usage, 3 refused (no such namespace/pod/container, no memprofile in the
# image, no control socket in the process).
set -o errexit -o nounset -o pipefail
# shellcheck source=scripts/cluster/kube.sh
source "$(dirname "$0")/kube.sh"

action="$(basename "$0" .sh)"
if [[ "${action}" == control ]]; then
  action="${1:-}"
  (($#)) && shift
fi
case "${action}" in
  start | stop | snapshot | status) ;;
  -h | --help) print_help; exit 0 ;;
  *) usage_error "the action is start, stop, snapshot or status, not '${action}'" ;;
esac
pid=1 json=false
while (($#)); do
  common_option "$@"
  ((CONSUMED)) || pod_option "$@"
  if ((CONSUMED)); then shift "${CONSUMED}"; continue; fi
  case "$1" in
    -h | --help) print_help; exit 0 ;;
    --pid) pid="${2:?--pid needs a value}"; shift 2 ;;
    --json) json=true; shift ;;
    *) usage_error "unknown option $1" ;;
  esac
done
[[ "${pid}" =~ ^[0-9]+$ ]] || usage_error "--pid must be a number"
need_tools "${KUBECTL}"
need_namespace
pod="$(pick_pod "${POD}" "${SELECTOR}")"
container="$(pick_container "${pod}" "${CONTAINER}")"
cmd=(exec "${pod}" -n "${NAMESPACE}" -c "${container}" -- "${LAUNCHER}" "${action}")
[[ "${json}" == false ]] || cmd+=(--json)
cmd+=("${pid}")
# Without --pid the launcher may answer for the only profiled process when
# PID 1 is a dispatcher: leave the PID out then.
[[ "${pid}" != 1 ]] || unset 'cmd[-1]'
if [[ "${DRY_RUN}" == true ]]; then
  kc_write "${cmd[@]}"
  exit 0
fi
need_launcher "${pod}" "${container}"
rc=0
kc "${cmd[@]}" || rc=$?
case "${rc}" in
  0) [[ "${action}" != snapshot || "${json}" == true ]] ||
       info "in ${NAMESPACE}/${pod}/${container}; get it out with scripts/cluster/collect.sh -n ${NAMESPACE} ${pod}" ;;
  1) exit "${EXIT_FAILED}" ;;
  *) die "${EXIT_REFUSED}" "memprofile ${action} failed in ${NAMESPACE}/${pod}/${container} (exit ${rc}): is the pod running a memprofile image (make image-memprofile), started by memprofile exec?" ;;
esac
