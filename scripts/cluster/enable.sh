#!/usr/bin/env bash
# Enables profiling on a workload that runs a profilable image: its container
# starts through `memprofile exec` (the image's ENTRYPOINT already is; a
# `command:` in the spec is wrapped), the profile goes to a dedicated emptyDir
# with a size limit (never the app's data volume), and LD_PRELOAD is removed
# from the pod env, where it would reach every `kubectl exec` and the tar of
# `kubectl cp`. The object is replaced with its resourceVersion, so a
# concurrent change makes this fail instead of being overwritten.
#
# usage: scripts/cluster/enable.sh -n NAMESPACE
#          (--deployment NAME | --statefulset NAME | --pipeline NAME --vertex VERTEX)
#          [-c CONTAINER] [--image IMAGE] [--backend B] [--target PATH]
#          [--output-dir /var/memprofile] [--size-limit 2Gi] [--no-image-check]
#          [--serve PORT --serve-token-secret SECRET] [--context CTX] [--dry-run]
#
#   -c             the container (default: the only one). In a numaflow Pipeline
#                  vertex: udf, udsource, udsink (their user containers) or numa
#                  (the vertex's own container, through containerTemplate; its
#                  image comes from the controller: see switch-image.sh)
#   --image        also switch the container to this profilable image
#   --backend, --target
#                  the launcher's backend and real process (MEMPROFILE_BACKEND,
#                  MEMPROFILE_TARGET in the container env); default: the image's
#   --size-limit   of the emptyDir the profile goes to (default 2Gi)
#   --serve        also serve the tree's heap (pprof) and memory (Prometheus
#                  metrics) on PORT of the pod (exec --serve, docs/serve.md): a
#                  container port named memprofile, and the annotations that
#                  Grafana Alloy's pyroscope discovery (profiles.grafana.com/
#                  memory.*) and Prometheus' (prometheus.io/*) read
#   --serve-token-secret
#                  the Secret whose key "token" is the bearer token serve
#                  requires (mounted read-only; needed with --serve: the pod's
#                  address is not loopback)
#   --dry-run      print the new object and the kubectl commands, change nothing
# Exit codes: 0 done, 1 kubectl failed, 2 usage, 3 refused (no such
# namespace/object/container, not a profilable image).
set -o errexit -o nounset -o pipefail
# shellcheck source=scripts/cluster/kube.sh
source "$(dirname "$0")/kube.sh"

kind="" name="" vertex="" container="" image="" backend="" target=""
output_dir=/var/memprofile size_limit=2Gi image_check=true serve_port="" token_secret=""
while (($#)); do
  common_option "$@"
  if ((CONSUMED)); then shift "${CONSUMED}"; continue; fi
  case "$1" in
    -h | --help) print_help; exit 0 ;;
    --deployment | --statefulset | --pipeline)
      [[ -z "${kind}" ]] || usage_error "name one workload"
      kind="${1#--}"; name="${2:?$1 needs a value}"; shift 2 ;;
    --vertex) vertex="${2:?--vertex needs a value}"; shift 2 ;;
    -c | --container) container="${2:?--container needs a value}"; shift 2 ;;
    --image) image="${2:?--image needs a value}"; shift 2 ;;
    --backend) backend="${2:?--backend needs a value}"; shift 2 ;;
    --target) target="${2:?--target needs a value}"; shift 2 ;;
    --output-dir) output_dir="${2:?--output-dir needs a value}"; shift 2 ;;
    --size-limit) size_limit="${2:?--size-limit needs a value}"; shift 2 ;;
    --no-image-check) image_check=false; shift ;;
    --serve) serve_port="${2:?--serve needs a port}"; shift 2 ;;
    --serve-token-secret) token_secret="${2:?--serve-token-secret needs a Secret name}"; shift 2 ;;
    *) usage_error "unknown argument $1" ;;
  esac
done
[[ -n "${kind}" ]] || usage_error "name the workload: --deployment, --statefulset or --pipeline"
[[ "${kind}" != pipeline || -n "${vertex}" ]] || usage_error "--pipeline needs --vertex"
[[ "${kind}" == pipeline || -z "${vertex}" ]] || usage_error "--vertex goes with --pipeline"
# The preload backends, one a recipe (preload/NAME/recipe.sh; memray's is
# an image of its own, as the Makefile's BACKENDS): a new backend is
# accepted here without a word of this script changing.
if [[ -n "${backend}" ]]; then
  known=()
  for recipe in "$(dirname "$0")"/../../preload/*/recipe.sh; do
    recipe="$(basename "$(dirname "${recipe}")")"
    [[ "${recipe}" == memray || "${recipe}" == "*" ]] || known+=("${recipe}")
  done
  ((${#known[@]})) || usage_error "--backend: no preload recipes beside this script (run it from memprofile's checkout)"
  listed=" ${known[*]} "
  if [[ "${listed}" != *" ${backend} "* ]]; then
    phrase=""
    for recipe in "${known[@]:0:${#known[@]}-1}"; do phrase+="${recipe}, "; done
    phrase="${phrase%, }${phrase:+ or }${known[-1]}"
    usage_error "--backend must be ${phrase}"
  fi
fi
[[ "${output_dir}" == /* ]] || usage_error "--output-dir must be an absolute path"
if [[ -n "${serve_port}" ]]; then
  if [[ ! "${serve_port}" =~ ^[0-9]{1,5}$ ]] || ((10#${serve_port} < 1 || 10#${serve_port} > 65535)); then
    usage_error "--serve ${serve_port} is not a port (1 to 65535)"
  fi
  [[ -n "${token_secret}" ]] ||
    usage_error "--serve needs --serve-token-secret: serve listens on the pod's address, which is not loopback, and profiles name the code and its memory"
  [[ "${kind}" != pipeline ]] || usage_error "--serve is for a Deployment or a StatefulSet"
  serve_port="$((10#${serve_port}))"
fi
[[ -n "${serve_port}" || -z "${token_secret}" ]] || usage_error "--serve-token-secret goes with --serve"
[[ "${size_limit}" =~ ^[0-9]+(\.[0-9]+)?([KMGTPE]i?|[kmgtpe])?$ ]] || usage_error "--size-limit ${size_limit} is not a Kubernetes quantity"
need_tools "${KUBECTL}" jq
need_namespace
object="$(need_object "${kind}" "${name}")"

# Where the container lives in the object, as a jq path, and its current image.
if [[ "${kind}" == pipeline ]]; then
  jq -e --arg v "${vertex}" '.spec.vertices[]? | select(.name == $v)' <<<"${object}" >/dev/null ||
    die "${EXIT_REFUSED}" "pipeline ${name} has no vertex ${vertex}"
  if [[ -z "${container}" ]]; then
    container="$(jq -r --arg v "${vertex}" '.spec.vertices[] | select(.name == $v) |
      if .udf.container then "udf" elif .source.udsource.container then "udsource"
      elif .sink.udsink.container then "udsink" else "numa" end' <<<"${object}")"
  fi
  case "${container}" in
    udf) where='.udf.container' ;;
    udsource) where='.source.udsource.container' ;;
    udsink) where='.sink.udsink.container' ;;
    numa) where='' ;;
    *) die "${EXIT_REFUSED}" "a vertex's containers are udf, udsource, udsink or numa, not ${container}" ;;
  esac
  if [[ -n "${where}" ]]; then
    jq -e --arg v "${vertex}" ".spec.vertices[] | select(.name == \$v) | ${where} | objects" <<<"${object}" >/dev/null ||
      die "${EXIT_REFUSED}" "vertex ${vertex} of pipeline ${name} has no ${container} container"
    current_image="$(jq -r --arg v "${vertex}" ".spec.vertices[] | select(.name == \$v) | ${where}.image // empty" <<<"${object}")"
  else
    [[ -z "${image}" ]] || usage_error "the numa container's image is the controller's: use switch-image.sh, not --image"
    current_image=""
    warn "numaflow's containerTemplate has no volumeMounts: the numa container's profile goes to ${output_dir} on its own filesystem (bounded by its ephemeral storage), not a dedicated volume"
  fi
else
  if [[ -z "${container}" ]]; then
    container="$(jq -r '.spec.template.spec.containers | if length == 1 then .[0].name else empty end' <<<"${object}")"
    [[ -n "${container}" ]] || die "${EXIT_REFUSED}" "${kind} ${name} has several containers: name one with -c"
  fi
  jq -e --arg c "${container}" '.spec.template.spec.containers[] | select(.name == $c)' <<<"${object}" >/dev/null ||
    die "${EXIT_REFUSED}" "${kind} ${name} has no container ${container}"
  current_image="$(jq -r --arg c "${container}" '.spec.template.spec.containers[] | select(.name == $c) | .image' <<<"${object}")"
fi

if [[ -n "${serve_port}" ]]; then
  # serve binds before the program starts: a port the program declares
  # under another name would be taken from it.
  jq -e --arg c "${container}" --argjson p "${serve_port}" '.spec.template.spec.containers[] | select(.name == $c)
    | (.ports // []) | any(.containerPort == $p and .name != "memprofile")' <<<"${object}" >/dev/null &&
    die "${EXIT_REFUSED}" "container ${container} already declares port ${serve_port}: give --serve another"
  # The app's own prometheus.io annotations stay: its metrics go on being
  # scraped; serve's /metrics then needs a job of its own (docs/serve.md).
  if jq -e '.spec.template.metadata.annotations // {} | has("prometheus.io/scrape") or has("prometheus.io/port")' \
    <<<"${object}" >/dev/null; then
    warn "the pod template already has prometheus.io annotations (the app's metrics): left as they are; scrape serve's /metrics on port ${serve_port} with a job of its own (docs/serve.md)"
  fi
fi

check_image="${image:-${current_image}}"
if [[ -n "${check_image}" && "${image_check}" == true ]]; then
  image_backend="$(need_profilable_image "${check_image}")"
  info "${check_image} is profilable (${image_backend})"
elif [[ -n "${check_image}" ]]; then
  warn "not checking that ${check_image} is profilable (--no-image-check)"
fi

# The edit, in jq: the same for a pod template's container and a vertex's.
# shellcheck disable=SC2016 # jq's own variables
edit='
  def env_set($k; $v): .env = ((.env // []) | map(select(.name != $k)) + [{name: $k, value: $v}]);
  def env_set_if($k; $v): if $v == "" then . else env_set($k; $v) end;
  def no_preload: .env = ((.env // []) | map(select(.name != "LD_PRELOAD")));
  def launcher_env: no_preload | env_set("MEMPROFILE_OUTPUT_DIR"; $dir)
    | env_set_if("MEMPROFILE_BACKEND"; $backend) | env_set_if("MEMPROFILE_TARGET"; $target);
  def wrap: if (.command // null) == null or (.command[0] // "") == $launcher then .
            else .command = [$launcher, "exec", "--"] + .command end;
  def mount: .volumeMounts = ((.volumeMounts // []) | map(select(.name != "memprofile-output" and .mountPath != $dir))
    + [{name: "memprofile-output", mountPath: $dir}]);
  def volume: .volumes = ((.volumes // []) | map(select(.name != "memprofile-output"))
    + [{name: "memprofile-output", emptyDir: {sizeLimit: $size}}]);
  def image: if $image == "" then . else .image = $image end;
  def serve: if $port == "" then . else
      env_set("MEMPROFILE_SERVE"; "0.0.0.0:" + $port)
      | env_set("MEMPROFILE_SERVE_TOKEN_FILE"; "/var/run/memprofile-serve/token")
      | .ports = ((.ports // []) | map(select(.name != "memprofile")) + [{name: "memprofile", containerPort: ($port | tonumber), protocol: "TCP"}])
      | .volumeMounts = ((.volumeMounts // []) | map(select(.name != "memprofile-serve-token"))
        + [{name: "memprofile-serve-token", mountPath: "/var/run/memprofile-serve", readOnly: true}])
    end;
  def serve_volume: if $port == "" then . else
      .volumes = ((.volumes // []) | map(select(.name != "memprofile-serve-token"))
        + [{name: "memprofile-serve-token", secret: {secretName: $secret, defaultMode: 292}}])
    end;
  # Where the scrapers look: Alloy'"'"'s pyroscope.scrape discovery and
  # Prometheus'"'"' kubernetes_sd relabelling conventions.
  def serve_annotations: if $port == "" then . else
      .["profiles.grafana.com/memory.scrape"] = "true" | .["profiles.grafana.com/memory.port_name"] = "memprofile"
      | .["profiles.grafana.com/memory.path"] = "/debug/pprof/heap"
      | if has("prometheus.io/scrape") or has("prometheus.io/port") or has("prometheus.io/path") then .
        else .["prometheus.io/scrape"] = "true" | .["prometheus.io/port"] = $port | .["prometheus.io/path"] = "/metrics" end
    end;
  def container_edit: wrap | launcher_env | mount | image | serve;
'
if [[ "${kind}" == pipeline ]]; then
  if [[ "${container}" == numa ]]; then
    # shellcheck disable=SC2016 # jq's own variables
    edit+='.spec.vertices |= map(if .name == $vertex then .containerTemplate = ((.containerTemplate // {}) | launcher_env) else . end)'
  else
    edit+=".spec.vertices |= map(if .name == \$vertex then (volume | ${where} |= container_edit) else . end)"
  fi
else
  # shellcheck disable=SC2016 # jq's own variables
  edit+='.spec.template.spec |= (volume | serve_volume | .containers |= map(if .name == $container then container_edit else . end))
    | .spec.template.metadata.annotations["memprofile.io/profiling"] = "enabled"
    | .spec.template.metadata.annotations |= serve_annotations'
fi
had_preload="$(jq -r '[.. | objects | select(.name? == "LD_PRELOAD" and has("value"))] | length' <<<"${object}")"
((had_preload == 0)) ||
  warn "removing LD_PRELOAD from the pod env: memprofile exec injects it into the app only (it would crash kubectl cp's tar)"
new="$(jq --arg dir "${output_dir}" --arg size "${size_limit}" --arg backend "${backend}" --arg target "${target}" \
  --arg launcher "${LAUNCHER}" --arg image "${image}" --arg container "${container}" --arg vertex "${vertex}" \
  --arg port "${serve_port}" --arg secret "${token_secret}" "${edit}" <<<"${object}")"

if [[ "${DRY_RUN}" == true ]]; then
  echo "# ${kind}/${name} after the change (JSON, which kubectl reads as YAML):"
  jq 'del(.status, .metadata.managedFields)' <<<"${new}"
fi
if [[ "${DRY_RUN}" == true ]]; then
  kc_write replace -f -
else
  jq 'del(.status)' <<<"${new}" | kc replace -f - || die "${EXIT_FAILED}" "kubectl replace failed (changed meanwhile? run again)"
fi
case "${kind}" in
  deployment | statefulset)
    if [[ "${DRY_RUN}" == true ]]; then
      kc_write rollout status "${kind}/${name}" -n "${NAMESPACE}" --timeout=5m
    else
      kc rollout status "${kind}/${name}" -n "${NAMESPACE}" --timeout=5m ||
        die "${EXIT_FAILED}" "the rollout of ${kind}/${name} did not finish"
    fi ;;
  pipeline) info "numaflow restarts the vertex pods it changes; if not: kubectl -n ${NAMESPACE} delete pod -l numaflow.numaproj.io/vertex-name=${vertex}" ;;
esac
[[ "${DRY_RUN}" == true ]] || info "profiling enabled on ${kind}/${name} (${container}); check it with scripts/cluster/verify.sh"
