#!/usr/bin/env bash
# make base-image CONTAINER_ENGINE=docker: a Debian base from Debian's archive
# (mmdebstrap) imported into docker's store for its platform, labelled with
# the key of what it was made from; the same inputs reuse it, another package
# set under the same tag imports it again and says why.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/docker_lib.sh
source "$(dirname "$0")/docker_lib.sh"

# The bases the other docker tests and make example use.
base_images amd64
for variant in slim builder; do
  ref="localhost/memprofile-base:${SUITE}-${variant}-amd64"
  [[ "$(docker image inspect --format '{{.Os}}/{{.Architecture}}' "${ref}")" == linux/amd64 ]] || fail "${ref}: not linux/amd64"
  [[ "$(docker image inspect --format '{{index .Config.Labels "io.memprofile.base.key"}}' "${ref}")" =~ ^[0-9a-f]{16}$ ]] ||
    fail "${ref} has no io.memprofile.base.key label"
done
docker run --rm "localhost/memprofile-base:${SUITE}-builder-amd64" sh -c 'command -v gcc && command -v cargo' >/dev/null ||
  fail "the builder base has no gcc or cargo"
[[ "$(docker run --rm "localhost/memprofile-base:${SUITE}-slim-amd64" cat /etc/debian_version)" == 12.* ]] ||
  fail "the slim base is not Debian 12"
pass "make base-image imports slim and builder bases into docker, labelled with their key"

# Reuse by key, not by name.
tag=localhost/memprofile-keytest:${SUITE}-amd64
drop_at_exit "${tag}"
base() { "${E2E_ROOT}/scripts/base-image.sh" docker amd64 "${SUITE}" "${tag}" "$@" 2> "${SCRATCH}/stderr"; }
docker rmi --force "${tag}" >/dev/null 2>&1 || true
base >/dev/null
id1="$(image_id "${tag}")"
base --include hello >/dev/null
id2="$(image_id "${tag}")"
[[ "${id2}" != "${id1}" ]] || fail "another package set reused the cached base"
grep -q "was made from other inputs" "${SCRATCH}/stderr" || fail "the reimport did not say why: $(cat "${SCRATCH}/stderr")"
docker run --rm "${tag}" /usr/bin/hello >/dev/null || fail "the base asked for with hello has no hello"
base --include hello >/dev/null
[[ "$(image_id "${tag}")" == "${id2}" && ! -s "${SCRATCH}/stderr" ]] || fail "the same inputs did not reuse the base"
pass "the same inputs reuse a docker base; another package set imports it again, saying why"
