# A thin front door over CMake. The two commands a newcomer needs:
#   make run    build, then run the main job on MODEL (see README)
#   make test   everything CI runs: tests, the same under ASan+UBSan, fuzzing,
#               and the end-to-end tests with the openai npm client
# Each installs the Debian packages it needs first (scripts/deps.sh).

BUILD       ?= build
ASAN_BUILD  ?= build-asan
FUZZ_BUILD  ?= build-fuzz
JOBS        ?= $(shell nproc 2>/dev/null || echo 2)
FUZZ_SECONDS ?= 30
# Warnings are errors in every build of $(BUILD), so that `make run` after
# `make test` (or the other way round) reuses the same build: one
# configuration, nothing rebuilt. `make run WERROR=OFF` for a compiler that
# warns where ours does not (it reconfigures, and so rebuilds, once).
WERROR      ?= ON
MODEL       ?=

# The one configuration of $(BUILD), shared by build, check and e2e.
CONFIGURE   = cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DSTRATA_WERROR=$(WERROR) >/dev/null

.PHONY: all deps build run test check asan fuzz e2e clean

all: build

deps:
	@bash scripts/deps.sh

build: deps
	$(CONFIGURE)
	cmake --build $(BUILD) -j $(JOBS)

# The main job: strata serve on MODEL (PORT=8080), until Ctrl-C.
run: build
	@bash scripts/run.sh $(BUILD)/strata "$(MODEL)"

# The normal suite: warnings are errors, as in CI.
check: deps
	$(CONFIGURE)
	cmake --build $(BUILD) -j $(JOBS)
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The suite again under AddressSanitizer + UndefinedBehaviorSanitizer.
asan: deps
	CC=clang cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DSTRATA_SANITIZE=ON -DSTRATA_WERROR=ON >/dev/null
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	    ctest --output-on-failure -j $(JOBS)

# Each libFuzzer target for FUZZ_SECONDS.
fuzz: deps
	CC=clang cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=Debug -DSTRATA_FUZZ=ON -DSTRATA_TESTS=OFF -DSTRATA_WERROR=ON >/dev/null
	cmake --build $(FUZZ_BUILD) -j $(JOBS)
	bash scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

# The end-to-end tests (tests/e2e/, scripts/e2e.sh) on $(BUILD)/strata, in
# the same configuration, so that after `check` nothing is rebuilt.
e2e: deps
	$(CONFIGURE)
	cmake --build $(BUILD) -j $(JOBS) --target strata
	bash scripts/e2e.sh $(BUILD)

test: check asan fuzz e2e

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
