#!/usr/bin/env bash
# bytehound cross-built offline for arm64 (where the bundle is, see
# preload/README.md), checked against both architectures, and recording
# under qemu-user in a Debian bookworm arm64 root.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=preload/recipes.sh
source "${E2E_ROOT}/preload/recipes.sh"
# shellcheck source=preload/bytehound/recipe.sh
source "${E2E_ROOT}/preload/bytehound/recipe.sh"

bundle="$(find_bundle)"
if [[ -z "${bundle}" ]]; then
  echo "skip: no offline bundle (${BUNDLE_NAME} in $(preload_cache)/sources or ../shared/vendor/bytehound beside the clone): the offline build and its runs are not tested here"
  exit 77
fi

# arm64: cross-built the same way, and recording under qemu-user in a
# Debian bookworm arm64 root (chroot in a mount namespace of its own, on an
# overlay, so the shared root stays read-only). Unpatched, bytehound's own
# allocator aborted here ("memory allocation of 8 bytes failed"; see
# preload/bytehound/memfd-map-private.patch).
arm64="$(preload_dist bytehound arm64)"
grep -q '"arch": "arm64"' "${arm64}/manifest.json" || fail "arm64 manifest"
"${MEMPROFILE}" check --preload "${arm64}/libbytehound.so" "${FIXTURES}/arm64-dynamic" > /dev/null ||
  fail "the arm64 library is refused for an arm64 program"
if "${MEMPROFILE}" check --preload "${arm64}/libbytehound.so" "${FIXTURES}/dynamic" > /dev/null; then
  fail "the arm64 library is accepted for an amd64 program"
fi
pass "cross-built offline for arm64, and checked against both architectures"
[[ "${EUID}" == 0 ]] || { echo "skip: the arm64 run needs root (a mount namespace and chroot)"; exit 77; }
arm_root="$("${E2E_ROOT}/tests/fixtures/rootfs.sh" arm64)"
mkdir -p "${SCRATCH}/upper" "${SCRATCH}/work" "${SCRATCH}/root"
cat > "${SCRATCH}/inside.sh" <<'SH'
set -o errexit -o nounset -o pipefail
root="${SCRATCH}/root"
mount -t overlay overlay -o "lowerdir=${ARM_ROOT},upperdir=${SCRATCH}/upper,workdir=${SCRATCH}/work" "${root}"
mount -t proc proc "${root}/proc"
mkdir -p "${root}/opt/t" "${root}/out"
cp "${LIBRARY}" "${PROGRAM}" "${root}/opt/t/"
timeout 600 chroot "${root}" env LD_PRELOAD=/opt/t/libbytehound.so MEMORY_PROFILER_USE_SHADOW_STACK=0 \
  MEMORY_PROFILER_LOGFILE=/out/bytehound.log MEMORY_PROFILER_OUTPUT=/out/p_%p.dat /opt/t/arm64-leak leak 8
"${MEMPROFILE}" report --json --rootfs "${root}" "${root}/out" > "${SCRATCH}/arm64.json"
SH
export SCRATCH
ARM_ROOT="${arm_root}" LIBRARY="${arm64}/libbytehound.so" PROGRAM="${FIXTURES}/arm64-leak" \
  unshare --mount --propagation private bash "${SCRATCH}/inside.sh" > "${SCRATCH}/arm64.log" 2>&1 ||
  fail "arm64 under bytehound: $(tail -5 "${SCRATCH}/arm64.log")"
dat="$(find "${SCRATCH}/upper/out" -name 'p_*.dat' -size +1k -print -quit)"
[[ -n "${dat}" ]] || fail "arm64: no .dat: $(tail -5 "${SCRATCH}/upper/out/bytehound.log" 2>&1)"
jq -e '.in_use[0].site.function == "leaky_function" and .in_use[0].bytes_in_use >= 8388608' "${SCRATCH}/arm64.json" > /dev/null ||
  fail "arm64: report: $(jq -c '{top: .in_use[0], warnings}' "${SCRATCH}/arm64.json")"
pass "arm64 under qemu: a .dat of $(stat -c %s "${dat}") bytes, whose report names leaky_function"
