#!/usr/bin/env bash
# make image-memprofile BACKEND=memray on an image whose Python is not
# Debian's: the python: images' kind, CPython 3.11 built from its release
# tarball into /usr/local (tests/fixtures/cpython.sh) on a Debian bookworm
# slim base, running a script that forks two workers, each keeping buffers.
# Driven as a user would, with buildah:
#   - preflight finds /usr/local/bin/python3.11, not Debian's, with its
#     headers in /usr/local/include/python3.11;
#   - the build copies those headers out of the app image, builds memray
#     from Debian's source package against them and installs it in
#     /usr/local/lib/python3.11/site-packages, where that interpreter (and
#     pip) looks; the build's verify step imports it there;
#   - run as a container: each forked worker's capture names the line
#     that keeps its buffers.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/images_lib.sh
source "$(dirname "$0")/images_lib.sh"

cpython="$("${E2E_ROOT}/tests/fixtures/cpython.sh")" || fail "CPython 3.11 from source"
mk base-image ARCH=amd64 SUITE="${SUITE}" > /dev/null
fork_workers_app "${SCRATCH}/app"
app=localhost/local-python-app:amd64
app_image "localhost/memprofile-base:${SUITE}-slim-amd64" "${app}" "${SCRATCH}/app" '["python3", "/app/service.py"]' '[]'
buildah add --quiet "${MOUNTED[-1]}" "${cpython}" / > /dev/null
buildah config --env PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin "${MOUNTED[-1]}"
buildah commit --quiet "${MOUNTED[-1]}" "${app}" > /dev/null
buildah run --isolation chroot "${MOUNTED[-1]}" -- python3 -c 'import sys; assert sys.prefix == "/usr/local"' ||
  fail "the app image's python3 is not the one in /usr/local"

buildah push --quiet "${app}" "oci-archive:${SCRATCH}/app.tar" > /dev/null
"${MEMPROFILE}" preflight --json --backend memray "${SCRATCH}/app.tar" > "${SCRATCH}/app.json" || true
jq -e '.python | .interpreter == "/usr/local/bin/python3.11" and .debian.python_package == null and .headers
    and .include_dir == "/usr/local/include/python3.11" and .site_packages == "/usr/local/lib/python3.11/site-packages"' \
  "${SCRATCH}/app.json" > /dev/null || fail "preflight's python facts: $(jq -c '.python | del(.debian)' "${SCRATCH}/app.json")"

mk image-memprofile APP_IMAGE="${app}" BACKEND=memray ENGINE_BUILD_FLAGS=--no-cache > "${SCRATCH}/build.log" 2>&1 ||
  { cat "${SCRATCH}/build.log" >&2; fail "make image-memprofile BACKEND=memray"; }
site=/usr/local/lib/python3.11/site-packages
if ! { grep -q "memray-debian: /usr/local/bin/python3.11 (3.11) is not Debian's python" "${SCRATCH}/build.log" &&
  grep -q "memray-source: memray 1\.17\.0 for /usr/local/bin/python3.11 in ${site} (amd64; built against the image's /usr/local/include/python3.11)" \
    "${SCRATCH}/build.log" &&
  grep -q "MEMRAY_IMPORTED: the image's /usr/local/bin/python3[.0-9]* imports ${site}/memray/_memray.cpython-311-x86_64-linux-gnu.so" \
    "${SCRATCH}/build.log"; }; then
  fail "the build: $(grep -E 'memray-|MEMRAY' "${SCRATCH}/build.log")"
fi
"${MEMPROFILE}" preflight "${SCRATCH}/image/image.tar" > "${SCRATCH}/preflight" ||
  fail "the memray image is not READY: $(cat "${SCRATCH}/preflight")"
pass "a Python not Debian's (/usr/local/bin/python3.11 built from source): memray built against the image's own headers, installed in ${site}, imported there in the build; READY"

fork_workers_round "${app}-memprofile" "${SCRATCH}/image/image.tar" "${SCRATCH}/out"
pass "in the container: each of the 2 forked workers has its capture, and report names keep (service.py:${keep_line}) in each"
