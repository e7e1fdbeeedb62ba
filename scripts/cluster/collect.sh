#!/usr/bin/env bash
# Gets the profile out of a running pod, safely: `memprofile collect` streams
# a tar with a manifest (sizes, sha256) through `kubectl exec`, never
# `kubectl cp` (its tar would run in the pod, injected by a pod-wide
# LD_PRELOAD, and crash). Every file is checked against the manifest before
# the result gets its name; a stream cut short is kept only as FILE.partial.
#
# usage: scripts/cluster/collect.sh -n NAMESPACE (POD | -l SELECTOR) [-c CONTAINER]
#          [-o FILE.tar] [--settle SECONDS] [--timeout SECONDS] [--suspend]
#          [--context CTX] [--dry-run]
#
#   -o         where the tar goes (default ./memprofile-POD-TIME.tar)
#   --settle   seconds the files must stop growing first (default 3)
#   --timeout  most seconds to wait for that (default 90)
#   --suspend  bytehound: pause tracking (SIGUSR1) around the copy
# Exit codes: 0 collected and verified, 1 cut short or does not match its
# manifest, 2 usage, 3 refused (no such namespace/pod/container, no memprofile
# in the image, not enough local space).
set -o errexit -o nounset -o pipefail
# shellcheck source=scripts/cluster/kube.sh
source "$(dirname "$0")/kube.sh"

out="" settle=3 timeout=90 suspend=false
while (($#)); do
  common_option "$@"
  ((CONSUMED)) || pod_option "$@"
  if ((CONSUMED)); then shift "${CONSUMED}"; continue; fi
  case "$1" in
    -h | --help) print_help; exit 0 ;;
    -o | --out) out="${2:?$1 needs a value}"; shift 2 ;;
    --settle) settle="${2:?--settle needs a value}"; shift 2 ;;
    --timeout) timeout="${2:?--timeout needs a value}"; shift 2 ;;
    --suspend) suspend=true; shift ;;
    *) usage_error "unknown option $1" ;;
  esac
done
[[ "${settle}" =~ ^[0-9]+$ && "${timeout}" =~ ^[0-9]+$ ]] || usage_error "--settle and --timeout are whole seconds"
need_tools "${KUBECTL}" jq tar sha256sum
need_namespace
pod="$(pick_pod "${POD}" "${SELECTOR}")"
container="$(pick_container "${pod}" "${CONTAINER}")"
out="${out:-memprofile-${pod}-$(date +%Y%m%d-%H%M%S).tar}"
collect=(exec "${pod}" -n "${NAMESPACE}" -c "${container}" -- "${LAUNCHER}" collect --out - --settle "${settle}"
  --timeout "${timeout}")
[[ "${suspend}" == false ]] || collect+=(--suspend)
if [[ "${DRY_RUN}" == true ]]; then
  kc_write "${collect[@]}"
  echo "# > ${out}.partial, checked against its MEMPROFILE-MANIFEST.json, then renamed ${out}"
  exit 0
fi
need_launcher "${pod}" "${container}"

# Refuse before streaming when the profile cannot fit here.
sizes="$(kc exec "${pod}" -n "${NAMESPACE}" -c "${container}" -- "${LAUNCHER}" attached --json --window 0 2>/dev/null || true)"
# Every process's profiles (a prefork server's workers write their own),
# from an older launcher the process's own.
need="$(jq -r '.output_dir_bytes // ([.profiles[]?.size] | add) // 0' <<<"${sizes}" 2>/dev/null || echo 0)"
free="$(($(df -Pk "$(dirname "${out}")" | awk 'NR == 2 {print $4}') * 1024))"
((need * 11 / 10 + 1048576 < free)) ||
  die "${EXIT_REFUSED}" "the profile is ${need} bytes and $(dirname "${out}") has ${free} free: the tar would be cut short; use -o elsewhere"

info "collecting from ${NAMESPACE}/${pod}/${container} (${need} bytes so far) into ${out}"
partial="${out}.partial"
rc=0
kc "${collect[@]}" > "${partial}" || rc=$?
check="$(mktemp -d)"
trap 'rm -rf "${check}"' EXIT
cut_short() { die "${EXIT_FAILED}" "$* — kept as ${partial}; run collect again"; }
((rc == 0)) || cut_short "kubectl exec ... memprofile collect exited ${rc}"
tar -C "${check}" -xf "${partial}" 2>/dev/null || cut_short "the tar is cut short or damaged"
manifest="${check}/MEMPROFILE-MANIFEST.json"
if ! { [[ -s "${manifest}" ]] && jq -e '.files' "${manifest}" >/dev/null 2>&1; }; then
  cut_short "no manifest at the end of the stream: it was cut short"
fi
while IFS=$'\t' read -r name size sha; do
  # Nested profiles come as sub/dir/file; nothing may climb out or be absolute.
  [[ -n "${name}" && "${name}" != /* && "/${name}/" != */../* && "/${name}/" != */./* ]] ||
    cut_short "the manifest names ${name}, outside the profile directory"
  [[ -f "${check}/${name}" ]] || cut_short "${name} is in the manifest but not in the tar"
  [[ "$(stat -c %s "${check}/${name}")" == "${size}" ]] || cut_short "${name} is not ${size} bytes as the manifest says"
  [[ "$(sha256sum "${check}/${name}" | cut -d' ' -f1)" == "${sha}" ]] || cut_short "${name} does not match its sha256"
done < <(jq -r '.files[] | [.name, (.size | tostring), .sha256] | @tsv' "${manifest}")
mv "${partial}" "${out}"
info "verified $(jq '.files | length' "${manifest}") file(s) against the manifest ($(jq -r .backend "${manifest}")): ${out}"
info "next: scripts/cluster/open.sh ${out} --pod ${NAMESPACE}/${pod}/${container}"
