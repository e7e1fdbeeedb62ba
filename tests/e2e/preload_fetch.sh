#!/usr/bin/env bash
# The fetch step: a corrupted cache file is refused; a source that cannot be
# downloaded fails with a message naming what to download and where to put it.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=preload/recipes.sh
source "${E2E_ROOT}/preload/recipes.sh"
export PRELOAD_CACHE="${SCRATCH}/cache"

mkdir -p "${PRELOAD_CACHE}/sources"
echo "not the tarball" > "${PRELOAD_CACHE}/sources/thing.tar.gz"
want=$(printf 'real' | sha256sum | cut -d' ' -f1)
if out=$( (fetch thing.tar.gz "${want}" "http://127.0.0.1:9/thing.tar.gz") 2>&1); then fail "a corrupted cache file was accepted"; fi
[[ "${out}" == *"does not match the pinned ${want}; refusing it"* ]] || fail "unclear message for a corrupted cache file: ${out}"
pass "corrupted cache file refused"

# Nothing listens on 127.0.0.1:9 (discard): the download fails at once.
if out=$( (fetch other.tar.gz "${want}" "http://127.0.0.1:9/a.tar.gz" "http://127.0.0.1:9/b.tar.gz") 2>&1); then fail "fetch of an unreachable source succeeded"; fi
[[ "${out}" == *"cannot fetch other.tar.gz: download it from one of: http://127.0.0.1:9/a.tar.gz http://127.0.0.1:9/b.tar.gz (sha256 ${want}) and put it at ${PRELOAD_CACHE}/sources/other.tar.gz"* ]] ||
  fail "unclear message for an unreachable source: ${out}"
pass "unreachable source: says what to download and where to put it"

# Offline from the cache: a verified file is used without any network.
printf 'real' > "${PRELOAD_CACHE}/sources/good.tar.gz"
got=$(fetch good.tar.gz "${want}" "http://127.0.0.1:9/never-used")
[[ "${got}" == "${PRELOAD_CACHE}/sources/good.tar.gz" ]] || fail "cached file not used: ${got}"
pass "cached source used offline"

if out=$( (arch_triplet riscv64) 2>&1); then fail "unknown arch accepted"; fi
[[ "${out}" == *"unsupported architecture 'riscv64'"* ]] || fail "unclear unknown-arch message: ${out}"
[[ "$(arch_triplet linux/arm64/v8)" == aarch64-linux-gnu && "$(arch_triplet amd64)" == x86_64-linux-gnu ]] ||
  fail "arch mapping"
pass "architecture mapping, unknown platforms fail"
