# memprofile: the user's entry point. `make help` lists the targets.
SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec
.DEFAULT_GOAL := help

BUILD_DIR ?= build
ASAN_BUILD_DIR ?= build-asan
FUZZ_BUILD_DIR ?= build-fuzz
FUZZ_SECONDS ?= 25
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# Skip the dependency installer (e.g. on a machine without apt, or offline).
SKIP_DEPS ?= false

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
	cmake -S . -B $(BUILD_DIR) $(CMAKE_FLAGS) >/dev/null
	cmake --build $(BUILD_DIR) -j $(JOBS)

ARCH ?= $(shell dpkg --print-architecture 2>/dev/null || echo amd64)

.PHONY: static
static: deps ## Build the static memprofile binary for ARCH (amd64, arm64) into dist/memprofile/ARCH/.
ifeq ($(ARCH),amd64)
	cmake -S . -B $(BUILD_DIR) $(CMAKE_FLAGS) >/dev/null
	cmake --build $(BUILD_DIR) -j $(JOBS) --target memprofile-static
	install -D -m 0755 $(BUILD_DIR)/tool/memprofile-static dist/memprofile/amd64/memprofile
else ifeq ($(ARCH),arm64)
	cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DMEMPROFILE_STATIC_ONLY=ON \
	  -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build build-arm64 -j $(JOBS)
	install -D -m 0755 build-arm64/tool/memprofile-static dist/memprofile/arm64/memprofile
else
	$(error ARCH must be amd64 or arm64, not '$(ARCH)')
endif
	strip --strip-debug dist/memprofile/$(ARCH)/memprofile 2>/dev/null || \
	  aarch64-linux-gnu-strip --strip-debug dist/memprofile/$(ARCH)/memprofile

BACKEND ?=

.PHONY: preload
preload: build ## Build BACKEND's preload library for ARCH from pinned source into dist/preload/BACKEND/ARCH/.
	$(if $(BACKEND),,$(error BACKEND is required: make preload BACKEND=jemalloc|heaptrack|bytehound ARCH=amd64|arm64))
	MEMPROFILE=$(abspath $(MEMPROFILE)) preload/build.sh $(BACKEND) $(ARCH)

.PHONY: clean
clean: ## Remove build directories and dist/ (caches under ~/.cache/memprofile stay).
	rm -rf $(BUILD_DIR) $(ASAN_BUILD_DIR) $(FUZZ_BUILD_DIR) build-arm64 dist

##@ Main job

.PHONY: example
example: build ## Build the example binaries with real toolchains and check each one.
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
test: build lint test-fuzz test-asan test-unit ## Run the whole test suite (unit, e2e, sanitizers, fuzzing, lint).

.PHONY: test-unit
test-unit: build ## Run the Catch2 unit and end-to-end tests (ctest) in $(BUILD_DIR).
	cd $(BUILD_DIR) && ctest -j $(JOBS) --output-on-failure

.PHONY: test-asan
test-asan: deps ## Build with ASan+UBSan and run the tests under it.
	cmake -S . -B $(ASAN_BUILD_DIR) -DMEMPROFILE_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug $(CMAKE_FLAGS) >/dev/null
	cmake --build $(ASAN_BUILD_DIR) -j $(JOBS)
	cd $(ASAN_BUILD_DIR) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest -j $(JOBS) --output-on-failure

.PHONY: test-fuzz
test-fuzz: deps ## Build the libFuzzer targets with clang and run each for FUZZ_SECONDS.
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD_DIR) -DMEMPROFILE_FUZZ=ON -DMEMPROFILE_TESTS=OFF \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build $(FUZZ_BUILD_DIR) -j $(JOBS)
	tests/fixtures/build.sh $(FUZZ_BUILD_DIR)/seeds
	mkdir -p $(FUZZ_BUILD_DIR)/tar-seeds $(FUZZ_BUILD_DIR)/config-seeds
	tar -C $(FUZZ_BUILD_DIR)/seeds -cf $(FUZZ_BUILD_DIR)/tar-seeds/layer.tar dynamic static-pie script.sh
	gzip -1 -c $(FUZZ_BUILD_DIR)/tar-seeds/layer.tar > $(FUZZ_BUILD_DIR)/tar-seeds/layer.tar.gz
	zstd -q -f $(FUZZ_BUILD_DIR)/tar-seeds/layer.tar -o $(FUZZ_BUILD_DIR)/tar-seeds/layer.tar.zst
	printf '%s' '{"architecture":"arm64","os":"linux","variant":"v8","config":{"Entrypoint":["/app"],"Cmd":["-x"],"Env":["PATH=/bin","LD_PRELOAD=/l.so"],"User":"nobody:nogroup","WorkingDir":"/w"},"rootfs":{"type":"layers","diff_ids":["sha256:00"]}}' \
	  > $(FUZZ_BUILD_DIR)/config-seeds/config.json
	TAR_SEEDS=$(FUZZ_BUILD_DIR)/tar-seeds CONFIG_SEEDS=$(FUZZ_BUILD_DIR)/config-seeds \
	  fuzz/run.sh $(FUZZ_BUILD_DIR) $(FUZZ_SECONDS) $(FUZZ_BUILD_DIR)/seeds "$$(tests/fixtures/rootfs.sh amd64)"

.PHONY: lint
lint: deps ## Lint shell scripts with shellcheck.
	shellcheck -x scripts/*.sh tests/fixtures/*.sh tests/e2e/*.sh bench/*.sh fuzz/*.sh preload/*.sh preload/*/*.sh .ci/run

##@ Benchmarks

.PHONY: bench
bench: build ## Run the benchmarks in bench/ (ratios against baselines measured in the same run).
	bench/check_vs_scanelf.sh $(MEMPROFILE) /usr
	bench/preflight_vs_gzip.sh $(MEMPROFILE)
	bench/exec_overhead.sh $(BUILD_DIR)/tool/memprofile-static
	MEMPROFILE=$(abspath $(MEMPROFILE)) bench/preload_cross_vs_emulated.sh
