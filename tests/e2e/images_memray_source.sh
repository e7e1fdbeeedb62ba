#!/usr/bin/env bash
# make image-memprofile BACKEND=memray where Debian has no memray for the
# image's Python: a Debian bookworm image (Python 3.11; bookworm has no
# python3-memray) with gunicorn 20 serving a WSGI app whose workers keep
# 256 KiB a request. Driven as a user would, with buildah:
#   - the build says bookworm has no python3-memray and builds memray from
#     Debian's source package against Debian's libpython3.11-dev at the
#     image's python's version, into /usr/local/lib/python3.11/dist-packages
#     (where pip puts it), with the two libraries it links beside it; the
#     build's own verify step has the image's python3.11 import it, and the
#     manifest names the pinned sources and every file's SHA-256;
#   - preflight of the result: READY;
#   - built DORMANT=true and run as a container: the arbiter and its 2
#     workers serve status, none recording; `start` from a second container
#     of the image (sharing the profile volume) starts all 3 without a
#     restart, `stop` closes them, report names the handler's line in each
#     worker with the requests between the two alone, --merge sums them;
#   - an app in a venv made without the system's packages gets memray in the
#     venv, from the same build (reused: the cache's key), and each of its
#     forked workers' captures names the keeping line;
#   - a Python not Debian's whose headers are not in the image is refused in
#     one line, before anything is built.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/images_lib.sh
source "$(dirname "$0")/images_lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"
trap 'stop_services; unmount_all' EXIT

base="localhost/memprofile-test:bookworm-gunicorn-amd64"
"${E2E_ROOT}/scripts/base-image.sh" buildah amd64 bookworm "${base}" --include gunicorn > /dev/null ||
  fail "no bookworm image with gunicorn"
root="${SCRATCH}/app-root"
mkdir -p "${root}/app"
leaky_wsgi_app
app=localhost/gunicorn-app:bookworm-amd64
app_image "${base}" "${app}" "${root}/app" '["/usr/bin/gunicorn"]' \
  '["--chdir", "/app", "-w", "2", "--timeout", "0", "-b", "127.0.0.1:8000", "leaky:app"]'
buildah run --isolation chroot "${MOUNTED[-1]}" -- python3 -c 'import memray' 2> /dev/null &&
  fail "the app image imports memray already: the test would not show the build installing it"

mk image-memprofile APP_IMAGE="${app}" BACKEND=memray DORMANT=true ENGINE_BUILD_FLAGS=--no-cache > "${SCRATCH}/build.log" 2>&1 ||
  { cat "${SCRATCH}/build.log" >&2; fail "make image-memprofile BACKEND=memray"; }
grep -q "memray-debian: bookworm has no python3-memray" "${SCRATCH}/build.log" ||
  fail "the build did not say why Debian's package is not used: $(grep memray- "${SCRATCH}/build.log")"
site=/usr/local/lib/python3.11/dist-packages
# Built now, or before from the same inputs (a warm cache): either way the
# source build's line.
grep -q "memray-source: memray 1\.17\.0 for /usr/bin/python3.11 in ${site} (amd64; built against Debian's libpython3.11-dev 3\.11\.[^ ]* (bookworm/amd64))" \
  "${SCRATCH}/build.log" || fail "the build did not build memray from source: $(grep memray- "${SCRATCH}/build.log")"
grep -q "MEMRAY_IMPORTED: the image's /usr/bin/python3[.0-9]* imports ${site}/memray/_memray.cpython-311-x86_64-linux-gnu.so" \
  "${SCRATCH}/build.log" || fail "the build's verify step did not import memray: $(verify_step "${SCRATCH}/build.log")"
img="$(image_root "${app}-memprofile")"
manifest="${img}/usr/share/memprofile/backend-memray.json"
jq -e --arg site "${site}" '.source == "debian-source" and .version == "1.17.0" and .tag == "cpython-311"
  and (.sources | length) == 3 and all(.sources[]; test(" sha256 [0-9a-f]{64}$"))
  and (.files | map(select(.path == ($site + "/memray.libs/liblz4.so.1") or .path == ($site + "/memray.libs/libunwind.so.8"))) | length) == 2
  and all(.files[]; (.sha256 | length) == 64)' "${manifest}" > /dev/null || fail "the manifest: $(jq -c 'del(.files)' "${manifest}")"
while read -r sum path; do
  [[ "$(sha256sum "${img}${path}" | cut -d' ' -f1)" == "${sum}" ]] || fail "${path}: not the manifest's SHA-256"
done < <(jq -r '.files[] | "\(.sha256) \(.path)"' "${manifest}")
[[ -f "${img}${site}/memray-1.17.0.dist-info/RECORD" ]] || fail "no dist-info for pip"
label="$(buildah inspect --type image "${app}-memprofile" | jq -r '.OCIv1.config.Labels["io.memprofile.backend.version"]')"
[[ "${label}" == 1.17.0 ]] || fail "the image's backend version label: ${label}"
"${MEMPROFILE}" preflight "${SCRATCH}/image/image.tar" > "${SCRATCH}/preflight" ||
  fail "the memray image is not READY: $(cat "${SCRATCH}/preflight")"
grep -q "^READY: memray will track /usr/bin/python3.11$" "${SCRATCH}/preflight" ||
  fail "preflight: $(head -3 "${SCRATCH}/preflight")"
pass "bookworm has no python3-memray: memray ${label} built from Debian's source package against libpython3.11-dev into ${site}, imported by the image's python3.11 in the build ($(jq '.files | length' "${manifest}") files, each SHA-256 checked); preflight READY"

gunicorn_memray_round "${app}-memprofile" "${SCRATCH}/image/image.tar" dormant
pass "dormant, in the container: ${ROUND}"

# An app in a venv made without the system's packages, the way most Python
# services ship: memray goes into the venv, and the build for the same
# interpreter and headers is reused, not made again.
fork_workers_app "${SCRATCH}/venv-app"
venv_app=localhost/venv-app:bookworm-amd64
app_image "${base}" "${venv_app}" "${SCRATCH}/venv-app" '["/opt/venv/bin/python", "/app/service.py"]' '[]'
buildah run --isolation chroot "${MOUNTED[-1]}" -- python3 -m venv --without-pip /opt/venv || fail "cannot make the venv"
buildah commit --quiet "${MOUNTED[-1]}" "${venv_app}" > /dev/null
mk image-memprofile APP_IMAGE="${venv_app}" BACKEND=memray > "${SCRATCH}/venv.log" 2>&1 ||
  { cat "${SCRATCH}/venv.log" >&2; fail "make image-memprofile BACKEND=memray (a venv)"; }
vsite=/opt/venv/lib/python3.11/site-packages
if ! { grep -q "memray-debian: /opt/venv/bin/python is a venv made without the system's site-packages" "${SCRATCH}/venv.log" &&
  grep -q "memray-source: memray for cpython-311 (amd64) built before from the same inputs" "${SCRATCH}/venv.log" &&
  grep -q "MEMRAY_IMPORTED: the image's /opt/venv/bin/python imports ${vsite}/memray/_memray.cpython-311-x86_64-linux-gnu.so" \
    "${SCRATCH}/venv.log"; }; then
  fail "the venv's build: $(grep -E 'memray-|MEMRAY' "${SCRATCH}/venv.log")"
fi
fork_workers_round "${venv_app}-memprofile" "${SCRATCH}/image/image.tar" "${SCRATCH}/venv-out"
pass "a venv without the system's packages: memray installed in ${vsite} (the build for the same interpreter and headers reused), each forked worker's capture names keep (service.py:${keep_line})"

# A Python not Debian's whose headers are not in the image: nothing to build
# memray against, said in one line, nothing built.
nohdr=localhost/no-headers:bookworm-amd64
app_image "${base}" "${nohdr}" "" '["/usr/local/bin/python3.11", "-c", "pass"]' '[]'
buildah run --isolation chroot "${MOUNTED[-1]}" -- cp /usr/bin/python3.11 /usr/local/bin/python3.11 || fail "cp"
buildah commit --quiet "${MOUNTED[-1]}" "${nohdr}" > /dev/null
rc=0
mk image-memprofile APP_IMAGE="${nohdr}" BACKEND=memray > "${SCRATCH}/nohdr.log" 2>&1 || rc=$?
((rc != 0)) || fail "an image whose Python has no headers was built"
grep -q "^memprofile: /usr/local/bin/python3.11 (3.11) has no C headers in the image (no /usr/local/include/python3.11/Python.h), and it is not Debian's python" \
  "${SCRATCH}/nohdr.log" || fail "the refusal: $(grep memprofile: "${SCRATCH}/nohdr.log" | tail -3)"
buildah inspect --type image "${nohdr}-memprofile" > /dev/null 2>&1 && fail "an image was built without memray's headers"
pass "a Python not Debian's without its headers in the image: refused in one line, nothing built"
