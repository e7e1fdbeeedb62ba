#!/usr/bin/env bash
# bytehound, the default backend, in an image: make image-memprofile with no
# BACKEND layers the offline-built libbytehound.so (preload/README.md) onto
# the example app; the build's own verify step traces the loader, the result
# is READY, and running it as a container would records a .dat of the app's
# process, written by the app's user, which report reads with the image.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/images_lib.sh
source "$(dirname "$0")/images_lib.sh"

need_bytehound_bundle 77
seed_dist bytehound amd64
example_app amd64
image=localhost/leaky:bytehound
drop_at_exit "${image}"
mk image-memprofile APP_IMAGE=localhost/leaky:amd64 MEMPROFILE_IMAGE_TAG=bytehound > "${SCRATCH}/build.log" 2>&1 ||
  { cat "${SCRATCH}/build.log" >&2; fail "make image-memprofile (the default backend)"; }
grep -q "LOADER_TRACED" "${SCRATCH}/build.log" || fail "the build's own verify step did not trace the loader"
"${MEMPROFILE}" preflight "${SCRATCH}/image/image.tar" > "${SCRATCH}/preflight" || fail "the image is not READY: $(cat "${SCRATCH}/preflight")"
grep -q "^READY: a preload profiler will attach to /usr/local/bin/leaky" "${SCRATCH}/preflight" || fail "READY for the wrong program"
grep -q "preload: /usr/share/libbytehound.so (bytehound)" "${SCRATCH}/preflight" || fail "not judged with bytehound: $(cat "${SCRATCH}/preflight")"
config="$(buildah inspect --type image "${image}" | jq -c .OCIv1.config)"
[[ "$(jq -r '.Labels["io.memprofile.backend"]' <<<"${config}")" == bytehound &&
   "$(jq -r '.Labels["io.memprofile.backend.version"]' <<<"${config}")" == 0.11.0 ]] || fail "backend labels: ${config}"
pass "built with the default backend, verified in the build, READY"

run_entrypoint "${image}" "${SCRATCH}/out" 1.5 > "${SCRATCH}/run.log" 2>&1 || { cat "${SCRATCH}/run.log" >&2; fail "run"; }
grep -q "memprofile: info: profiling /usr/local/bin/leaky with bytehound" "${SCRATCH}/run.log" || fail "no start line: $(cat "${SCRATCH}/run.log")"
grep -q "leaky: leaked" "${SCRATCH}/run.log" || fail "the app did not run to its end"
record="$(find "${SCRATCH}/out" -name 'memprofile-proc.*.json' -print -quit)"
[[ -n "${record}" ]] || fail "no process record in the output: $(ls -l "${SCRATCH}/out")"
pid="$(jq -r .pid "${record}")"
dat="$(find "${SCRATCH}/out" -name "memory-profiling_leaky_*_${pid}.dat" -size +1k -print -quit)"
[[ -n "${dat}" ]] || fail "no .dat of process ${pid}: $(ls -l "${SCRATCH}/out")"
[[ "$(stat -c %U "${dat}")" == nobody ]] || fail "the .dat was not written by the app's user"
"${MEMPROFILE}" report --json --image "${SCRATCH}/image/image.tar" "${SCRATCH}/out" > "${SCRATCH}/report.json" ||
  fail "report: $(cat "${SCRATCH}/report.json")"
jq -e '.in_use[0].site.function == "leaky_function"' "${SCRATCH}/report.json" > /dev/null ||
  fail "report: $(jq -c '{top: .in_use[0], warnings}' "${SCRATCH}/report.json")"
pass "the image records: $(basename "${dat}"), $(stat -c %s "${dat}") bytes, by the app's user; report --image names leaky_function"

# seed 000's `kubectl cp`: it runs `tar cf - -C DIR FILE` in the container,
# with the container's environment. With LD_PRELOAD in the pod's env (the
# guide's way), bytehound loads into that tar too; this image keeps
# LD_PRELOAD out of the environment (the launcher sets it for the app
# alone), so the tar of a second container loads no profiler and writes no
# .dat of its own, and the archive holds the app's .dat whole.
buildah inspect --type image "${image}" | jq -e '[.OCIv1.config.Env[] | select(startswith("LD_PRELOAD="))] | length == 0' \
  > /dev/null || fail "the image's environment sets LD_PRELOAD"
before="$(find "${SCRATCH}/out" -name '*.dat' | wc -l)"
ctr="$(buildah from --pull=never --quiet "${image}")"
MOUNTED+=("${ctr}")
buildah run --isolation chroot -v "${SCRATCH}/out:/var/memprofile" "${ctr}" -- \
  tar cf - -C /var/memprofile "$(basename "${dat}")" > "${SCRATCH}/cp.tar" 2> "${SCRATCH}/cp.err" ||
  fail "tar in the container (what kubectl cp runs): $(cat "${SCRATCH}/cp.err")"
[[ "$(find "${SCRATCH}/out" -name '*.dat' | wc -l)" == "${before}" ]] || fail "the tar in the container wrote a .dat of its own"
mkdir -p "${SCRATCH}/cp"
tar -C "${SCRATCH}/cp" -xf "${SCRATCH}/cp.tar"
cmp -s "${SCRATCH}/cp/$(basename "${dat}")" "${dat}" || fail "kubectl cp's tar did not carry the .dat whole"
pass "kubectl cp's tar in the container loads no profiler (no LD_PRELOAD in the image's env) and carries the .dat whole"
