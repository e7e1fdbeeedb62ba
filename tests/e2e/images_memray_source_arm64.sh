#!/usr/bin/env bash
# make image-memprofile BACKEND=memray for arm64 from an amd64 host, where
# Debian has no memray for the image's Python: a distroless-style Debian
# bookworm arm64 image (python3.11 unpacked onto the slim base and recorded
# in its dpkg status, no maintainer script run), running a script that forks
# two workers, each keeping buffers. The build cross-compiles memray from
# Debian's source package against Debian's arm64 libpython3.11-dev, its
# verify step imports it in the image's own python3.11 under qemu
# (MEMRAY_IMPORTED, the aarch64 extension), and the container, run under
# qemu, writes a capture for each worker whose report names the line that
# keeps its buffers.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/images_lib.sh
source "$(dirname "$0")/images_lib.sh"

mk base-image ARCH=arm64 SUITE="${SUITE}" > /dev/null
python_base="localhost/memprofile-test:bookworm-python3.11-arm64"
debian_packages_image "localhost/memprofile-base:${SUITE}-slim-arm64" "${python_base}" arm64 "${SUITE}" python3.11
fork_workers_app "${SCRATCH}/app"
app=localhost/python-source-app:arm64
app_image "${python_base}" "${app}" "${SCRATCH}/app" '["/usr/bin/python3.11", "/app/service.py"]' '[]'

mk image-memprofile APP_IMAGE="${app}" BACKEND=memray ENGINE_BUILD_FLAGS=--no-cache > "${SCRATCH}/build.log" 2>&1 ||
  { cat "${SCRATCH}/build.log" >&2; fail "make image-memprofile BACKEND=memray (arm64)"; }
image="${app}-memprofile"
[[ "$(buildah inspect --type image "${image}" | jq -r .OCIv1.architecture)" == arm64 ]] || fail "not an arm64 image"
site=/usr/local/lib/python3.11/dist-packages
grep -q "memray-source: memray 1\.17\.0 for /usr/bin/python3.11 in ${site} (arm64; built against Debian's libpython3.11-dev 3\.11\.[^ ]* (bookworm/arm64))" \
  "${SCRATCH}/build.log" || fail "the build did not cross-build memray for arm64: $(grep memray- "${SCRATCH}/build.log")"
grep -q "MEMRAY_IMPORTED: the image's /usr/bin/python3.11 imports ${site}/memray/_memray.cpython-311-aarch64-linux-gnu.so" \
  "${SCRATCH}/build.log" || fail "the verify step did not import the arm64 memray: $(verify_step "${SCRATCH}/build.log")"
"${MEMPROFILE}" preflight "${SCRATCH}/image/image.tar" > "${SCRATCH}/preflight" ||
  fail "the arm64 memray image is not READY: $(cat "${SCRATCH}/preflight")"
pass "arm64: memray cross-built from Debian's source package for bookworm's python3.11, imported by the image's interpreter under qemu in the build; READY"

fork_workers_round "${image}" "${SCRATCH}/image/image.tar" "${SCRATCH}/out"
pass "arm64 under qemu: each of the 2 forked workers has its capture, and report names keep (service.py:${keep_line}) in each"
