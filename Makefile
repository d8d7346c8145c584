# memplan: two commands on a fresh machine.
#   make demo   installs dependencies, builds, exports a real model and analyzes it
#   make test   installs dependencies, builds, runs the whole test suite (ctest)

BUILD_DIR ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc)
# Exported models depend only on the pinned Python environment and the export script: they are
# cached outside the clone, keyed by both, so fresh clones and CI export once.
MODEL_CACHE ?= $(HOME)/.cache/memplan/models-$(shell cat scripts/requirements.txt samples/export_models.py | sha256sum | cut -c1-12)
CMAKE_FLAGS ?=
GENERATOR = $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")
# The project's Python environment (PyPI torch, torchvision, onnx), made by scripts/install-deps.sh.
PYTHON := $(shell bash scripts/install-deps.sh --print-venv)/bin/python

# make test SANITIZE=1: the analyzer, planner, CLI and GUI suites under AddressSanitizer and
# UndefinedBehaviorSanitizer, in build-asan (cmake/Sanitizers.cmake). The executor stays out:
# LibTorch is not built with sanitizers. It shares the exported model cache.
ifeq ($(SANITIZE),1)
BUILD_DIR := build-asan
override CMAKE_FLAGS += -DMEMPLAN_SANITIZE=ON -DMEMPLAN_WITH_TORCH=OFF -DMEMPLAN_BUILD_BENCH=OFF
export ASAN_OPTIONS ?= detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1
export UBSAN_OPTIONS ?= print_stacktrace=1:halt_on_error=1
endif
# make fuzz: the libFuzzer targets in fuzz/ (clang), each for FUZZ_SECONDS (fuzz/run.sh).
FUZZ_SECONDS ?= 60
FUZZ_BUILD_DIR ?= build-fuzz

.PHONY: all deps configure build test demo bench fuzz clean

all: build

deps:
	bash scripts/install-deps.sh

configure:
	@if [ ! -f $(BUILD_DIR)/CMakeCache.txt ]; then \
	  cmake -S . -B $(BUILD_DIR) $(GENERATOR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	    -DMEMPLAN_MODEL_CACHE=$(MODEL_CACHE) \
	    -DMEMPLAN_PYTHON=$(PYTHON) $(CMAKE_FLAGS); \
	fi

build: deps configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

demo: build
	$(PYTHON) samples/export_models.py --out $(MODEL_CACHE) --models resnet50
	$(BUILD_DIR)/cli/memplan analyze $(MODEL_CACHE)/resnet50.onnx --batch 32 --optimizer adam \
	  --json $(BUILD_DIR)/resnet50-analysis.json

bench: build
	$(PYTHON) samples/export_models.py --out $(MODEL_CACHE) --models resnet18,resnet50,vgg16,mobilenet_v2,vit_b_16,gpt,gpt_deep,swin_t
	$(BUILD_DIR)/bench/bench_analyzer $(MODEL_CACHE)

fuzz: deps
	@if [ ! -f $(FUZZ_BUILD_DIR)/CMakeCache.txt ]; then \
	  CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD_DIR) $(GENERATOR) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DMEMPLAN_FUZZ=ON -DMEMPLAN_WITH_TORCH=OFF -DMEMPLAN_WITH_GUI=OFF -DMEMPLAN_BUILD_TESTS=OFF \
	    -DMEMPLAN_BUILD_BENCH=OFF; \
	fi
	cmake --build $(FUZZ_BUILD_DIR) -j $(JOBS) --target make_seeds fuzz_onnx fuzz_plan fuzz_document fuzz_cli
	FUZZ_SECONDS=$(FUZZ_SECONDS) MEMPLAN_MODEL_CACHE=$(MODEL_CACHE) bash fuzz/run.sh $(FUZZ_BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR)
