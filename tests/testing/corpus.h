// Real models for tests, exported by samples/export_models.py into MEMPLAN_MODEL_CACHE.
#pragma once

#include <string>
#include <vector>

#include "memplan/cpu_device.h"

namespace memplan::testing {

// The CPU kernels whose rules the planner suites' expectations were worked out on (oneDNN's
// AVX-512 ones, verified: cpu_device.h) with this machine's threads: planning behaviour is the
// same on every machine, whatever kernels its own oneDNN runs (ONEDNN_MAX_CPU_ISA=SSE41 included).
inline CpuKernels VerifiedKernels() { return {CpuIsa::kAvx512Core, DefaultIntraOpThreads()}; }

// The models every test suite runs on: the core corpus and a few more architectures
// (dense connections, depthwise convs, stochastic depth, shifted-window attention).
const std::vector<std::string>& TestCorpus();
// The same architectures exported by torch.onnx.export(dynamo=True): opset 18 and newer.
const std::vector<std::string>& DynamoCorpus();
// Hugging Face transformers models (LLaMA, BERT, GPT-2, ViT; two layers, hidden 64) built from a
// config and exported with the dynamo exporter (samples/export_models.py hf_*).
const std::vector<std::string>& HuggingFaceCorpus();

// Path of `<cache>/<name>.onnx`, exporting it first if the cache lacks it (tests normally
// find it there: ctest runs the export as a fixture). Fails the test if the export fails.
std::string CorpusModel(const std::string& name);

std::string ModelCacheDir();

}  // namespace memplan::testing
