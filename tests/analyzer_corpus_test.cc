// Every real model of the test corpus resolves every tensor, and two independent methods
// (ONNX inference + rules, and memplan's rules alone) agree on every shape.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "loader_internal.h"
#include "memplan/analyzer.h"
#include "testing/corpus.h"

namespace memplan {
namespace {

class Corpus : public ::testing::TestWithParam<std::string> {};

TEST_P(Corpus, EveryTensorHasAConcreteShapeAtBatch1And32) {
  std::string path = testing::CorpusModel(GetParam());
  for (int64_t batch : {1, 32}) {
    LoadOptions o;
    o.batch = batch;
    TrainingGraph g = LoadTrainingGraph(path, o);
    for (const Tensor& t : g.tensors) {
      ASSERT_TRUE(ShapeKnown(t)) << t.name;
      ASSERT_GT(DTypeSize(t.dtype), 0) << t.name;
    }
    EXPECT_TRUE(g.shape_disagreements.empty()) << g.shape_disagreements.front();
    EXPECT_GT(g.parameters.size(), 0u);
    EXPECT_NE(g.loss, kNone);
  }
}

TEST_P(Corpus, RulesAloneAgreeWithOnnxInference) {
  std::string path = testing::CorpusModel(GetParam());
  if (LoadTrainingGraph(path, {}).opset > 17)
    GTEST_SKIP() << "the C++ ONNX library stops at opset 17: see RulesAgreeWithPythonOnnx";
  LoadOptions with_onnx, rules_only;
  with_onnx.batch = rules_only.batch = 2;
  with_onnx.onnx_shape_inference = true;
  TrainingGraph a = LoadTrainingGraph(path, with_onnx);
  TrainingGraph b = LoadTrainingGraph(path, rules_only);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  EXPECT_EQ(b.tensors_shaped_by_onnx, 0);
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    ASSERT_EQ(a.tensors[i].shape, b.tensors[i].shape) << a.tensors[i].name;
    ASSERT_EQ(a.tensors[i].dtype, b.tensors[i].dtype) << a.tensors[i].name;
  }
}

TEST_P(Corpus, PeakCoversPersistentStateAndBatchGrowsIt) {
  std::string path = testing::CorpusModel(GetParam());
  LoadOptions small, large;
  small.batch = 1;
  large.batch = 8;
  // With kept gradients, parameters and their gradients are alive the whole step.
  small.grads = large.grads = GradientLifetime::kKept;
  Analysis a = Analyze(LoadTrainingGraph(path, small));
  Analysis b = Analyze(LoadTrainingGraph(path, large));
  EXPECT_GE(a.timeline.peak_bytes, 2 * a.graph.param_bytes());
  EXPECT_EQ(a.graph.param_bytes(), b.graph.param_bytes());
  EXPECT_GT(b.timeline.peak_bytes, a.timeline.peak_bytes);
  // Activation memory is at most linear in the batch: 8x the batch adds at most 8x.
  int64_t fixed = 2 * a.graph.param_bytes();
  EXPECT_LE(b.timeline.peak_bytes - fixed, 8 * (a.timeline.peak_bytes - fixed) + 8 * 4096);
  EXPECT_FALSE(a.bottlenecks.empty());
  // Set to None between steps, gradients exist from the backward to the optimizer step (which
  // holds them all): never a larger peak, never one below parameters and gradients together.
  small.grads = GradientLifetime::kNone;
  const MemoryTimeline none = Analyze(LoadTrainingGraph(path, small)).timeline;
  EXPECT_LE(none.peak_bytes, a.timeline.peak_bytes);
  EXPECT_GE(none.peak_bytes, 2 * a.graph.param_bytes());
  EXPECT_EQ(none.bytes_after[0] + a.graph.param_bytes(), a.timeline.bytes_after[0]);
}

// Newer opsets: memplan's rules alone give the shapes; the Python onnx package (which knows
// every opset of its version) infers them independently.
TEST_P(Corpus, RulesAgreeWithPythonOnnx) {
  std::string path = testing::CorpusModel(GetParam());
  LoadOptions o;
  o.batch = 2;
  TrainingGraph g = LoadTrainingGraph(path, o);
  std::string cmd =
      std::string(MEMPLAN_PYTHON) + " " MEMPLAN_SOURCE_DIR "/samples/onnx_shapes.py '" + path + "'";
  for (const auto& [name, value] : g.dims) cmd += " --dim " + name + "=" + std::to_string(value);
  std::string text;
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[65536];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) text.append(buf, n);
  ASSERT_EQ(::pclose(p), 0) << cmd;
  nlohmann::json onnx_shapes = nlohmann::json::parse(text);
  int compared = 0;
  for (const Tensor& t : g.tensors) {
    auto it = onnx_shapes.find(t.name);
    if (it == onnx_shapes.end()) continue;
    ASSERT_EQ(t.shape, (*it)[1].get<std::vector<int64_t>>()) << t.name;
    ++compared;
  }
  // ONNX resolves most tensors of these exports; memplan must agree on all of them.
  EXPECT_GT(compared, static_cast<int>(g.nodes.size()) / 2)
      << compared << " of " << g.tensors.size();
}

INSTANTIATE_TEST_SUITE_P(Dynamo, Corpus, ::testing::ValuesIn(testing::DynamoCorpus()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

INSTANTIATE_TEST_SUITE_P(HuggingFace, Corpus, ::testing::ValuesIn(testing::HuggingFaceCorpus()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

INSTANTIATE_TEST_SUITE_P(Models, Corpus, ::testing::ValuesIn(testing::TestCorpus()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace memplan
