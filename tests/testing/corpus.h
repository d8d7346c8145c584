// Real models for tests, exported by samples/export_models.py into MEMPLAN_MODEL_CACHE.
#pragma once

#include <string>
#include <vector>

namespace memplan::testing {

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
