#!/usr/bin/env bash
# Prints the first container engine that can build here: docker (only with a
# reachable daemon and buildx), then podman, then buildah, and says on stderr
# which one it picked and why not the ones before it. Prints nothing and
# exits 1 when none works. `make` uses it unless CONTAINER_ENGINE is set.
# (scripts/docker-engine.sh starts a Docker engine of the toolkit's own;
# eval "$(scripts/docker-engine.sh env)" points docker at it.)
set -o errexit -o nounset -o pipefail

works() { "$@" >/dev/null 2>&1; }
said() { echo "memprofile: container engine: $*" >&2; }
skipped=()

if command -v docker >/dev/null; then
  if ! server="$(timeout 10 docker version --format '{{.Server.Version}}' 2>/dev/null)" || [[ -z "${server}" ]]; then
    skipped+=("docker: no daemon answers${DOCKER_HOST:+ at ${DOCKER_HOST}}")
  elif ! buildx="$(timeout 10 docker buildx version 2>/dev/null)"; then
    skipped+=("docker: no buildx plugin")
  else
    said "docker (daemon ${server}, buildx $(cut -d' ' -f2 <<<"${buildx}")${DOCKER_HOST:+, ${DOCKER_HOST}}); set CONTAINER_ENGINE to choose another"
    echo docker
    exit 0
  fi
fi
why="${skipped[*]:+; ${skipped[*]}}"
if command -v podman >/dev/null && works timeout 20 podman info; then
  said "podman ($(podman --version | cut -d' ' -f3)${why}); set CONTAINER_ENGINE to choose another"
  echo podman
elif command -v buildah >/dev/null && works timeout 20 buildah info; then
  said "buildah ($(buildah --version | cut -d' ' -f3)${why}); set CONTAINER_ENGINE to choose another"
  echo buildah
else
  echo "memprofile: no working container engine (docker with a daemon and buildx, podman or buildah)${why}; install one" >&2
  exit 1
fi
