#!/usr/bin/env bash
# bytehound cannot be fetched or compiled here (GitHub, crates.io): what the
# recipe decides without the network is tested.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=preload/lib.sh
source "${E2E_ROOT}/preload/lib.sh"
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
[[ "${cargo_line}" == "build --release --locked -p bytehound-preload --target aarch64-unknown-linux-gnu --features nightly" ]] ||
  fail "cargo arguments: ${cargo_line}"
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

# Without network and without the vendored source: the exact file to provide.
if out=$(PRELOAD_CACHE="${SCRATCH}/cache" "${E2E_ROOT}/preload/build.sh" bytehound arm64 "${SCRATCH}/out" 2>&1); then
  fail "bytehound build succeeded without its source"
fi
[[ "${out}" == *"cannot fetch bytehound 0.11.0: download https://github.com/koute/bytehound/archive/${COMMIT}.tar.gz"*"put it at ${SCRATCH}/cache/sources/bytehound-0.11.0-vendored.tar.gz"* ]] ||
  fail "unclear message without source: ${out}"
pass "no network: names what to download and where"
