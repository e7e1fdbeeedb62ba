#!/usr/bin/env bash
# memprofile report on arm64 profiles recorded under qemu-user: the test
# program cross-compiled for arm64, run in a Debian bookworm arm64 root
# (chroot, qemu through binfmt) with the project's arm64 jemalloc and
# heaptrack preload libraries. The leak is ranked first at its file and line,
# symbolised from that root (the arm64 build check: return addresses follow
# BL/BLR). heaptrack's arm64 trace is also read from a qemu -L run against
# the same root.
#
# Why a real root and not -L /usr/aarch64-linux-gnu: there, ld.so comes from
# libc6-arm64-cross and libc.so.6 falls through to the multiarch libc6:arm64
# (another build of glibc 2.36): the loader and the libc disagree on their
# private structures, and heaptrack's first pthread_create spins forever
# (qemu 7.2; reproduced on this machine, not a qemu bug).
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

[[ "${EUID}" == 0 ]] || { echo "skip: needs root for a mount namespace and chroot"; exit 77; }
src="${E2E_ROOT}/tests/fixtures/src"
arm_root="$("${E2E_ROOT}/tests/fixtures/rootfs.sh" arm64)"
jemalloc="$(preload_dist jemalloc arm64)"
heaptrack="$(preload_dist heaptrack arm64)"
aarch64-linux-gnu-gcc -g -O1 -o "${SCRATCH}/sites" "${src}/sites.c"

# The shared root stays read-only: an overlay in a mount namespace of this
# test's own holds the program, the libraries and the profiles.
mkdir -p "${SCRATCH}/upper" "${SCRATCH}/work" "${SCRATCH}/root"
cat > "${SCRATCH}/inside.sh" <<'SH'
set -o errexit -o nounset -o pipefail
mount -t overlay overlay -o "lowerdir=${ARM_ROOT},upperdir=${SCRATCH}/upper,workdir=${SCRATCH}/work" "${SCRATCH}/root"
root="${SCRATCH}/root"
mount -t proc proc "${root}/proc"  # jemalloc's maps, heaptrack's RSS
mkdir -p "${root}/opt/t/jemalloc" "${root}/opt/t/heaptrack" "${root}/out/jemalloc" "${root}/out/heaptrack" "${root}/out/ld-prefix"
cp "${SCRATCH}/sites" "${root}/opt/t/sites"
cp "${JEMALLOC}"/libjemalloc.so.2 "${root}/opt/t/jemalloc/"
cp "${HEAPTRACK}"/*.so* "${root}/opt/t/heaptrack/"
timeout 300 chroot "${root}" env LD_PRELOAD=/opt/t/jemalloc/libjemalloc.so.2 \
  MALLOC_CONF=prof:true,prof_final:true,lg_prof_interval:24,lg_prof_sample:14,prof_prefix:/out/jemalloc/jeprof \
  /opt/t/sites 400
timeout 300 chroot "${root}" env LD_PRELOAD=/opt/t/heaptrack/libheaptrack_preload.so \
  DUMP_HEAPTRACK_OUTPUT='/out/heaptrack/heaptrack.$$.raw' /opt/t/sites 400 2000
# qemu -L with the same root as the prefix: the program runs from the host's
# path, its libraries come from the root.
cp "${SCRATCH}/sites" "${root}/opt/t/sites-l"
# The maps name the program by its host path: the same path inside the root
# holds the same file, for report --rootfs.
mkdir -p "${root}${root}/opt/t"
cp "${SCRATCH}/sites" "${root}${root}/opt/t/sites-l"
timeout 300 env QEMU_LD_PREFIX="${root}" LD_PRELOAD="${root}/opt/t/heaptrack/libheaptrack_preload.so" \
  DUMP_HEAPTRACK_OUTPUT="${root}/out/ld-prefix/heaptrack.\$\$.raw" "${root}/opt/t/sites-l" 400 2000
for kind in jemalloc heaptrack ld-prefix; do
  "${MEMPROFILE}" report --json --rootfs "${root}" "${root}/out/${kind}" > "${SCRATCH}/${kind}.json"
done
SH
export SCRATCH
ARM_ROOT="${arm_root}" JEMALLOC="${jemalloc}" HEAPTRACK="${heaptrack}" \
  unshare --mount --propagation private bash "${SCRATCH}/inside.sh" > "${SCRATCH}/inside.log" 2>&1 ||
  fail "recording under qemu: $(tail -5 "${SCRATCH}/inside.log")"
line="$(grep -n 'SITE grow_steadily' "${src}/sites.c" | cut -d: -f1)"
for kind in jemalloc heaptrack ld-prefix; do
  jq -e --argjson line "${line}" '.growth[0] | .site.function == "grow_steadily" and .site.line == $line
    and .leak_suspect' "${SCRATCH}/${kind}.json" > /dev/null ||
    fail "${kind}: $(jq -c '{g: .growth[0].site, w: .warnings}' "${SCRATCH}/${kind}.json")"
  jq -e '.warnings | map(select(test("not the build"))) | length == 0' "${SCRATCH}/${kind}.json" > /dev/null ||
    fail "${kind}: the build check refused the right build: $(jq -c .warnings "${SCRATCH}/${kind}.json")"
done
pass "arm64 under qemu: jemalloc and heaptrack (chroot and -L ROOT) profiles name grow_steadily (sites.c:${line}) first, a leak suspect"
