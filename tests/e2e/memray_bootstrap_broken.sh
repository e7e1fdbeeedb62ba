#!/usr/bin/env bash
# memprofile's memray bootstrap never stops the app: a memray package whose
# import raises SystemExit, a Tracker that raises KeyboardInterrupt, and one
# whose start calls sys.exit each end in one line on stderr; the app runs
# with its own exit code and its own sitecustomize still runs after ours.
# The interpreter is the host's python3; memray is a stand-in package that
# fails the way each case says (the bootstrap is what is tested).
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

python=/usr/bin/python3
bootstrap="$(dirname "${CTL_LIBRARY}")/python"
[[ -f "${bootstrap}/sitecustomize.py" ]] || fail "no bootstrap in ${bootstrap}"
mkdir -p "${SCRATCH}/app-site" "${SCRATCH}/out"
echo 'import sys; print("app sitecustomize ran")' > "${SCRATCH}/app-site/sitecustomize.py"

broken_memray() {  # CASE: a memray package at SCRATCH/CASE/memray that fails that way
  mkdir -p "${SCRATCH}/$1/memray"
  case "$1" in
    exit-on-import) echo 'raise SystemExit(3)' ;;
    tracker-interrupt) printf 'class Tracker:\n    def __init__(self, *a, **k):\n        raise KeyboardInterrupt\n' ;;
    tracker-exit) printf 'import sys\nclass Tracker:\n    def __init__(self, *a, **k):\n        pass\n    def __enter__(self):\n        sys.exit(4)\n    def __exit__(self, *a):\n        pass\n' ;;
  esac > "${SCRATCH}/$1/memray/__init__.py"
}

for case in exit-on-import tracker-interrupt tracker-exit; do
  broken_memray "${case}"
  rc=0
  env PYTHONPATH="${bootstrap}:${SCRATCH}/${case}:${SCRATCH}/app-site" MEMPROFILE_MEMRAY_TARGET="$(realpath "${python}")" \
    MEMPROFILE_MEMRAY_DIR="${SCRATCH}/out" "${python}" -c 'import sys; print("app ran"); sys.exit(7)' \
    > "${SCRATCH}/${case}.out" 2> "${SCRATCH}/${case}.err" || rc=$?
  ((rc == 7)) || fail "${case}: exit ${rc}, not the app's 7: $(cat "${SCRATCH}/${case}.out" "${SCRATCH}/${case}.err")"
  [[ "$(cat "${SCRATCH}/${case}.out")" == $'app sitecustomize ran\napp ran' ]] ||
    fail "${case}: the app or its sitecustomize did not run: $(cat "${SCRATCH}/${case}.out" "${SCRATCH}/${case}.err")"
  { [[ "$(wc -l < "${SCRATCH}/${case}.err")" == 1 ]] && grep -q "^memprofile: memray: .*not tracked" "${SCRATCH}/${case}.err"; } ||
    fail "${case}: not one line on stderr: $(cat "${SCRATCH}/${case}.err")"
done
pass "a memray that exits on import, or whose Tracker raises KeyboardInterrupt or calls sys.exit: one line, the app and its sitecustomize run"
