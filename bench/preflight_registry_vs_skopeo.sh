#!/usr/bin/env bash
# Benchmark: `memprofile preflight docker://…` straight from a registry on
# loopback against the two-step way, `skopeo copy docker://… oci-archive:FILE`
# then `memprofile preflight FILE`, in the same run, on a large image (the
# one bench/preflight_vs_gzip.sh builds from this machine's /usr, > 400 MB).
# Prints both times, the ratio (target <= 0.5) and memprofile's peak RSS
# (target <= 64 MiB).
# usage: bench/preflight_registry_vs_skopeo.sh [MEMPROFILE]
set -o errexit -o nounset -o pipefail

memprofile="$(realpath "${1:-build/tool/memprofile}")"
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=scripts/host.sh
source "${here}/../scripts/host.sh"
bench="$(memprofile_cache)/bench"
if [[ ! -e "${bench}/gzip/index.json" ]]; then
  # preflight_vs_gzip.sh builds the image once (and caches it) on its way.
  "${here}/preflight_vs_gzip.sh" "${memprofile}" >/dev/null
fi

work="$(mktemp -d)"
registry_pid=""
cleanup() {
  [[ -z "${registry_pid}" ]] || kill "${registry_pid}" 2>/dev/null || true
  rm -rf "${work}"
}
trap cleanup EXIT
port=""
for candidate in $(shuf -i 20000-60000 -n 50); do
  if ! (exec 3<>"/dev/tcp/127.0.0.1/${candidate}") 2>/dev/null; then port="${candidate}"; break; fi
done
[[ -n "${port}" ]] || { echo "bench: no free port" >&2; exit 2; }
cat > "${work}/registry.yml" <<YAML
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: ${work}/registry
http:
  addr: 127.0.0.1:${port}
YAML
timeout 3600 docker-registry serve "${work}/registry.yml" > "${work}/registry.log" 2>&1 &
registry_pid=$!
for _ in $(seq 100); do curl -fsS "http://127.0.0.1:${port}/v2/" >/dev/null 2>&1 && break; sleep 0.1; done
ref="127.0.0.1:${port}/bench/usr:latest"
skopeo copy --quiet --dest-tls-verify=false "oci:${bench}/gzip" "docker://${ref}" >/dev/null
stored=$(du -sb "${work}/registry" | cut -f1)

two_step() {
  rm -f "${work}/copy.tar"
  skopeo copy --quiet --src-tls-verify=false "docker://${ref}" "oci-archive:${work}/copy.tar" >/dev/null
  "${memprofile}" preflight --json "${work}/copy.tar" >/dev/null
}
t_two=$(best_seconds 3 two_step)
rm -f "${work}/copy.tar"
t_ours=$(best_seconds 3 "${memprofile}" preflight --json --tls-verify=false "docker://${ref}")
rss=$( { /usr/bin/time -f '%M' "${memprofile}" preflight --json --tls-verify=false "docker://${ref}" >/dev/null || true; } 2>&1 | tail -1)
echo "image: docker://${ref} ($((stored / 1000000)) MB in the registry, on loopback)"
echo "skopeo copy + preflight FILE:  ${t_two} s"
echo "preflight docker://:           ${t_ours} s   ratio $(echo "scale=2; ${t_ours} / ${t_two}" | bc -l) (target <= 0.5)"
echo "memprofile peak RSS:           $((rss / 1024)) MiB (target <= 64)"
