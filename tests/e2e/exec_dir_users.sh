#!/usr/bin/env bash
# exec checks the output directory for every user the tree will run as, as
# far as the program's own configuration says: nginx started as root runs
# its workers as its `user` (nobody when there is none), and a directory
# only root can write would fail every worker's snapshot. exec names the
# uid with OUTPUT_DIR_NOT_WRITABLE and the fix, and nginx runs unprofiled;
# with the directory made 1777, it is profiled.
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
out="${SCRATCH}/out"
mkdir -m 0755 "${out}"

# run_nginx LOG: nginx under exec, answered once, ended with SIGQUIT.
run_nginx() {
  "${LAUNCHER}" exec --backend jemalloc --preload "${JEMALLOC}" --output-dir "${out}" --min-free-mb 1 -- \
    "${NGINX}" -p "${prefix}" -c "${prefix}/nginx.conf" > "$1" 2>&1 &
  local master=$!
  track "${master}"
  wait_until 60 curl -fs --max-time 5 -o /dev/null "http://127.0.0.1:${port}/" || fail "nginx does not answer: $(cat "$1")"
  kill -QUIT "${master}"
  wait "${master}" || fail "nginx's exit code changed: $? ($(cat "$1"))"
}

run_nginx "${SCRATCH}/default.log"
grep -q "running unprofiled: .*OUTPUT_DIR_NOT_WRITABLE: output directory ${out} is not writable by uid 65534 (nobody, nginx's default user (no \`user\` in ${prefix}/nginx.conf)).*fix: chmod 1777 ${out}" \
  "${SCRATCH}/default.log" || fail "not said for nginx's default user: $(cat "${SCRATCH}/default.log")"
[[ -z "$(ls "${out}")" ]] || fail "profiled anyway: $(ls "${out}")"
pass "nginx as root, no user directive: the 0755 directory is refused for uid 65534 (nobody), nginx runs unprofiled"

sed -i '1i user www-data;  # the workers' "${prefix}/nginx.conf"
run_nginx "${SCRATCH}/www.log"
grep -q "is not writable by uid $(id -u www-data) (www-data, nginx's \`user\` in ${prefix}/nginx.conf)" "${SCRATCH}/www.log" ||
  fail "not said for www-data: $(cat "${SCRATCH}/www.log")"
pass "nginx's user www-data is named the same way"

chmod 1777 "${out}"
run_nginx "${SCRATCH}/open.log"
grep -q "profiling ${NGINX} with jemalloc" "${SCRATCH}/open.log" || fail "not profiled with 1777: $(cat "${SCRATCH}/open.log")"
pass "with the directory 1777, nginx is profiled"
