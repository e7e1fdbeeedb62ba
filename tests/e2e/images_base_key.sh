#!/usr/bin/env bash
# A cached base is reused only when it is the base asked for (#11): the same
# tag asked for with another package set is imported again, the same inputs
# twice reuse it, and every other cache keyed by content (root filesystems,
# preload builds) moves to a new key when what makes it changes.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/images_lib.sh
source "$(dirname "$0")/images_lib.sh"

tag=localhost/memprofile-keytest:bookworm-builder-amd64
drop_at_exit "${tag}"
base() { "${E2E_ROOT}/scripts/base-image.sh" buildah amd64 bookworm "${tag}" "$@" 2> "${SCRATCH}/stderr"; }
image_has() {  # FILE: the current ${tag} holds FILE
  local ctr root rc=0
  ctr="$(buildah from --pull=never --quiet "${tag}")"
  root="$(buildah mount "${ctr}")"
  [[ -e "${root}$1" ]] || rc=1
  buildah umount "${ctr}" >/dev/null
  buildah rm "${ctr}" >/dev/null
  return "${rc}"
}

# 1. The tag made with one package set (none beyond minbase)...
base >/dev/null
id1="$(image_id "${tag}")"
! image_has /usr/bin/hello || fail "the minbase image already has hello"
# 2. ...then asked for with another: imported again, and it says why.
base --include hello >/dev/null
id2="$(image_id "${tag}")"
[[ "${id2}" != "${id1}" ]] || fail "asking for another package set reused the cached base"
image_has /usr/bin/hello || fail "the base asked for with hello has no /usr/bin/hello"
grep -q "was made from other inputs" "${SCRATCH}/stderr" || fail "the rebuild did not say why: $(cat "${SCRATCH}/stderr")"
pass "the same tag with another package set is rebuilt"

# 3. The same inputs again: reused, silently; the package order does not matter.
base --include hello,hello >/dev/null
[[ "$(image_id "${tag}")" == "${id2}" && ! -s "${SCRATCH}/stderr" ]] || fail "the same inputs did not reuse the base"
# 4. And back: the first set again is rebuilt, not left with hello.
base >/dev/null
! image_has /usr/bin/hello || fail "going back to minbase kept the image with hello"
pass "the same inputs reuse it; going back rebuilds it"

# 5. Root filesystem keys: every input is in the name, the mirror too.
k1="$(cache_key bookworm amd64 "" hello "http://a/debian" "@${E2E_ROOT}/scripts/make-rootfs.sh")"
k2="$(cache_key bookworm amd64 "" hello "http://b/debian" "@${E2E_ROOT}/scripts/make-rootfs.sh")"
[[ "${k1}" != "${k2}" ]] || fail "the mirror does not change a root's key"
tarball="$("${E2E_ROOT}/scripts/make-rootfs.sh" amd64 --include hello)"
[[ "${tarball}" == *"-hello-$(cat "${tarball}.key")".tar ]] || fail "the root's name does not hold its key: ${tarball}"
# An explicit OUT whose key is not this one's is made again, not reused.
cp "${tarball}" "${SCRATCH}/root.tar"
echo stale > "${SCRATCH}/root.tar.key"
out="$("${E2E_ROOT}/scripts/make-rootfs.sh" amd64 "${SCRATCH}/root.tar" --include hello)"
[[ -s "${out}" && "$(cat "${out}.key")" == "$(cat "${tarball}.key")" ]] || fail "a root with a stale key was reused"
pass "root filesystems are keyed by suite, arches, packages, mirror and script"

# 6. Preload builds: a changed recipe is a new key; the manifest records it.
cp -a "${E2E_ROOT}/preload" "${E2E_ROOT}/scripts" "${SCRATCH}/"
before="$("${SCRATCH}/preload/build.sh" --key jemalloc)"
[[ "${before}" == "$("${E2E_ROOT}/preload/build.sh" --key jemalloc)" ]] || fail "the recipe key depends on where the tree is"
echo "# changed" >> "${SCRATCH}/preload/jemalloc/recipe.sh"
[[ "$("${SCRATCH}/preload/build.sh" --key jemalloc)" != "${before}" ]] || fail "a changed recipe keeps its key"
[[ "$(jq -r .recipe_key "$(preload_dist heaptrack amd64)/manifest.json")" == \
  "$("${E2E_ROOT}/preload/build.sh" --key heaptrack)" ]] || fail "a built library's manifest does not record its recipe key"
pass "preload builds are keyed by their recipe"
