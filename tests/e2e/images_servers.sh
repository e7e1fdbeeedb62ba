#!/usr/bin/env bash
# A real server's tree in a profilable image run by buildah: Debian's nginx
# (a master and two workers that setuid to www-data) in a bookworm image,
# made profilable with jemalloc. Driven from outside as a user would: HTTP
# on loopback, and status and snapshot of the master from a second process
# in the container; every worker is listed and reached.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/images_lib.sh
source "$(dirname "$0")/images_lib.sh"

seed_dist jemalloc amd64
base="localhost/memprofile-test:${SUITE}-nginx-amd64"
"${E2E_ROOT}/scripts/base-image.sh" buildah amd64 "${SUITE}" "${base}" --include nginx > /dev/null ||
  fail "no ${SUITE} image with nginx"
# The app image: nginx's own command, as a Dockerfile would give it.
app=localhost/nginx-app:amd64
work="$(buildah from --pull=never --quiet "${base}")"
MOUNTED+=("${work}")
buildah config --entrypoint '["/usr/sbin/nginx"]' --cmd '["-g", "daemon off;"]' "${work}"
buildah commit --quiet "${work}" "${app}" > /dev/null
drop_at_exit "${app}" "${app}-memprofile"
mk image-memprofile APP_IMAGE="${app}" BACKEND=jemalloc > "${SCRATCH}/build.log" 2>&1 ||
  { cat "${SCRATCH}/build.log" >&2; fail "make image-memprofile (nginx)"; }
"${MEMPROFILE}" preflight "${SCRATCH}/image/image.tar" > "${SCRATCH}/preflight" ||
  fail "the nginx image is not READY: $(cat "${SCRATCH}/preflight")"

port="$(free_port)"
conf="${SCRATCH}/conf"
out="${SCRATCH}/out"
mkdir -p "${conf}" "${out}"
chmod 1777 "${out}"
cat > "${conf}/nginx.conf" <<NGINX
master_process on;
worker_processes 2;
user www-data;
pid /tmp/nginx.pid;
error_log stderr;
events { worker_connections 64; }
http {
  access_log off;
  server {
    listen 127.0.0.1:${port};
    location / { return 200 "ok\n"; }
  }
}
NGINX
ctr="$(buildah from --pull=never --quiet "${app}-memprofile")"
MOUNTED+=("${ctr}")
buildah run --isolation chroot -v "${out}:/var/memprofile" -v "${conf}:/conf:ro" "${ctr}" -- \
  /usr/bin/memprofile exec --from-config -- -c /conf/nginx.conf -g 'daemon off;' > "${SCRATCH}/nginx.log" 2>&1 &
service=$!
wait_sockets "${out}" 3 "${service}" "${SCRATCH}/nginx.log"
for _ in $(seq 1 50); do curl -fsS --max-time 10 "http://127.0.0.1:${port}/" > /dev/null || fail "nginx does not answer"; done
master="$(jq -r 'select(.parent == 0) | .pid' "${out}"/memprofile-proc.*.json)"
[[ "${master}" =~ ^[0-9]+$ ]] || fail "no master among the records"
in_pod() { buildah run --isolation chroot -v "${out}:/var/memprofile" "${ctr}" -- /usr/bin/memprofile "$@"; }
in_pod status "${master}" --json > "${SCRATCH}/status.json" 2> /dev/null || fail "status: $(cat "${SCRATCH}/status.json")"
[[ "$(jq -c '.tree | {failed, processes, served}' "${SCRATCH}/status.json")" == '{"failed":0,"processes":3,"served":3}' ]] ||
  fail "nginx's tree: $(jq -c '.tree, [.processes[] | {pid, parent, program, served}]' "${SCRATCH}/status.json")"
[[ "$(jq --argjson m "${master}" '[.processes[] | select(.parent == $m and .recording and .program == "/usr/sbin/nginx")] | length' \
  "${SCRATCH}/status.json")" == 2 ]] || fail "nginx's workers: $(jq -c '[.processes[] | {pid, parent, program, recording}]' "${SCRATCH}/status.json")"
in_pod snapshot "${master}" > "${SCRATCH}/snap" 2> /dev/null || fail "snapshot"
(($(wc -l < "${SCRATCH}/snap") == 3)) || fail "the tree's snapshot: $(cat "${SCRATCH}/snap")"
kill -QUIT "${master}"
wait "${service}" || fail "nginx's exit code: $? $(tail -3 "${SCRATCH}/nginx.log")"
"${MEMPROFILE}" report --image "${SCRATCH}/image/image.tar" --json "${out}" > "${SCRATCH}/report.json" || fail "report"
[[ "$(jq '.processes | length' "${SCRATCH}/report.json")" == 3 ]] ||
  fail "report's processes: $(jq -c '[.processes[] | {pid, parent, program}]' "${SCRATCH}/report.json")"
pass "buildah: nginx's master and 2 workers (www-data) served, listed and snapshotted from another process in the container; report tables the 3; graceful exit 0"
