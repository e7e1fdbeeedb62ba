#!/usr/bin/env bash
# A growing site without a name, and the word on missing symbols: a program
# stripped to its dynamic symbols (as Debian ships them, its debug file
# elsewhere, named by .gnu_debuglink) grows in a static function. report
# names the site by its nearest named caller, with the unnamed frame at the
# top of its stack, and says once which file lacks symbols, the debug file
# it looked for and how to get it; with --debug-dir holding the debug
# file, the static function itself is named.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/control_lib.sh
source "$(dirname "$0")/control_lib.sh"

cat > "${SCRATCH}/app.c" <<'C'
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
void* kept[4096];  /* global: never optimised away */
static int n;
__attribute__((noinline)) static void grow_static(size_t size) {  /* no symbol once stripped */
  char* p = malloc(size);
  memset(p, 1, size);
  kept[n++ % 4096] = p;
}
__attribute__((noinline)) void named_caller(size_t size) { grow_static(size); }
int main(void) {
  for (int i = 0; i < 600; ++i) { named_caller(256 << 10); usleep(100000); }
  return 0;
}
C
gcc -O1 -g -rdynamic -o "${SCRATCH}/app.full" "${SCRATCH}/app.c"
mkdir -p "${SCRATCH}/dbg"
objcopy --only-keep-debug "${SCRATCH}/app.full" "${SCRATCH}/dbg/app.debug"
strip --strip-all -o "${SCRATCH}/app" "${SCRATCH}/app.full"
objcopy --add-gnu-debuglink="${SCRATCH}/dbg/app.debug" "${SCRATCH}/app"
[[ "$(readelf -S "${SCRATCH}/app")" != *.symtab* ]] || fail "the stripped program kept .symtab"

out="${SCRATCH}/out"
start_service "${out}" "${SCRATCH}/run.log" --backend jemalloc --preload "$(preload_dist jemalloc amd64)/libjemalloc.so.2" -- \
  "${SCRATCH}/app"
sleep 2
"${MEMPROFILE}" snapshot "${SERVICE_PID}" --output-dir "${out}" > /dev/null || fail "first snapshot"
sleep 3
"${MEMPROFILE}" snapshot "${SERVICE_PID}" --output-dir "${out}" > /dev/null || fail "second snapshot"
kill -KILL "${SERVICE_PID}"

"${MEMPROFILE}" report --rootfs / --json "${out}" > "${SCRATCH}/plain.json" 2> "${SCRATCH}/plain.err" ||
  fail "report: $(cat "${SCRATCH}/plain.err")"
[[ "$(jq -r '.growth[0].site.function' "${SCRATCH}/plain.json")" == named_caller ]] ||
  fail "the site is not named by its caller: $(jq -c '.growth[0]' "${SCRATCH}/plain.json")"
jq -e --arg app "${SCRATCH}/app" '.growth[0].stack[0] | .function == "" and .module == $app' "${SCRATCH}/plain.json" > /dev/null ||
  fail "the unnamed frame is not kept at the top of the site's stack: $(jq -c '.growth[0].stack' "${SCRATCH}/plain.json")"
note="$(jq -r --arg app "${SCRATCH}/app" '.notes[] | select(startswith($app + " has no symbol"))' "${SCRATCH}/plain.json")"
[[ "${note}" == *"app.debug"* && "${note}" == *"--debug-dir"* ]] ||
  fail "no note on the missing symbols, with the debug file looked for: $(jq -c .notes "${SCRATCH}/plain.json")"
pass "a static function without a symbol: the site is named by its caller (named_caller), the file's missing debug file is said once"
# The text says it in one short line, where a site shown depends on it;
# --verbose gives the whole story.
"${MEMPROFILE}" report --rootfs / "${out}" > "${SCRATCH}/plain.txt" 2> /dev/null || fail "report (text)"
[[ "$(grep -c "app has no symbols here: install its debug symbols or use --debug-dir" "${SCRATCH}/plain.txt")" == 1 ]] ||
  fail "the text does not say the missing symbols in one line: $(cat "${SCRATCH}/plain.txt")"
! grep -q "app.debug" "${SCRATCH}/plain.txt" || fail "the text lists where the debug file was looked for without --verbose"
"${MEMPROFILE}" -v report --rootfs / "${out}" > "${SCRATCH}/verbose.txt" 2> /dev/null || fail "report -v (text)"
grep -q "app.debug" "${SCRATCH}/verbose.txt" || fail "--verbose does not say where the debug file was looked for: $(cat "${SCRATCH}/verbose.txt")"
pass "the text says the missing symbols in one line where a shown site needs them; --verbose says where they were looked for"

"${MEMPROFILE}" report --rootfs / --debug-dir "${SCRATCH}/dbg" --json "${out}" > "${SCRATCH}/debug.json" 2> /dev/null ||
  fail "report --debug-dir"
[[ "$(jq -r '.growth[0].site.function' "${SCRATCH}/debug.json")" == grow_static ]] ||
  fail "--debug-dir: the static function is not named: $(jq -c '.growth[0].site' "${SCRATCH}/debug.json")"
pass "with --debug-dir, the debug file names grow_static"
