#!/usr/bin/env bash
# memprofile exec --backend memray, in a Debian trixie root of its own
# (python3-memray 1.17, Python 3.13; chroot in a mount namespace of the
# test's): memprofile's bootstrap (python/sitecustomize.py beside the control
# library, first on PYTHONPATH) starts memray's tracker inside the
# interpreter, without touching the app:
#   a script: one capture, memray.PID.bin, whose report names the keeping
#     line, with native frames by default and without them (--python-only);
#   memory a C library holds, called through ctypes: the site is the C
#     function's line (the library's DWARF), the Python caller on its stack.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

memray_root  # sets root: the trixie root with the launcher and the bootstrap in /opt/memprofile
memray_service_app  # /app/service.py; sets keep_line

# 1. A script, with native frames (the default) and without.
for mode in native python-only; do
  out="/out-${mode}"
  mkdir -p "${root}${out}"
  flags=(--output-dir "${out}")
  [[ "${mode}" == python-only ]] && flags+=(--python-only)
  memray_exec "${flags[@]}" -- python3 service.py 200 > "${SCRATCH}/${mode}.log" 2>&1 ||
    fail "${mode}: exit code: $(cat "${SCRATCH}/${mode}.log")"
  grep -q "profiling /usr/bin/python3 with memray (/usr/lib/python3/dist-packages/memray/_memray.cpython-3" \
    "${SCRATCH}/${mode}.log" || fail "${mode}: no start line: $(cat "${SCRATCH}/${mode}.log")"
  grep -q "which serves memprofile start/stop/status, output in ${out} (budget " "${SCRATCH}/${mode}.log" ||
    fail "${mode}: the budget and the control are not said: $(cat "${SCRATCH}/${mode}.log")"
  mapfile -t captures < <(cd "${root}${out}" && ls memray.*)
  [[ "${#captures[@]}" == 1 && "${captures[0]}" =~ ^memray\.[0-9]+\.bin$ ]] || fail "${mode}: captures: ${captures[*]}"
  "${MEMPROFILE}" report --rootfs "${root}" --json "${root}${out}" > "${SCRATCH}/${mode}.json" || fail "${mode}: report"
  [[ "$(top_site "${SCRATCH}/${mode}.json")" == "keep (/app/service.py:${keep_line}) "* ]] ||
    fail "${mode}: the top site: $(top_site "${SCRATCH}/${mode}.json")"
  kept="$(jq '.in_use[0].bytes_in_use' "${SCRATCH}/${mode}.json")"
  ((kept >= 200 * 64 * 1024)) || fail "${mode}: keep holds ${kept} bytes, not the 12.5 MiB kept"
  natives="$(jq '[.in_use[0].stack[] | select(.module != "")] | length' "${SCRATCH}/${mode}.json")"
  if [[ "${mode}" == native ]]; then
    ((natives > 0)) || fail "native: no native frame under keep's stack"
  else
    ((natives == 0)) || fail "python-only: ${natives} native frames in keep's stack"
  fi
  pass "${mode}: one capture (${captures[0]}), report names keep (service.py:${keep_line}) with ${kept} bytes, ${natives} native frames in its stack"
done

# 1b. Memory a C library holds (no Python object): called through ctypes,
# the site is the C function's line, symbolised from the library's own
# DWARF in the root, with the Python line that called it on the stack; with
# --python-only, the Python line is the site.
cat > "${SCRATCH}/leak.c" <<'C'
#include <stdlib.h>
#include <string.h>

void *held[4096];

int leak(size_t n) {
  static int count;
  void *p = malloc(n);  /* held for good */
  memset(p, 1, n);
  held[count++ % 4096] = p;
  return count;
}
C
gcc -g -O0 -fPIC -shared -o "${root}/app/libleak.so" "${SCRATCH}/leak.c" || fail "gcc cannot build the C library"
cat > "${root}/app/native.py" <<'PY'
import ctypes
import sys

lib = ctypes.CDLL("/app/libleak.so")
lib.leak.argtypes = [ctypes.c_size_t]


def fill(rounds):
    for _ in range(rounds):
        lib.leak(64 * 1024)  # the C library keeps it


if __name__ == "__main__":
    fill(int(sys.argv[1]))
PY
leak_line="$(grep -n 'held for good' "${SCRATCH}/leak.c" | cut -d: -f1)"
fill_line="$(grep -n 'the C library keeps it' "${root}/app/native.py" | cut -d: -f1)"
for mode in native python-only; do
  out="/out-clib-${mode}"
  mkdir -p "${root}${out}"
  flags=(--output-dir "${out}")
  [[ "${mode}" == python-only ]] && flags+=(--python-only)
  memray_exec "${flags[@]}" -- python3 native.py 200 > "${SCRATCH}/clib.log" 2>&1 ||
    fail "C library, ${mode}: exit code: $(cat "${SCRATCH}/clib.log")"
  "${MEMPROFILE}" report --rootfs "${root}" --json "${root}${out}" > "${SCRATCH}/clib.json" ||
    fail "C library, ${mode}: report"
  want="fill (/app/native.py:${fill_line})"
  [[ "${mode}" == native ]] && want="leak (${SCRATCH}/leak.c:${leak_line})"
  [[ "$(top_site "${SCRATCH}/clib.json")" == "${want} "* ]] ||
    fail "C library, ${mode}: the top site: $(top_site "${SCRATCH}/clib.json"), not ${want}"
  jq -e --argjson line "${fill_line}" '.in_use[0].bytes_in_use >= 200 * 65536 and
      ([.in_use[0].stack[] | select(.function == "fill" and .line == $line)] | length == 1)' \
    "${SCRATCH}/clib.json" > /dev/null || fail "C library, ${mode}: $(jq -c '.in_use[0]' "${SCRATCH}/clib.json")"
done
pass "a C library's malloc through ctypes: the site is leak (leak.c:${leak_line}) from the library's DWARF, with fill (native.py:${fill_line}) on its stack; with --python-only, fill (native.py:${fill_line})"
