#!/usr/bin/env bash
# Engine detection (scripts/container-engine.sh, behind make's
# CONTAINER_ENGINE): docker when a daemon and buildx answer, saying so and
# which daemon; another engine, saying why not docker, when the daemon does
# not answer or buildx is missing; and make picks what it detected.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/docker_lib.sh
source "$(dirname "$0")/docker_lib.sh"

detect="${E2E_ROOT}/scripts/container-engine.sh"
server="$(docker version --format '{{.Server.Version}}')"

[[ "$("${detect}" 2> "${SCRATCH}/said")" == docker ]] || fail "a daemon and buildx answer, but docker was not picked: $(cat "${SCRATCH}/said")"
grep -q "^memprofile: container engine: docker (daemon ${server}, buildx 0\.1" "${SCRATCH}/said" ||
  fail "it did not say it picked docker and which: $(cat "${SCRATCH}/said")"
pass "docker picked, and said: $(cat "${SCRATCH}/said")"

# No daemon at DOCKER_HOST: docker is passed over, and it says why.
picked="$(DOCKER_HOST="unix://${SCRATCH}/none.sock" "${detect}" 2> "${SCRATCH}/said")" || true
[[ "${picked}" != docker ]] || fail "docker picked with no daemon"
grep -q "docker: no daemon answers at unix://${SCRATCH}/none.sock" "${SCRATCH}/said" ||
  fail "it did not say why not docker: $(cat "${SCRATCH}/said")"
pass "no daemon: ${picked:-nothing} picked, and said: $(cat "${SCRATCH}/said")"

# A daemon but no buildx plugin: passed over too.
mkdir -p "${SCRATCH}/no-plugins"
picked="$(DOCKER_CONFIG="${SCRATCH}/no-plugins" "${detect}" 2> "${SCRATCH}/said")" || true
if docker buildx version >/dev/null 2>&1 && ! DOCKER_CONFIG="${SCRATCH}/no-plugins" docker buildx version >/dev/null 2>&1; then
  [[ "${picked}" != docker ]] || fail "docker picked without buildx"
  grep -q "docker: no buildx plugin" "${SCRATCH}/said" || fail "it did not say buildx is missing: $(cat "${SCRATCH}/said")"
  pass "no buildx: ${picked:-nothing} picked, and said so"
else
  echo "skip: a system-wide buildx plugin answers without DOCKER_CONFIG's"
fi

# make detects it and uses it: make base-image imports into docker's store.
make -C "${E2E_ROOT}" --no-print-directory SKIP_DEPS=true base-image ARCH=amd64 SUITE="${SUITE}" \
  > "${SCRATCH}/make.log" 2>&1 || { cat "${SCRATCH}/make.log" >&2; fail "make base-image with the engine detected"; }
grep -q "container engine: docker" "${SCRATCH}/make.log" || { cat "${SCRATCH}/make.log" >&2; fail "make did not say docker"; }
grep -q '^scripts/base-image.sh "docker" amd64' "${SCRATCH}/make.log" || { cat "${SCRATCH}/make.log" >&2; fail "make did not use docker"; }
docker image inspect "localhost/memprofile-base:${SUITE}-slim-amd64" >/dev/null || fail "no base in docker's store"
pass "make detects docker and uses it (make base-image)"
