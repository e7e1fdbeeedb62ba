#!/usr/bin/env bash
# preflight docker:// through containers-registries.conf(5), against two
# real registries on loopback and skopeo reading the same file: a name
# moved elsewhere (location) on an insecure (plain HTTP) endpoint, mirrors
# tried first (one that is down, one that lacks the image), a mirror for
# digests only, a blocked name, a drop-in file in the user's directory, and
# one line when every source fails.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/registry_lib.sh
source "$(dirname "$0")/registry_lib.sh"

main_port="$(free_port)"
start_registry main "${main_port}"
empty_port="$(free_port)"
start_registry empty "${empty_port}"
wait_http "http://127.0.0.1:${main_port}/v2/" || fail "the registry did not start: $(cat "${SCRATCH}/main.log")"
wait_http "http://127.0.0.1:${empty_port}/v2/" || fail "the second registry did not start: $(cat "${SCRATCH}/empty.log")"
down_port="$(free_port)"  # nothing listens there
main="127.0.0.1:${main_port}"
empty="127.0.0.1:${empty_port}"
down="127.0.0.1:${down_port}"
for image in multi ready; do
  skopeo copy --quiet --all --dest-tls-verify=false "oci-archive:${IMAGES}/${image}.oci.tar" \
    "docker://${main}/team/${image}:v1" >/dev/null || fail "skopeo copy ${image}"
done
digest="sha256:$(skopeo inspect --raw --tls-verify=false "docker://${main}/team/ready:v1" | sha256sum | cut -d' ' -f1)"
pass "two registries on loopback, the images in one of them"

export HOME="${SCRATCH}/home"
mkdir -p "${HOME}"
unset XDG_RUNTIME_DIR REGISTRY_AUTH_FILE DOCKER_CONFIG
conf="${SCRATCH}/registries.conf"
export CONTAINERS_REGISTRIES_CONF="${conf}"

# skopeo, reading the same file, resolves REF to the same manifest that
# preflight judged; and the verdicts are the archive's.
same_as_skopeo() {  # ARCHIVE REF [preflight args]
  local archive="$1" ref="$2" ours theirs
  shift 2
  same_verdicts "${archive}" "docker://${ref}" "$@"
  ours="$("${MEMPROFILE}" preflight --json "$@" "docker://${ref}" | jq -r .reference)" || true
  # skopeo takes the file as a (hidden) global flag; podman and buildah
  # read CONTAINERS_REGISTRIES_CONF, as preflight does.
  local named=()
  [[ -z "${CONTAINERS_REGISTRIES_CONF:-}" ]] || named=(--registries-conf "${CONTAINERS_REGISTRIES_CONF}")
  skopeo "${named[@]}" inspect --raw "docker://${ref}" > "${SCRATCH}/raw" || fail "skopeo inspect ${ref}"
  # An index: preflight judged this machine's platform's manifest.
  theirs="$(jq -r '[.manifests[]? | select(.platform.architecture == "amd64")][0].digest // empty' "${SCRATCH}/raw")"
  [[ -n "${theirs}" ]] || theirs="sha256:$(sha256sum < "${SCRATCH}/raw" | cut -d' ' -f1)"
  [[ "${ours}" == "${theirs}" ]] || fail "${ref}: preflight judged ${ours}, skopeo resolves ${theirs}"
}

# A name that exists nowhere, moved to the registry (location), which speaks
# plain HTTP (insecure: no --tls-verify=false needed).
apps="[[registry]]
prefix = \"registry.example.invalid/apps\"
location = \"${main}/team\"
insecure = true"
echo "${apps}" > "${conf}"
same_as_skopeo "${IMAGES}/multi.oci.tar" registry.example.invalid/apps/multi:v1
same_as_skopeo "${IMAGES}/ready.oci.tar" "registry.example.invalid/apps/ready@${digest}"
pass "location: registry.example.invalid/apps is read from ${main}/team over plain HTTP (insecure = true)"

# Mirrors first: one that is down, one that lacks the image, then the
# primary location.
cat > "${conf}" <<TOML
[[registry]]
prefix = "registry.example.invalid/apps"
location = "${main}/team"
insecure = true
[[registry.mirror]]
location = "${down}/mirror"
insecure = true
[[registry.mirror]]
location = "${empty}/mirror"
insecure = true
TOML
same_as_skopeo "${IMAGES}/multi.oci.tar" registry.example.invalid/apps/multi:v1
# The primary down too: one line, with what each mirror said.
sed -i "s|^location = \"${main}/team\"|location = \"${down}/team\"|" "${conf}"
expect_error "${down}: cannot connect.*\(mirrors also failed: ${down}: .*cannot connect.*; ${empty} has no manifest mirror/multi:v1 \(404 Not Found\)" \
  docker://registry.example.invalid/apps/multi:v1
pass "mirrors in order (one down, one without the image), then the location; all down is one line"

# A mirror for digests only is not asked for a tag; a blocked name is refused.
cat > "${conf}" <<TOML
[[registry]]
prefix = "registry.example.invalid/apps"
location = "${down}/team"
insecure = true
mirror-by-digest-only = true
[[registry.mirror]]
location = "${main}/team"
insecure = true

[[registry]]
location = "${main}/team/multi"
blocked = true
TOML
same_as_skopeo "${IMAGES}/ready.oci.tar" "registry.example.invalid/apps/ready@${digest}"
expect_error "${down}: cannot connect" docker://registry.example.invalid/apps/ready:v1
expect_error "registries.conf: ${conf}: pulls of ${main}/team/multi are blocked" --tls-verify=false "docker://${main}/team/multi:v1"
pass "mirror-by-digest-only: the mirror serves a digest, not a tag; blocked = true refuses the name"

# Without the variable: the user's drop-in directory adds an entry, and a
# malformed drop-in is one line naming it.
unset CONTAINERS_REGISTRIES_CONF
mkdir -p "${HOME}/.config/containers/registries.conf.d"
echo "${apps}" > "${HOME}/.config/containers/registries.conf.d/50-apps.conf"
same_as_skopeo "${IMAGES}/multi.oci.tar" registry.example.invalid/apps/multi:v1
printf '[[registry]\nlocation = "x.io"\n' > "${HOME}/.config/containers/registries.conf.d/60-broken.conf"
expect_error "registries.conf: ${HOME}/.config/containers/registries.conf.d/60-broken.conf: malformed TOML: line 1" \
  docker://registry.example.invalid/apps/multi:v1
pass "a drop-in file in ~/.config/containers/registries.conf.d is read; a malformed one is one line naming it"
