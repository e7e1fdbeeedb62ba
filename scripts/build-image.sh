#!/usr/bin/env bash
# Builds a profilable image: `make image-memprofile` and
# `make image-memprofile-multi` run this after checking their variables.
#
#   way 1 (APP_IMAGE): export the app image, preflight it (a static or scratch
#     app stops here, pointing at way 2), read its Entrypoint/Cmd/User and
#     platform, then images/layer.Dockerfile;
#   way 2 (APP_SRC + APP_BIN): images/rebuild.Dockerfile.
# Then the result is exported and judged by `memprofile preflight`: anything
# but READY fails. Pushed only when PUSH=true, and then the very archive
# that was judged is pushed (skopeo copy --all --preserve-digests), never a
# rebuild or the engine's copy; the digest the registry got must be the one
# judged.
#
# Environment (set by the Makefile): ENGINE MEMPROFILE BACKEND IMAGE PLATFORMS
#   MULTI APP_IMAGE APP_SRC APP_BIN APP_TARGET DORMANT MAX_PROFILE_MB SNAPSHOT_EVERY CARGO_PROFILE
#   CARGO_FEATURES CARGO_NO_DEFAULT_FEATURES BASE_IMAGE
#   BUILDER_IMAGE RUST_BUILDER_IMAGE ARTIFACTS PULL_POLICY TLS_VERIFY PUSH
#   SKIP_CLEAN WORK_DIR OUT_ARCHIVE REVISION SOURCE_URL ENGINE_BUILD_FLAGS
set -o errexit -o nounset -o pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=preload/recipes.sh
source "${root}/preload/recipes.sh"  # arch_triplet
die() {
  echo "memprofile: $*" >&2
  exit 1
}
say() { echo "== $*" >&2; }
# A step that fails without a word of its own (errexit, pipefail) still
# names itself: a build never ends silently.
trap 'echo "memprofile: build-image.sh line ${LINENO}: \`${BASH_COMMAND}\` failed" >&2' ERR

: "${ENGINE:?}" "${MEMPROFILE:?}" "${BACKEND:?}" "${IMAGE:?}" "${WORK_DIR:?}"
PLATFORMS="${PLATFORMS:-}"
MULTI="${MULTI:-false}"
APP_IMAGE="${APP_IMAGE:-}"
APP_SRC="${APP_SRC:-}"
APP_BIN="${APP_BIN:-}"
APP_TARGET="${APP_TARGET:-}"
ARTIFACTS="${ARTIFACTS:-dist}"
PULL_POLICY="${PULL_POLICY:-}"
TLS_VERIFY="${TLS_VERIFY:-true}"
PUSH="${PUSH:-false}"
SKIP_CLEAN="${SKIP_CLEAN:-false}"
OUT_ARCHIVE="${OUT_ARCHIVE:-${WORK_DIR}/image.tar}"
read -r -a extra_flags <<<"${ENGINE_BUILD_FLAGS:-}"

ctx="${WORK_DIR}/context"
rm -rf "${ctx}"
mkdir -p "${ctx}"
cleanup() { [[ "${SKIP_CLEAN}" == true ]] || rm -rf "${ctx}" "${WORK_DIR}/app.tar" "${WORK_DIR}"/python-headers-*; }
trap cleanup EXIT

# export_image REF ARCHIVE [list]: an image (or manifest list) from the engine's store into a file preflight reads.
export_image() {
  local ref="$1" archive="$2" list="${3:-}"
  rm -f "${archive}"
  case "${ENGINE}" in
    docker) docker save -o "${archive}" "${ref}" ;;
    podman)
      if [[ -n "${list}" ]]; then podman manifest push --all "${ref}" "oci-archive:${archive}" >/dev/null
      else podman save --format oci-archive -o "${archive}" "${ref}" >/dev/null; fi ;;
    buildah)
      if [[ -n "${list}" ]]; then buildah manifest push --quiet --all "${ref}" "oci-archive:${archive}" >/dev/null
      else buildah push --quiet "${ref}" "oci-archive:${archive}" >/dev/null; fi ;;
  esac
}

# copy_out REF PLATFORM DIR DEST: a directory of the image for PLATFORM
# (a manifest list's) copied into DEST, as the engine's own copy reads it.
copy_out() {
  local ref="$1" platform="$2" dir="$3" dest="$4" id mnt
  mkdir -p "${dest}"
  case "${ENGINE}" in
    docker | podman)
      id="$("${ENGINE}" create --platform "${platform}" "${ref}" /nonexistent)" || return 1
      "${ENGINE}" cp "${id}:${dir}/." - | tar -C "${dest}" -xf - || { "${ENGINE}" rm "${id}" >/dev/null; return 1; }
      "${ENGINE}" rm "${id}" >/dev/null ;;
    buildah)
      id="$(buildah from --quiet --pull=never --platform "${platform}" "${ref}")" || return 1
      if ! { mnt="$(buildah mount "${id}")" && tar -C "${mnt}${dir}" -cf - . | tar -C "${dest}" -xf -; }; then
        buildah rm "${id}" >/dev/null
        return 1
      fi
      buildah rm "${id}" >/dev/null ;;
  esac
}

is_list() {  # REF: a manifest list in the local store (podman/buildah)
  case "${ENGINE}" in
    podman) podman manifest inspect "$1" >/dev/null 2>&1 ;;
    buildah) buildah manifest inspect "$1" >/dev/null 2>&1 ;;
    *) return 1 ;;
  esac
}

# archive_platforms ARCHIVE: the platforms of the image an OCI archive (or a
# docker save of Docker >= 25) holds, one a line; attestations left out.
# docker: a multi-platform image of the containerd store is a list too.
archive_platforms() {
  local top
  top="$(tar -xOf "$1" index.json 2>/dev/null | jq -r '.manifests[0].digest // empty' 2>/dev/null)" || return 0
  [[ -n "${top}" ]] || return 0
  tar -xOf "$1" "blobs/sha256/${top#sha256:}" 2>/dev/null |
    jq -r '(.manifests // [])[] | .platform // empty | select(.os != "unknown") | .os + "/" + .architecture' 2>/dev/null || true
}

platform_args=()
if [[ -n "${PLATFORMS}" ]]; then platform_args=(--platform "${PLATFORMS}"); fi
build_args=("${extra_flags[@]}" --build-arg "BACKEND=${BACKEND}" --build-arg "ARTIFACTS=${ARTIFACTS}"
  --build-arg "REVISION=${REVISION:-unknown}" --build-arg "SOURCE_URL=${SOURCE_URL:-https://github.com/memprofile/memprofile}")
[[ -z "${APP_TARGET}" ]] || build_args+=(--build-arg "APP_TARGET=${APP_TARGET}")
[[ "${DORMANT:-false}" != true ]] || build_args+=(--build-arg "DORMANT=true")
[[ -z "${MAX_PROFILE_MB:-}" ]] || build_args+=(--build-arg "MAX_PROFILE_MB=${MAX_PROFILE_MB}")
[[ -z "${SNAPSHOT_EVERY:-}" ]] || build_args+=(--build-arg "SNAPSHOT_EVERY=${SNAPSHOT_EVERY}")
[[ -z "${BUILDER_IMAGE:-}" ]] || build_args+=(--build-arg "BUILDER_IMAGE=${BUILDER_IMAGE}")

# 1. What to build on, and the app's own command.
if [[ -n "${APP_IMAGE}" ]]; then
  dockerfile="${root}/images/layer.Dockerfile"
  say "preflight of the app image ${APP_IMAGE}"
  list=""
  is_list "${APP_IMAGE}" && list=yes
  export_image "${APP_IMAGE}" "${WORK_DIR}/app.tar" "${list}" ||
    die "cannot export ${APP_IMAGE} from ${ENGINE}: pull or build it first"
  if [[ "${ENGINE}" == docker ]] && (($(archive_platforms "${WORK_DIR}/app.tar" | wc -l) > 1)); then list=yes; fi
  pick=()
  if [[ -n "${list}" && "${MULTI}" == true ]]; then
    pick=(--all-platforms)
  elif [[ -n "${list}" ]]; then
    pick=(--platform "${PLATFORMS:-linux/$(dpkg --print-architecture 2>/dev/null || echo amd64)}")
  fi
  verdict=0
  judge_as=()
  [[ "${BACKEND}" != memray ]] || judge_as=(--backend memray)
  "${MEMPROFILE}" preflight --json "${pick[@]}" "${judge_as[@]}" "${WORK_DIR}/app.tar" >"${WORK_DIR}/app.json" || verdict=$?
  ((verdict <= 1)) || die "memprofile preflight could not read ${APP_IMAGE} (exported to ${WORK_DIR}/app.tar)"
  app_json="$(head -n 1 "${WORK_DIR}/app.json")"
  if [[ "${BACKEND}" == memray ]]; then
    # memray missing is what this build adds (Debian's package, per
    # platform: scripts/memray-debian.sh); anything else stops it here.
    verdict=0
    while read -r line; do
      a="$(jq -r '.platform | split("/")[1]' <<<"${line}")"
      echo "${line}" > "${WORK_DIR}/app-${a}.json"
      other="$(jq -r '[.blocking[] | select(. != "MEMRAY_MISSING")] | join(", ")' <<<"${line}")"
      [[ -z "${other}" ]] || { echo "${a}: ${other}" >&2; verdict=1; }
    done < "${WORK_DIR}/app.json"
    if ((verdict != 0)); then
      "${MEMPROFILE}" preflight "${pick[@]}" --backend memray "${WORK_DIR}/app.tar" >&2 || true
      die "${APP_IMAGE} cannot be tracked by memray even with memray installed (the findings above): BACKEND=memray needs a CPython interpreter the entrypoint reaches"
    fi
  elif ((verdict != 0)); then
    "${MEMPROFILE}" preflight "${pick[@]}" "${WORK_DIR}/app.tar" >&2 || true
    die "${APP_IMAGE} cannot be profiled by layering a preload library onto it (blocking: $(jq -r '.blocking | join(", ")' "${WORK_DIR}/app.json" | sort -u | paste -sd' ')). Rebuild the app as a dynamic glibc program instead (way 2): make image-memprofile APP_SRC=<cargo project> APP_BIN=<binary>"
  fi
  app_platform="$(jq -r .platform <<<"${app_json}")"
  if [[ -z "${PLATFORMS}" ]]; then
    PLATFORMS="${app_platform}"
    platform_args=(--platform "${PLATFORMS}")
  fi
  build_args+=(--build-arg "APP_IMAGE=${APP_IMAGE}"
    --build-arg "APP_ENTRYPOINT=$(jq -c '.config.entrypoint // []' <<<"${app_json}")"
    --build-arg "APP_CMD=$(jq -c '.config.cmd // []' <<<"${app_json}")"
    --build-arg "APP_USER=$(jq -r '.config.user | if . == "" then "root" else . end' <<<"${app_json}")")
  say "${APP_IMAGE} (${app_platform}) runs $(jq -c .argv <<<"${app_json}") as $(jq -r '.config.user | if . == "" then "root" else . end' <<<"${app_json}")"
else
  dockerfile="${root}/images/rebuild.Dockerfile"
  [[ -f "${APP_SRC}/Cargo.toml" ]] || die "APP_SRC=${APP_SRC} has no Cargo.toml (way 2 rebuilds a cargo project)"
  mkdir -p "${ctx}/app"
  tar -C "${APP_SRC}" --exclude=./target --exclude=./.git -cf - . | tar -C "${ctx}/app" -xf -
  build_args+=(--build-arg "APP_BIN=${APP_BIN}" --build-arg "CARGO_PROFILE=${CARGO_PROFILE:-release}"
    --build-arg "CARGO_FEATURES=${CARGO_FEATURES:-}" --build-arg "CARGO_NO_DEFAULT_FEATURES=${CARGO_NO_DEFAULT_FEATURES:-false}")
  [[ -z "${BASE_IMAGE:-}" ]] || build_args+=(--build-arg "BASE_IMAGE=${BASE_IMAGE}")
  [[ -z "${RUST_BUILDER_IMAGE:-}" ]] || build_args+=(--build-arg "RUST_BUILDER_IMAGE=${RUST_BUILDER_IMAGE}")
  [[ -n "${PLATFORMS}" ]] || { PLATFORMS="linux/$(dpkg --print-architecture 2>/dev/null || echo amd64)"; platform_args=(--platform "${PLATFORMS}"); }
fi

# 2. The launcher and the preload library for each target architecture.
IFS=, read -r -a platforms <<<"${PLATFORMS}"
for platform in "${platforms[@]}"; do
  arch="${platform#linux/}"
  arch="${arch%%/*}"
  case "${platform}" in
    linux/amd64 | linux/arm64 | linux/arm64/v8) ;;
    *) die "unsupported platform '${platform}' (linux/amd64, linux/arm64)" ;;
  esac
  if [[ "${ARTIFACTS}" == dist ]]; then
    say "artifacts for ${arch} (${BACKEND}), host-built"
    facts=""
    headers=""
    if [[ "${BACKEND}" == memray ]]; then
      [[ -s "${WORK_DIR}/app-${arch}.json" ]] || die "${APP_IMAGE} has no ${platform} image to install memray for"
      # Only where memray is missing: an image with its own is left as it is.
      if jq -e '.blocking | index("MEMRAY_MISSING")' "${WORK_DIR}/app-${arch}.json" >/dev/null; then
        facts="${WORK_DIR}/app-${arch}.json"
        # A Python not Debian's gets memray built against its own headers:
        # include_dir (canonical in the image: preflight resolved its links
        # there), and the multiarch directory a Debian-style pyconfig.h
        # wrapper includes (Ubuntu's python, a derivative's).
        include_dir="$(jq -r 'if .python.debian.python_package == null and .python.headers then .python.include_dir else empty end' "${facts}")"
        if [[ -n "${include_dir}" ]]; then
          [[ "${include_dir}" == /* && "${include_dir}" != *..* && "${include_dir}" != *$'\n'* ]] ||
            die "${APP_IMAGE}: preflight's include_dir '${include_dir}' is not a plain absolute path"
          headers="${WORK_DIR}/python-headers-${arch}"
          rm -rf "${headers}" "${headers}-multiarch"
          copy_out "${APP_IMAGE}" "${platform}" "${include_dir}" "${headers}" ||
            die "cannot copy ${include_dir} out of ${APP_IMAGE} (${platform}) with ${ENGINE}"
          triplet="$(arch_triplet "${arch}")"
          if grep -q "include <${triplet}/${include_dir##*/}/pyconfig.h>" "${headers}/pyconfig.h" 2>/dev/null; then
            copy_out "${APP_IMAGE}" "${platform}" "${include_dir%/*}/${triplet}/${include_dir##*/}" \
              "${headers}-multiarch/${triplet}/${include_dir##*/}" ||
              die "${include_dir}/pyconfig.h includes ${triplet}/${include_dir##*/}/pyconfig.h, which ${APP_IMAGE} (${platform}) lacks"
            headers+=":${headers}-multiarch"
          fi
          # A link in the copy would be followed on this machine.
          links="$(IFS=':'; read -ra dirs <<<"${headers}"; find "${dirs[@]}" -type l | awk "NR <= 3" | paste -sd' ')"
          [[ -z "${links}" ]] || die "${APP_IMAGE}: the headers in ${include_dir} hold symbolic links (${links}): memray is built against plain files"
        fi
      else
        say "${APP_IMAGE} (${arch}) imports memray already: installing none"
      fi
    fi
    make -C "${root}" --no-print-directory image-artifacts SKIP_DEPS=true ARCH="${arch}" BACKEND="${BACKEND}" DIST="${DIST:-dist}" \
      ARTIFACTS_OUT="${ctx}/artifacts/${arch}" MEMRAY_FACTS="${facts}" MEMRAY_HEADERS="${headers}" >&2
  fi
done
if [[ "${ARTIFACTS}" == source ]]; then
  mkdir -p "${ctx}/src"
  tar -C "${root}" -cf - CMakeLists.txt Makefile cmake ctl tool preload scripts | tar -C "${ctx}/src" -xf -
elif [[ "${ARTIFACTS}" != dist ]]; then
  die "ARTIFACTS must be dist or source, not '${ARTIFACTS}'"
fi
manifest="$(find "${ctx}/artifacts" \( -name "preload-${BACKEND}.json" -o -name "backend-${BACKEND}.json" \) -print -quit 2>/dev/null || true)"
[[ -z "${manifest}" ]] || build_args+=(--build-arg "BACKEND_VERSION=$(jq -r .version "${manifest}")")

# 3. Build.
say "building ${IMAGE} for ${PLATFORMS} with ${ENGINE} ($(basename "${dockerfile}"))"
pull=()
[[ -z "${PULL_POLICY}" ]] || pull=(--pull="${PULL_POLICY}")
list=""
[[ "${MULTI}" == true ]] && list=yes
case "${ENGINE}" in
  docker)
    if [[ -n "${list}" ]]; then
      docker buildx build "${platform_args[@]}" -f "${dockerfile}" "${build_args[@]}" -t "${IMAGE}" \
        --output "type=oci,dest=${OUT_ARCHIVE}" "${ctx}"
    else
      docker buildx build "${platform_args[@]}" -f "${dockerfile}" "${build_args[@]}" -t "${IMAGE}" --load "${ctx}"
    fi ;;
  podman | buildah)
    if [[ "${ENGINE}" == podman ]]; then bud=(podman build); else bud=(buildah bud); fi
    bud+=(--isolation "${BUILD_ISOLATION:-chroot}" "${pull[@]}")
    if [[ -n "${list}" ]]; then
      "${ENGINE}" manifest rm "${IMAGE}" >/dev/null 2>&1 || true
      "${ENGINE}" rmi "${IMAGE}" >/dev/null 2>&1 || true
      engine_build "${bud[@]}" "${platform_args[@]}" -f "${dockerfile}" "${build_args[@]}" --manifest "${IMAGE}" "${ctx}" >&2
    else
      engine_build "${bud[@]}" "${platform_args[@]}" -f "${dockerfile}" "${build_args[@]}" -t "${IMAGE}" "${ctx}" >&2
    fi ;;
  *) die "unknown CONTAINER_ENGINE '${ENGINE}' (docker, podman, buildah)" ;;
esac

# 4. Judge what was built, as it will be shipped.
rm -f "${WORK_DIR}/judged.digest" "${WORK_DIR}/pushed.digest"
[[ "${ENGINE}" == docker && -n "${list}" ]] || export_image "${IMAGE}" "${OUT_ARCHIVE}" "${list}"
say "preflight of ${IMAGE} (${OUT_ARCHIVE})"
all=()
[[ -z "${list}" ]] || all=(--all-platforms)
"${MEMPROFILE}" preflight "${all[@]}" "${OUT_ARCHIVE}" >&2 || die "${IMAGE} is not READY: not pushed"
# The archive's OCI index names the image (or list) it holds: that digest is
# the one judged. `docker save` before Docker 25 writes no index.
judged="$(tar -xOf "${OUT_ARCHIVE}" index.json 2>/dev/null | jq -r 'if (.manifests | length) == 1 then .manifests[0].digest else empty end' || true)"
if [[ -n "${judged}" ]]; then
  echo "${judged}" > "${WORK_DIR}/judged.digest"
  say "judged READY: ${IMAGE}@${judged}"
fi

# 5. Push the archive that was judged, as it is.
if [[ "${PUSH}" == true ]]; then
  command -v skopeo >/dev/null || die "pushing needs skopeo (Debian: apt-get install skopeo; scripts/install-deps.sh installs it)"
  src="oci-archive:${OUT_ARCHIVE}"
  [[ -n "${judged}" ]] || src="docker-archive:${OUT_ARCHIVE}"
  dest_tls=()
  [[ "${TLS_VERIFY}" == true ]] || dest_tls=(--dest-tls-verify=false)
  say "pushing ${OUT_ARCHIVE} to ${IMAGE}"
  skopeo copy --quiet --all --preserve-digests "${dest_tls[@]}" --digestfile "${WORK_DIR}/pushed.digest" \
    "${src}" "docker://${IMAGE}" >&2 || die "pushing ${IMAGE} failed"
  pushed="$(cat "${WORK_DIR}/pushed.digest")"
  if [[ -n "${judged}" && "${pushed}" != "${judged}" ]]; then
    die "the registry got ${IMAGE}@${pushed}, not the judged ${judged}"
  fi
  say "pushed ${IMAGE}@${pushed}${judged:+ (the judged digest)}"
fi
echo "${IMAGE}"
