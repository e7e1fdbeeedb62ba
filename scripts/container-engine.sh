#!/usr/bin/env bash
# Prints the first container engine that can build here: docker (only with a
# reachable daemon and buildx), then podman, then buildah. Prints nothing and
# exits 1 when none works. `make` uses it unless CONTAINER_ENGINE is set.
set -o errexit -o nounset -o pipefail

works() { "$@" >/dev/null 2>&1; }

if command -v docker >/dev/null && works timeout 10 docker info && works docker buildx version; then
  echo docker
elif command -v podman >/dev/null && works timeout 20 podman info; then
  echo podman
elif command -v buildah >/dev/null && works timeout 20 buildah info; then
  echo buildah
else
  echo "memprofile: no working container engine (docker with a daemon and buildx, podman or buildah); install one" >&2
  exit 1
fi
