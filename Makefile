# memplan: two commands on a fresh machine.
#   make demo   installs dependencies, builds, exports a real model and analyzes it
#   make test   installs dependencies, builds, runs the test suite (ctest): every behaviour, in minutes
#   make check  the long checks (ctest label `long`): the same behaviours on the rest of the corpus
#   make check-torch211   builds the executor against torch 2.11.0 and runs its smoke tests
#   make check-avx2   the CPU exactness and budget suites again on oneDNN's AVX2 kernels

BUILD_DIR ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc)
# Exported models depend only on the pinned Python environment and the export script: they are
# cached outside the clone, keyed by both, so fresh clones and CI export once.
MODEL_CACHE ?= $(HOME)/.cache/memplan/models-$(shell cat scripts/requirements.txt samples/export_models.py | sha256sum | cut -c1-12)
CMAKE_FLAGS ?=
# ccache (CMakeLists.txt's compiler launcher) hashes paths relative to the clone and not the build
# folder, so that a fresh clone (CI) reuses what an earlier clone compiled.
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1
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
# Left out under the sanitizers, as 30x slower there (CI timings, 2 cores) and covered beside them:
# the window rendering every page of resnet18 (340 s) and of resnet50 with its GPU plan, run and
# profile (157 s; GuiGpuFiles.AModelTakesTheBatchOfItsPlanAndRun still opens those files and the
# other GuiWindow tests draw pages of small models), the explorer's background re-plan (111 s) and
# the two largest random-DAG brute forces (107 s; the chain and residual ones stay) and the
# planner agreement on gpt (1,068 s, 25 s in the plain build: every strategy's smallest budget
# searched to the byte at 1, 2 and auto micro-batches; PlannerCli's sweep and smallest-budget
# tests run that search under ASan). The plain build runs them all. The other brute forces and
# the 200,000-node chain take a smaller instance under ASan (tests/testing/sanitizer.h).
# A parameterized test's ctest name goes on with "  # GetParam() = ...".
TEST_SKIP = -E '^(GuiWindow\.EveryPageRendersTheModel|GuiGpuFiles\.EveryPageShowsOneBatchAndTheKindsOfMemory|GuiWindow\.PlanExplorerReplansInAWorker|SelectiveBruteForce\.RandomDags|SelectiveBruteForce\.LeanSearchGap|Models/PlannerAgreementCorpus\.OneSmallestBudgetAndAutoAtLeastAsGoodAsEveryStrategy/gpt( .*)?)$$'
endif
# make check-torch211: the executor and `memplan` built against the oldest supported LibTorch,
# torch 2.11.0 (scripts/requirements-torch211.txt: a second pinned environment, cached like the
# first), in build-torch211, then `memplan --version` and the executor's smoke tests there:
# hand-built graphs (training, plans, selective recompute, errors) and two corpus models, read
# from the model cache that the pinned environment exports. Left out: the gpt micro-batch test,
# whose attention key biases have a gradient that is zero but for rounding (softmax ignores a
# constant added to every key), compared by relative error: 2.11's kernels round it differently.
TORCH211_REQUIREMENTS = scripts/requirements-torch211.txt
TORCH211_BUILD_DIR ?= build-torch211
TORCH211_SMOKE ?= ExecutorTraining.*:ExecutorPlans.*:ExecutorSelective.EachDroppedTensorGivesThePlainStepsGradients:ExecutorSelective.SegmentsAndDroppedTensorsAreRefused:ExecutorOps.*:ExecutorErrors.*:Corpus/ExecutorAccuracy.*/resnet18_b16:Corpus/ExecutorAccuracy.*/gpt_b4:-ExecutorPlans.GptMicroBatchedPlansGiveTheFullBatchsStep
# make fuzz: the libFuzzer targets in fuzz/ (clang), each for FUZZ_SECONDS, JOBS at a time (fuzz/run.sh).
FUZZ_SECONDS ?= 60
FUZZ_BUILD_DIR ?= build-fuzz

# make check-avx2: the CPU exactness and budget suites on oneDNN's AVX2 kernels, which
# ONEDNN_MAX_CPU_ISA=AVX2 runs on any x86-64 machine (AVX-512 ones included), as a machine without
# AVX-512 runs them. The exactness suites calibrate first there (tests/testing/cpu_calibration.h);
# the budget suites run uncalibrated, so that the AVX2 rules and margins are what holds the budgets.
AVX2_SUITES = ^(Corpus/ExecutorAccuracy\.|Corpus/StochasticDepth\.|Corpus/PlanBudget\.|Corpus/HuggingFace\.|CpuIsa\.|CpuWorkspaceMargin\.|CpuCalibration\.|WorkspaceMargins\.|ExecutorCpuCalibration\.)

.PHONY: all deps configure build test check check-exhaustive check-torch211 check-avx2 demo bench fuzz clean

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
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) -LE 'long|exhaustive' $(TEST_SKIP)

# The long checks (tests/CMakeLists.txt's memplan_discover_tests): every corpus model, strategy and
# budget run for real, and the slowest end-to-end runs. CI runs them after `make test`.
check: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) -L long

# What takes too long for CI: the planner agreement on the corpus's largest graphs (4-9 min each).
check-exhaustive: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) -L exhaustive

AVX2_LONG_SUITES = ^(Corpus/ExecutorAccuracy\.|Corpus/StochasticDepth\.|Corpus/PlanBudget\.|Corpus/OffloadBudget\.)

# 23 s and 4 min 31 s on 2 cores (the long accuracy, budget and offload suites of every corpus model).
check-avx2: build
	cd $(BUILD_DIR) && ONEDNN_MAX_CPU_ISA=AVX2 ctest --output-on-failure -j $(JOBS) -LE 'long|exhaustive' -R '$(AVX2_SUITES)'
	cd $(BUILD_DIR) && ONEDNN_MAX_CPU_ISA=AVX2 ctest --output-on-failure -j $(JOBS) -L long -R '$(AVX2_LONG_SUITES)'

check-torch211: deps
	bash scripts/install-deps.sh --requirements $(TORCH211_REQUIREMENTS)
	@if [ ! -f $(TORCH211_BUILD_DIR)/CMakeCache.txt ]; then \
	  cmake -S . -B $(TORCH211_BUILD_DIR) $(GENERATOR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	    -DMEMPLAN_MODEL_CACHE=$(MODEL_CACHE) \
	    -DMEMPLAN_PYTHON=$$(bash scripts/install-deps.sh --requirements $(TORCH211_REQUIREMENTS) --print-venv)/bin/python \
	    -DMEMPLAN_WITH_GUI=OFF -DMEMPLAN_BUILD_BENCH=OFF; \
	fi
	cmake --build $(TORCH211_BUILD_DIR) -j $(JOBS) --target memplan executor_tests
	@v=$$($(TORCH211_BUILD_DIR)/cli/memplan --version); echo "$$v"; echo "$$v" | grep -q "LibTorch 2\.11\." || \
	  { echo "check-torch211: $(TORCH211_BUILD_DIR)/cli/memplan is not built against LibTorch 2.11" >&2; exit 1; }
	$(PYTHON) samples/export_models.py --out $(MODEL_CACHE) --models resnet18,gpt
	$(TORCH211_BUILD_DIR)/tests/executor_tests --gtest_brief=1 --gtest_filter='$(TORCH211_SMOKE)'
	@# Two data-parallel ranks on Gloo (c10d's collectives, torch_compat.h's all-gather).
	$(TORCH211_BUILD_DIR)/cli/memplan plan $(MODEL_CACHE)/gpt.onnx --batch 4 --budget 100GiB --strategy none --devices 2 \
	  --json $(TORCH211_BUILD_DIR)/gpt-2ranks-plan.json > /dev/null
	$(TORCH211_BUILD_DIR)/cli/memplan run $(MODEL_CACHE)/gpt.onnx --plan $(TORCH211_BUILD_DIR)/gpt-2ranks-plan.json \
	  --nproc 2 --steps 2 --random-weights --threads 1 --json $(TORCH211_BUILD_DIR)/gpt-2ranks-run.json

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
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_JOBS=$(JOBS) MEMPLAN_MODEL_CACHE=$(MODEL_CACHE) bash fuzz/run.sh $(FUZZ_BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR)
