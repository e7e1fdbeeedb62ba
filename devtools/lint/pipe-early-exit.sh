#!/usr/bin/env bash
# Under pipefail, a reader that leaves at its first match (grep -q, grep -m)
# kills a writer that still has output with SIGPIPE, and the pipeline fails
# or not depending on how the writer's output was split into writes: a test
# that passes on an idle machine and fails on a busy one. Write
# `| grep PATTERN > /dev/null` (it reads to the end) or grep a file or a
# here-string instead. One line per violation: FILE:LINE: text. Exit 1 when any.
# usage: devtools/lint/pipe-early-exit.sh SCRIPT...
set -o errexit -o nounset -o pipefail

status=0
for file in "$@"; do
  # A pipe into grep with -q or -m among its options (not a here-string).
  if grep -nE '(^|[^|])\|[[:space:]]*grep([[:space:]]+-[A-Za-z]*[qm][A-Za-z0-9]*)+([[:space:]]|$)' "${file}" |
    sed "s|^\([0-9]*\):|${file}:\1: |; s|\$|  (grep -q or -m at the end of a pipe: SIGPIPE under pipefail)|"; then
    status=1
  fi
done
exit "${status}"
