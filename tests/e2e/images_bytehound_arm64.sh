#!/usr/bin/env bash
# bytehound, the default backend, on arm64 from an amd64 host: the example
# app image built for arm64, the offline cross-built libbytehound.so layered
# on; the build's verify step and the container run under qemu-aarch64, the
# .dat is written by the app's user, memprofile collect carries it out from a
# second container, and report --image names the leaking function.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/images_lib.sh
source "$(dirname "$0")/images_lib.sh"

need_bytehound_bundle 77
seed_dist bytehound arm64
example_app arm64
image=localhost/leaky:bytehound-arm64
drop_at_exit "${image}"
mk image-memprofile APP_IMAGE=localhost/leaky:arm64 MEMPROFILE_IMAGE_TAG=bytehound-arm64 > "${SCRATCH}/build.log" 2>&1 ||
  { cat "${SCRATCH}/build.log" >&2; fail "make image-memprofile (arm64, the default backend)"; }
[[ "$(buildah inspect --type image "${image}" | jq -r .OCIv1.architecture)" == arm64 ]] || fail "not an arm64 image"
grep -q "LOADER_TRACED" "${SCRATCH}/build.log" || fail "the verify step did not trace the arm64 loader"
"${MEMPROFILE}" preflight "${SCRATCH}/image/image.tar" > "${SCRATCH}/preflight" || fail "not READY: $(cat "${SCRATCH}/preflight")"
root="$(image_root "${image}")"
"${MEMPROFILE}" check "${root}/usr/share/libbytehound.so" --json > "${SCRATCH}/lib.json" || true
[[ "$(jq -r .arch "${SCRATCH}/lib.json")" == aarch64 ]] || fail "the image's libbytehound.so is not aarch64: $(cat "${SCRATCH}/lib.json")"
pass "arm64 image with bytehound built, verified under qemu, READY"

out="${SCRATCH}/out"
run_entrypoint "${image}" "${out}" 1.5 > "${SCRATCH}/run.log" 2>&1 || { cat "${SCRATCH}/run.log" >&2; fail "run"; }
grep -q "memprofile: info: profiling /usr/local/bin/leaky with bytehound" "${SCRATCH}/run.log" || fail "no start line: $(cat "${SCRATCH}/run.log")"
grep -q "leaky: leaked" "${SCRATCH}/run.log" || fail "the app did not run to its end: $(cat "${SCRATCH}/run.log")"
dat="$(find "${out}" -name 'memory-profiling_leaky_*.dat' -size +1k -print -quit)"
[[ -n "${dat}" ]] || fail "no .dat from the arm64 container: $(ls -l "${out}")"
[[ "$(stat -c %U "${dat}")" == nobody ]] || fail "the .dat was not written by the app's user"
# The launcher turns bytehound's shadow stack off on aarch64 (docs/launcher.md):
# bytehound's own log, which the launcher puts beside the .dat, says so.
log="$(find "${out}" -name 'bytehound_leaky_*.log' -print -quit)"
grep -Eq 'MEMORY_PROFILER_USE_SHADOW_STACK +=  *false' "${log:-/dev/null}" ||
  fail "bytehound's log does not show the shadow stack off: $(grep -s SHADOW "${log:-/dev/null}")"

# collect from a second container, as `kubectl exec POD -- memprofile
# collect > profile.tar` would: the tar on standard output.
ctr="$(buildah from --pull=never --quiet "${image}")"
MOUNTED+=("${ctr}")
buildah run --isolation chroot -v "${out}:/var/memprofile" "${ctr}" -- /usr/bin/memprofile collect \
  > "${SCRATCH}/profile.tar" 2> "${SCRATCH}/collect.log" || { cat "${SCRATCH}/collect.log" >&2; fail "memprofile collect (arm64)"; }
"${MEMPROFILE}" collect --verify "${SCRATCH}/profile.tar" > "${SCRATCH}/verify.log" 2>&1 ||
  { cat "${SCRATCH}/verify.log" >&2; fail "the collected tar does not verify"; }
tar -tf "${SCRATCH}/profile.tar" | grep "$(basename "${dat}")$" > /dev/null || fail "the .dat is not in the collected tar: $(tar -tf "${SCRATCH}/profile.tar")"
"${MEMPROFILE}" report --json --image "${SCRATCH}/image/image.tar" "${SCRATCH}/profile.tar" > "${SCRATCH}/report.json" ||
  fail "report: $(cat "${SCRATCH}/report.json")"
jq -e '.in_use[0].site.function == "leaky_function" and (.in_use[0].site.file | endswith("leaky.c"))' "${SCRATCH}/report.json" > /dev/null ||
  fail "report: $(jq -c '{top: .in_use[0].site, warnings}' "${SCRATCH}/report.json")"
pass "the arm64 container records a .dat ($(stat -c %s "${dat}") bytes, by the app's user, the shadow stack off) under qemu; collect carries it out verified; report --image names leaky_function"
