// Selective recompute (plan.h): schedules on hand-built graphs with every expected peak worked
// out by hand, and consistency on the corpus.
//
// ReluChain(6): input x [1, 25] (100 B), parameter w (100 B), h0 = Mul(x, w), h_i = Relu(h_{i-1})
// for i = 1..6, a sum loss (4 B; its seed gradient is handed on as a view). Persistent
// P = x + w + grad w = 300 B. Mul saves only x; each Relu saves its output; h0 is saved by
// nobody (freed after Relu_1). Nodes: 0 Mul, i Relu_i, 7 loss.
#include <gtest/gtest.h>

#include <random>

#include "memplan/planner.h"
#include "planner_toy_graphs.h"
#include "testing/corpus.h"

namespace memplan {
namespace {

TensorId T(const TrainingGraph& g, const std::string& name) { return g.FindTensor(name); }

Plan Replay(const TrainingGraph& g, const std::vector<std::string>& names) {
  std::vector<TensorId> ids;
  for (const std::string& n : names) ids.push_back(T(g, n));
  return ReplaySelective(g, "selective", ids, 0, 0);
}

int CountRecomputeSteps(const Schedule& s) {
  int n = 0;
  for (const Step& step : s.steps) n += step.phase == Phase::kRecompute;
  return n;
}

TEST(SelectiveSchedule, NothingDroppedIsThePlainStep) {
  TrainingGraph g = testing::ReluChain(6);
  // Relu_6's backward: P 300 + saved h1..h6 600 + seed 4 + grad h5 100 = 1004 B.
  EXPECT_EQ(Replay(g, {}).predicted_peak_bytes, 1004);
}

TEST(SelectiveSchedule, OneDroppedTensorIsRecomputedOnceBeforeItsSaver) {
  TrainingGraph g = testing::ReluChain(6);
  // h3 is freed after Relu_4's forward. Relu_6's backward: P 300 + h1, h2, h4, h5, h6 500
  // + seed 4 + grad h5 100 = 904 B. Before Relu_3's backward h3 is recomputed from h2:
  // P 300 + h1, h2 200 + grad h3 100 + h3 100 = 700, + grad h2 = 800 B.
  Plan p = Replay(g, {"h3"});
  EXPECT_EQ(p.predicted_peak_bytes, 904);
  EXPECT_EQ(CountRecomputeSteps(p.schedule), 1);
  EXPECT_DOUBLE_EQ(p.recompute_flops, g.nodes[3].forward_flops);
}

TEST(SelectiveSchedule, ADroppedChainIsRecomputedTogetherAndHeldUntilItsSavers) {
  TrainingGraph g = testing::ReluChain(6);
  // Relu_6's backward: P 300 + h1, h2, h5, h6 400 + seed 4 + grad h5 100 = 804 B. Before
  // Relu_4's backward h3 then h4 are recomputed; h3 waits for Relu_3's backward. Relu_4's
  // backward: P 300 + h1, h2 200 + grad h4 100 + h3, h4 200 + grad h3 100 = 900 B.
  Plan p = Replay(g, {"h3", "h4"});
  EXPECT_EQ(p.predicted_peak_bytes, 900);
  EXPECT_EQ(CountRecomputeSteps(p.schedule), 2);
}

TEST(SelectiveSchedule, AKeptInputOfARecomputeLivesUntilTheRecompute) {
  TrainingGraph g = testing::ReluChain(6);
  // Dropping h1 keeps h0 (saved by nobody) alive for the recompute of Relu_1: nothing saved.
  // Relu_6's backward: P 300 + h0, h2..h6 600 + seed 4 + grad h5 100 = 1004 B.
  EXPECT_EQ(Replay(g, {"h1"}).predicted_peak_bytes, 1004);
  // Dropping h0 too recomputes Mul then Relu_1; h0 dies after the chain:
  // P 300 + h2..h6 500 + seed 4 + grad h5 100 = 904 B.
  Plan p = Replay(g, {"h0", "h1"});
  EXPECT_EQ(p.predicted_peak_bytes, 904);
  EXPECT_EQ(CountRecomputeSteps(p.schedule), 2);
}

TEST(SelectiveSchedule, RecomputableTensorsAreTheSavedActivations) {
  TrainingGraph g = testing::ReluChain(3);
  std::vector<TensorId> r = RecomputableTensors(g);
  std::vector<std::string> names;
  for (TensorId t : r) names.push_back(g.tensors[t].name);
  // h0 is saved by nobody; the loss's output is never recomputed.
  EXPECT_EQ(names, (std::vector<std::string>{"h1", "h2", "h3"}));
}

TEST(SelectiveSchedule, RefusesAViewOrAPersistentTensor) {
  TrainingGraph g = testing::ReluChain(2);
  EXPECT_THROW(Replay(g, {"x"}), MemplanError);
  EXPECT_THROW(Replay(g, {"w"}), MemplanError);
}

class SelectiveCorpus : public ::testing::TestWithParam<std::string> {};

// Every subset of the recomputable tensors gives a consistent schedule (Simulate checks every
// buffer is allocated once and freed once, while alive); none dropped is the plain step.
TEST_P(SelectiveCorpus, AnyDroppedSetReplays) {
  LoadOptions o;
  o.batch = 2;
  TrainingGraph g = LoadTrainingGraph(testing::CorpusModel(GetParam()), o);
  const int64_t plain = Simulate(BuildTrainingSchedule(g)).peak_bytes;
  EXPECT_EQ(ReplaySelective(g, "selective", {}, 0, 0).predicted_peak_bytes, plain);
  std::vector<TensorId> all = RecomputableTensors(g);
  ASSERT_FALSE(all.empty());
  Plan every = ReplaySelective(g, "selective", all, 0, 0);
  EXPECT_LT(every.predicted_peak_bytes, plain);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 5; ++trial) {
    std::vector<TensorId> some;
    for (TensorId t : all) if (rng() % 2) some.push_back(t);
    Plan p = ReplaySelective(g, "selective", some, 0, 0);
    EXPECT_GT(p.recompute_flops, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, SelectiveCorpus, ::testing::ValuesIn(testing::TestCorpus()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace memplan
