# Way 2: rebuild a Rust app as a dynamic glibc program (crt-static off, the
# -gnu target of TARGETPLATFORM) and package it on a glibc base with a
# preload heap profiler and the memprofile launcher: the path for apps whose
# images are static or FROM scratch, where LD_PRELOAD can never work.
# No "# syntax=" line: BuildKit would fetch that frontend from Docker Hub,
# which air-gapped and mirror-only builders cannot; the built-in one reads
# everything here.
#
# Build context (made by scripts/build-image.sh, behind make image-memprofile):
# app/ (the cargo project, APP_SRC), artifacts/<arch>/ or src/ as in
# layer.Dockerfile.
ARG BASE_IMAGE=debian:trixie-slim
ARG RUST_BUILDER_IMAGE=rust:1-trixie
ARG BUILDER_IMAGE=debian:trixie
ARG ARTIFACTS=dist

FROM scratch AS artifacts-dist
ARG TARGETARCH
COPY artifacts/${TARGETARCH}/ /out/

FROM --platform=$BUILDPLATFORM ${BUILDER_IMAGE} AS artifacts-source
ARG TARGETARCH
ARG BACKEND=bytehound
COPY src/ /src/
WORKDIR /src
# A builder image that already has the toolchain (make base-image
# BASE_VARIANT=toolchain) skips the install; the packages come from the
# builder's own Debian suite, so their versions are pinned by it.
RUN case "${TARGETARCH}" in \
      amd64|arm64) ;; \
      *) echo "memprofile: unsupported TARGETARCH '${TARGETARCH}' (amd64, arm64)" >&2; exit 1 ;; \
    esac \
 && scripts/install-deps.sh --image-build "${TARGETARCH}" \
 && make image-artifacts SKIP_DEPS=true ARCH="${TARGETARCH}" BACKEND="${BACKEND}" ARTIFACTS_OUT=/out

FROM artifacts-${ARTIFACTS} AS artifacts
# An instruction, though nothing needs doing: buildah 1.28 leaves the working
# container of a stage that is only FROM (mounted, never removed), one per
# build.
WORKDIR /

# The app, dynamic. Cross-compiled from the build platform when the engine
# honours --platform (needs the target's std and gcc-aarch64-linux-gnu in the
# builder image), compiled natively when it runs this stage as the target.
FROM --platform=$BUILDPLATFORM ${RUST_BUILDER_IMAGE} AS app
ARG TARGETPLATFORM
ARG APP_BIN
ARG CARGO_PROFILE=release
# The profiling build's features: one that brings a #[global_allocator] is
# left off (docs/images.md, CARGO_FEATURES).
ARG CARGO_FEATURES=
ARG CARGO_NO_DEFAULT_FEATURES=false
COPY app/ /app/
WORKDIR /app
RUN case "${TARGETPLATFORM}" in \
      linux/amd64) target=x86_64-unknown-linux-gnu; cc=x86_64-linux-gnu-gcc ;; \
      linux/arm64|linux/arm64/v8) target=aarch64-unknown-linux-gnu; cc=aarch64-linux-gnu-gcc ;; \
      *) echo "memprofile: unsupported TARGETPLATFORM '${TARGETPLATFORM}' (linux/amd64, linux/arm64)" >&2; exit 1 ;; \
    esac \
 && if [ -z "${APP_BIN}" ]; then echo "memprofile: APP_BIN (the cargo binary to package) is required" >&2; exit 1; fi \
 && host="$(rustc -vV | sed -n 's/^host: //p')" \
 && if [ "${host}" = "${target}" ]; then cc=cc; fi \
 && linker_var="CARGO_TARGET_$(echo "${target}" | tr 'a-z-' 'A-Z_')_LINKER" \
 && export "${linker_var}=${cc}" \
 && case "${CARGO_PROFILE}" in release) dir=release ;; dev|test) dir=debug ;; *) dir="${CARGO_PROFILE}" ;; esac \
 && RUSTFLAGS="-C target-feature=-crt-static" \
    cargo build --offline --locked --profile "${CARGO_PROFILE}" --target "${target}" --bin "${APP_BIN}" \
      $(if [ "${CARGO_NO_DEFAULT_FEATURES}" = true ]; then echo --no-default-features; fi) \
      ${CARGO_FEATURES:+--features "${CARGO_FEATURES}"} \
 && install -D -m 0755 "target/${target}/${dir}/${APP_BIN}" "/out/usr/local/bin/${APP_BIN}"

FROM ${BASE_IMAGE}
ARG BASE_IMAGE
ARG APP_BIN
ARG BACKEND=bytehound
ARG BACKEND_VERSION=unknown
ARG SOURCE_URL=https://github.com/memprofile/memprofile
ARG REVISION=unknown
ARG APP_CMD=
ARG APP_TARGET=
ARG PROFILE_DIR=/var/memprofile
ARG DORMANT=false
ARG MAX_PROFILE_MB=
ARG SNAPSHOT_EVERY=
LABEL org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.base.name="${BASE_IMAGE}" \
      io.memprofile.backend="${BACKEND}" \
      io.memprofile.backend.version="${BACKEND_VERSION}"
COPY --from=artifacts /out/ /
COPY --from=app /out/ /
# A build arg, not ENV: image-setup reads it from its environment, and the
# app's entrypoint must not stay in the runtime environment.
ARG APP_ENTRYPOINT="[\"/usr/local/bin/${APP_BIN}\"]"
RUN ["/usr/bin/memprofile", "image-setup"]
RUN ["/usr/bin/memprofile", "preflight", "--rootfs", "/", "--trace-loader", \
     "--entrypoint", "[\"/usr/bin/memprofile\",\"exec\",\"--from-config\",\"--\"]"]
ENTRYPOINT ["/usr/bin/memprofile", "exec", "--from-config", "--"]
CMD []
