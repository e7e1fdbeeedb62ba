#!/usr/bin/env bash
# bytehound cross-built offline for arm64 (where the bundle is, see
# preload/README.md), checked against both architectures, and recording
# under qemu-user in a Debian bookworm arm64 root, started by the arm64
# launcher as an image's entrypoint would: the launcher turns bytehound's
# shadow stack off on aarch64 (bytehound's own log says so), the .dat's
# report names the leaking function and its file, and collect carries it
# out verified. (The arm64 image of the default backend is this library
# layered as images_bytehound.sh layers the amd64 one.)
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
cp "${LAUNCHER}" "${root}/opt/t/memprofile"
cp "${CTL}" "${root}/opt/t/libmemprofile_ctl.so"
timeout 600 chroot "${root}" env MEMPROFILE_CTL_LIBRARY=/opt/t/libmemprofile_ctl.so /opt/t/memprofile exec \
  --backend bytehound --preload /opt/t/libbytehound.so --output-dir /out --min-free-mb 1 -- /opt/t/arm64-leak leak 8
"${MEMPROFILE}" report --json --rootfs "${root}" "${root}/out" > "${SCRATCH}/arm64.json"
# collect from the root, as `kubectl exec POD -- memprofile collect` would
chroot "${root}" /opt/t/memprofile collect --output-dir /out > "${SCRATCH}/profile.tar"
SH
export SCRATCH
ARM_ROOT="${arm_root}" LIBRARY="${arm64}/libbytehound.so" PROGRAM="${FIXTURES}/arm64-leak" \
  LAUNCHER="${MEMPROFILE_ARM64:?}/tool/memprofile-static" CTL="${MEMPROFILE_ARM64}/ctl/libmemprofile_ctl.so" \
  unshare --mount --propagation private bash "${SCRATCH}/inside.sh" > "${SCRATCH}/arm64.log" 2>&1 ||
  fail "arm64 under bytehound: $(tail -5 "${SCRATCH}/arm64.log")"
dat="$(find "${SCRATCH}/upper/out" -name '*.dat' -size +1k -print -quit)"
[[ -n "${dat}" ]] || fail "arm64: no .dat: $(ls -l "${SCRATCH}/upper/out") $(tail -5 "${SCRATCH}/arm64.log")"
log="$(find "${SCRATCH}/upper/out" -name 'bytehound_*.log' -print -quit)"
grep -Eq 'MEMORY_PROFILER_USE_SHADOW_STACK +=  *false' "${log:-/dev/null}" ||
  fail "arm64: bytehound's log does not show the shadow stack off: $(grep -s SHADOW "${log:-/dev/null}")"
jq -e '.in_use[0].site.function == "leaky_function" and (.in_use[0].site.file | endswith("leak.c"))
       and .in_use[0].bytes_in_use >= 8388608' "${SCRATCH}/arm64.json" > /dev/null ||
  fail "arm64: report: $(jq -c '{top: .in_use[0], warnings}' "${SCRATCH}/arm64.json")"
"${MEMPROFILE}" collect --verify "${SCRATCH}/profile.tar" > "${SCRATCH}/verify.log" 2>&1 ||
  fail "the collected tar does not verify: $(cat "${SCRATCH}/verify.log")"
grep -q "$(basename "${dat}")$" <<< "$(tar -tf "${SCRATCH}/profile.tar")" || fail "the .dat is not in the collected tar: $(tar -tf "${SCRATCH}/profile.tar")"
pass "arm64 under qemu, started by the arm64 launcher: a .dat of $(stat -c %s "${dat}") bytes (the shadow stack off), whose report names leaky_function in its file; collect carries it out verified"
