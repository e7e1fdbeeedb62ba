#!/usr/bin/env bash
# bytehound's recipe: what it decides without the network, and (where the
# offline bundle is, see preload/README.md) the bundle's checks. The build
# and its runs: preload_bytehound_run.sh (amd64), preload_bytehound_arm64.sh.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=preload/recipes.sh
source "${E2E_ROOT}/preload/recipes.sh"
# shellcheck source=preload/bytehound/recipe.sh
source "${E2E_ROOT}/preload/bytehound/recipe.sh"

[[ "$(rust_target amd64)" == x86_64-unknown-linux-gnu && "$(rust_target linux/arm64)" == aarch64-unknown-linux-gnu ]] ||
  fail "rust target mapping"
if out=$( (rust_target linux/s390x) 2>&1); then fail "unknown platform accepted"; fi
[[ "${out}" == *"unsupported architecture"* ]] || fail "unclear unknown-platform message"
pass "target mapping; unknown platforms fail"

env_arm64="$(cargo_env arm64 aarch64-linux-gnu)"
[[ "${env_arm64}" == *"RUSTUP_TOOLCHAIN=nightly-2022-10-13"* ]] || fail "pinned toolchain not selected"
[[ "${env_arm64}" == *"CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc"* ]] || fail "cross linker"
[[ "${env_arm64}" == *"CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc"* ]] || fail "cross C compiler (bytehound#64)"
[[ "$(cargo_env amd64 x86_64-linux-gnu)" != *LINKER* ]] || fail "native build given a cross linker"
pass "toolchain and cross settings"

cargo_line="$(cargo_args arm64)"
[[ "${cargo_line}" == "build --release -p bytehound-preload --target aarch64-unknown-linux-gnu --locked --features nightly" ]] ||
  fail "cargo arguments: ${cargo_line}"
[[ "$(cargo_args amd64 offline)" == "build --release -p bytehound-preload --target x86_64-unknown-linux-gnu --offline" ]] ||
  fail "offline cargo arguments: $(cargo_args amd64 offline)"
[[ "$(cargo_env arm64 aarch64-linux-gnu offline)" != *RUSTUP_TOOLCHAIN* ]] || fail "the offline build asks rustup for a toolchain"
mkdir -p "${SCRATCH}/src/vendor"
[[ "$(SRC_DIR="${SCRATCH}/src" cargo_args amd64)" == *"--offline"* ]] || fail "a vendored tree does not build offline"
pass "cargo arguments; vendored trees build offline"

# The pin is a git tree id over the unpacked content: a changed file is refused.
mkdir -p "${SCRATCH}/tree/a"
echo one > "${SCRATCH}/tree/a/f"
id1="$(tree_id "${SCRATCH}/tree")"
echo two > "${SCRATCH}/tree/a/f"
[[ "$(tree_id "${SCRATCH}/tree")" != "${id1}" ]] || fail "tree id ignores content"
[[ "${id1}" == "$(cd "${SCRATCH}/tree" && echo one > a/f && git init -q && git add -A && git write-tree)" ]] || fail "tree id differs from git's"
if out=$( (verify_source "${SCRATCH}/tree") 2>&1); then fail "a wrong tree passed verification"; fi
[[ "${out}" == *"not the pinned ${TREE}"* ]] || fail "unclear verification message"
pass "source verification by git tree id"

# Without network, bundle or vendored source: the exact files to provide.
# A proxy nobody listens on: the fetch fails for sure, wherever GitHub is
# reachable too.
if out=$(BYTEHOUND_BUNDLE=none PRELOAD_CACHE="${SCRATCH}/cache" https_proxy=http://127.0.0.1:9 http_proxy=http://127.0.0.1:9 \
    "${E2E_ROOT}/preload/build.sh" bytehound arm64 "${SCRATCH}/out" 2>&1); then
  fail "bytehound build succeeded without its source"
fi
[[ "${out}" == *"put the offline bundle bytehound-0.11.0-offline.tar.gz at ${SCRATCH}/cache/sources/"*"download https://github.com/koute/bytehound/archive/${COMMIT}.tar.gz"*"put it at ${SCRATCH}/cache/sources/bytehound-0.11.0-vendored.tar.gz"* ]] ||
  fail "unclear message without source: ${out}"
if out=$(BYTEHOUND_BUNDLE="${SCRATCH}/nothing.tar.gz" "${E2E_ROOT}/preload/build.sh" bytehound amd64 "${SCRATCH}/out" 2>&1); then
  fail "a missing BYTEHOUND_BUNDLE was ignored"
fi
[[ "${out}" == *"BYTEHOUND_BUNDLE=${SCRATCH}/nothing.tar.gz: no such file"* ]] || fail "unclear missing-bundle message: ${out}"
pass "no network: names what to download and where"

bundle="$(find_bundle)"
if [[ -z "${bundle}" ]]; then
  echo "skip: no offline bundle (${BUNDLE_NAME} in $(preload_cache)/sources or ../shared/vendor/bytehound beside the clone): the offline build and its runs are not tested here"
  exit 77
fi

# The bundle's checks: the tree by its id (one absent blob named), each
# crate by its pinned digest; a changed, an unknown, a missing or a linked
# crate is refused in one line naming it.
mkdir -p "${SCRATCH}/bundle"
tar -C "${SCRATCH}/bundle" --strip-components=1 -xzf "${bundle}"
crates="${SCRATCH}/bundle/crates"
(verify_source "${SCRATCH}/bundle/bytehound-0.11.0" "${BUNDLE_MISSING[@]}") || fail "the bundle's tree is refused"
if (verify_source "${SCRATCH}/bundle/bytehound-0.11.0") 2> /dev/null; then fail "a tree lacking a blob passed without it being named"; fi
(verify_crates "${crates}") || fail "the bundle's crates are refused"
refused() {  # PATTERN: verify_crates fails, saying PATTERN
  local out
  if out="$( (verify_crates "${crates}") 2>&1)"; then fail "verify_crates passed: expected ${1}"; fi
  [[ "${out}" == *"$1"* ]] || fail "verify_crates said: ${out}; expected ${1}"
}
cp "${crates}/glob-0.2.11/src/lib.rs" "${SCRATCH}/lib.rs"
echo "// changed" >> "${crates}/glob-0.2.11/src/lib.rs"
refused "glob-0.2.11: content digest"
cp "${SCRATCH}/lib.rs" "${crates}/glob-0.2.11/src/lib.rs"
mkdir "${crates}/evil-1.0.0"
refused "evil-1.0.0: not a crate the recipe pins"
rmdir "${crates}/evil-1.0.0"
mv "${crates}/lru-0.6.6" "${SCRATCH}/lru"
refused "lacks lru-0.6.6"
mv "${SCRATCH}/lru" "${crates}/lru-0.6.6"
ln -s /etc/passwd "${crates}/glob-0.2.11/passwd"
refused "holds a symbolic link"
rm "${crates}/glob-0.2.11/passwd"
(verify_crates "${crates}") || fail "the restored crates are refused"
# The blob the bundle lacks by design may not be there in any form.
echo anything > "${SCRATCH}/bundle/bytehound-0.11.0/simulation/memory-profiling-simulation.dat"
if out="$( (verify_source "${SCRATCH}/bundle/bytehound-0.11.0" "${BUNDLE_MISSING[@]}") 2>&1)"; then
  fail "a file where the tree lacks one by design passed"
fi
[[ "${out}" == *"lacks this file by design"* ]] || fail "unclear message for the present absent blob: ${out}"
rm "${SCRATCH}/bundle/bytehound-0.11.0/simulation/memory-profiling-simulation.dat"
# Through the build entry itself, before any build: a tampered bundle, and
# one whose tree is a link (the build would write where it points).
tampered() {  # NAME PATTERN: build.sh refuses bundle NAME (made from SCRATCH/bundle), saying PATTERN
  local out
  if out="$(BYTEHOUND_BUNDLE="${SCRATCH}/$1" "${E2E_ROOT}/preload/build.sh" bytehound amd64 "${SCRATCH}/out-$1" 2>&1)"; then
    fail "build.sh built from $1"
  fi
  [[ "${out}" == *"$2"* ]] || fail "build.sh on $1 said: ${out}; expected ${2}"
  [[ ! -e "${SCRATCH}/out-$1/libbytehound.so" ]] || fail "a library was written from $1"
}
echo "// changed" >> "${crates}/glob-0.2.11/src/lib.rs"
tar -C "${SCRATCH}" -czf "${SCRATCH}/changed.tar.gz" bundle
tampered changed.tar.gz "glob-0.2.11: content digest"
cp "${SCRATCH}/lib.rs" "${crates}/glob-0.2.11/src/lib.rs"
mv "${SCRATCH}/bundle/bytehound-0.11.0" "${SCRATCH}/tree-elsewhere"
ln -s "${SCRATCH}/tree-elsewhere" "${SCRATCH}/bundle/bytehound-0.11.0"
tar -C "${SCRATCH}" -czf "${SCRATCH}/linked.tar.gz" bundle
tampered linked.tar.gz "holds bytehound-0.11.0, which is not a plain file or directory"
rm "${SCRATCH}/bundle/bytehound-0.11.0"
mv "${SCRATCH}/tree-elsewhere" "${SCRATCH}/bundle/bytehound-0.11.0"
pass "the bundle: tree id with its one absent blob named (present: refused); each crate pinned (changed, unknown, missing, linked: refused); build.sh refuses a tampered bundle and one whose tree is a link, and writes nothing"
