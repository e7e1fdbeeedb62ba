#!/usr/bin/env bash
# Lays out what a profilable image adds, as a root tree the Dockerfiles copy
# with one COPY: the static memprofile, the control library built beside it
# (ctl/ctl.h) and memray's bootstrap beside it (python/: sitecustomize.py
# and its package, for `exec --backend memray`), the preload library at its
# install path (from its manifest), and the manifest itself.
# usage: scripts/stage-artifacts.sh MEMPROFILE_STATIC PRELOAD_DIST_DIR OUT
#   PRELOAD_DIST_DIR "-": no preload library (memray: scripts/memray-debian.sh
#   adds what the image needs)
set -o errexit -o nounset -o pipefail

launcher="${1:?usage: stage-artifacts.sh MEMPROFILE_STATIC PRELOAD_DIST_DIR OUT}"
dist="${2:?usage: stage-artifacts.sh MEMPROFILE_STATIC PRELOAD_DIST_DIR OUT}"
out="${3:?usage: stage-artifacts.sh MEMPROFILE_STATIC PRELOAD_DIST_DIR OUT}"
manifest="${dist}/manifest.json"
[[ "${dist}" == - || -f "${manifest}" ]] || { echo "memprofile: ${manifest} missing: build the preload library first (make preload)" >&2; exit 1; }
if [[ "${dist}" != - ]]; then
  backend="$(jq -r .backend "${manifest}")"
  library="$(jq -r .library "${manifest}")"
  install_path="$(jq -r .install_path "${manifest}")"
  [[ "${install_path}" == /* && "${install_path}" != *..* ]] || { echo "memprofile: ${manifest}: bad install_path '${install_path}'" >&2; exit 1; }
fi

rm -rf "${out}"
ctl="$(dirname "${launcher}")/libmemprofile_ctl.so"
[[ -f "${ctl}" ]] || { echo "memprofile: ${ctl} missing: build it with the launcher (make static)" >&2; exit 1; }
install -D -m 0755 "${launcher}" "${out}/usr/bin/memprofile"
install -D -m 0755 "${ctl}" "${out}/usr/lib/memprofile/libmemprofile_ctl.so"
# The bootstrap: its entry and its package, the Python files alone (no
# bytecode a run left beside them).
bootstrap="$(dirname "${launcher}")/python"
for file in sitecustomize.py _memprofile_memray/__init__.py; do
  [[ -f "${bootstrap}/${file}" ]] ||
    { echo "memprofile: ${bootstrap}/${file} missing: it is staged with the launcher (make static)" >&2; exit 1; }
done
while IFS= read -r -d '' file; do
  install -D -m 0644 "${bootstrap}/${file}" "${out}/usr/lib/memprofile/python/${file}"
done < <(cd "${bootstrap}" && find . -name '*.py' -print0 | LC_ALL=C sort -z)
[[ "${dist}" != - ]] || exit 0
install -D -m 0755 "${dist}/${library}" "${out}${install_path}"
# Libraries the recipe bundles go beside it (the library's RUNPATH is $ORIGIN).
for lib in $(jq -r '.bundled // "" | split(" ")[]' "${manifest}"); do
  [[ "${lib}" != */* ]] || { echo "memprofile: ${manifest}: bad bundled entry '${lib}'" >&2; exit 1; }
  install -m 0644 "${dist}/${lib}" "${out}$(dirname "${install_path}")/${lib}"
done
install -D -m 0644 "${manifest}" "${out}/usr/share/memprofile/preload-${backend}.json"
