#!/usr/bin/env bash
# make image-memprofile BACKEND=memray for arm64 from an amd64 host: a Debian
# trixie arm64 image with Python 3.13 and no memray, running a script that
# keeps a list of buffers. The image is distroless-style: base-files and
# python3.13-minimal alone with what they need, unpacked from Debian's arm64
# packages and recorded in its dpkg status (no qemu: mmdebstrap of the same
# under qemu took five minutes); the rest of the standard library comes
# with what memray needs. The build stages Debian's arm64
# python3-memray (apt on the host, for arm64), its verify step imports it in the image's
# own python3.13 under qemu (MEMRAY_IMPORTED, the aarch64 extension), and
# the container, run under qemu, writes a capture whose report names the
# line that keeps the buffers.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/images_lib.sh
source "$(dirname "$0")/images_lib.sh"

base="localhost/memprofile-test:trixie-python-minimal-arm64"
debian_packages_image scratch "${base}" arm64 trixie base-files python3.13-minimal
mkdir -p "${SCRATCH}/app"
cat > "${SCRATCH}/app/service.py" <<'PY'
kept = []


def keep():
    for _ in range(40):
        kept.append(bytearray(256 << 10))  # 10 MiB in all, kept to the end


keep()
print("kept", sum(len(b) for b in kept))
PY
keep_line="$(grep -n 'kept.append' "${SCRATCH}/app/service.py" | cut -d: -f1)"
app=localhost/python-app:arm64
work="$(buildah from --pull=never --quiet "${base}")"
MOUNTED+=("${work}")
buildah copy --quiet "${work}" "${SCRATCH}/app" /app > /dev/null
buildah config --entrypoint '["/usr/bin/python3.13", "/app/service.py"]' "${work}"
buildah commit --quiet "${work}" "${app}" > /dev/null
drop_at_exit "${app}" "${app}-memprofile"

mk image-memprofile APP_IMAGE="${app}" BACKEND=memray ENGINE_BUILD_FLAGS=--no-cache > "${SCRATCH}/build.log" 2>&1 ||
  { cat "${SCRATCH}/build.log" >&2; fail "make image-memprofile BACKEND=memray (arm64)"; }
image="${app}-memprofile"
[[ "$(buildah inspect --type image "${image}" | jq -r .OCIv1.architecture)" == arm64 ]] || fail "not an arm64 image"
grep -q "memray-debian: python3-memray 1\.17\.[^ ]* for /usr/bin/python3.13 (trixie/arm64)" "${SCRATCH}/build.log" ||
  fail "the build did not stage Debian's arm64 memray: $(grep memray-debian "${SCRATCH}/build.log")"
grep -q "MEMRAY_IMPORTED: the image's /usr/bin/python3.13 imports /usr/lib/python3/dist-packages/memray/_memray.cpython-313-aarch64-linux-gnu.so" \
  "${SCRATCH}/build.log" || fail "the verify step did not import the arm64 memray: $(verify_step "${SCRATCH}/build.log")"
"${MEMPROFILE}" preflight "${SCRATCH}/image/image.tar" > "${SCRATCH}/preflight" ||
  fail "the arm64 memray image is not READY: $(cat "${SCRATCH}/preflight")"
pass "arm64: Debian's arm64 python3-memray staged, imported by the image's python3.13 under qemu in the build; READY"

run_entrypoint "${image}" "${SCRATCH}/out" > "${SCRATCH}/run.log" 2>&1 || { cat "${SCRATCH}/run.log" >&2; fail "run"; }
grep -q "profiling /usr/bin/python3[.0-9]* with memray" "${SCRATCH}/run.log" || fail "no start line: $(cat "${SCRATCH}/run.log")"
capture="$(find "${SCRATCH}/out" -name 'memray.*.bin' -print -quit)"
[[ -s "${capture}" ]] || fail "no capture: $(ls "${SCRATCH}/out")"
"${MEMPROFILE}" report --image "${SCRATCH}/image/image.tar" --json "${capture}" > "${SCRATCH}/report.json" ||
  fail "report: $(cat "${SCRATCH}/report.json")"
site="$(jq -r '.in_use[0] | "\(.site.function) (\(.site.file):\(.site.line)) \(.bytes_in_use)"' "${SCRATCH}/report.json")"
[[ "${site}" == "keep (/app/service.py:${keep_line}) "* ]] || fail "the top site: ${site}"
pass "arm64 under qemu: the capture's report names keep (service.py:${keep_line}) (${site##* } bytes)"
