#!/usr/bin/env bash
# Stages memray for an app image's interpreter (BACKEND=memray): Debian's
# python3-memray where it is for that interpreter (scripts/memray-debian.sh),
# else memray built from Debian's source package against the interpreter's
# headers (scripts/memray-source.sh).
# usage: scripts/memray-stage.sh FACTS.json ARCH OUT [HEADERS]
set -o errexit -o nounset -o pipefail

here="$(cd "$(dirname "$0")" && pwd)"
rc=0
"${here}/memray-debian.sh" "${1:-}" "${2:-}" "${3:-}" || rc=$?
((rc == 3)) || exit "${rc}"
exec "${here}/memray-source.sh" "$@"
