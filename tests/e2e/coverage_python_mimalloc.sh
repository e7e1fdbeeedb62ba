#!/usr/bin/env bash
# CPython 3.13 (Debian trixie's) carries mimalloc, by its strings, as an
# object allocator PYTHONMALLOC picks: that is CPython's HEAP_PYMALLOC (which
# PYTHONMALLOC=malloc covers), not HEAP_OWN_ALLOCATOR, and the program is
# READY. The oracle is heaptrack's own trace, inside the trixie root: with
# PYTHONMALLOC=mimalloc it misses the small objects a program keeps, under
# memprofile exec it shows them.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

if sanitized "${LAUNCHER}"; then
  echo "skip: ${LAUNCHER} is an AddressSanitizer build (it needs libasan, which the trixie root has not)"
  exit 77
fi
root="${SCRATCH}/root"
unpack_trixie_python_root "${root}"
python="$(readlink -f "${root}/usr/bin/python3")"
python="${python#"${root}"}"
[[ "${python}" == /usr/bin/python3.1[3-9] ]] || fail "the root's python3 is ${python}, not one that carries mimalloc"
mkdir -p "${root}/opt/memprofile" "${root}/out-exec" "${root}/out-mimalloc"
cp "${LAUNCHER}" "${root}/opt/memprofile/memprofile"
cp "$(preload_dist heaptrack amd64)"/*.so* "${CTL_LIBRARY}" "${root}/opt/memprofile/"
cp "${E2E_ROOT}/tests/fixtures/src/small_objects.py" "${root}/small.py"

verdict="$("${MEMPROFILE}" check --root "${root}" --preload /opt/memprofile/libheaptrack_preload.so "${python}")"
grep -q "warning HEAP_PYMALLOC: .* as does the mimalloc it carries" <<< "${verdict}" ||
  fail "no HEAP_PYMALLOC naming mimalloc: ${verdict}"
verdict_says "${python}" "${verdict}" yes
pass "check: ${python} is READY with HEAP_PYMALLOC naming the mimalloc it carries"

# in_use_mib DIR: what report says is in use at heaptrack's last look, in MiB.
in_use_mib() {
  "${MEMPROFILE}" report --json --rootfs "${root}" "$1" > "${SCRATCH}/$2.json" || fail "report $1: $(cat "${SCRATCH}/$2.json")"
  jq '[.in_use[].bytes_in_use] | add / 1048576 | floor' "${SCRATCH}/$2.json"
}

in_root /opt/memprofile/memprofile exec --backend heaptrack --preload /opt/memprofile/libheaptrack_preload.so \
  --output-dir /out-exec --min-free-mb 1 -- "${python}" /small.py > /dev/null 2> "${SCRATCH}/exec.log" ||
  fail "exec: $(cat "${SCRATCH}/exec.log")"
grep -q "PYTHONMALLOC=malloc so that every Python object goes through malloc" "${SCRATCH}/exec.log" ||
  fail "the start line does not say PYTHONMALLOC: $(cat "${SCRATCH}/exec.log")"
# shellcheck disable=SC2016 # $$ is the inner shell's: heaptrack's file per process
in_root sh -c 'PYTHONMALLOC=mimalloc LD_PRELOAD=/opt/memprofile/libheaptrack_preload.so \
  DUMP_HEAPTRACK_OUTPUT=/out-mimalloc/heaptrack.$$.raw exec "$0" /small.py' "${python}" > /dev/null
seen="$(in_use_mib "${root}/out-exec" exec)" missed="$(in_use_mib "${root}/out-mimalloc" mimalloc)"
((seen >= 60)) || fail "under exec heaptrack saw ${seen} MiB of the ~75 MiB kept"
((missed <= 30)) || fail "with PYTHONMALLOC=mimalloc heaptrack saw ${missed} MiB: the finding would be wrong"
pass "heaptrack saw ${seen} MiB of small objects under exec (PYTHONMALLOC=malloc), ${missed} MiB under mimalloc"
