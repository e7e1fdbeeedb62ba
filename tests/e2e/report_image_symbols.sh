#!/usr/bin/env bash
# report's symbols for a stripped binary (tests/e2e/lib.sh's sites program
# under Debian's libjemalloc): from a root directory, its debug file found by
# build-id under its /usr/lib/debug; from an image (an OCI layout) read in
# one pass; and another build of the binary refused, not misread.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

sites_build c
sites_record c

# Symbols from a root directory holding the stripped binary at the path it
# ran from, its debug file under /usr/lib/debug/.build-id.
root="${SCRATCH}/root"
mkdir -p "${root}${SCRATCH}"
build_id="$(readelf -n "${SCRATCH}/sites-c" | awk '/Build ID/ { print $3 }')"
mkdir -p "${root}/usr/lib/debug/.build-id/${build_id:0:2}"
objcopy --only-keep-debug "${SCRATCH}/sites-c" "${root}/usr/lib/debug/.build-id/${build_id:0:2}/${build_id:2}.debug"
strip -o "${root}${SCRATCH}/sites-c" "${SCRATCH}/sites-c"
"${MEMPROFILE}" report --json --rootfs "${root}" "${SCRATCH}/c" > "${SCRATCH}/stripped.json"
jq -e --argjson line "$(sites_line_of sites.c grow_steadily)" \
  '.growth[0].site | .function == "grow_steadily" and .line == $line' "${SCRATCH}/stripped.json" > /dev/null ||
  fail "stripped + build-id debug file: $(jq -c '.growth[0].site' "${SCRATCH}/stripped.json")"
jq -e '[.warnings[] | select(test("libc.so.6: not in the image"))] | length == 1' "${SCRATCH}/stripped.json" > /dev/null ||
  fail "a file missing from the root is not said: $(jq -c .warnings "${SCRATCH}/stripped.json")"
pass "a stripped binary: its debug file found by build-id in the root's /usr/lib/debug; a missing library said once"

# The same root as an image (an OCI layout, one layer): read in one pass,
# only the mapped files and the debug files kept, nothing extracted.
oci="${SCRATCH}/oci"
mkdir -p "${oci}/blobs/sha256"
tar -C "${root}" --numeric-owner -cf "${SCRATCH}/layer.tar" .
layer="$(sha256sum < "${SCRATCH}/layer.tar" | cut -d' ' -f1)"
mv "${SCRATCH}/layer.tar" "${oci}/blobs/sha256/${layer}"
blob() {  # JSON -> its digest, stored as a blob
  local d
  d="$(printf %s "$1" | sha256sum | cut -d' ' -f1)"
  printf %s "$1" > "${oci}/blobs/sha256/${d}"
  echo "${d}"
}
config="$(blob "$(jq -cn --arg d "sha256:${layer}" \
  '{architecture: "amd64", os: "linux", config: {}, rootfs: {type: "layers", diff_ids: [$d]}}')")"
manifest="$(blob "$(jq -cn --arg c "sha256:${config}" --argjson cs "$(stat -c %s "${oci}/blobs/sha256/${config}")" \
  --arg l "sha256:${layer}" --argjson ls "$(stat -c %s "${oci}/blobs/sha256/${layer}")" \
  '{schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
    config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $c, size: $cs},
    layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar", digest: $l, size: $ls}]}')")"
jq -cn --arg m "sha256:${manifest}" --argjson ms "$(stat -c %s "${oci}/blobs/sha256/${manifest}")" \
  '{schemaVersion: 2, manifests: [{mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $m, size: $ms}]}' \
  > "${oci}/index.json"
echo '{"imageLayoutVersion": "1.0.0"}' > "${oci}/oci-layout"
"${MEMPROFILE}" report --json --image "${oci}" "${SCRATCH}/c" > "${SCRATCH}/image.json"
[[ "$(jq -c '[.growth[0].site.function, .growth[0].site.line]' "${SCRATCH}/image.json")" == \
  "$(jq -c '[.growth[0].site.function, .growth[0].site.line]' "${SCRATCH}/stripped.json")" ]] ||
  fail "--image: $(jq -c '.growth[0].site' "${SCRATCH}/image.json")"
pass "--image (an OCI layout of the same root): the same answer, the debug file read from the image"

# Another build at that path: refused with a warning, nothing attributed to
# it. jemalloc records no build-id: the same layout with other code (-O2) is
# caught by its return addresses, which no longer follow calls; another
# layout by its segments.
other_build() {  # GCC FLAGS...
  gcc -g "$@" -o "${root}${SCRATCH}/sites-c" "${SITES_SRC}/sites.c"
  "${MEMPROFILE}" report --json --rootfs "${root}" "${SCRATCH}/c" > "${SCRATCH}/other.json"
  jq -e '[.warnings[] | select(test("sites-c: not the (build|file) the process (ran|mapped)"))] | length == 1' \
    "${SCRATCH}/other.json" > /dev/null || fail "another build ($*) is not refused: $(jq -c .warnings "${SCRATCH}/other.json")"
  jq -e '[.in_use[].stack[] | select(.function == "grow_steadily" or .function == "allocate_once")] | length == 0' \
    "${SCRATCH}/other.json" > /dev/null || fail "another build's symbols were used ($*)"
  echo "   $(jq -r '.warnings[] | select(test("sites-c"))' "${SCRATCH}/other.json")"
}
other_build -O2 -fno-inline
other_build -O0 -Wl,-z,max-page-size=0x10000 -Wl,-z,separate-code
pass "another build of the binary (same layout, or another): refused with a warning, no function attributed from it"
