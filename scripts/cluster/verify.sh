#!/usr/bin/env bash
# Is the profiler attached in a running pod? Runs `memprofile attached` in the
# container (the static binary: an LD_PRELOAD in the pod env cannot reach it)
# and says so in words: the library mapped into the process, the executable
# dynamic, the profile files and whether they grow, and whether it records
# (a process started dormant is attached and records nothing until start.sh).
#
# usage: scripts/cluster/verify.sh -n NAMESPACE (POD | -l SELECTOR) [-c CONTAINER]
#          [--pid 1] [--window SECONDS] [--json] [--context CTX] [--dry-run]
#
#   --pid      the process to inspect (default 1: the container's entrypoint,
#              which memprofile exec has become)
#   --window   seconds to watch the profile grow (default 5; bytehound
#              flushes about every 30 s, so a quiet window is normal for it)
#   --json     print memprofile's JSON verdict instead
# Exit codes: 0 attached, 1 not attached, 2 usage, 3 refused (no such
# namespace/pod/container, no memprofile in the image).
set -o errexit -o nounset -o pipefail
# shellcheck source=scripts/cluster/kube.sh
source "$(dirname "$0")/kube.sh"

pid=1 window=5 json=false
while (($#)); do
  common_option "$@"
  ((CONSUMED)) || pod_option "$@"
  if ((CONSUMED)); then shift "${CONSUMED}"; continue; fi
  case "$1" in
    -h | --help) print_help; exit 0 ;;
    --pid) pid="${2:?--pid needs a value}"; shift 2 ;;
    --window) window="${2:?--window needs a value}"; shift 2 ;;
    --json) json=true; shift ;;
    *) usage_error "unknown option $1" ;;
  esac
done
[[ "${pid}" =~ ^[0-9]+$ ]] || usage_error "--pid must be a number"
[[ "${window}" =~ ^[0-9]+$ ]] || usage_error "--window must be a whole number of seconds"
need_tools "${KUBECTL}" jq
need_namespace
pod="$(pick_pod "${POD}" "${SELECTOR}")"
container="$(pick_container "${pod}" "${CONTAINER}")"
cmd=(exec "${pod}" -n "${NAMESPACE}" -c "${container}" -- "${LAUNCHER}" attached --json --window "${window}" "${pid}")
if [[ "${DRY_RUN}" == true ]]; then
  kc_write "${cmd[@]}"
  exit 0
fi
need_launcher "${pod}" "${container}"
rc=0
verdict="$(kc "${cmd[@]}")" || rc=$?
jq -e . <<<"${verdict}" >/dev/null 2>&1 || die "${EXIT_FAILED}" "memprofile attached gave no verdict (exit ${rc}): ${verdict}"
if [[ "${json}" == true ]]; then
  printf '%s\n' "${verdict}"
else
  jq -r --arg where "${NAMESPACE}/${pod}/${container}" '
    (if .attached then "ATTACHED" else "NOT ATTACHED" end) + ": pid \(.pid) in \($where) runs \(.exe) (\(.linkage))",
    (if .mapped then "  \(.backend) library \(.library) is mapped into it"
     else "  no \(.backend // "profiler") library is mapped into it" end),
    (if (.profiles | length) == 0 then "  no profile files yet"
     else (.profiles[] | "  profile \(.path): \(.size) bytes\(if .grew > 0 then ", growing (+\(.grew))" else "" end)") end),
    (if .recording == true then "  recording: on"
     elif .recording == false then "  recording: off\(if (.stopped_reason // "") != "" then " (stopped: \(.stopped_reason))" else " (dormant or stopped: scripts/cluster/start.sh turns it on)" end)"
     else empty end),
    (if .attached and (.growing | not) and .backend == "bytehound" then "  (bytehound flushes about every 30 s: a quiet window is normal)" else empty end)
  ' <<<"${verdict}"
fi
[[ "$(jq -r .attached <<<"${verdict}")" == true ]] || exit "${EXIT_FAILED}"
