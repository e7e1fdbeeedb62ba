#!/usr/bin/env bash
# What keeps memray from working under memprofile exec --backend memray is
# one ERROR line, and the program runs unprofiled (exit 3 with --strict): no
# memray in the interpreter's sys.path (a virtual environment without the
# system's site-packages), a program that is no Python, python3 -I.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

memray_root  # sets root: the trixie root with the launcher and the bootstrap in /opt/memprofile
memray_service_app  # /app/service.py

# 4. What keeps memray from working: one ERROR line, the program runs
# unprofiled with its own exit code; --strict refuses with 3.
refused() {  # refused NAME CODE [exec args...]
  local name="$1" code="$2" rc=0
  shift 2
  mkdir -p "${root}/out-${name}"
  memray_exec --output-dir "/out-${name}" "$@" > "${SCRATCH}/${name}.log" 2>&1 || rc=$?
  ((rc == 0)) || fail "${name}: the unprofiled program's exit code is ${rc}: $(cat "${SCRATCH}/${name}.log")"
  grep -q "running unprofiled: .*: ${code}: " "${SCRATCH}/${name}.log" || fail "${name}: no ${code}: $(cat "${SCRATCH}/${name}.log")"
  [[ -z "$(ls "${root}/out-${name}")" ]] || fail "${name}: something was captured: $(ls "${root}/out-${name}")"
  rc=0
  memray_exec --strict --output-dir "/out-${name}" "$@" > "${SCRATCH}/${name}-strict.log" 2>&1 || rc=$?
  ((rc == 3)) || fail "${name}: --strict exits ${rc}: $(cat "${SCRATCH}/${name}-strict.log")"
}
refused not-python MEMRAY_NOT_PYTHON -- /bin/true
refused isolated MEMRAY_BOOTSTRAP_IGNORED -- python3 -I service.py 5
# A virtual environment sees the base's memray only when it includes the
# system's site-packages (pyvenv.cfg), as its interpreter would.
in_root python3 -m venv --without-pip /opt/venv-isolated || fail "venv: cannot make one"
in_root python3 -m venv --without-pip --system-site-packages /opt/venv-system || fail "venv: cannot make one"
refused venv-isolated MEMRAY_MISSING -- /opt/venv-isolated/bin/python service.py 5
mkdir -p "${root}/out-venv"
memray_exec --output-dir /out-venv -- /opt/venv-system/bin/python service.py 50 > "${SCRATCH}/venv.log" 2>&1 ||
  fail "venv: exit code: $(cat "${SCRATCH}/venv.log")"
[[ "$(cd "${root}/out-venv" && ls memray.*)" =~ ^memray\.[0-9]+\.bin$ ]] || fail "venv: captures: $(ls "${root}/out-venv"): $(cat "${SCRATCH}/venv.log")"
pass "venv: tracked when it includes the system's site-packages, MEMRAY_MISSING when it does not"
mv "${root}/usr/lib/python3/dist-packages/memray" "${root}/memray.away"
refused missing MEMRAY_MISSING -- python3 service.py 5
mv "${root}/memray.away" "${root}/usr/lib/python3/dist-packages/memray"
pass "refused in one line each, the program run unprofiled (exit 3 with --strict): not python, python3 -I, no memray on sys.path"
