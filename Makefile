# Ember — top-level entry points. `make demo` and `make test` do all set-up on a fresh machine.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
JOBS ?= $(shell nproc)
BUILD := build
ASAN_BUILD := build-asan
CMAKE_GEN := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")
# Stock-ExecuTorch test files, made by the installed executorch (tests/fixtures/
# make_executorch_fixtures.py, ~20 s once, then cached): C tests, fuzz corpus, MCU and Python tests.
ET_FIXTURES := $(BUILD)/fixtures/executorch
ET_FIXTURES_DEF := -DEMBER_ET_FIXTURES=$(abspath $(ET_FIXTURES))

.PHONY: all deps venv fixtures build build-asan test test-tsan test-c test-asan test-fuzz fuzz-long test-py demo bench bench-deps bench-llm format lint clean size

all: build

# System packages: clang (libFuzzer, clang-format). Installed only when missing.
deps:
	@command -v clang >/dev/null 2>&1 && command -v clang-format >/dev/null 2>&1 || \
	  { echo "installing clang, clang-format (apt)"; \
	    (apt-get update -q && apt-get install -y -q clang clang-format) >/dev/null 2>&1 || \
	    echo "warning: could not install clang; the fuzz target will be skipped"; }

$(VENV)/.stamp: pyproject.toml requirements-dev.txt requirements-nodeps.txt
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q -r requirements-dev.txt
	$(VPY) -m pip install -q --no-deps -r requirements-nodeps.txt
	$(VPY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

venv: $(VENV)/.stamp

$(ET_FIXTURES)/.stamp: tests/fixtures/make_executorch_fixtures.py tests/fixtures/legacy_pte.py | venv
	$(VPY) tests/fixtures/make_executorch_fixtures.py --out $(ET_FIXTURES)

fixtures: $(ET_FIXTURES)/.stamp

build:
	cmake -S . -B $(BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Release $(ET_FIXTURES_DEF) >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

build-asan:
	cmake -S . -B $(ASAN_BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Debug -DEMBER_SANITIZE=ON $(ET_FIXTURES_DEF) >/dev/null
	cmake --build $(ASAN_BUILD) -j $(JOBS)

test-c: build fixtures
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-asan: build-asan fixtures
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS)

# ThreadSanitizer: the thread pool tests and two methods of one program running concurrently.
TSAN_BUILD := build-tsan
test-tsan:
	cmake -S . -B $(TSAN_BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEMBER_TSAN=ON >/dev/null
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target test_threadpool test_concurrent
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" $(TSAN_BUILD)/tests/test_threadpool
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" $(TSAN_BUILD)/tests/test_concurrent

# libFuzzer on the executing target, bounded and reproducible: a fresh corpus from the seeds, a
# fixed seed and a fixed number of runs (FUZZ_SEED, FUZZ_RUNS; FUZZ_SECONDS caps the time), so
# every machine tries the same inputs (a clean clone then passes or fails the same way). Skipped
# with a message when clang is absent; `make fuzz-long` hunts with fresh random seeds.
test-fuzz: deps fixtures
	@if command -v clang >/dev/null 2>&1; then \
	  cmake -S . -B build-fuzz $(CMAKE_GEN) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DEMBER_FUZZ=ON -DEMBER_TESTS=OFF >/dev/null && \
	  cmake --build build-fuzz -j $(JOBS) --target fuzz_loader && \
	  rm -rf build-fuzz/corpus && mkdir -p build-fuzz/corpus && cp $(ET_FIXTURES)/*.pte $(ET_FIXTURES)/*.bpte tests/fixtures/*.pte tests/fixtures/alias/*.pte tests/fixtures/vulkan/*.pte tests/fuzz/regressions/*.pte build-fuzz/corpus/ 2>/dev/null; \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp ./build-fuzz/fuzz_loader -seed=$${FUZZ_SEED:-1} -runs=$${FUZZ_RUNS:-100000} \
	    -max_total_time=$${FUZZ_SECONDS:-150} -rss_limit_mb=2048 -print_final_stats=1 \
	    -artifact_prefix=build-fuzz/ build-fuzz/corpus > build-fuzz/fuzz.log 2>&1; rc=$$?; \
	  tail -n 30 build-fuzz/fuzz.log; exit $$rc; \
	else echo "clang not found: fuzz target skipped"; fi

# The long run of the same target (issue 30): a random seed, no run limit, FUZZ_SECONDS (default
# 1 h); figures in build-fuzz/fuzz.log.
fuzz-long:
	FUZZ_SEED=$${FUZZ_SEED:-0} FUZZ_RUNS=$${FUZZ_RUNS:--1} FUZZ_SECONDS=$${FUZZ_SECONDS:-3600} $(MAKE) test-fuzz

test-py: venv build fixtures
	$(VPY) -m pytest -q -rs -p no:cacheprovider --durations=25 tests/python

# The whole architecture corpus (tests/python/corpus, ~75 models on four paths; `make test` runs
# its fast subset); the table of errors and EmberCpuBackend shares goes to out/corpus.md.
.PHONY: test-corpus
test-corpus: venv build
	mkdir -p out && EMBER_CORPUS=full EMBER_CORPUS_TABLE=out/corpus.md \
	  $(VPY) -m pytest -q -rfEx -p no:cacheprovider tests/python/corpus

test: vulkan-deps venv build build-asan
	$(MAKE) test-c
	$(MAKE) test-asan
	$(MAKE) test-tsan
	$(MAKE) test-fuzz
	$(MAKE) test-neon
	-$(MAKE) mcu-deps
	$(MAKE) test-py

demo: venv build
	$(VPY) examples/demo.py
	$(VPY) examples/chat_demo.py

bench: venv build
	$(VPY) bench/run.py

# llama.cpp (llama-cpp-python) for bench/llm.py, built from source for the AVX2/AVX-512/VNNI CPU
# features this project targets. AMX is left out: the reference CPU (Zen 4) has none, and
# llama.cpp's AMX path crashes on this machine's Xeon.
LLAMA_CPP_CMAKE := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
  -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_BF16=ON \
  -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAMA_CURL=OFF
$(VENV)/.stamp-bench: $(VENV)/.stamp requirements-bench.txt
	CMAKE_ARGS="$(LLAMA_CPP_CMAKE)" CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) \
	  $(VPY) -m pip install -q --no-deps --no-binary llama-cpp-python -r requirements-bench.txt
	touch $@

bench-deps: $(VENV)/.stamp-bench

bench-llm: bench-deps build
	$(VPY) bench/llm.py

size: fixtures
	$(VPY) tools/size_report.py

format:
	clang-format -i $$(git ls-files '*.c' '*.h')
	$(VENV)/bin/ruff format python tests/python bench examples tools

lint:
	$(VENV)/bin/ruff check python tests/python

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) build-fuzz build-neon build-wheel

# ---- MCU (owned by MCU work) ----
# Cortex-M33 firmware under QEMU (mps2-an505): see mcu/Makefile. `make mcu` builds the
# hard-float and soft-float images for each model in MCU_MODELS, runs them and prints sizes.
MCU_MODELS ?= $(ET_FIXTURES)/add.pte $(ET_FIXTURES)/add_constant.pte
MCU_APT := gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm dataset-fashion-mnist
MCU_MLP := build-mcu/models/mlp.pte
MCU_MLP_CASES := 8
MCU_CNN := build-mcu/models/cnn.pte
.PHONY: mcu-deps mcu mcu-clean mcu-train

mcu-deps:
	@command -v arm-none-eabi-gcc >/dev/null 2>&1 && command -v qemu-system-arm >/dev/null 2>&1 && \
	  test -d /usr/lib/arm-none-eabi/newlib && test -d /usr/share/datasets/fashion-mnist || \
	  { echo "installing $(MCU_APT) (apt)"; \
	    (apt-get install -y -q $(MCU_APT) || (apt-get update -q && apt-get install -y -q $(MCU_APT))) \
	      >/dev/null 2>&1 || { echo "error: could not install $(MCU_APT)"; exit 1; }; }

# The paper's MLP (784-32-16-10), trained on Fashion-MNIST once (a few minutes on 2 cores),
# exported in fp32, after int8 post-training quantization (ember.quant, Q/DQ operators) and
# lowered to integer-only ember::quantized_linear (expected outputs: the bit-exact Python reference).
$(MCU_MLP): mcu/models/mlp.py $(wildcard mcu/models/mlp_state.pt) python/ember/quant/__init__.py \
            python/ember/quant/fused.py | venv mcu-deps
	$(VPY) mcu/models/mlp.py --out $(dir $@) --cases $(MCU_MLP_CASES)

# The small CNN (conv 1->8, pool, conv 8->16, pool, linear 400->10) on Fashion-MNIST: trained
# once (weights committed in mcu/models/cnn_state.pt), exported fp32, Q/DQ int8 and integer-only
# (ember::quantized_conv2d / quantized_max_pool2d / quantized_linear); accuracy on all 10k test
# images run on Ember's host runtime.
$(MCU_CNN): mcu/models/cnn.py mcu/models/mlp.py $(wildcard mcu/models/cnn_state.pt) \
            python/ember/quant/__init__.py python/ember/quant/fused.py | venv mcu-deps build
	$(VPY) mcu/models/cnn.py --out $(dir $@) --cases $(MCU_MLP_CASES)

# Train both models again from scratch (a few minutes on 2 cores) and refresh the committed weights.
mcu-train: venv mcu-deps build
	$(VPY) mcu/models/mlp.py --out build-mcu/train --retrain --state build-mcu/train/none.pt
	$(VPY) mcu/models/cnn.py --out build-mcu/train --retrain --state build-mcu/train/none.pt
	cp build-mcu/train/mlp_state.pt build-mcu/train/cnn_state.pt mcu/models/

mcu: mcu-deps venv build fixtures $(MCU_MLP) $(MCU_CNN)
	@set -e; for m in $(MCU_MODELS); do for f in hard soft; do \
	  echo "==== $$(basename $$m) ($$f float) ===="; \
	  $(MAKE) -s --no-print-directory -C mcu MODEL=$$(realpath $$m) FLOAT=$$f \
	    HOST_EMBER=$(abspath $(BUILD))/ember run size; \
	done; done
	@cat $(dir $(MCU_MLP))mlp_accuracy.txt
	@set -e; d=$(abspath $(dir $(MCU_MLP))); \
	for m in mlp mlp_int8 mlp_int8_fused mlp_int8_in8; do \
	  exp=; img=mlp_images; \
	  case $$m in *fused|*in8) exp="--expected $$d/$${m}_expected.npy";; esac; \
	  test $$m != mlp_int8_in8 || img=mlp_images_int8; \
	  for f in hard soft; do \
	  echo "==== $$m.pte, 784-32-16-10 on Fashion-MNIST ($$f float, pools sized exactly) ===="; \
	  $(MAKE) -s --no-print-directory -C mcu MODEL=$$d/$$m.pte FLOAT=$$f \
	    HOST_EMBER=$(abspath $(BUILD))/ember GEN_ARGS="--input $$d/$$img.npy \
	    --labels $$d/mlp_labels.npy --cases $(MCU_MLP_CASES) $$exp" exact; \
	done; done
	@cat $(dir $(MCU_CNN))cnn_accuracy.txt
	@set -e; d=$(abspath $(dir $(MCU_CNN))); \
	for m in cnn cnn_int8 cnn_int8_fused cnn_int8_in8; do \
	  exp=; img=cnn_images; \
	  case $$m in *fused|*in8) exp="--expected $$d/$${m}_expected.npy";; esac; \
	  test $$m != cnn_int8_in8 || img=cnn_images_int8; \
	  for f in hard soft; do \
	  echo "==== $$m.pte, small CNN on Fashion-MNIST ($$f float, pools sized exactly) ===="; \
	  $(MAKE) -s --no-print-directory -C mcu MODEL=$$d/$$m.pte FLOAT=$$f \
	    HOST_EMBER=$(abspath $(BUILD))/ember GEN_ARGS="--input $$d/$$img.npy \
	    --labels $$d/cnn_labels.npy --cases $(MCU_MLP_CASES) $$exp" exact; \
	done; done

mcu-clean:
	rm -rf build-mcu

# ---- Vulkan backend (backends/vulkan) ----
# `make vulkan-deps` installs lavapipe (Mesa's CPU Vulkan device), the Vulkan loader and headers
# and glslangValidator when missing; `make test` runs it before the C build, so CMake's
# EMBER_VULKAN=AUTO finds them and tests/python/test_backend_vulkan.py runs on lavapipe. Without
# apt it says so and goes on: the backend is then not built and its tests skip with a message.
VULKAN_APT := mesa-vulkan-drivers libvulkan-dev glslang-tools
.PHONY: vulkan-deps

vulkan-deps:
	@test -f /usr/include/vulkan/vulkan.h && command -v glslangValidator >/dev/null 2>&1 && \
	  ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 || \
	  { echo "installing $(VULKAN_APT) (apt)"; \
	    (apt-get install -y -q $(VULKAN_APT) || (apt-get update -q && apt-get install -y -q $(VULKAN_APT))) \
	      >/dev/null 2>&1 || echo "warning: could not install $(VULKAN_APT): EmberVulkanBackend is not built and its tests are skipped"; }

# ---- NEON (aarch64) CPU backend under qemu-user (owned by CPU backend work) ----
# `make test-neon` cross-compiles the runtime and its C tests for aarch64 with Debian's cross gcc
# (cmake/aarch64-linux-gnu.cmake) and runs them under qemu-aarch64 (-L: the cross libc), so the
# NEON micro-kernels (backends/cpu/*__neon.c) are checked against the portable ones on any x86
# machine, then test_cpu_ukernels_misc again with EMBER_CPU_ISA=scalar (the forced ISA must be
# chosen).
# It is skipped, with a message, only when the toolchain cannot be installed. About a minute.
NEON_APT := gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
NEON_BUILD := build-neon
NEON_TESTS := test_cpu_ukernels_gemm test_cpu_ukernels_conv test_cpu_ukernels_misc test_no_alloc \
  test_corrupt
NEON_SYSROOT := /usr/aarch64-linux-gnu
.PHONY: neon-deps test-neon

neon-deps:
	@command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 && command -v qemu-aarch64 >/dev/null 2>&1 && \
	  test -f $(NEON_SYSROOT)/include/stdio.h || \
	  { echo "installing $(NEON_APT) (apt)"; \
	    (apt-get install -y -q $(NEON_APT) || (apt-get update -q && apt-get install -y -q $(NEON_APT))) \
	      >/dev/null 2>&1 || { echo "error: could not install $(NEON_APT)"; exit 1; }; }

test-neon: fixtures
	@if ! $(MAKE) -s --no-print-directory neon-deps; then \
	  echo "aarch64 cross toolchain / qemu-user unavailable: NEON tests skipped"; exit 0; fi; \
	set -e; \
	cmake -S . -B $(NEON_BUILD) $(CMAKE_GEN) -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
	  -DCMAKE_BUILD_TYPE=Release $(ET_FIXTURES_DEF) >/dev/null; \
	cmake --build $(NEON_BUILD) -j $(JOBS) --target $(NEON_TESTS); \
	(cd $(NEON_BUILD) && ctest --output-on-failure -j $(JOBS) -R '^($(subst $() ,|,$(NEON_TESTS)))$$'); \
	echo "==== test_cpu_ukernels_misc, EMBER_CPU_ISA=scalar (aarch64 under qemu-aarch64) ===="; \
	EMBER_CPU_ISA=scalar qemu-aarch64 -L $(NEON_SYSROOT) $(NEON_BUILD)/tests/test_cpu_ukernels_misc
