// Strategies on small graphs. The true optimum comes from brute force: every segmentation
// (all 2^P subsets of the P cut positions) is replayed; `optimal` (and `milp`) must reach
// its least recompute for every budget, and the smallest peak when nothing fits.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "memplan/planner.h"
#include "planner_toy_graphs.h"
#include "testing/graph_builder.h"
#include "testing/sanitizer.h"

namespace memplan {
namespace {

using testing::GraphBuilder;

TrainingGraph Chain(int k) { return testing::ReluChain(k); }
using testing::LoadSum;

using testing::RandomDag;
using testing::Residual;
using testing::ToyCosts;
using testing::UnlessSanitized;

struct Segmentation {
  std::vector<NodeId> cuts;
  int64_t peak;
  double flops;
};

// Every segmentation of the graph, replayed.
std::vector<Segmentation> BruteForce(const TrainingGraph& g) {
  NodeId loss = g.tensors[g.loss].producer;
  std::vector<Segmentation> all;
  const uint32_t positions = static_cast<uint32_t>(loss);  // cut positions 1..loss
  for (uint32_t mask = 0; mask < (1u << positions); ++mask) {
    std::vector<NodeId> cuts;
    for (uint32_t p = 0; p < positions; ++p)
      if (mask & (1u << p)) cuts.push_back(static_cast<NodeId>(p + 1));
    Schedule s = BuildSegmentedSchedule(
        g, cuts.empty() ? std::vector<std::vector<NodeId>>{} : SegmentsFromCuts(g, cuts));
    all.push_back({cuts, Simulate(s).peak_bytes, RecomputeFlops(g, cuts)});
  }
  return all;
}

// For budgets across the whole range, optimal's recompute equals brute force's least, and its
// peak is the least among the segmentations with that last cut; below every segmentation's
// peak it reports the smallest peak.
void ExpectOptimalMatchesBruteForce(const TrainingGraph& raw, const CostModel& cost,
                                    const std::string& strategy) {
  TrainingGraph g = ApplyCostModel(raw, cost);
  ASSERT_LE(g.tensors[g.loss].producer, 16) << "too many cut positions for brute force";
  std::vector<Segmentation> all = BruteForce(g);
  std::set<int64_t> peaks;
  int64_t smallest = INT64_MAX;
  for (const Segmentation& s : all) {
    peaks.insert(s.peak);
    smallest = std::min(smallest, s.peak);
  }
  std::vector<int64_t> budgets(peaks.begin(), peaks.end());
  budgets.push_back(smallest - 1);
  for (int64_t budget : budgets) {
    double best = -1;
    for (const Segmentation& s : all) {
      if (s.peak <= budget && (best < 0 || s.flops < best)) best = s.flops;
    }
    PlanOptions o;
    o.budget_bytes = budget;
    o.strategy = strategy;
    // The strategy itself (MakePlan adds the segment-border margin on top: see PlannerMargin).
    Plan p = strategy == "milp" ? PlanMilp(g, CostModel{}, o) : PlanOptimal(g, CostModel{}, o);
    if (best < 0) {
      EXPECT_FALSE(p.feasible) << "budget " << budget;
      EXPECT_EQ(p.predicted_peak_bytes, smallest) << "budget " << budget;
      continue;
    }
    ASSERT_TRUE(p.feasible) << strategy << " budget " << budget;
    EXPECT_DOUBLE_EQ(p.recompute_flops, best) << strategy << " budget " << budget;
    EXPECT_LE(p.predicted_peak_bytes, budget);
    if (strategy == "optimal") {
      std::vector<NodeId> cuts = CutsFromSegments(g, p.segments);
      NodeId last = cuts.empty() ? 0 : cuts.back();
      int64_t least = INT64_MAX;
      for (const Segmentation& s : all) {
        if ((s.cuts.empty() ? 0 : s.cuts.back()) == last) least = std::min(least, s.peak);
      }
      EXPECT_EQ(p.predicted_peak_bytes, least) << "budget " << budget;
    }
  }
}

// sections: the fewest sections of any segmentation that fits, and the least recompute among them.
void ExpectSectionsMatchBruteForce(const TrainingGraph& raw, const CostModel& cost) {
  TrainingGraph g = ApplyCostModel(raw, cost);
  std::vector<Segmentation> all = BruteForce(g);
  std::set<int64_t> peaks;
  for (const Segmentation& s : all) peaks.insert(s.peak);
  for (int64_t budget : peaks) {
    size_t fewest = SIZE_MAX;
    double flops = 0;
    for (const Segmentation& s : all) {
      if (s.peak > budget) continue;
      if (s.cuts.size() < fewest || (s.cuts.size() == fewest && s.flops < flops)) {
        fewest = s.cuts.size();
        flops = s.flops;
      }
    }
    PlanOptions o;
    o.budget_bytes = budget;
    Plan p = PlanSections(g, CostModel{}, o);
    ASSERT_TRUE(p.feasible) << "budget " << budget;
    EXPECT_EQ(static_cast<size_t>(p.num_sections()), fewest + 1) << "budget " << budget;
    EXPECT_DOUBLE_EQ(p.recompute_flops, flops) << "budget " << budget;
  }
}

// Under AddressSanitizer (testing/sanitizer.h) the brute forces take shorter chains and fewer
// random DAGs: 2^P replays of every segmentation run 10-30x slower there (the five tests took
// 92 s of ASan's test time on CI's two cores). The plain build runs the full sizes.
TEST(PlannerBruteForce, SectionsAreTheFewest) {
  ExpectSectionsMatchBruteForce(Chain(UnlessSanitized(12, 9)), ToyCosts());
  ExpectSectionsMatchBruteForce(Residual(), ToyCosts());
  for (uint32_t seed = 1; seed <= UnlessSanitized(4u, 2u); ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    TrainingGraph g = RandomDag(seed, 10);
    if (g.tensors[g.loss].producer <= 14) ExpectSectionsMatchBruteForce(g, ToyCosts());
  }
}

TEST(PlannerBruteForce, ChainOptimal) {
  ExpectOptimalMatchesBruteForce(Chain(UnlessSanitized(14, 10)), CostModel{}, "optimal");
}
TEST(PlannerBruteForce, ChainToyCostsOptimal) {
  ExpectOptimalMatchesBruteForce(Chain(12), ToyCosts(), "optimal");
}
TEST(PlannerBruteForce, ResidualOptimal) {
  ExpectOptimalMatchesBruteForce(Residual(), ToyCosts(), "optimal");
}

// Residual's Add nodes hand one gradient to two inputs, each [1,25] float32 = 100 B: a
// checkpoint there gets a copy of it (AccumulateGrad), so segmented plans keep 100 B free.
// With every activation costed at 1000 B, the margin is 1000 B.
TEST(PlannerMargin, SegmentedPlansKeepTheLargestPassThroughGradientFree) {
  EXPECT_EQ(SegmentBorderMargin(Residual()), 100);
  EXPECT_EQ(SegmentBorderMargin(Chain(6)), 0);  // no op passes one gradient to several inputs
  CostModel wide;
  wide.tensor_bytes = [](const Tensor& t) {
    return t.category == TensorCategory::kActivation ? int64_t{1000} : t.bytes;
  };
  // x -> Mul -> t0 -> Relu x 8 -> t8; u = Add(t0, t8) -> Sigmoid: one long skip.
  GraphBuilder b;
  b.Input("x", {-1, 25}).Param("w0", {25});
  b.Node("Mul", {"x", "w0"}, {"t0"});
  for (int i = 1; i <= 8; ++i)
    b.Node("Relu", {"t" + std::to_string(i - 1)}, {"t" + std::to_string(i)});
  b.Node("Add", {"t0", "t8"}, {"u"}).Node("Sigmoid", {"u"}, {"y"});
  b.Output("y");
  TrainingGraph g = ApplyCostModel(LoadSum(b), wide);
  const int64_t margin = 1000;
  EXPECT_EQ(SegmentBorderMargin(g), margin);
  const int64_t baseline = Simulate(BuildTrainingSchedule(g)).peak_bytes;
  int segmented = 0;
  for (int64_t budget = baseline; budget > baseline / 4; budget -= 50) {
    PlanOptions o;
    o.budget_bytes = budget;
    o.strategy = "optimal";
    Plan p = MakePlan(g, CostModel{}, o);
    if (!p.feasible) break;
    if (p.segments.size() > 1) {
      ++segmented;
      EXPECT_EQ(p.margin_bytes, margin) << "budget " << budget;
      EXPECT_LE(p.predicted_peak_bytes + margin, budget) << "budget " << budget;
    } else {
      EXPECT_EQ(p.margin_bytes, 0);
      EXPECT_LE(p.predicted_peak_bytes, budget);
    }
  }
  EXPECT_GT(segmented, 0) << "no budget gave a segmented plan: the test checks nothing";
}

TEST(PlannerBruteForce, RandomDagsOptimal) {
  for (uint32_t seed = 1; seed <= UnlessSanitized(8u, 3u); ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    TrainingGraph g = RandomDag(seed, 10);
    if (g.tensors[g.loss].producer > 14) continue;
    ExpectOptimalMatchesBruteForce(g, ToyCosts(), "optimal");
  }
}

// The same with gradients set to None between steps: they are born in the backward, so the
// plain step's peak moves there, and the segment tables follow GradientFlow all the same.
TEST(PlannerBruteForce, OptimalAndSectionsWithGradientsSetToNone) {
  const GradientLifetime none = GradientLifetime::kNone;
  const int k = UnlessSanitized(12, 9);
  ExpectOptimalMatchesBruteForce(testing::ReluChain(k, none), ToyCosts(), "optimal");
  ExpectOptimalMatchesBruteForce(Residual(none), ToyCosts(), "optimal");
  ExpectSectionsMatchBruteForce(testing::ReluChain(k, none), ToyCosts());
  ExpectSectionsMatchBruteForce(Residual(none), ToyCosts());
  for (uint32_t seed = 1; seed <= UnlessSanitized(8u, 3u); ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    TrainingGraph g = RandomDag(seed, 10, none);
    if (g.tensors[g.loss].producer > 14) continue;
    ExpectOptimalMatchesBruteForce(g, ToyCosts(), "optimal");
  }
}

TEST(PlannerBruteForce, MilpMatchesOnSmallGraphs) {
  if (!MilpAvailable()) GTEST_SKIP() << "built without COIN-OR CBC";
  ExpectOptimalMatchesBruteForce(Chain(UnlessSanitized(10, 8)), ToyCosts(), "milp");
  ExpectOptimalMatchesBruteForce(Residual(), ToyCosts(), "milp");
  for (uint32_t seed = 1; seed <= UnlessSanitized(3u, 1u); ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    TrainingGraph g = RandomDag(seed, 9);
    if (g.tensors[g.loss].producer > 12) continue;
    ExpectOptimalMatchesBruteForce(g, ToyCosts(), "milp");
  }
}

TEST(PlannerStrategies, ManualCutsAfterEachNamedTensor) {
  TrainingGraph g = Chain(6);
  PlanOptions o;
  o.budget_bytes = 950;
  o.checkpoints = {"h3"};
  Plan p = PlanManual(g, {}, o);
  ASSERT_EQ(p.segments.size(), 2u);
  EXPECT_EQ(p.segments[1].front(), 4);     // right after Relu_3
  EXPECT_EQ(p.predicted_peak_bytes, 900);  // planner_schedule_test's ChainOneCut
  EXPECT_TRUE(p.feasible);
  ASSERT_EQ(p.checkpoints.size(), 1u);
  EXPECT_EQ(g.tensors[p.checkpoints[0]].name, "h3");
  // Mul and R1..R3 are recomputed: 4 x 25 FLOPs.
  EXPECT_DOUBLE_EQ(p.recompute_flops, 100);
}

TEST(PlannerStrategies, ManualRejectsUnknownAndPersistentNames) {
  TrainingGraph g = Chain(3);
  PlanOptions o;
  o.checkpoints = {"h1", "no_such_tensor"};
  try {
    PlanManual(g, {}, o);
    FAIL() << "expected an error";
  } catch (const MemplanError& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_tensor"), std::string::npos) << e.what();
  }
  o.checkpoints = {"w"};
  EXPECT_THROW(PlanManual(g, {}, o), MemplanError);
  o.checkpoints = {};
  EXPECT_THROW(PlanManual(g, {}, o), MemplanError);
}

TEST(PlannerStrategies, SpeedKeepsTheOutputsOfContractions) {
  // x -> MatMul(W 25x25) -> m1 -> Relu -> r1 -> MatMul -> m2 -> Relu -> r2 -> sum.
  GraphBuilder b;
  b.Input("x", {-1, 25}).Param("w1", {25, 25}).Param("w2", {25, 25});
  b.Node("MatMul", {"x", "w1"}, {"m1"}).Node("Relu", {"m1"}, {"r1"});
  b.Node("MatMul", {"r1", "w2"}, {"m2"}).Node("Relu", {"m2"}, {"r2"}).Output("r2");
  TrainingGraph g = LoadSum(b);
  Plan p = PlanSpeed(g, {}, PlanOptions{});
  std::set<std::string> kept;
  for (TensorId t : p.checkpoints) kept.insert(g.tensors[t].name);
  // MatMul: 2 x 25 FLOPs per output element (>= 16); Relu: 1.
  EXPECT_EQ(kept, (std::set<std::string>{"m1", "m2"}));
}

TEST(PlannerStrategies, BottleneckCutsAtTensorsThatSeparateTheGraph) {
  TrainingGraph g = Residual();
  Plan p = PlanBottleneck(g, {}, PlanOptions{});
  // Every path from x to the loss passes s, u and y; the residual blocks' tensors are all
  // bypassed (by a skip, or by the long skip from s to u). About sqrt(13 activations) = 4
  // checkpoints are wanted, so all three bottlenecks are kept, each cut right after its
  // producer, and nothing else crosses those cuts.
  std::set<std::string> kept;
  for (TensorId t : p.checkpoints) kept.insert(g.tensors[t].name);
  EXPECT_EQ(kept, (std::set<std::string>{"s", "u", "y"}));
  EXPECT_EQ(p.num_sections(), 4);
}

TEST(PlannerStrategies, SectionsAreTheFewestThatFit) {
  TrainingGraph g = Chain(12);
  PlanOptions o;
  o.budget_bytes = PlanNone(g, {}, o).predicted_peak_bytes - 1;
  Plan p = PlanSections(g, {}, o);
  ASSERT_TRUE(p.feasible);
  EXPECT_EQ(p.num_sections(), 2);
  // Nothing fits below the smallest peak: sections reports its best attempt.
  o.budget_bytes = 1;
  EXPECT_FALSE(PlanSections(g, {}, o).feasible);
}

TEST(PlannerStrategies, AutoPicksTheCheapestFeasiblePlan) {
  TrainingGraph g = Chain(12);
  PlanOptions o;
  o.budget_bytes = 1000000;
  Plan none = MakePlan(g, {}, o);
  EXPECT_EQ(none.strategy, "none");
  EXPECT_TRUE(none.feasible);
  o.budget_bytes = PlanNone(g, {}, o).predicted_peak_bytes * 3 / 4;
  Plan a = MakePlan(g, {}, o);
  ASSERT_TRUE(a.feasible);
  o.strategy = "optimal";
  Plan opt = MakePlan(g, {}, o);
  EXPECT_LE(a.recompute_flops, opt.recompute_flops);
  for (const std::string& s : {"speed", "bottleneck", "sqrt", "sections"}) {
    o.strategy = s;
    Plan p = MakePlan(g, {}, o);
    if (p.feasible) EXPECT_LE(a.recompute_flops, p.recompute_flops) << s;
  }
}

TEST(PlannerStrategies, UnknownStrategyIsAUserError) {
  PlanOptions o;
  o.strategy = "fastest";
  EXPECT_THROW(MakePlan(Chain(3), {}, o), MemplanError);
}

TEST(PlannerStrategies, SweepGoesFromTheBaselineToTheSmallestBudget) {
  TrainingGraph g = Chain(12);
  PlanOptions o;
  SweepResult s = SweepBudgets(g, {}, o, 8);
  EXPECT_EQ(s.baseline_peak_bytes, PlanNone(g, {}, o).predicted_peak_bytes);
  ASSERT_FALSE(s.points.empty());
  EXPECT_EQ(s.points.front().budget_bytes, s.baseline_peak_bytes);
  EXPECT_EQ(s.points.front().recompute_flops, 0);
  EXPECT_EQ(s.points.back().peak_bytes, s.min_budget_bytes);
  for (size_t i = 1; i < s.points.size(); ++i) {
    // Pareto: a smaller peak costs more recompute.
    EXPECT_LT(s.points[i].peak_bytes, s.points[i - 1].peak_bytes);
    EXPECT_GT(s.points[i].recompute_flops, s.points[i - 1].recompute_flops);
  }
  EXPECT_LT(s.min_budget_bytes, s.baseline_peak_bytes);
}

}  // namespace
}  // namespace memplan
