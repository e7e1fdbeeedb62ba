#!/usr/bin/env bash
# Benchmark: `make image-memprofile` for the same app (the example service,
# jemalloc) on docker, podman and buildah, in one run. Each engine first runs
# `make example` (bases, the app image, one profiled run: it must work end to
# end), then builds the profilable image twice: from scratch
# (ENGINE_BUILD_FLAGS=--no-cache; docker's BuildKit and buildah would
# otherwise reuse the verify step) and again with the engine's cache. Prints
# the wall times and each engine's ratio to buildah's in the same run.
# docker is scripts/docker-engine.sh's engine (trixie's Docker 26, buildx
# 0.13), started for the bench and stopped at its end.
# usage: bench/image_build_engines.sh [ROUNDS]   (ROUNDS fresh builds per engine, 1)
set -o errexit -o nounset -o pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "${here}/.." && pwd)"
# shellcheck source=scripts/host.sh
source "${root}/scripts/host.sh"
rounds="${1:-1}"
work="$(mktemp -d)"
engine_started=false
cleanup() {
  if [[ "${engine_started}" == true ]]; then "${root}/scripts/docker-engine.sh" stop >/dev/null 2>&1 || true; fi
  rm -rf "${work}"
}
trap cleanup EXIT
# podman and buildah share the store make example uses.
use_container_storage "$(memprofile_cache)/containers"

declare -A fresh cached
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

build() {  # ENGINE LABEL FLAGS -> seconds
  local engine="$1" label="$2" flags="$3" t0 t1 pull=never
  [[ "${engine}" != docker ]] || pull=""
  t0="$(now)"
  make -C "${root}" --no-print-directory SKIP_DEPS=true CONTAINER_ENGINE="${engine}" \
    APP_IMAGE=localhost/leaky:example BACKEND=jemalloc PULL_POLICY="${pull}" \
    IMAGE_WORK_DIR="${work}/${engine}-${label}" ENGINE_BUILD_FLAGS="${flags}" image-memprofile \
    > "${work}/${engine}-${label}.log" 2>&1 || {
    tail -30 "${work}/${engine}-${label}.log" >&2
    echo "bench: make image-memprofile failed on ${engine}" >&2
    exit 1
  }
  t1="$(now)"
  elapsed "${t0}" "${t1}"
}

for engine in buildah podman docker; do
  if [[ "${engine}" == docker ]]; then
    "${root}/scripts/docker-engine.sh" start
    engine_started=true
    eval "$("${root}/scripts/docker-engine.sh" env)"
  fi
  echo "== ${engine}: make example (bases, app image, one profiled run)" >&2
  CONTAINER_ENGINE="${engine}" EXAMPLE_WORK_DIR="${work}/example-${engine}" "${root}/scripts/example.sh" \
    > "${work}/example-${engine}.log" 2>&1 || {
    tail -30 "${work}/example-${engine}.log" >&2
    echo "bench: make example failed on ${engine}" >&2
    exit 1
  }
  best=""
  for _ in $(seq "${rounds}"); do
    s="$(build "${engine}" fresh --no-cache)"
    if [[ -z "${best}" ]] || awk -v a="${s}" -v b="${best}" 'BEGIN { exit !(a < b) }'; then best="${s}"; fi
  done
  fresh[${engine}]="${best}"
  cached[${engine}]="$(build "${engine}" cached "")"
  echo "== ${engine}: fresh ${fresh[${engine}]} s, cached ${cached[${engine}]} s" >&2
done

printf '\n%-8s %12s %10s %12s %10s\n' engine "fresh (s)" "vs buildah" "cached (s)" "vs buildah"
for engine in buildah podman docker; do
  printf '%-8s %12s %10s %12s %10s\n' "${engine}" "${fresh[${engine}]}" \
    "$(awk -v a="${fresh[${engine}]}" -v b="${fresh[buildah]}" 'BEGIN { printf "%.2fx", a / b }')" \
    "${cached[${engine}]}" "$(awk -v a="${cached[${engine}]}" -v b="${cached[buildah]}" 'BEGIN { printf "%.2fx", a / b }')"
done
echo "(make image-memprofile APP_IMAGE=localhost/leaky:example BACKEND=jemalloc on $(nproc) cores;" \
  "buildah $(buildah --version | cut -d' ' -f3), podman $(podman --version | cut -d' ' -f3)," \
  "docker $(docker version --format '{{.Server.Version}}' 2>/dev/null), buildx $(docker buildx version | cut -d' ' -f2))"
