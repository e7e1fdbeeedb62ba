#!/usr/bin/env bash
# memprofile preflight --backend memray, on a Debian trixie root (Python
# 3.13, python3-memray 1.17, gunicorn 23), before anything runs: which
# interpreter the entrypoint reaches, whether its sys.path in the image
# imports memray, whether the extension is built for its Python and its
# architecture and resolves there (the loader model), and, under memprofile
# exec, whether the bootstrap is there and the output directory exists:
#   READY for a script, /usr/bin/env scripts and gunicorn's console script,
#     and for venvs that include the system's site-packages (one --copies);
#   NOT PROFILABLE, each with its finding: a venv without memray
#     (MEMRAY_MISSING), a memray copied from another Python (an extension
#     tagged cpython-311: MEMRAY_WRONG_PYTHON) and one of another
#     architecture (a real aarch64 ELF tagged aarch64-linux-gnu:
#     MEMRAY_WRONG_ARCH), `-I` or `env -u PYTHONPATH` on the #! line
#     (MEMRAY_BOOTSTRAP_IGNORED), a program that is no Python
#     (MEMRAY_NOT_PYTHON), a script as --target;
#   with memprofile exec --backend memray as the entrypoint: the bootstrap
#     missing, then present (READY: memray will track), an output
#     directory the image lacks, a launcher that starts jemalloc, and an app
#     run by python -m memray (its own tracker);
#   the user's site-packages (~/.local) first, unless -s;
#   --backend with another value: one line, exit 2.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

[[ "${EUID}" == 0 ]] || { echo "skip: the venvs are made by the root's own python in a chroot (root)"; exit 77; }
root="${SCRATCH}/root"
unpack_trixie_python_root "${root}"
mkdir -p "${root}/app"
echo 'print("hello")' > "${root}/app/service.py"
printf '#!/usr/bin/env python3\nprint("hello")\n' > "${root}/app/run"
printf '#!/usr/bin/python3 -I\nprint("hello")\n' > "${root}/app/isolated"
printf '#!/usr/bin/env -S -u PYTHONPATH python3\nprint("hello")\n' > "${root}/app/unset"
printf '#!/usr/bin/env -S PYTHONUNBUFFERED=1 python3\nprint("hello")\n' > "${root}/app/unbuffered"
chmod 0755 "${root}/app/run" "${root}/app/isolated" "${root}/app/unset" "${root}/app/unbuffered"
chroot "${root}" python3 -m venv --without-pip /opt/venv-isolated || fail "venv: cannot make one"
chroot "${root}" python3 -m venv --without-pip --system-site-packages /opt/venv-system || fail "venv: cannot make one"
chroot "${root}" python3 -m venv --without-pip --copies --system-site-packages /opt/venv-copies ||
  fail "venv: cannot make one"
memray_pkg="$(find "${root}/usr/lib/python3/dist-packages" -maxdepth 1 -name memray -type d)"
extension="$(find "${memray_pkg}" -maxdepth 1 -name '_memray.cpython-313-x86_64-linux-gnu.so')"
[[ -n "${extension}" ]] || fail "the trixie root's memray has no x86_64 extension for Python 3.13: $(ls "${memray_pkg}")"

# A memray package vendored into /opt/NAME (first on PYTHONPATH) with the
# given extension file in place of Debian's.
vendored() {
  local name="$1" ext="$2"
  mkdir -p "${root}/opt/${name}/memray"
  find "${memray_pkg}" -maxdepth 1 -name '*.py' -exec cp {} "${root}/opt/${name}/memray/" \;
  cp "${ext}" "${root}/opt/${name}/memray/"
}
# From a python:3.11 image: the same extension as its Python would tag it.
cp "${extension}" "${SCRATCH}/_memray.cpython-311-x86_64-linux-gnu.so"
vendored py311 "${SCRATCH}/_memray.cpython-311-x86_64-linux-gnu.so"
# From an arm64 image: an aarch64 ELF shared object, as arm64's is named.
echo 'int memray_stub(void) { return 0; }' > "${SCRATCH}/stub.c"
aarch64-linux-gnu-gcc -shared -fPIC -o "${SCRATCH}/_memray.cpython-313-aarch64-linux-gnu.so" "${SCRATCH}/stub.c" ||
  fail "aarch64-linux-gnu-gcc cannot build a shared object"
vendored arm64 "${SCRATCH}/_memray.cpython-313-aarch64-linux-gnu.so"

# judge NAME WANT_EXIT ARGS...: preflight --json of the root; the verdict in
# SCRATCH/NAME.json.
judge() {
  local name="$1" want="$2" rc=0
  shift 2
  "${MEMPROFILE}" preflight --json --rootfs "${root}" --backend memray "$@" > "${SCRATCH}/${name}.json" 2> "${SCRATCH}/${name}.err" || rc=$?
  ((rc == want)) || fail "${name}: exit ${rc}, not ${want}: $(cat "${SCRATCH}/${name}.err") $(jq -c '.findings' "${SCRATCH}/${name}.json" 2> /dev/null)"
}
# has NAME CODE: the verdict holds that finding.
has() {
  jq -e --arg c "$2" '[.findings[].code] | index($c)' "${SCRATCH}/$1.json" > /dev/null ||
    fail "$1: no $2 among $(jq -c '[.findings[] | "\(.code): \(.message)"]' "${SCRATCH}/$1.json")"
}
# ready NAME PROGRAM: READY, memray's extension found for PROGRAM.
ready() {
  jq -e --arg p "$2" '.ready and .preload.backend == "memray" and .program == $p and
      (.preload.path | endswith("/_memray.cpython-313-x86_64-linux-gnu.so"))' "${SCRATCH}/$1.json" > /dev/null ||
    fail "$1: $(jq -c '{ready, program, preload, findings: [.findings[].code]}' "${SCRATCH}/$1.json")"
}

judge script 0 --entrypoint '["python3", "/app/service.py"]'
ready script /usr/bin/python3.13
has script MEMRAY_NO_LAUNCHER
judge env-script 0 --entrypoint '["/app/run"]'
ready env-script /usr/bin/python3.13
jq -e '.scripts == ["/app/run"]' "${SCRATCH}/env-script.json" > /dev/null || fail "env-script: $(jq -c .scripts "${SCRATCH}/env-script.json")"
judge gunicorn 0 --entrypoint '["gunicorn", "--workers", "2", "app:app"]'
ready gunicorn /usr/bin/python3.13
judge venv-system 0 --entrypoint '["/opt/venv-system/bin/python", "/app/service.py"]'
ready venv-system /usr/bin/python3.13
judge venv-copies 0 --entrypoint '["/opt/venv-copies/bin/python", "/app/service.py"]'
ready venv-copies /opt/venv-copies/bin/python
judge unbuffered 0 --entrypoint '["/app/unbuffered"]'
ready unbuffered /usr/bin/python3.13
"${MEMPROFILE}" preflight --rootfs "${root}" --backend memray --entrypoint '["/app/run"]' > "${SCRATCH}/script.txt" ||
  fail "the text verdict: $(cat "${SCRATCH}/script.txt")"
grep -q "^READY: memray could track (started by memprofile exec) /usr/bin/python3.13" "${SCRATCH}/script.txt" ||
  fail "the text verdict: $(head -3 "${SCRATCH}/script.txt")"
# The interpreter's facts the memray image build reads: Debian's python3.13
# of trixie, with dpkg's installed packages; a venv's copy belongs to it too
# (pyvenv.cfg's home), and installs go to the venv's site-packages.
jq -e '.python | .interpreter == "/usr/bin/python3.13" and .version == "3.13" and
    .debian.codename == "trixie" and .debian.python_package == "python3.13-minimal" and .debian.complete and
    ([.debian.installed[].package] | index("python3-memray") != null)' "${SCRATCH}/gunicorn.json" > /dev/null ||
  fail "gunicorn: python facts: $(jq -c '.python | del(.debian.installed)' "${SCRATCH}/gunicorn.json")"
jq -e '.python | .debian.python_package == "python3.13-minimal" and .include_dir == "/usr/include/python3.13"
    and (.site_packages | test("^/opt/venv[^/]*/lib/python3.13/site-packages$"))' "${SCRATCH}/venv-copies.json" > /dev/null ||
  fail "venv-copies: python facts: $(jq -c '.python | del(.debian.installed)' "${SCRATCH}/venv-copies.json")"
jq -e '.python | .site_packages == "/usr/local/lib/python3.13/dist-packages" and .include_dir == "/usr/include/python3.13"' \
  "${SCRATCH}/gunicorn.json" > /dev/null || fail "gunicorn: where memray would go: $(jq -c '.python | del(.debian)' "${SCRATCH}/gunicorn.json")"
pass "python facts: Debian's python3.13-minimal of trixie for gunicorn's interpreter (dpkg's packages listed; memray would go to /usr/local's dist-packages) and for a venv's copied interpreter (to the venv's site-packages)"
pass "READY: a script, /usr/bin/env scripts (one setting a variable first), gunicorn's console script and venvs with the system's site-packages (linked, and copied: its version from pyvenv.cfg) reach a python3.13 that imports memray 1.17's cpython-313 x86_64 extension"

judge venv-isolated 1 --entrypoint '["/opt/venv-isolated/bin/python", "/app/service.py"]'
has venv-isolated MEMRAY_MISSING
# Its interpreter is Debian's, but Debian's memray would not be seen there:
# one built for it goes to the venv's own site-packages.
jq -e '.python | .isolated_venv and .debian.python_package == "python3.13-minimal" and .invoked == "/opt/venv-isolated/bin/python"
    and .site_packages == "/opt/venv-isolated/lib/python3.13/site-packages"' \
  "${SCRATCH}/venv-isolated.json" > /dev/null ||
  fail "venv-isolated: python facts: $(jq -c '.python | del(.debian.installed)' "${SCRATCH}/venv-isolated.json")"
judge py311 1 --entrypoint '["python3", "/app/service.py"]' --env PYTHONPATH=/opt/py311
has py311 MEMRAY_WRONG_PYTHON
judge arm64 1 --entrypoint '["python3", "/app/service.py"]' --env PYTHONPATH=/opt/arm64
has arm64 MEMRAY_WRONG_ARCH
judge isolated 1 --entrypoint '["/app/isolated"]'
has isolated MEMRAY_BOOTSTRAP_IGNORED
judge perl 1 --entrypoint '["perl", "-e", "1"]'
has perl MEMRAY_NOT_PYTHON
judge unset 1 --entrypoint '["/app/unset"]'
has unset MEMRAY_BOOTSTRAP_IGNORED
# --target as a name on PATH: the venv it names is the one judged.
judge venv-target 1 --entrypoint '["python", "/app/service.py"]' --env PATH=/opt/venv-isolated/bin:/usr/bin --target python
has venv-target MEMRAY_MISSING
judge script-target 1 --entrypoint '["/app/run"]' --target /app/run
has script-target ENTRYPOINT_NOT_EXECUTABLE
pass "NOT PROFILABLE: a venv without memray (named, and as --target found on PATH), memray from Python 3.11 and from arm64 first on PYTHONPATH, python3 -I, env -u PYTHONPATH on the #! line, perl, a script as --target: each its finding"

# memprofile exec --backend memray as the entrypoint, laid out as images
# have it.
mkdir -p "${root}/usr/local/bin" "${root}/usr/lib/memprofile" "${root}/profiles"
cp "${LAUNCHER}" "${root}/usr/local/bin/memprofile"
cp "${CTL_LIBRARY}" "${root}/usr/lib/memprofile/"
launched=(--entrypoint '["memprofile", "exec", "--backend", "memray", "--output-dir", "/profiles", "--"]'
  --cmd '["gunicorn", "--workers", "2", "app:app"]')
judge no-bootstrap 1 "${launched[@]}"
has no-bootstrap MEMRAY_BOOTSTRAP_MISSING
# The entry alone, as an image that copied only the one file would have it:
# its package is named missing.
mkdir -p "${root}/usr/lib/memprofile/python"
cp "$(dirname "${CTL_LIBRARY}")/python/sitecustomize.py" "${root}/usr/lib/memprofile/python/"
judge entry-only 1 "${launched[@]}"
# bootstrap_missing NAME TEXT: one MEMRAY_BOOTSTRAP_MISSING, naming TEXT and
# no file that is there.
bootstrap_missing() {
  jq -e --arg t "$2" '[.findings[] | select(.code == "MEMRAY_BOOTSTRAP_MISSING") | .message] |
      length == 1 and (.[0] | contains($t) and (contains("sitecustomize.py") | not))' "${SCRATCH}/$1.json" > /dev/null ||
    fail "$1: $(jq -c '[.findings[] | "\(.code): \(.message)"]' "${SCRATCH}/$1.json")"
}
bootstrap_missing entry-only "/usr/lib/memprofile/python/_memprofile_memray/ (the package)"
# A package short of one module: that module is named.
cp -R "$(dirname "${CTL_LIBRARY}")/python/." "${root}/usr/lib/memprofile/python/"
rm "${root}/usr/lib/memprofile/python/_memprofile_memray/control.py"
judge module-missing 1 "${launched[@]}"
bootstrap_missing module-missing "memprofile's bootstrap /usr/lib/memprofile/python/_memprofile_memray/control.py is not"
cp -R "$(dirname "${CTL_LIBRARY}")/python/." "${root}/usr/lib/memprofile/python/"
judge launched 0 "${launched[@]}"
ready launched /usr/bin/python3.13
jq -e '.launcher.backend == "memray" and ([.findings[].code] | index("MEMRAY_NO_LAUNCHER") | not)' \
  "${SCRATCH}/launched.json" > /dev/null || fail "launched: $(jq -c '{launcher, findings}' "${SCRATCH}/launched.json")"
judge no-output 1 --entrypoint '["memprofile", "exec", "--backend", "memray", "--output-dir", "/nowhere", "--"]' \
  --cmd '["python3", "/app/service.py"]'
has no-output OUTPUT_DIR_MISSING
judge own-tracker 1 --entrypoint '["memprofile", "exec", "--backend", "memray", "--output-dir", "/profiles", "--"]' \
  --cmd '["python3", "-m", "memray", "run", "/app/service.py"]'
has own-tracker MEMRAY_APP_TRACKER
judge jemalloc-launcher 1 --entrypoint '["memprofile", "exec", "--backend", "jemalloc", "--"]' --cmd '["python3", "/app/service.py"]'
has jemalloc-launcher LAUNCHER_CONFIG
pass "memprofile exec --backend memray: MEMRAY_BOOTSTRAP_MISSING without python/sitecustomize.py beside the control library, naming the package when only the entry is there and the one module missing from it, READY with all, OUTPUT_DIR_MISSING for an output directory the image lacks, LAUNCHER_CONFIG for a launcher that starts jemalloc, MEMRAY_APP_TRACKER for python -m memray run"

# The user's site-packages (pip install --user) comes before Debian's: the
# root user's ~/.local (HOME from /etc/passwd) holding the arm64 copy is the
# memray python3 imports, unless -s leaves the user site out; PYTHONUSERBASE
# moves it.
mkdir -p "${root}/root/.local/lib/python3.13/site-packages"
cp -r "${root}/opt/arm64/memray" "${root}/root/.local/lib/python3.13/site-packages/"
judge user-site 1 --entrypoint '["python3", "/app/service.py"]'
has user-site MEMRAY_WRONG_ARCH
judge no-user-site 0 --entrypoint '["python3", "-s", "/app/service.py"]'
ready no-user-site /usr/bin/python3.13
judge user-base 1 --entrypoint '["python3", "/app/service.py"]' --env PYTHONUSERBASE=/root/.local --env HOME=/nowhere
has user-base MEMRAY_WRONG_ARCH
rm -rf "${root}/root/.local"
pass "the user's site-packages (~/.local, from /etc/passwd's home, or PYTHONUSERBASE) is searched before Debian's, and left out under -s"

expect_error "--backend takes memray" --rootfs "${root}" --backend jemalloc --entrypoint python3
pass "--backend jemalloc: one line, exit 2"
