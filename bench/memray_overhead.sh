#!/usr/bin/env bash
# Benchmark: what memray under memprofile exec --backend memray costs a
# Python service, so users can decide where to run it. In a Debian trixie
# root (Python 3.13, python3-memray 1.17; scripts/make-rootfs.sh), one
# allocation-heavy workload (bench/src/alloc_churn.py: dicts, lists, strings
# and JSON, most of it freed, some kept) in three configurations, all in
# this run, each the median of REPS interleaved runs:
#   python       plain python3 (the baseline)
#   python-only  memprofile exec --backend memray --python-only
#   native       memprofile exec --backend memray (native frames, the default)
# Wall time, CPU (user+sys) and peak RSS as ratios against the baseline, and
# the capture's size per second of run. Nothing here asserts a time.
# usage: bench/memray_overhead.sh [LAUNCHER] [REPS]   (root: chroot)
set -o errexit -o nounset -o pipefail

here="$(cd "$(dirname "$0")" && pwd)"
launcher="$(realpath "${1:-build/tool/memprofile-static}")"
reps="${2:-5}"
ctl="$(dirname "$(dirname "${launcher}")")/ctl"
[[ -f "${ctl}/libmemprofile_ctl.so" && -f "${ctl}/python/sitecustomize.py" && -f "${ctl}/python/_memprofile_memray/control.py" ]] ||
  { echo "bench: ${ctl}/libmemprofile_ctl.so or the bootstrap in python/ missing (make build)" >&2; exit 2; }
[[ "${EUID}" == 0 ]] || { echo "bench: the trixie root runs in a chroot: run as root" >&2; exit 2; }
tarball="$("${here}/../scripts/make-rootfs.sh" amd64 --suite trixie --include gunicorn,python3-memray)"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
root="${work}/root"
mkdir -p "${root}"
tar -C "${root}" --numeric-owner -xpf "${tarball}"
mkdir -p "${root}/opt/memprofile/python" "${root}/app"
cp "${launcher}" "${root}/opt/memprofile/memprofile"
cp "${ctl}/libmemprofile_ctl.so" "${root}/opt/memprofile/"
cp -R "${ctl}/python/." "${root}/opt/memprofile/python/"
cp "${here}/src/alloc_churn.py" "${root}/app/"

# run CONFIG N: one timed run; its time in ${work}/CONFIG.N, its capture's
# bytes in ${work}/CONFIG.N.bytes.
run() {
  local config="$1" n="$2" out="/out-$1"
  rm -rf "${root:?}${out}" && mkdir -p "${root}${out}"
  local -a cmd=(python3 alloc_churn.py 40)
  local -a exec=(/opt/memprofile/memprofile exec --backend memray --min-free-mb 0 --output-dir "${out}")
  case "${config}" in
    python) ;;
    python-only) cmd=("${exec[@]}" --python-only -- "${cmd[@]}") ;;
    native) cmd=("${exec[@]}" -- "${cmd[@]}") ;;
  esac
  # shellcheck disable=SC2016 # $0 and $@ are the inner sh's
  /usr/bin/time -o "${work}/${config}.${n}" -f '%e %U %S %M' \
    unshare --mount --propagation private -- sh -c 'mount --bind /proc "$0/proc" && exec chroot "$0" env -C /app "$@"' \
    "${root}" env MEMPROFILE_CTL_LIBRARY=/opt/memprofile/libmemprofile_ctl.so "${cmd[@]}" > /dev/null 2> "${work}/err" ||
    { echo "bench: ${config} failed: $(tail -3 "${work}/err")" >&2; exit 1; }
  du -sb "${root}${out}" | cut -f1 > "${work}/${config}.${n}.bytes"
}

configs=(python python-only native)
for n in $(seq 1 "${reps}"); do
  for c in "${configs[@]}"; do run "${c}" "${n}"; done
done

# median COLUMN CONFIG: the median of that column over the runs.
median() {
  for n in $(seq 1 "${reps}"); do
    case "$1" in
      wall) awk '{ print $1 }' "${work}/$2.${n}" ;;
      cpu) awk '{ print $2 + $3 }' "${work}/$2.${n}" ;;
      rss) awk '{ print $4 }' "${work}/$2.${n}" ;;
      bytes) cat "${work}/$2.${n}.bytes" ;;
    esac
  done | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

printf '%-12s %9s %9s %11s %8s %8s %8s %12s\n' config wall_s cpu_s peak_rss_kb wall_x cpu_x rss_x capture_MB/s
base_wall="$(median wall python)" base_cpu="$(median cpu python)" base_rss="$(median rss python)"
for c in "${configs[@]}"; do
  wall="$(median wall "${c}")" cpu="$(median cpu "${c}")" rss="$(median rss "${c}")" bytes="$(median bytes "${c}")"
  awk -v c="${c}" -v w="${wall}" -v u="${cpu}" -v r="${rss}" -v b="${bytes}" \
    -v bw="${base_wall}" -v bu="${base_cpu}" -v br="${base_rss}" 'BEGIN {
      printf "%-12s %9.2f %9.2f %11d %7.2fx %7.2fx %7.2fx %12.2f\n", c, w, u, r, w / bw, u / bu, r / br,
        (c == "python" ? 0 : b / 1e6 / w)
    }'
done
echo "(median of ${reps} interleaved runs each; python3 $(chroot "${root}" python3 -c 'import sys, memray; print(sys.version.split()[0], "memray", memray.__version__)'))"
