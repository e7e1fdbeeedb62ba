#!/usr/bin/env bash
# Imports a local Debian base image made by mmdebstrap (`make base-image`),
# or reuses the one already there when it was made from the same inputs.
#
# usage: scripts/base-image.sh ENGINE ARCH SUITE TAG [--include pkg,pkg] [--foreign ARCH2] [--list LIST]
#   ENGINE  docker, podman or buildah
#   TAG     the image to make (e.g. localhost/memprofile-base:bookworm-slim-amd64)
#   --list  also (re)make LIST, a manifest list of TAG's amd64 and arm64
#           siblings there (TAG with its -ARCH suffix swapped)
# Prints TAG on stdout.
#
# A tag alone does not say what is inside: `make example` and the tests once
# asked for the same tag with different packages and each got whichever came
# first. So the image carries a label, io.memprofile.base.key, naming its
# root filesystem (suite, architectures, packages, mirror, make-rootfs.sh's
# text) and this script's text; it is reused only when the label is the key
# asked for, and imported again otherwise.
set -o errexit -o nounset -o pipefail

here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=scripts/host.sh
source "${here}/host.sh"

usage() { sed -n '4,9s/^# \{0,1\}//p' "$0"; }
(($# >= 4)) || { usage >&2; exit 2; }
engine="$1" arch="$2" suite="$3" tag="$4"
shift 4
rootfs_args=()
list=""
while (($#)); do
  case "$1" in
    --include | --foreign) rootfs_args+=("$1" "$2"); shift 2 ;;
    --list) list="$2"; shift 2 ;;
    *) echo "base-image.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
case "${engine}" in
  docker | podman | buildah) ;;
  *) echo "base-image.sh: no container engine to import into ('${engine}': docker, podman or buildah)" >&2; exit 2 ;;
esac

label=io.memprofile.base.key

# image_key REF: the key label of REF, empty when REF is absent or unlabelled.
image_key() {
  case "${engine}" in
    docker) docker image inspect --format "{{index .Config.Labels \"${label}\"}}" "$1" 2>/dev/null || true ;;
    *) podman image inspect --format "{{index .Labels \"${label}\"}}" "$1" 2>/dev/null || true ;;
  esac
}

image_exists() {
  case "${engine}" in
    docker) docker image inspect "$1" >/dev/null 2>&1 ;;
    *) podman image exists "$1" ;;
  esac
}

tarball="$("${here}/make-rootfs.sh" "${arch}" --suite "${suite}" "${rootfs_args[@]}")"
key="$(cache_key "$(cat "${tarball}.key")" "@$0")"
have="$(image_key "${tag}")"
if [[ "${have}" != "${key}" ]]; then
  if image_exists "${tag}"; then
    echo "base-image: ${tag} was made from other inputs (key '${have}', want '${key}'); importing it again" >&2
  fi
  case "${engine}" in
    docker) docker import --platform "linux/${arch}" --change "LABEL ${label}=${key}" "${tarball}" "${tag}" >/dev/null ;;
    *) podman import --arch "${arch}" --change "LABEL ${label}=${key}" "${tarball}" "${tag}" >/dev/null ;;
  esac
fi

# A manifest list of every arch imported so far, so that multi-platform
# builds resolve FROM LIST per platform. docker has no local `manifest
# create`: buildx makes the list from the per-arch images (the containerd
# image store keeps it as one multi-platform image).
if [[ -n "${list}" && "${engine}" == docker ]]; then
  ctx="$(mktemp -d)"
  trap 'rm -rf "${ctx}"' EXIT
  platforms=()
  for a in amd64 arm64; do
    ref="${tag%-"${arch}"}-${a}"
    if image_exists "${ref}"; then
      echo "FROM ${ref} AS base-${a}" >> "${ctx}/Dockerfile"
      platforms+=("linux/${a}")
    fi
  done
  # shellcheck disable=SC2016 # TARGETARCH is the Dockerfile's
  echo 'FROM base-${TARGETARCH}' >> "${ctx}/Dockerfile"
  # The classic image store cannot hold a multi-platform image: the per-arch
  # bases still work there, only multi-platform builds do not.
  docker buildx build --quiet --provenance=false --platform "$(IFS=,; echo "${platforms[*]}")" --load \
    -t "${list}" "${ctx}" >/dev/null 2>"${ctx}/err" ||
    echo "base-image: no multi-platform ${list} (docker needs the containerd image store for one): $(tail -1 "${ctx}/err")" >&2
elif [[ -n "${list}" ]]; then
  podman manifest rm "${list}" >/dev/null 2>&1 || true
  podman manifest create "${list}" >/dev/null
  for a in amd64 arm64; do
    ref="${tag%-"${arch}"}-${a}"
    if podman image exists "${ref}"; then podman manifest add "${list}" "containers-storage:${ref}" >/dev/null; fi
  done
fi
echo "${tag}"
