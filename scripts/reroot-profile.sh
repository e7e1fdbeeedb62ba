#!/usr/bin/env bash
# Rewrites the absolute paths a profile recorded in a container maps (the
# program, its libraries) to lie under ROOT, a copy or mount of the image's
# root, so jeprof and heaptrack_interpret read the right binaries off the
# cluster. jemalloc: the MAPPED_LIBRARIES section of a .heap file; heaptrack:
# the "x" and "m" lines of a raw trace (hex length, then the path).
# usage: scripts/reroot-profile.sh jemalloc|heaptrack ROOT IN OUT [--qemu-maps]
#   --qemu-maps  jemalloc: qemu-user 7.2 shows guest code as r--p and jeprof
#                skips maps that are not executable: mark them r-xp
set -o errexit -o nounset -o pipefail

backend="${1:?usage: reroot-profile.sh jemalloc|heaptrack ROOT IN OUT [--qemu-maps]}"
root="${2:?usage}" in="${3:?usage}" out="${4:?usage}"
[[ "${root}" != *"#"* ]] || { echo "reroot-profile: ROOT may not contain #" >&2; exit 2; }
case "${backend}" in
  jemalloc)
    edits=(-e '/^MAPPED_LIBRARIES:/,$ s# (/[^ ]+)$# '"${root}"'\1#')
    [[ "${5:-}" != --qemu-maps ]] || edits+=(-e '/^MAPPED_LIBRARIES:/,$ s/ r--p / r-xp /')
    sed -E "${edits[@]}" "${in}" > "${out}" ;;
  heaptrack)
    awk -v root="${root}" '
      ($1 == "x" || $1 == "m") && substr($3, 1, 1) == "/" { $3 = root $3; $2 = sprintf("%x", length($3)) }
      { print }' "${in}" > "${out}" ;;
  *) echo "reroot-profile: no paths to rewrite for backend '${backend}'" >&2; exit 2 ;;
esac
