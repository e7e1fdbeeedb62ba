#!/usr/bin/env bash
# Points a controller at a profilable image: sets the environment variable
# that names the image its workloads run (numaflow's NUMAFLOW_IMAGE) on the
# controller Deployment, restarts it and waits for the rollout.
#
# usage: scripts/cluster/switch-image.sh -n NAMESPACE --deployment NAME --image IMAGE
#          [--env NUMAFLOW_IMAGE] [-c CONTAINER] [--no-image-check] [--context CTX] [--dry-run]
#
#   --deployment   the controller Deployment (numaflow: numaflow-controller)
#   --env          the variable holding the image (default NUMAFLOW_IMAGE); it
#                  must already exist on the container
#   --image        a profilable image (make image-memprofile): checked for the
#                  io.memprofile.backend label with skopeo unless --no-image-check
#   --dry-run      print the kubectl commands that change anything, run none
# Exit codes: 0 done, 1 the rollout failed, 2 usage, 3 refused (no such
# namespace/deployment/container/variable, not a profilable image).
set -o errexit -o nounset -o pipefail
# shellcheck source=scripts/cluster/kube.sh
source "$(dirname "$0")/kube.sh"

deployment="" image="" env_name=NUMAFLOW_IMAGE container="" image_check=true
while (($#)); do
  common_option "$@"
  if ((CONSUMED)); then shift "${CONSUMED}"; continue; fi
  case "$1" in
    -h | --help) print_help; exit 0 ;;
    --deployment) deployment="${2:?--deployment needs a value}"; shift 2 ;;
    --image) image="${2:?--image needs a value}"; shift 2 ;;
    --env) env_name="${2:?--env needs a value}"; shift 2 ;;
    -c | --container) container="${2:?--container needs a value}"; shift 2 ;;
    --no-image-check) image_check=false; shift ;;
    *) usage_error "unknown argument $1" ;;
  esac
done
[[ -n "${deployment}" ]] || usage_error "give the controller with --deployment"
[[ -n "${image}" ]] || usage_error "give the profilable image with --image"
need_tools "${KUBECTL}" jq
need_namespace
object="$(need_object deployment "${deployment}")"
if [[ -z "${container}" ]]; then
  container="$(jq -r '.spec.template.spec.containers | if length == 1 then .[0].name else empty end' <<<"${object}")"
  [[ -n "${container}" ]] || die "${EXIT_REFUSED}" "deployment ${deployment} has several containers: name one with -c"
fi
current="$(jq -r --arg c "${container}" --arg e "${env_name}" \
  '.spec.template.spec.containers[] | select(.name == $c) | (.env // [])[] | select(.name == $e) | .value // ""' <<<"${object}")"
jq -e --arg c "${container}" '.spec.template.spec.containers[] | select(.name == $c)' <<<"${object}" >/dev/null ||
  die "${EXIT_REFUSED}" "deployment ${deployment} has no container ${container}"
jq -e --arg c "${container}" --arg e "${env_name}" \
  '.spec.template.spec.containers[] | select(.name == $c) | (.env // [])[] | select(.name == $e)' <<<"${object}" >/dev/null ||
  die "${EXIT_REFUSED}" "container ${container} of deployment ${deployment} has no ${env_name}: is it the controller? (--env names the variable)"
if [[ "${image_check}" == true ]]; then
  backend="$(need_profilable_image "${image}")"
  info "${image} is profilable (${backend})"
else
  warn "not checking that ${image} is profilable (--no-image-check)"
fi
info "${deployment}: ${env_name} ${current:-<empty>} -> ${image}"
kc_write set env "deployment/${deployment}" -n "${NAMESPACE}" -c "${container}" "${env_name}=${image}"
kc_write rollout restart "deployment/${deployment}" -n "${NAMESPACE}"
if [[ "${DRY_RUN}" == true ]]; then
  kc_write rollout status "deployment/${deployment}" -n "${NAMESPACE}" --timeout=5m
else
  kc rollout status "deployment/${deployment}" -n "${NAMESPACE}" --timeout=5m ||
    die "${EXIT_FAILED}" "the rollout of ${deployment} did not finish: kubectl -n ${NAMESPACE} rollout undo deployment/${deployment} reverts it"
  info "done: new workloads of ${deployment} run ${image}; restart the pods you want profiled"
fi
