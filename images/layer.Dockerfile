# Way 1: layer a preload heap profiler and the memprofile launcher onto an
# existing app image that is already dynamic glibc. `make image-memprofile
# APP_IMAGE=...` reads the app's Entrypoint/Cmd with memprofile and passes
# them here; the image's ENTRYPOINT becomes `memprofile exec --from-config --`
# (Cmd stays overridable: arguments given at run time replace the app's Cmd).
# No "# syntax=" line: BuildKit would fetch that frontend from Docker Hub,
# which air-gapped and mirror-only builders cannot; the built-in one reads
# everything here.
#
# Build context: a directory made by scripts/build-image.sh (behind make
# image-memprofile; docs/images.md):
#   artifacts/<arch>/...  the static memprofile and the preload library, as a
#                         root tree (ARTIFACTS=dist, the default)
#   src/...               memprofile's sources (ARTIFACTS=source: built in a
#                         builder stage for TARGETARCH instead)
ARG APP_IMAGE
ARG BUILDER_IMAGE=debian:trixie
ARG ARTIFACTS=dist

# Host-built artifacts: the fast path, and the only sane one where the
# engine runs every stage as the target platform under qemu (buildah 1.28
# ignores --platform=$BUILDPLATFORM).
FROM scratch AS artifacts-dist
ARG TARGETARCH
COPY artifacts/${TARGETARCH}/ /out/

# Built from source with the same entries as the host: cross-compiled on the
# build platform when the engine honours --platform, natively otherwise.
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

FROM ${APP_IMAGE}
ARG APP_IMAGE
ARG BACKEND=bytehound
ARG BACKEND_VERSION=unknown
ARG SOURCE_URL=https://github.com/memprofile/memprofile
ARG REVISION=unknown
# The app's own command and user, as its image config has them (JSON).
ARG APP_ENTRYPOINT=
ARG APP_CMD=
ARG APP_TARGET=
ARG APP_USER=root
ARG PROFILE_DIR=/var/memprofile
ARG DORMANT=false
ARG MAX_PROFILE_MB=
ARG SNAPSHOT_EVERY=
LABEL org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.base.name="${APP_IMAGE}" \
      io.memprofile.backend="${BACKEND}" \
      io.memprofile.backend.version="${BACKEND_VERSION}"
COPY --from=artifacts /out/ /
# JSON-form RUN steps: an app image may have no shell. Build args reach
# memprofile as environment variables.
USER root
RUN ["/usr/bin/memprofile", "image-setup"]
USER ${APP_USER}
# The build fails here unless the profiler will attach: the static model of
# the image, then the image's own loader in trace mode.
RUN ["/usr/bin/memprofile", "preflight", "--rootfs", "/", "--trace-loader", \
     "--entrypoint", "[\"/usr/bin/memprofile\",\"exec\",\"--from-config\",\"--\"]"]
ENTRYPOINT ["/usr/bin/memprofile", "exec", "--from-config", "--"]
CMD []
