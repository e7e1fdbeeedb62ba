# bytehound 0.11.0's preload library (libbytehound.so), the default backend.
# It needs Rust's crates.io and the pinned nightly toolchain, which this
# project's machines cannot reach: everything up to `cargo` is tested, and the
# build runs wherever rustup and crates.io (or a vendored tree) are there.
# shellcheck shell=bash
# shellcheck disable=SC2034 # the variables are read by preload/build.sh
VERSION=0.11.0
COMMIT=acce3bce127705ea8c840767ed351229a3c2738c   # tag 0.11.0
# GitHub generates archive tarballs on the fly, so their bytes (and sha256)
# are not stable: the pin is the commit's tree id, checked on the unpacked
# content with git, whatever the compression.
TREE=fff517768e180a238cdd752802e45a45a0f4b957
TOOLCHAIN=nightly-2022-10-13   # the repository's rust-toolchain file
SOURCE_NAME=bytehound-${COMMIT}.tar.gz
SOURCE_URLS=("https://github.com/koute/bytehound/archive/${COMMIT}.tar.gz")
INSTALL_PATH=/usr/share/libbytehound.so   # numaflow's guide's path
LIBRARY=libbytehound.so
ENV_VARS="MEMORY_PROFILER_OUTPUT MEMORY_PROFILER_LOG MEMORY_PROFILER_LOGFILE MEMORY_PROFILER_TRACK_CHILD_PROCESSES MEMORY_PROFILER_CULL_TEMPORARY_ALLOCATIONS MEMORY_PROFILER_GRAB_BACKTRACES_ON_FREE MEMORY_PROFILER_USE_SHADOW_STACK"
# The vendored source (sources + `cargo vendor` output) lets a later build run
# offline: preload/bytehound/vendor.sh makes it once where crates.io is reachable.
VENDORED_NAME=bytehound-${VERSION}-vendored.tar.gz

# tree_id DIR: git's tree id of DIR's content (what the pin is checked against).
tree_id() {
  local dir="$1" tmp
  tmp="$(mktemp -d)"
  GIT_DIR="${tmp}" GIT_WORK_TREE="${dir}" git init -q
  GIT_DIR="${tmp}" GIT_WORK_TREE="${dir}" git add -A -f .
  GIT_DIR="${tmp}" GIT_WORK_TREE="${dir}" git write-tree
  rm -rf "${tmp}"
}

# cargo_env ARCH TRIPLET: the cross settings, printed as KEY=VALUE lines.
# - bytehound#128 ("can't find crate for core"): the aarch64 std must be added
#   to the pinned toolchain, not the default one: rustup target add
#   --toolchain ${TOOLCHAIN}.
# - bytehound#64 (nwind's aarch64 .s files, "bad register expression"): the C
#   compiler for the target must be the cross gcc, set per target for cc-rs.
# - bytehound#114 (no unwinding through pointer-authenticated frames, gimli
#   lacks DW_CFA_AARCH64_negate_ra_state): still open upstream; Debian does
#   not build with -mbranch-protection by default, and the launcher sets
#   MEMORY_PROFILER_USE_SHADOW_STACK=0 on aarch64.
cargo_env() {
  local arch="$1" triplet="$2" target
  target="$(rust_target "${arch}")"
  echo "RUSTUP_TOOLCHAIN=${TOOLCHAIN}"
  if [[ "${arch}" != "$(host_arch)" ]]; then
    local t="${target//-/_}"
    echo "CARGO_TARGET_${t^^}_LINKER=${triplet}-gcc"
    echo "CC_${t}=${triplet}-gcc"
    echo "CXX_${t}=${triplet}-g++"
    echo "AR_${t}=${triplet}-ar"
  fi
}

# cargo_args ARCH: what `cargo build` gets.
cargo_args() {
  local args=(build --release --locked -p bytehound-preload --target "$(rust_target "$1")")
  # parking_lot's nightly feature, as bytehound's CI enables on nightly.
  args+=(--features nightly)
  [[ -d "${SRC_DIR:-}/vendor" ]] && args+=(--offline)
  echo "${args[@]}"
}

# Verifies an unpacked source tree against the pinned tree id.
verify_source() {
  local got
  got="$(tree_id "$1")"
  [[ "${got}" == "${TREE}" ]] || die "bytehound source tree is ${got}, not the pinned ${TREE} (tag ${VERSION})"
}

build_recipe() {
  local src="$1" build="$2" arch="$3" triplet="$4" out="$5" target kv
  target="$(rust_target "${arch}")"
  command -v rustup >/dev/null || die "bytehound needs rustup (the ${TOOLCHAIN} toolchain); see preload/README.md"
  rustup toolchain install --profile minimal "${TOOLCHAIN}" >&2
  rustup target add --toolchain "${TOOLCHAIN}" "${target}" >&2
  if [[ -d "${src}/vendor" ]]; then
    mkdir -p "${src}/.cargo"
    printf '[source.crates-io]\nreplace-with = "vendored"\n[source."git+https://github.com/koute/not-perf.git"]\ngit = "https://github.com/koute/not-perf.git"\nreplace-with = "vendored"\n[source.vendored]\ndirectory = "vendor"\n' \
      > "${src}/.cargo/config.toml"
  fi
  local envs=()
  while IFS= read -r kv; do envs+=("${kv}"); done < <(cargo_env "${arch}" "${triplet}")
  BUILD_FLAGS="$(SRC_DIR="${src}" cargo_args "${arch}")"
  # shellcheck disable=SC2046 # the arguments are words
  (cd "${src}" && env "${envs[@]}" CARGO_TARGET_DIR="${build}" cargo $(SRC_DIR="${src}" cargo_args "${arch}")) >&2
  cp "${build}/${target}/release/libbytehound.so" "${out}/libbytehound.so"
}
