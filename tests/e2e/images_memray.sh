#!/usr/bin/env bash
# make image-memprofile BACKEND=memray, on a Python app image with Debian's
# Python and no memray: a Debian trixie image with gunicorn 23 (Python 3.13)
# serving a WSGI app whose workers keep 256 KiB a request. Driven as a user
# would, with buildah:
#   - the build installs Debian's python3-memray, of the image's own suite and
#     architecture, with what it needs that the image lacks; the build's own
#     verify step has the image's interpreter import it (MEMRAY_IMPORTED),
#     and the image is labelled with the version;
#   - preflight of the result: READY, memray will track python3.13;
#   - run as a container, under load from curl on loopback: the arbiter and
#     its 2 workers serve status to a second process in the container, each
#     recording; snapshot marks all 3 captures (report ends a span of
#     each there); after SIGTERM, report names the
#     handler's line in each worker, and --merge sums them;
#   - a distroless-style image (base-files and python3.13-minimal alone,
#     unpacked from Debian's packages and recorded in its dpkg status) gets
#     what memray needs of the standard library with it: the build's verify
#     step imports memray there, and the container's capture names the line
#     that keeps the buffers (the arm64 path is images_memray_source_arm64.sh);
#   - an app image that runs no Python is refused before anything is built,
#     in one line.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/images_lib.sh
source "$(dirname "$0")/images_lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"
# Both helpers' ends: the services this test tracks, then its containers.
trap 'stop_services; unmount_all' EXIT

base="localhost/memprofile-test:trixie-gunicorn-amd64"
"${E2E_ROOT}/scripts/base-image.sh" buildah amd64 trixie "${base}" --include gunicorn > /dev/null ||
  fail "no trixie image with gunicorn"
root="${SCRATCH}/app-root"
mkdir -p "${root}/app"
leaky_wsgi_app
app=localhost/gunicorn-app:amd64
app_image "${base}" "${app}" "${root}/app" '["/usr/bin/gunicorn"]' \
  '["--chdir", "/app", "-w", "2", "--timeout", "0", "-b", "127.0.0.1:8000", "leaky:app"]'
buildah run --isolation chroot "${MOUNTED[-1]}" -- python3 -c 'import memray' 2> /dev/null &&
  fail "the app image imports memray already: the test would not show the build installing it"

mk image-memprofile APP_IMAGE="${app}" BACKEND=memray ENGINE_BUILD_FLAGS=--no-cache > "${SCRATCH}/build.log" 2>&1 ||
  { cat "${SCRATCH}/build.log" >&2; fail "make image-memprofile BACKEND=memray"; }
grep -q "memray-debian: python3-memray 1\.17\.[^ ]* for /usr/bin/python3.13 (trixie/amd64)" "${SCRATCH}/build.log" ||
  fail "the build did not install Debian's memray: $(grep memray-debian "${SCRATCH}/build.log")"
grep -q "MEMRAY_IMPORTED: the image's /usr/bin/python3[.0-9]* imports /usr/lib/python3/dist-packages/memray/_memray.cpython-313-x86_64-linux-gnu.so" \
  "${SCRATCH}/build.log" || fail "the build's verify step did not import memray: $(verify_step "${SCRATCH}/build.log")"
label="$(buildah inspect --type image "${app}-memprofile" | jq -r '.OCIv1.config.Labels["io.memprofile.backend.version"]')"
[[ "${label}" == 1.17.* ]] || fail "the image's backend version label: ${label}"
"${MEMPROFILE}" preflight "${SCRATCH}/image/image.tar" > "${SCRATCH}/preflight" ||
  fail "the memray image is not READY: $(cat "${SCRATCH}/preflight")"
grep -q "^READY: memray will track /usr/bin/python3.13$" "${SCRATCH}/preflight" ||
  fail "preflight: $(head -3 "${SCRATCH}/preflight")"
pass "the build installed Debian's python3-memray ${label} into the trixie app image, whose own python3.13 imported it; preflight READY"

gunicorn_memray_round "${app}-memprofile" "${SCRATCH}/image/image.tar"
pass "in the container: ${ROUND}"

# A distroless-style image: base-files and python3.13-minimal alone.
minimal="localhost/memprofile-test:trixie-python-minimal-amd64"
debian_packages_image scratch "${minimal}" amd64 trixie base-files python3.13-minimal
mkdir -p "${SCRATCH}/minimal-app"
cat > "${SCRATCH}/minimal-app/service.py" <<'PY'
kept = []


def keep():
    for _ in range(40):
        kept.append(bytearray(256 << 10))  # 10 MiB in all, kept to the end


keep()
print("kept", sum(len(b) for b in kept))
PY
keep_line="$(grep -n 'kept.append' "${SCRATCH}/minimal-app/service.py" | cut -d: -f1)"
small=localhost/python-minimal-app:amd64
app_image "${minimal}" "${small}" "${SCRATCH}/minimal-app" '["/usr/bin/python3.13", "/app/service.py"]' '[]'
mk image-memprofile APP_IMAGE="${small}" BACKEND=memray ENGINE_BUILD_FLAGS=--no-cache > "${SCRATCH}/minimal.log" 2>&1 ||
  { cat "${SCRATCH}/minimal.log" >&2; fail "make image-memprofile BACKEND=memray (a minimal image)"; }
grep -q "MEMRAY_IMPORTED: the image's /usr/bin/python3.13 imports /usr/lib/python3/dist-packages/memray/_memray.cpython-313-x86_64-linux-gnu.so" \
  "${SCRATCH}/minimal.log" || fail "the verify step did not import memray in the minimal image: $(verify_step "${SCRATCH}/minimal.log")"
"${MEMPROFILE}" preflight "${SCRATCH}/image/image.tar" > "${SCRATCH}/minimal.preflight" ||
  fail "the minimal memray image is not READY: $(cat "${SCRATCH}/minimal.preflight")"
run_entrypoint "${small}-memprofile" "${SCRATCH}/minimal-out" > "${SCRATCH}/minimal-run.log" 2>&1 ||
  { cat "${SCRATCH}/minimal-run.log" >&2; fail "run of the minimal image"; }
grep -q "profiling /usr/bin/python3[.0-9]* with memray" "${SCRATCH}/minimal-run.log" || fail "no start line: $(cat "${SCRATCH}/minimal-run.log")"
capture="$(find "${SCRATCH}/minimal-out" -name 'memray.*.bin' -print -quit)"
[[ -s "${capture}" ]] || fail "no capture: $(ls "${SCRATCH}/minimal-out")"
"${MEMPROFILE}" report --image "${SCRATCH}/image/image.tar" --json "${capture}" > "${SCRATCH}/minimal.json" ||
  fail "report: $(cat "${SCRATCH}/minimal.json")"
site="$(jq -r '.in_use[0] | "\(.site.function) (\(.site.file):\(.site.line)) \(.bytes_in_use)"' "${SCRATCH}/minimal.json")"
[[ "${site}" == "keep (/app/service.py:${keep_line}) "* ]] || fail "the minimal image's top site: ${site}"
pass "a distroless-style image (base-files, python3.13-minimal): memray staged with what it needs, imported in the build, READY; its capture names keep (service.py:${keep_line})"

# An app image that runs no Python: refused in one line, nothing built.
plain=localhost/not-python:amd64
app_image "${base}" "${plain}" "" '["/usr/bin/sleep"]' '["60"]'
rc=0
mk image-memprofile APP_IMAGE="${plain}" BACKEND=memray > "${SCRATCH}/plain.log" 2>&1 || rc=$?
((rc != 0)) || fail "an image that runs /usr/bin/sleep was built with BACKEND=memray"
grep -q "^memprofile: ${plain} cannot be tracked by memray" "${SCRATCH}/plain.log" ||
  fail "the refusal: $(tail -3 "${SCRATCH}/plain.log")"
buildah inspect --type image "${plain}-memprofile" > /dev/null 2>&1 && fail "an image was built for /usr/bin/sleep"
pass "an app image that runs /usr/bin/sleep: refused before the build ($(grep -o 'MEMRAY_NOT_PYTHON' "${SCRATCH}/plain.log" | head -1))"
