#!/usr/bin/env bash
# The hadolint-style rules our Dockerfiles keep (hadolint is not packaged for
# Debian; dockerfile-utils checks syntax only). One line per violation:
# FILE:LINE: RULE: text. Exit 1 when any.
#   DL3025 ENTRYPOINT and CMD in JSON form (signals reach the app, no sh -c)
#   DL3015 apt-get install with --no-install-recommends
#   DL3009 apt lists removed in the same RUN that fills them
#   DL3007 no :latest base tags; bases come from build args or pinned tags
#   DL3020 COPY, not ADD, for local files; no ADD of URLs
#   MP001  builder stages that branch on TARGETARCH/TARGETPLATFORM fail on an unknown one
#   MP002  a final-stage RUN in JSON form (app images may have no shell)
# usage: devtools/lint/dockerfile-checklist.sh DOCKERFILE...
set -o errexit -o nounset -o pipefail

status=0
for file in "$@"; do
  # Join continuation lines, remembering where each instruction starts.
  if ! awk -v file="${file}" '
    function report(rule, text) { printf "%s:%d: %s: %s\n", file, start, rule, text; bad = 1 }
    function check(line,    upper, inst) {
      upper = toupper(line)
      split(line, words, /[ \t]+/)
      inst = toupper(words[1])
      if (inst == "FROM") { stage++; last_from = start }
      if ((inst == "ENTRYPOINT" || inst == "CMD") && line !~ /^[A-Za-z]+[ \t]+\[/)
        report("DL3025", inst " in shell form")
      if (inst == "RUN" && line ~ /apt-get[ \t]+(-[^ ]+[ \t]+)*install/ && line !~ /--no-install-recommends/)
        report("DL3015", "apt-get install without --no-install-recommends")
      if (inst == "RUN" && line ~ /apt-get[ \t]+update/ && line !~ /rm -rf \/var\/lib\/apt\/lists/)
        report("DL3009", "apt-get update without removing /var/lib/apt/lists in the same RUN")
      if (inst == "FROM" && line ~ /:latest([ \t]|$)/) report("DL3007", "FROM with :latest")
      if (inst == "ADD") report("DL3020", "ADD instead of COPY")
      if (inst == "RUN" && line ~ /TARGET(ARCH|PLATFORM)/ && line ~ /case/ && line !~ /\*\).*exit[ \t]+1/)
        report("MP001", "case on the target without a failing *) branch")
      if (inst == "RUN") { last_run = start; last_run_json = (line ~ /^RUN[ \t]+\[/); last_run_stage = stage }
    }
    {
      if (cont == "") start = NR
      text = $0
      sub(/^[ \t]+/, "", text)
      if (text ~ /^#/ && cont == "") next
      if (text ~ /\\$/) { sub(/\\$/, "", text); cont = cont text " "; next }
      line = cont text
      cont = ""
      if (line ~ /^[ \t]*$/) next
      check(line)
    }
    END {
      if (last_run_stage == stage && last_run && !last_run_json) { start = last_run; report("MP002", "the final stage ends with a shell-form RUN") }
      exit bad
    }' "${file}"; then
    status=1
  fi
done
exit "${status}"
