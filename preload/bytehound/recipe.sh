# bytehound 0.11.0's preload library (libbytehound.so), the default backend.
# Two ways to build the same pinned tree, and the manifest says which one did:
# - offline: Debian's Rust crates (librust-*-dev, scripts/install-deps.sh),
#   the crates Debian lacks from an offline bundle (each checked against
#   crates.sha256), and Debian's rustc-web unpacked privately
#   (scripts/rust-web.sh); the lock file is resolved again against those
#   crates, so it is not the tag's Cargo.lock;
# - upstream: rustup's pinned nightly and crates.io with the tag's
#   Cargo.lock, where they are reachable (or a tree vendor.sh made).
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
# The offline bundle: the tag's tree and the crates Debian lacks. Looked for
# at BYTEHOUND_BUNDLE, in the preload cache's sources, and in a shared
# vendor directory beside the clone; everything in it is checked before use.
BUNDLE_NAME=bytehound-${VERSION}-offline.tar.gz
# The bundle's tree lacks one blob of the tag (pre-generated test data of the
# simulation crate, not used by the preload): the tree id is checked with
# that entry taken by its blob id.
BUNDLE_MISSING=(simulation/memory-profiling-simulation.dat=e0aff4b314e117302f9fbed0d7dbd996d48b567d)
# fast_range_map's const BTreeMap::new needs rustc 1.66 (bookworm's is 1.63).
RUSTC_MINOR_MIN=66
RUST_WEB="${MEMPROFILE_RUST_WEB:-/opt/memprofile/rust-web}"
# Debian's crate registry (librust-*-dev).
DEBIAN_REGISTRY="${MEMPROFILE_CARGO_REGISTRY:-/usr/share/cargo/registry}"
BUILD_PATH=""

# tree_id DIR: git's tree id of DIR's content (what the pin is checked against).
# PATH=BLOB arguments are entries absent from DIR, taken by their blob id.
# The bytes are hashed as they are: no user or system git config, and no
# attribute (the tree's own .gitattributes say `text eol=lf`, under which a
# CRLF copy would hash the same) converts them.
tree_id() {
  local dir="$1" tmp entry
  shift
  tmp="$(mktemp -d)"
  export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
  GIT_DIR="${tmp}" GIT_WORK_TREE="${dir}" git init -q
  printf '* -text !eol -filter -ident !working-tree-encoding\n' > "${tmp}/info/attributes"
  GIT_DIR="${tmp}" GIT_WORK_TREE="${dir}" git -c core.autocrlf=false add -A -f .
  for entry in "$@"; do
    GIT_DIR="${tmp}" git update-index --add --cacheinfo "100644,${entry#*=},${entry%%=*}"
  done
  GIT_DIR="${tmp}" GIT_WORK_TREE="${dir}" git write-tree --missing-ok
  rm -rf "${tmp}"
}

# cargo_env ARCH TRIPLET [offline]: the cross settings, printed as KEY=VALUE
# lines (offline: no rustup toolchain).
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
  [[ "${3:-}" == offline ]] || echo "RUSTUP_TOOLCHAIN=${TOOLCHAIN}"
  if [[ "${arch}" != "$(host_arch)" ]]; then
    local t="${target//-/_}"
    echo "CARGO_TARGET_${t^^}_LINKER=${triplet}-gcc"
    echo "CC_${t}=${triplet}-gcc"
    echo "CXX_${t}=${triplet}-g++"
    echo "AR_${t}=${triplet}-ar"
  fi
}

# cargo_args ARCH [offline]: what `cargo build` gets.
cargo_args() {
  local args=(build --release -p bytehound-preload --target "$(rust_target "$1")")
  if [[ "${2:-}" == offline ]]; then
    # Stable rustc: no nightly features; the lock was resolved here.
    args+=(--offline)
  else
    # The tag's Cargo.lock, and parking_lot's nightly feature, as bytehound's
    # CI enables on nightly.
    args+=(--locked --features nightly)
    [[ -d "${SRC_DIR:-}/vendor" ]] && args+=(--offline)
  fi
  echo "${args[@]}"
}

# Verifies an unpacked source tree against the pinned tree id (PATH=BLOB
# arguments: entries the tree may lack, see BUNDLE_MISSING).
verify_source() {
  local got dir="$1" entry
  shift
  # An entry the tree may lack must be absent: present, any bytes would pass.
  for entry in "$@"; do
    [[ ! -e "${dir}/${entry%%=*}" && ! -L "${dir}/${entry%%=*}" ]] ||
      die "${dir}/${entry%%=*}: the bundle's tree lacks this file by design (taken by its blob id), yet it is there"
  done
  got="$(tree_id "${dir}" "$@")"
  [[ "${got}" == "${TREE}" ]] || die "bytehound source tree is ${got}, not the pinned ${TREE} (tag ${VERSION})"
}

# find_bundle: the offline bundle's path, or nothing. BYTEHOUND_BUNDLE, when
# set, is the only place looked at ("none": build without one).
find_bundle() {
  local here candidate candidates
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  candidates=("$(preload_cache)/sources/${BUNDLE_NAME}" "$(cd "${here}/../../.." && pwd)/shared/vendor/bytehound/${BUNDLE_NAME}")
  if [[ -n "${BYTEHOUND_BUNDLE:-}" ]]; then
    [[ "${BYTEHOUND_BUNDLE}" == none ]] && return 0
    [[ -f "${BYTEHOUND_BUNDLE}" ]] || die "BYTEHOUND_BUNDLE=${BYTEHOUND_BUNDLE}: no such file"
    candidates=("${BYTEHOUND_BUNDLE}")
  fi
  for candidate in "${candidates[@]}"; do
    [[ -n "${candidate}" && -f "${candidate}" ]] && { echo "${candidate}"; return 0; }
  done
  return 0
}

# verify_crates DIR: every crate directory in DIR is one crates.sha256 pins,
# with the pinned content (a digest of its files' sha256 list), and every
# pinned crate is there. A link in a crate is refused (it could point out).
verify_crates() {
  local dir="$1" pins got name want
  pins="$(dirname "${BASH_SOURCE[0]}")/crates.sha256"
  local odd
  odd="$(find "${dir}" ! -type f ! -type d -print -quit)"
  [[ -z "${odd}" ]] || die "${odd}: a crate holds a symbolic link or a special file"
  for name in "${dir}"/*/; do
    name="$(basename "${name}")"
    want="$(N="${name}" awk '$2 == ENVIRON["N"] { print $1 }' "${pins}")"
    [[ -n "${want}" ]] || die "${dir}/${name}: not a crate the recipe pins (${pins})"
    got="$(cd "${dir}/${name}" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum | sha256sum | cut -d' ' -f1)"
    [[ "${got}" == "${want}" ]] || die "${dir}/${name}: content digest ${got}, not the pinned ${want}"
  done
  while read -r want name; do
    [[ -d "${dir}/${name}" ]] || die "${dir}: lacks ${name}, which the recipe pins"
  done < "${pins}"
}

# prepare_source SRC: the pinned tree in SRC, from the offline bundle when
# there is one, else from the vendored tree or GitHub; sets BUILD_PATH and
# SOURCE_PIN.
prepare_source() {
  local src="$1" bundle vendored
  bundle="$(find_bundle)" || exit 1
  if [[ -n "${bundle}" ]]; then
    local unpacked="${src}.bundle"
    mkdir -p "${unpacked}"
    tar -C "${unpacked}" --strip-components=1 --no-same-owner --no-same-permissions -xzf "${bundle}" ||
      die "${bundle}: not a readable tar.gz"
    # Files and directories only: a link (the tree itself could be one, and
    # the build writes into it), a device, a fifo or a .git is refused.
    local odd
    odd="$(find "${unpacked}" \( \( ! -type f ! -type d \) -o -name .git \) -print -quit)"
    [[ -z "${odd}" ]] || die "${bundle}: holds ${odd#"${unpacked}/"}, which is not a plain file or directory (or is a .git)"
    [[ -d "${unpacked}/bytehound-${VERSION}" && -d "${unpacked}/crates" ]] ||
      die "${bundle}: no bytehound-${VERSION}/ and crates/ in it"
    verify_source "${unpacked}/bytehound-${VERSION}" "${BUNDLE_MISSING[@]}"
    verify_crates "${unpacked}/crates"
    rmdir "${src}"
    mv "${unpacked}/bytehound-${VERSION}" "${src}"
    mv "${unpacked}/crates" "${src}.crates"
    rm -rf "${unpacked}"
    BUILD_PATH="offline: Debian's crates and the bundle's, lock resolved here ($(basename "${bundle}"))"
    SOURCE_NAME="${BUNDLE_NAME}"
    SOURCE_PIN="git tree ${TREE} (commit ${COMMIT}); crates by preload/bytehound/crates.sha256"
    return 0
  fi
  vendored="$(preload_cache)/sources/${VENDORED_NAME}"
  if [[ -e "${vendored}" ]]; then
    tar -C "${src}" --strip-components=1 -xzf "${vendored}"
  else
    curl --fail --location --silent --connect-timeout 20 -o "${src}.tar.gz" "${SOURCE_URLS[0]}" 2>/dev/null ||
      die "cannot fetch bytehound ${VERSION}: put the offline bundle ${BUNDLE_NAME} at $(preload_cache)/sources/${BUNDLE_NAME} (or set BYTEHOUND_BUNDLE), or download ${SOURCE_URLS[0]} (or make the offline source with preload/bytehound/vendor.sh) and put it at ${vendored}"
    tar -C "${src}" --strip-components=1 -xzf "${src}.tar.gz"
  fi
  verify_source "${src}"
  BUILD_PATH="upstream: crates.io and the tag's Cargo.lock"
  SOURCE_PIN="git tree ${TREE} (commit ${COMMIT})"
}

# rust_web_libs: where the private toolchain's own libraries are
# (librustc_driver, libLLVM), for LD_LIBRARY_PATH.
rust_web_libs() {
  echo "${RUST_WEB}/usr/lib/$(arch_triplet "$(host_arch)")${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
}

# rust_web: the private rustc-web toolchain's bin directory, checked new
# enough.
rust_web() {
  local rustc="${RUST_WEB}/usr/bin/rustc" minor
  [[ -x "${rustc}" && -x "${RUST_WEB}/usr/bin/cargo" ]] ||
    die "no Rust toolchain at ${RUST_WEB} (scripts/install-deps.sh unpacks Debian's rustc-web there; or set MEMPROFILE_RUST_WEB)"
  local version
  version="$(LD_LIBRARY_PATH="$(rust_web_libs)" "${rustc}" --version 2>&1)" ||
    die "cannot run ${rustc}: ${version%%$'\n'*} (run scripts/rust-web.sh again)"
  minor="$(sed -nE 's/^rustc 1\.([0-9]+).*/\1/p' <<< "${version}")"
  [[ -n "${minor}" && "${minor}" -ge "${RUSTC_MINOR_MIN}" ]] ||
    die "${rustc} is 1.${minor:-?}, bytehound needs 1.${RUSTC_MINOR_MIN} or newer"
  echo "${RUST_WEB}/usr/bin"
}

# cargo_registry CRATES DIR: one cargo directory source in DIR made of the
# vendored crates (copied, manifests normalized, see normalize_manifest.py)
# and Debian's (linked, never written); prints the cargo config using it.
cargo_registry() {
  local crates="$1" dir="$2" d here
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  [[ -d "${DEBIAN_REGISTRY}" ]] || die "no Debian crate registry at ${DEBIAN_REGISTRY} (scripts/install-deps.sh installs the librust-*-dev packages)"
  mkdir -p "${dir}"
  for d in "${crates}"/*/; do
    d="${d%/}"
    cp -a "${d}" "${dir}/"
    chmod -R u+w "${dir}/${d##*/}"
    python3 "${here}/normalize_manifest.py" "${dir}/${d##*/}/Cargo.toml"
    # A directory source needs a checksum file per crate; "package": null
    # means no lock file checksum (the content was checked above).
    echo '{"files":{},"package":null}' > "${dir}/${d##*/}/.cargo-checksum.json"
  done
  for d in "${DEBIAN_REGISTRY}"/*/; do
    d="${d%/}"
    [[ -e "${dir}/${d##*/}" ]] || ln -s "${d}" "${dir}/${d##*/}"
  done
  printf '[source.crates-io]\nreplace-with = "bundle"\n[source.bundle]\ndirectory = "%s"\n[net]\noffline = true\n' "${dir}"
}

build_offline() {
  local src="$1" build="$2" arch="$3" triplet="$4" out="$5" target bin kv here
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  target="$(rust_target "${arch}")"
  bin="$(rust_web)"
  BUILD_PATH="${BUILD_PATH} with $(LD_LIBRARY_PATH="$(rust_web_libs)" "${bin}/rustc" --version | cut -d' ' -f1-2)"
  [[ -d "${RUST_WEB}/usr/lib/rustlib/${target}" ]] ||
    die "the toolchain at ${RUST_WEB} has no standard library for ${target} (scripts/install-deps.sh unpacks libstd-rust-web-dev:arm64 there when dpkg has arm64)"
  mkdir -p "${build}/cargo-home"
  cargo_registry "${src}.crates" "${build}/registry" > "${build}/cargo-home/config.toml"
  python3 "${here}/offline_edits.py" "${src}" || die "bytehound's manifests do not take the offline edits"
  local envs=(CARGO_HOME="${build}/cargo-home" RUSTC="${bin}/rustc" RUSTDOC="${bin}/rustdoc" CARGO_TARGET_DIR="${build}/target"
    LD_LIBRARY_PATH="$(rust_web_libs)"
    # The release profile asks for DWARF, which is stripped below: not
    # generating it halves the fat-LTO link.
    CARGO_PROFILE_RELEASE_DEBUG=false)
  while IFS= read -r kv; do envs+=("${kv}"); done < <(cargo_env "${arch}" "${triplet}" offline)
  BUILD_FLAGS="$(cargo_args "${arch}" offline)"
  # The tag's Cargo.lock pins crates.io versions Debian does not all have
  # (libc 0.2.126, Debian 0.2.139): the lock is resolved again, offline.
  (cd "${src}" && env "${envs[@]}" "${bin}/cargo" generate-lockfile --offline) >&2 ||
    die "cargo cannot resolve bytehound's crates offline (are the librust-*-dev packages of scripts/install-deps.sh installed?)"
  # shellcheck disable=SC2046 # the arguments are words
  (cd "${src}" && env "${envs[@]}" "${bin}/cargo" $(cargo_args "${arch}" offline) -j "$(nproc)") >&2
  # No DWARF (see above, and none from the C parts); bytehound unwinds with
  # .eh_frame and names with the symbol table, which stay (about 1.8 MB).
  "${triplet}-strip" --strip-debug -o "${out}/libbytehound.so" "${build}/target/${target}/release/libbytehound.so"
}

build_upstream() {
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

build_recipe() {
  local patch
  # The source fixes the library needs, on either path (each patch says why).
  for patch in "$(dirname "${BASH_SOURCE[0]}")"/*.patch; do
    patch -d "$1" -p1 --quiet --no-backup-if-mismatch < "${patch}" || die "$(basename "${patch}") does not apply to bytehound ${VERSION}"
  done
  if [[ "${BUILD_PATH}" == offline* ]]; then build_offline "$@"; else build_upstream "$@"; fi
}
