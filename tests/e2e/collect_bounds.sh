#!/usr/bin/env bash
# collect carries no more than the tree's own profiles within the budget:
# a 64 GiB sparse file a member planted under a dump's name (no disk
# blocks, so no budget saw it), a file of a uid no process of the tree runs
# as, and files past the profiles' disk budget are each skipped with a line
# on stderr and in the manifest; the rest is carried and verifies.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

[[ "${EUID}" == 0 ]] || { echo "skip: the tree's member and the outsider run as other uids (setpriv needs root)"; exit 77; }
chmod 0755 "${SCRATCH}"
out="${SCRATCH}/out"
mkdir -p "${out}"
chmod 1777 "${out}"
as() { local uid="$1"; shift; setpriv --reuid="${uid}" --regid="${uid}" --clear-groups "$@"; }
# The tree: one process, run as nobody (uid 65534); setpriv itself in the
# background (a function would make $! a subshell's).
setpriv --reuid=65534 --regid=65534 --clear-groups "${LAUNCHER}" exec --backend none --output-dir "${out}" --min-free-mb 1 -- sleep 300 > "${SCRATCH}/run.log" 2>&1 &
pid=$!
track "${pid}"
wait_for_socket "${out}" "${pid}"

as 65534 truncate -s 64G "${out}/jeprof.${pid}.0.i0.heap"           # a member's sparse plant
as 65533 sh -c "echo planted > '${out}/jeprof.${pid}.1.m0.heap'"     # an outsider's file
for k in 0 1 2; do head -c $((600 * 1024)) /dev/urandom > "${out}/jeprof.${pid}.2.m${k}.heap"; done  # 1.8 MiB, dense

rc=0
MEMPROFILE_MAX_PROFILE_MB=1 "${MEMPROFILE}" collect --backend jemalloc --output-dir "${out}" --settle 0 \
  --out "${SCRATCH}/p.tar" 2> "${SCRATCH}/collect.err" || rc=$?
((rc == 0)) || fail "collect: exit ${rc}: $(cat "${SCRATCH}/collect.err")"
(($(stat -c %s "${SCRATCH}/p.tar") < 2 * 1024 * 1024)) || fail "the archive is $(stat -c %s "${SCRATCH}/p.tar") bytes"
manifest="$(tar -xOf "${SCRATCH}/p.tar" MEMPROFILE-MANIFEST.json)"
why() { jq -r --arg n "$1" '.skipped[] | select(.name == $n) | .why' <<< "${manifest}"; }
[[ "$(why "jeprof.${pid}.0.i0.heap")" == "sparse: 68719476736 bytes long but 0 of data, the rest holes"* ]] || fail "the sparse plant: ${manifest}"
[[ "$(why "jeprof.${pid}.1.m0.heap")" == "owned by uid 65533, which no process of the tree runs as" ]] ||
  fail "the outsider's file: ${manifest}"
[[ "$(jq '[.skipped[] | select(.why | startswith("past the budget"))] | length' <<< "${manifest}")" == 2 ]] ||
  fail "not two of the three 600 KiB dumps past the 1 MiB budget: ${manifest}"
[[ "$(jq '[.files[] | select(.name | startswith("jeprof."))] | length' <<< "${manifest}")" == 1 ]] ||
  fail "not one dump carried: ${manifest}"
grep -q "warning: skipped ${out}/jeprof.${pid}.0.i0.heap: sparse" "${SCRATCH}/collect.err" || fail "not said: $(cat "${SCRATCH}/collect.err")"
"${MEMPROFILE}" collect --verify "${SCRATCH}/p.tar" > /dev/null || fail "the archive does not verify"
pass "collect: a member's 64 GiB sparse plant, an outsider's file and files past the budget skipped and said; the archive verifies"
