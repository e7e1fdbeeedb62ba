#!/usr/bin/env bash
# Opens a collected profile. For jemalloc and heaptrack, when the image the
# pod ran is at hand (--image, or the image of --pod's container, read from
# the registry), it runs `memprofile report` on the tar: what grew, what holds
# the memory, symbolised from the image's own files, plus a flame graph, a
# trend chart and a pprof profile in DIR. Otherwise (and for bytehound) it
# unpacks the tar and prints the analysis commands for its backend
# (memprofile report and bytehound server/strip, jeprof, heaptrack_print) with the paths filled
# in; with --pod and --fetch it also copies the binaries the profile names
# out of the pod (`kubectl exec cat`, not `kubectl cp`) into DIR/root and
# rewrites the profile's paths to them, for images that are not available.
#
# usage: scripts/cluster/open.sh FILE.tar [--dir DIR] [--image IMAGE | --rootfs DIR | --pod NAMESPACE/POD/CONTAINER [--fetch]]
#                                [--context CTX]
#
#   --dir    where to unpack and write the pictures (default: FILE without .tar)
#   --image  the image the profile came from, as `memprofile report --image`
#            takes it: an archive, an OCI layout, docker://REF, docker-daemon:NAME
#   --rootfs the image's root filesystem as a directory, instead of --image
# Environment: MEMPROFILE (the memprofile to run report with; default: on PATH)
# Exit codes: 0 done, 1 a file could not be fetched or report failed, 2 usage, 3 refused
# (not a memprofile collect tar, or its manifest does not match).
set -o errexit -o nounset -o pipefail
# shellcheck source=scripts/cluster/kube.sh
source "$(dirname "$0")/kube.sh"

file="" dir="" podspec="" fetch=false image="" rootfs=""
while (($#)); do
  common_option "$@"
  if ((CONSUMED)); then shift "${CONSUMED}"; continue; fi
  case "$1" in
    -h | --help) print_help; exit 0 ;;
    --dir) dir="${2:?--dir needs a value}"; shift 2 ;;
    --pod) podspec="${2:?--pod needs NAMESPACE/POD/CONTAINER}"; shift 2 ;;
    --fetch) fetch=true; shift ;;
    --image) image="${2:?--image needs a value}"; shift 2 ;;
    --rootfs) rootfs="${2:?--rootfs needs a value}"; shift 2 ;;
    -*) usage_error "unknown option $1" ;;
    *) [[ -z "${file}" ]] || usage_error "one profile at a time"; file="$1"; shift ;;
  esac
done
[[ -n "${file}" ]] || usage_error "name the tar collect.sh wrote"
[[ -f "${file}" ]] || die "${EXIT_REFUSED}" "${file} does not exist"
[[ "${fetch}" == false || -n "${podspec}" ]] || usage_error "--fetch needs --pod NAMESPACE/POD/CONTAINER"
need_tools jq tar
dir="${dir:-${file%.tar}}"
mkdir -p "${dir}"
tar -C "${dir}" -xf "${file}" 2>/dev/null || die "${EXIT_REFUSED}" "${file} is not a readable tar"
manifest="${dir}/MEMPROFILE-MANIFEST.json"
[[ -s "${manifest}" ]] || die "${EXIT_REFUSED}" "${file} has no MEMPROFILE-MANIFEST.json: not from memprofile collect"
backend="$(jq -r .backend "${manifest}")"
mapfile -t files < <(jq -r '.files[].name' "${manifest}")

pod_ns="" pod="" pod_c=""
if [[ -n "${podspec}" ]]; then
  IFS=/ read -r pod_ns pod pod_c <<<"${podspec}"
  [[ -n "${pod_ns}" && -n "${pod}" && -n "${pod_c}" ]] || usage_error "--pod is NAMESPACE/POD/CONTAINER"
fi

# The absolute paths a profile maps (program and libraries), one per line.
mapped_paths() {
  case "${backend}" in
    jemalloc) sed -n '/^MAPPED_LIBRARIES:/,$p' "$1" | awk '$6 ~ /^\// {print $6}' | sort -u ;;
    heaptrack) awk '($1 == "x" || $1 == "m") && substr($3, 1, 1) == "/" {print $3}' "$1" | sort -u ;;
  esac
}
# memprofile report, when the image is at hand: the pod's image is read
# straight from its registry (docker://), nothing copied out of the pod.
memprofile="${MEMPROFILE:-$(command -v memprofile || true)}"
[[ -z "${image}" || -z "${rootfs}" ]] || usage_error "--image or --rootfs, not both"
if [[ -z "${image}" && -z "${rootfs}" && -n "${podspec}" && "${fetch}" == false && "${backend}" != bytehound ]]; then
  NAMESPACE="${pod_ns}"
  need_tools "${KUBECTL}"
  ref="$(kc get pod "${pod}" -n "${pod_ns}" -o "jsonpath={.spec.containers[?(@.name==\"${pod_c}\")].image}")" ||
    die "${EXIT_FAILED}" "cannot read the image of ${podspec}"
  [[ -z "${ref}" ]] || image="docker://${ref}"
fi
if [[ -n "${image}${rootfs}" && "${backend}" != bytehound ]]; then
  [[ -x "${memprofile}" ]] || die "${EXIT_REFUSED}" "memprofile not found (put it on PATH or set MEMPROFILE) for report"
  dir_abs="$(cd "${dir}" && pwd)"
  files_from=(--image "${image}")
  [[ -z "${rootfs}" ]] || files_from=(--rootfs "${rootfs}")
  info "memprofile report ${files_from[*]} ${file}"
  "${memprofile}" report "${files_from[@]}" --flamegraph "${dir_abs}/flame.svg" --trend "${dir_abs}/trend.svg" \
    --pprof "${dir_abs}/profile.pb.gz" "${file}" || die "${EXIT_FAILED}" "memprofile report failed"
  exit 0
fi

root="$(cd "${dir}" && pwd)/root"
reroot="$(dirname "$0")/../reroot-profile.sh"
if [[ "${fetch}" == true && "${backend}" != bytehound ]]; then
  NAMESPACE="${pod_ns}"
  need_tools "${KUBECTL}"
  for f in "${files[@]}"; do
    while read -r path; do
      [[ "${path}" != *..* && -n "${path}" ]] || continue
      [[ -s "${root}${path}" ]] && continue
      mkdir -p "$(dirname "${root}${path}")"
      kc exec "${pod}" -n "${pod_ns}" -c "${pod_c}" -- cat "${path}" > "${root}${path}" ||
        die "${EXIT_FAILED}" "cannot read ${path} in ${podspec}"
    done < <(mapped_paths "${dir}/${f}")
  done
  info "binaries the profile names are under ${root}"
fi

echo "${file}: ${backend}, $(jq '.files | length' "${manifest}") file(s) in ${dir}"
for f in "${files[@]}"; do
  p="${dir}/${f}"
  case "${backend}" in
    bytehound)
      symbols="--image IMAGE"
      [[ -d "${root}" ]] && symbols="--rootfs ${root}"
      cat <<TEXT

${f}: bytehound's data file. memprofile report reads it (growth, leak suspects, in use; --pprof, --flamegraph):
  memprofile report ${symbols} ${p}
With the bytehound CLI (its releases ship x86_64 builds):
  bytehound server ${p}                 # then open http://localhost:8080 (flame graphs, leaks over time)
  bytehound strip --threshold 60 -o ${dir}/stripped.dat ${p}   # when the file is too big for the server
TEXT
      ;;
    jemalloc)
      [[ "${f}" == *.heap ]] || continue
      program="$(sed -n '/^MAPPED_LIBRARIES:/,$p' "${p}" | awk '$6 ~ /^\// && !n++ {print $6}')"
      heap="${p}"
      if [[ -d "${root}" ]]; then
        "${reroot}" jemalloc "${root}" "${p}" "${p}.rooted"
        heap="${p}.rooted"
        program="${root}${program}"
      elif [[ -n "${podspec}" ]]; then
        echo "(add --fetch to copy ${program} and its libraries out of ${podspec} for symbols)"
      fi
      cat <<TEXT

${f}: a jemalloc heap profile of ${program}. With jeprof (Debian's libjemalloc-dev, or the one built beside the library):
  jeprof --text ${program} ${heap}                        # top allocation sites
  jeprof --svg ${program} ${heap} > ${dir}/profile.svg     # call graph
  jeprof --collapsed ${program} ${heap} | flamegraph.pl > ${dir}/flame.svg   # flame graph (FlameGraph's flamegraph.pl)
  jeprof --text --base ${dir}/<an earlier>.heap ${program} ${heap}           # growth between two dumps
TEXT
      ;;
    heaptrack)
      raw="${p}"
      if [[ -d "${root}" ]]; then
        "${reroot}" heaptrack "${root}" "${p}" "${p}.rooted"
        raw="${p}.rooted"
      elif [[ -n "${podspec}" ]]; then
        echo "(add --fetch to copy the binaries out of ${podspec}: heaptrack_interpret reads them at the recorded paths)"
      fi
      cat <<TEXT

${f}: heaptrack's raw trace. With Debian's heaptrack:
  /usr/lib/heaptrack/libexec/heaptrack_interpret < ${raw} | gzip > ${dir}/heaptrack.gz
  heaptrack_print ${dir}/heaptrack.gz                                # leaks, peak, top allocators
  heaptrack_print --flamegraph-file ${dir}/stacks.txt ${dir}/heaptrack.gz && flamegraph.pl ${dir}/stacks.txt > ${dir}/flame.svg
  heaptrack --analyze ${dir}/heaptrack.gz                            # the GUI (heaptrack-gui)
TEXT
      ;;
    *) die "${EXIT_REFUSED}" "unknown backend '${backend}' in ${manifest}" ;;
  esac
done
