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
#     recording; snapshot reaches all 3 (memray's capture is continuous:
#     each says so); after SIGTERM, report names the
#     handler's line in each worker, and --merge sums them;
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
work="$(buildah from --pull=never --quiet "${base}")"
MOUNTED+=("${work}")
buildah copy --quiet "${work}" "${root}/app" /app > /dev/null
buildah config --entrypoint '["/usr/bin/gunicorn"]' \
  --cmd '["--chdir", "/app", "-w", "2", "--timeout", "0", "-b", "127.0.0.1:8000", "leaky:app"]' "${work}"
buildah commit --quiet "${work}" "${app}" > /dev/null
drop_at_exit "${app}" "${app}-memprofile"
buildah run --isolation chroot "${work}" -- python3 -c 'import memray' 2> /dev/null &&
  fail "the app image imports memray already: the test would not show the build installing it"

mk image-memprofile APP_IMAGE="${app}" BACKEND=memray ENGINE_BUILD_FLAGS=--no-cache > "${SCRATCH}/build.log" 2>&1 ||
  { cat "${SCRATCH}/build.log" >&2; fail "make image-memprofile BACKEND=memray"; }
grep -q "memray-debian: python3-memray 1\.17\.[^ ]* for /usr/bin/python3.13 (trixie/amd64)" "${SCRATCH}/build.log" ||
  fail "the build did not install Debian's memray: $(grep memray-debian "${SCRATCH}/build.log")"
grep -q "MEMRAY_IMPORTED: the image's /usr/bin/python3[.0-9]* imports /usr/lib/python3/dist-packages/memray/_memray.cpython-313-x86_64-linux-gnu.so" \
  "${SCRATCH}/build.log" || fail "the build's verify step did not import memray: $(grep -i memray "${SCRATCH}/build.log" | tail -5)"
label="$(buildah inspect --type image "${app}-memprofile" | jq -r '.OCIv1.config.Labels["io.memprofile.backend.version"]')"
[[ "${label}" == 1.17.* ]] || fail "the image's backend version label: ${label}"
"${MEMPROFILE}" preflight "${SCRATCH}/image/image.tar" > "${SCRATCH}/preflight" ||
  fail "the memray image is not READY: $(cat "${SCRATCH}/preflight")"
grep -q "^READY: memray will track /usr/bin/python3.13$" "${SCRATCH}/preflight" ||
  fail "preflight: $(head -3 "${SCRATCH}/preflight")"
pass "the build installed Debian's python3-memray ${label} into the trixie app image, whose own python3.13 imported it; preflight READY"

port="$(free_port)"
out="${SCRATCH}/out"
mkdir -p "${out}"
chmod 1777 "${out}"
ctr="$(buildah from --pull=never --quiet "${app}-memprofile")"
MOUNTED+=("${ctr}")
buildah run --isolation chroot -v "${out}:/var/memprofile" "${ctr}" -- /usr/bin/memprofile exec --from-config -- \
  --chdir /app -w 2 --timeout 0 -b "127.0.0.1:${port}" leaky:app > "${SCRATCH}/gunicorn.log" 2>&1 &
service=$!
wait_sockets "${out}" 3 "${service}" "${SCRATCH}/gunicorn.log"
arbiter="$(jq -r 'select(.parent == 0) | .pid' "${out}"/memprofile-proc.*.json)"
[[ "${arbiter}" =~ ^[0-9]+$ ]] || fail "no arbiter among the records: $(cat "${out}"/memprofile-proc.*.json)"
track "${arbiter}"
for _ in $(seq 1 80); do
  curl -fsS --max-time 30 "http://127.0.0.1:${port}/" > /dev/null || fail "gunicorn does not answer: $(tail -3 "${SCRATCH}/gunicorn.log")"
done
in_pod() { buildah run --isolation chroot -v "${out}:/var/memprofile" "${ctr}" -- /usr/bin/memprofile "$@"; }
in_pod status "${arbiter}" --json > "${SCRATCH}/status.json" 2> /dev/null || fail "status: $(cat "${SCRATCH}/status.json")"
jq -e '.tree.served == 3 and ([.processes[] | select(.backend == "memray" and .recording)] | length) == 3' \
  "${SCRATCH}/status.json" > /dev/null ||
  fail "status: $(jq -c '.tree, [.processes[] | {pid, parent, backend, recording}]' "${SCRATCH}/status.json")"
# memray writes one continuous capture: snapshot reaches each process and
# says so (exit 1), as with memprofile exec outside an image.
rc=0
in_pod snapshot "${arbiter}" > "${SCRATCH}/snap" 2>&1 || rc=$?
if ((rc != 1)) || (($(grep -c 'memray writes one continuous file, not snapshots' "${SCRATCH}/snap") != 3)); then
  fail "the tree's snapshot: exit ${rc}: $(cat "${SCRATCH}/snap")"
fi
mapfile -t workers < <(jq -r --argjson a "${arbiter}" 'select(.parent == $a) | .pid' "${out}"/memprofile-proc.*.json | sort -n)
((${#workers[@]} == 2)) || fail "not 2 workers of ${arbiter}: ${workers[*]}"
kill -TERM "${arbiter}"
wait "${service}" || fail "gunicorn's exit code: $? $(tail -3 "${SCRATCH}/gunicorn.log")"

top_site() { jq -r '.in_use[0] | "\(.site.function) (\(.site.file):\(.site.line)) \(.bytes_in_use)"' "$1"; }
total=0
for w in "${workers[@]}"; do
  capture="${out}/memray.${arbiter}.bin.${w}"
  [[ -s "${capture}" ]] || fail "no capture for worker ${w}: $(ls "${out}")"
  "${MEMPROFILE}" report --image "${SCRATCH}/image/image.tar" --json "${capture}" > "${SCRATCH}/worker-${w}.json" ||
    fail "report of worker ${w}"
  [[ "$(top_site "${SCRATCH}/worker-${w}.json")" == "app (/app/leaky.py:${app_line}) "* ]] ||
    fail "worker ${w}'s top site: $(top_site "${SCRATCH}/worker-${w}.json")"
  total=$((total + $(jq '.in_use[0].bytes_in_use' "${SCRATCH}/worker-${w}.json")))
done
((total >= 80 * 256 * 1024)) || fail "the workers hold ${total} bytes at the handler, not the 20 MiB kept"
"${MEMPROFILE}" report --image "${SCRATCH}/image/image.tar" --json --merge "${out}" > "${SCRATCH}/merged.json" ||
  fail "report --merge"
merged="$(jq '.in_use[0].bytes_in_use' "${SCRATCH}/merged.json")"
if [[ "$(top_site "${SCRATCH}/merged.json")" != "app (/app/leaky.py:${app_line}) "* ]] || ((merged < total)); then
  fail "--merge: $(top_site "${SCRATCH}/merged.json") against ${total} in the workers"
fi
pass "in the container: the arbiter and its 2 workers served status (each recording) and snapshot; report names app (leaky.py:${app_line}) in each worker (${total} bytes together), --merge sums them (${merged})"

# An app image that runs no Python: refused in one line, nothing built.
plain=localhost/not-python:amd64
work="$(buildah from --pull=never --quiet "${base}")"
MOUNTED+=("${work}")
buildah config --entrypoint '["/usr/bin/sleep"]' --cmd '["60"]' "${work}"
buildah commit --quiet "${work}" "${plain}" > /dev/null
drop_at_exit "${plain}" "${plain}-memprofile"
rc=0
mk image-memprofile APP_IMAGE="${plain}" BACKEND=memray > "${SCRATCH}/plain.log" 2>&1 || rc=$?
((rc != 0)) || fail "an image that runs /usr/bin/sleep was built with BACKEND=memray"
grep -q "^memprofile: ${plain} cannot be tracked by memray" "${SCRATCH}/plain.log" ||
  fail "the refusal: $(tail -3 "${SCRATCH}/plain.log")"
buildah inspect --type image "${plain}-memprofile" > /dev/null 2>&1 && fail "an image was built for /usr/bin/sleep"
pass "an app image that runs /usr/bin/sleep: refused before the build ($(grep -o 'MEMRAY_NOT_PYTHON' "${SCRATCH}/plain.log" | head -1))"
