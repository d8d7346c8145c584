// Every real model of the test corpus resolves every tensor, and two independent methods
// (ONNX inference + rules, and memplan's rules alone) agree on every shape.
#include <gtest/gtest.h>

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
  LoadOptions with_onnx, rules_only;
  with_onnx.batch = rules_only.batch = 2;
  rules_only.onnx_shape_inference = false;
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
  Analysis a = Analyze(LoadTrainingGraph(path, small));
  Analysis b = Analyze(LoadTrainingGraph(path, large));
  // Parameters and their gradients are alive the whole step.
  EXPECT_GE(a.timeline.peak_bytes, 2 * a.graph.param_bytes());
  EXPECT_EQ(a.graph.param_bytes(), b.graph.param_bytes());
  EXPECT_GT(b.timeline.peak_bytes, a.timeline.peak_bytes);
  // Activation memory is at most linear in the batch: 8x the batch adds at most 8x.
  int64_t fixed = 2 * a.graph.param_bytes();
  EXPECT_LE(b.timeline.peak_bytes - fixed, 8 * (a.timeline.peak_bytes - fixed) + 8 * 4096);
  EXPECT_FALSE(a.bottlenecks.empty());
}

INSTANTIATE_TEST_SUITE_P(Models, Corpus, ::testing::ValuesIn(testing::TestCorpus()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace memplan
