#!/usr/bin/env bash
# An output directory that a user of the tree cannot write. nginx started
# as root runs its workers as its `user` (nobody when there is none); with a
# root-owned 0755 directory their snapshots would fail. exec names the uid
# and where it read it; each worker, as it gives up root, makes its own
# subdirectory DIR/proc.PID owned by that user and writes there, so
# snapshot reaches every worker and report reads them all. Without the
# control library nobody can make those subdirectories: exec refuses with
# OUTPUT_DIR_NOT_WRITABLE, the uid, and the fix. With 1777, one directory.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

NGINX=/usr/sbin/nginx
[[ -x "${NGINX}" ]] || fail "nginx missing: run scripts/install-deps.sh"
[[ "${EUID}" == 0 ]] || { echo "skip: nginx changes its workers' user only when started as root"; exit 77; }
chmod 0755 "${SCRATCH}"
JEMALLOC="$(preload_dist jemalloc amd64)/libjemalloc.so.2"
port="$(free_port)"
prefix="${SCRATCH}/nginx"
nginx_conf "${prefix}" "${port}"

# start_nginx OUT LOG: nginx under exec into OUT, answering; its master's pid in NGINX_PID.
start_nginx() {
  "${LAUNCHER}" exec --backend jemalloc --preload "${JEMALLOC}" --output-dir "$1" --min-free-mb 1 -- \
    "${NGINX}" -p "${prefix}" -c "${prefix}/nginx.conf" > "$2" 2>&1 &
  NGINX_PID=$!
  track "${NGINX_PID}"
  wait_until 60 curl -fs --max-time 5 -o /dev/null "http://127.0.0.1:${port}/" || fail "nginx does not answer: $(cat "$2")"
}
stop_nginx() {
  kill -QUIT "${NGINX_PID}"
  wait "${NGINX_PID}" || fail "nginx's exit code changed: $?"
}

# own_subdirs OUT USER: both workers wrote their snapshots into
# subdirectories of their own, owned by USER, and report reads the tree.
own_subdirs() {
  local out="$1" user="$2" snaps="${SCRATCH}/snaps" worker
  wait_until 60 sockets_are "${out}" 3 || fail "not 3 sockets: $(ls -R "${out}")"
  "${MEMPROFILE}" snapshot "${NGINX_PID}" --output-dir "${out}" > "${snaps}" 2>&1 || fail "snapshot: $(cat "${snaps}")"
  [[ "$(wc -l < "${snaps}")" == 3 ]] || fail "not 3 snapshots: $(cat "${snaps}")"
  for worker in $(pgrep -P "${NGINX_PID}"); do
    [[ "$(stat -c %U "${out}/proc.${worker}")" == "${user}" ]] || fail "proc.${worker} is not ${user}'s: $(ls -l "${out}")"
    grep -q "^${out}/proc.${worker}/jeprof\.${worker}\." "${snaps}" || fail "worker ${worker}'s snapshot: $(cat "${snaps}")"
  done
  "${MEMPROFILE}" report --rootfs / --json "${out}" > "${SCRATCH}/report.json" || fail "report: $(cat "${SCRATCH}/report.json")"
  jq -e '.processes | length == 3' "${SCRATCH}/report.json" > /dev/null ||
    fail "report's processes: $(jq -c .processes "${SCRATCH}/report.json")"
}

out="${SCRATCH}/default"
mkdir -m 0755 "${out}"
start_nginx "${out}" "${SCRATCH}/default.log"
grep -q "profiling ${NGINX} with jemalloc.*the directory is not writable by uid 65534 (nobody, nginx's default user (no \`user\` in ${prefix}/nginx.conf)): each process that becomes that user writes to a subdirectory of its own, ${out}/proc.PID" \
  "${SCRATCH}/default.log" || fail "not said for nginx's default user: $(cat "${SCRATCH}/default.log")"
own_subdirs "${out}" nobody
stop_nginx
pass "nginx as root, no user directive, a 0755 directory: uid 65534 named, each worker snapshots into its own proc.PID (nobody's), report reads all 3"

sed -i '1i user www-data;  # the workers' "${prefix}/nginx.conf"
out="${SCRATCH}/www"
mkdir -m 0755 "${out}"
start_nginx "${out}" "${SCRATCH}/www.log"
grep -q "not writable by uid $(id -u www-data) (www-data, nginx's \`user\` in ${prefix}/nginx.conf)" "${SCRATCH}/www.log" ||
  fail "not said for www-data: $(cat "${SCRATCH}/www.log")"
own_subdirs "${out}" www-data
stop_nginx
pass "nginx's user www-data: named the same way, and its workers' subdirectories are www-data's"

out="${SCRATCH}/noctl"
mkdir -m 0755 "${out}"
MEMPROFILE_CTL_LIBRARY="${SCRATCH}/absent.so" start_nginx "${out}" "${SCRATCH}/noctl.log"
stop_nginx
grep -q "running unprofiled: .*OUTPUT_DIR_NOT_WRITABLE: output directory ${out} is not writable by uid $(id -u www-data) (www-data.*without the control library.*fix: chmod 1777 ${out}" \
  "${SCRATCH}/noctl.log" || fail "without the control library: $(cat "${SCRATCH}/noctl.log")"
[[ -z "$(ls "${out}")" ]] || fail "profiled anyway: $(ls "${out}")"
pass "without the control library: refused with the uid and chmod 1777, nginx runs unprofiled"

out="${SCRATCH}/open"
mkdir -m 1777 "${out}"
start_nginx "${out}" "${SCRATCH}/open.log"
grep -q "profiling ${NGINX} with jemalloc" "${SCRATCH}/open.log" || fail "not profiled with 1777: $(cat "${SCRATCH}/open.log")"
! grep -q "subdirectory of its own" "${SCRATCH}/open.log" || fail "subdirectories with 1777: $(cat "${SCRATCH}/open.log")"
stop_nginx
pass "with the directory 1777, nginx is profiled in one directory"
