#!/usr/bin/env bash
# Installs everything memprofile's build, tests and benchmarks need on a
# Debian 12 machine, from Debian's archive and the npm registry only.
# Idempotent: a second run installs nothing and only re-checks binfmt.
#
# usage: scripts/install-deps.sh [--image-build [TARGET_ARCH] | --list-image-build]
#   --image-build: only what `make image-memprofile` needs on a build host (a
#   CI runner with docker, a Dockerfile builder stage): the static memprofile
#   and preload builds, plus the cross toolchain when TARGET_ARCH differs.
#   --list-image-build: those packages for this machine's arch, comma-separated
#   (`make base-image BASE_VARIANT=toolchain` makes a builder that has them).
set -o errexit -o nounset -o pipefail

# installed PACKAGE[:ARCH]: whether it is installed. A bare name is this
# machine's arch, or arch all: with its arm64 twin installed too, dpkg-query
# on the bare name prints a status for each, which is no single match.
native_arch="$(dpkg --print-architecture)"
installed() {
  local p="$1"
  [[ "${p}" == *:* ]] || p="${p}:${native_arch}"
  [[ "$(dpkg-query -W -f='${Status}' "${p}" 2>/dev/null)" == "install ok installed" ]] && return 0
  [[ "$1" != *:* && "$(dpkg-query -W -f='${Architecture} ${Status}' "$1" 2>/dev/null)" == "all install ok installed" ]]
}

image_build_packages=(
  build-essential cmake pkg-config libelf-dev libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libzstd-dev zlib1g-dev libssl-dev libunwind-dev curl ca-certificates xz-utils bzip2 jq file
  # BACKEND=memray built from source: liblz4, and python3 to run Cython
  liblz4-dev python3
  # the static binary's report and serve: symbols (libdw, libiberty), pprof
  # (protobuf), HTTP (Boost.Beast, header-only)
  libdw-dev liblzma-dev libbz2-dev libiberty-dev libprotobuf-dev protobuf-compiler libboost-dev
)
if [[ "${1:-}" == --list-image-build ]]; then
  (IFS=,; echo "${image_build_packages[*]}")
  exit 0
fi
if [[ "${1:-}" == --image-build ]]; then
  target="${2:-${native_arch}}"
  if [[ "${target}" != "${native_arch}" ]]; then
    [[ "${target}" == arm64 ]] || { echo "install-deps: no cross toolchain for ${target}" >&2; exit 2; }
    dpkg --print-foreign-architectures | grep -x arm64 > /dev/null || dpkg --add-architecture arm64
    image_build_packages+=(gcc-aarch64-linux-gnu g++-aarch64-linux-gnu libc6-dev-arm64-cross
      libelf-dev:arm64 libzstd-dev:arm64 zlib1g-dev:arm64 libssl-dev:arm64 libunwind-dev:arm64 liblz4-dev:arm64
      libdw-dev:arm64 liblzma-dev:arm64 libbz2-dev:arm64 libiberty-dev:arm64 libprotobuf-dev:arm64)
  fi
  missing=()
  for p in "${image_build_packages[@]}"; do
    installed "${p}" || missing+=("${p}")
  done
  if ((${#missing[@]})); then
    # Said: a builder made with `make base-image BASE_VARIANT=toolchain` needs none.
    echo "install-deps: installing what this builder lacks: ${missing[*]}" >&2
    sudo=()
    ((EUID == 0)) || sudo=(sudo)
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  echo "install-deps: ok (image build)" >&2
  exit 0
fi

# The crates bytehound's preload library needs that Debian ships at a
# compatible version (the others come in its offline bundle). winapi* are
# never compiled on Linux, but cargo's resolver needs memmap's Windows-only
# dependency to exist.
bytehound_crates=(
  librust-ahash-0.7-dev librust-autocfg-dev librust-bitflags-dev librust-byteorder-dev
  librust-cc-dev librust-cfg-if-dev librust-cty-dev librust-fallible-iterator-dev
  librust-fs-extra-dev librust-getrandom-dev librust-lazy-static-dev librust-libc-dev
  librust-lock-api-dev librust-log-dev librust-memmap-dev librust-once-cell-dev
  librust-parking-lot-dev librust-parking-lot-core-dev librust-plain-dev
  librust-proc-macro2-dev librust-quote-dev librust-syn-dev librust-scopeguard-dev
  librust-semver-0.9-dev librust-semver-parser-0.7-dev librust-smallvec-dev
  librust-stable-deref-trait-dev librust-unicode-ident-dev librust-version-check-dev
  librust-winapi-dev librust-winapi-i686-pc-windows-gnu-dev librust-winapi-x86-64-pc-windows-gnu-dev
)
packages=(
  # build (ccache: a second build of the same sources, in another build
  # directory or clone, compiles from the cache: CMakeLists.txt)
  build-essential cmake pkg-config clang patch ccache
  libelf-dev libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev catch2
  libzstd-dev zlib1g-dev libisal-dev libssl-dev
  # report: memray captures are LZ4 frames
  liblz4-dev
  # preflight docker://: the registry source's HTTP client, and TOML for
  # containers-registries.conf(5)
  libcurl4-openssl-dev libtoml11-dev
  # memprofile serve: its HTTP server (Boost.Beast, header-only: docs/serve.md);
  # its tests scrape it with a real Prometheus and go tool pprof
  libboost-dev prometheus
  # memprofile report: symbols (elfutils' libdwfl), names (libiberty's demangler),
  # --pprof (pprof's profile.proto; its tests read it with protoc and go tool pprof)
  libdw-dev libiberty-dev libprotobuf-dev protobuf-compiler
  # ... and the static binary links them (libdw's compressed sections: lzma, bzip2)
  liblzma-dev libbz2-dev
  # report's SVGs are opened in a real browser by the tests (headless)
  chromium
  # test fixtures: real binaries from real toolchains
  musl-tools gcc-aarch64-linux-gnu g++-aarch64-linux-gnu libc6-dev-arm64-cross golang-go rustc
  libcap2-bin elfutils binutils pax-utils file bc util-linux zstd time
  # root filesystems, images and other architectures; the Docker engine of
  # scripts/docker-engine.sh (its own namespaces: ip, unshare, pivot_root)
  mmdebstrap arch-test qemu-user-static binfmt-support buildah podman skopeo iproute2 util-linux
  # real preload libraries and their analysis tools
  libjemalloc2 libjemalloc-dev heaptrack libheaptrack
  # heap coverage fixtures (tests/fixtures/allocators.sh): programs that bring
  # their own allocator (static tcmalloc, mimalloc under a Rust global
  # allocator), and managed runtimes whose heap is not malloc's
  libgoogle-perftools-dev libmimalloc-dev openjdk-17-jre-headless
  # building preload libraries from source (heaptrack needs libunwind)
  libunwind-dev curl xz-utils bzip2
  # images: a registry for the multi-arch push test, JSON in shell
  docker-registry jq ca-certificates
  # preflight docker:// tests: TLS certificates, htpasswd (bcrypt) and a token
  # server of the tests' own (tests/e2e/registry_*.sh)
  openssl apache2-utils python3 python3-jwt
  # real servers with real process trees: prefork workers (nginx), a backend
  # per connection (PostgreSQL); the tests start their own, on loopback
  nginx-light postgresql-15
  # bytehound built offline (preload/bytehound/recipe.sh): Debian's crates,
  # and what the private rustc-web toolchain's cargo links (scripts/rust-web.sh)
  "${bytehound_crates[@]}" libgit2-1.5 libssh2-1 libsqlite3-0 libcurl4
  # lint and the bats tests run on Node.js tools (devtools/node/package.json)
  shellcheck
)
# The static launcher cross-built for arm64 links arm64 static libraries,
# installed side by side through Debian's multiarch; memray built from source
# for an arm64 image links arm64's liblz4 and libunwind.
arm64_packages=(libelf-dev:arm64 libzstd-dev:arm64 zlib1g-dev:arm64 libssl-dev:arm64 libunwind-dev:arm64 liblz4-dev:arm64
  # its report and serve: libdw, libiberty and protobuf, static
  libdw-dev:arm64 liblzma-dev:arm64 libbz2-dev:arm64 libiberty-dev:arm64 libprotobuf-dev:arm64
  # the heap coverage fixtures' arm64 side (libjemalloc-dev cannot sit beside
  # the amd64 one: the arm64 jemalloc is its shared library alone)
  libgoogle-perftools-dev:arm64 libmimalloc-dev:arm64 libjemalloc2:arm64)

if ! dpkg --print-foreign-architectures | grep -x arm64 > /dev/null; then
  dpkg --add-architecture arm64
fi
missing=()
for p in "${packages[@]}" "${arm64_packages[@]}"; do
  installed "${p}" || missing+=("${p}")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  # Packaged servers (nginx, PostgreSQL) would start at install, listening on
  # this machine's ports: no service starts during the install.
  policy=/usr/sbin/policy-rc.d
  if [[ ! -e "${policy}" ]]; then
    printf '#!/bin/sh\nexit 101\n' > "${policy}"
    chmod 0755 "${policy}"
    trap 'rm -f "${policy}"' EXIT
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# bytehound needs rustc >= 1.66; bookworm's rustc (1.63) stays for the
# fixtures, and Debian's rustc-web is unpacked beside it.
bash "$(dirname "$0")/rust-web.sh" >/dev/null ||
  echo "install-deps: warning: no rustc-web toolchain: bytehound cannot be built offline (its tests say so)" >&2

# qemu-user-static registers arm64 through binfmt_misc; the filesystem is not
# always mounted in containers and CI machines.
if [[ ! -e /proc/sys/fs/binfmt_misc/status ]]; then
  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null || \
    echo "install-deps: warning: cannot mount binfmt_misc; arm64 containers will not run" >&2
fi
if [[ -e /proc/sys/fs/binfmt_misc/status && ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]]; then
  update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || \
    echo "install-deps: warning: cannot register qemu-aarch64 with binfmt_misc" >&2
fi
# Node.js usually comes with the machine (with its own npm); Debian's otherwise.
if ! command -v npm >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
# Pinned by devtools/node/package-lock.json; npm ci is skipped when up to date.
node_tools="$(cd "$(dirname "$0")/../devtools/node" && pwd)"
if [[ ! -e "${node_tools}/node_modules/.package-lock.json" ||
      "${node_tools}/package-lock.json" -nt "${node_tools}/node_modules/.package-lock.json" ]]; then
  (cd "${node_tools}" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
echo "install-deps: ok" >&2
