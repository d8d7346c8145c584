// The planner on every corpus model: one segment is the plain step; the DP's tables agree
// with replayed schedules; every strategy's plan is a replayed schedule within its budget.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "graph_facts.h"
#include "memplan/planner.h"
#include "optimal.h"
#include "segment_costs.h"
#include "testing/corpus.h"

namespace memplan {
namespace {

Schedule BuildFromCuts(const TrainingGraph& g, const std::vector<NodeId>& cuts) {
  return BuildSegmentedSchedule(
      g, cuts.empty() ? std::vector<std::vector<NodeId>>{} : SegmentsFromCuts(g, cuts));
}

// The replayed timeline's maximum per phase, in PredictPhasePeaks' order.
std::vector<int64_t> PhasePeaks(const TrainingGraph& g, const Schedule& s, const MemoryTimeline& t,
                                const std::vector<NodeId>& cuts) {
  const size_t K = cuts.size() + 1;
  auto segment = [&](NodeId n) {
    return static_cast<size_t>(std::upper_bound(cuts.begin(), cuts.end(), n) - cuts.begin());
  };
  std::vector<int64_t> forward(K - 1, 0), backward(K - 1, 0);
  int64_t last = 0;
  size_t current = K - 1;  // the segment of the previous step (for a trailing step without a node)
  for (size_t i = 0; i < s.steps.size(); ++i) {
    const Step& step = s.steps[i];
    if (step.phase == Phase::kSetup || step.phase == Phase::kOptimizer) continue;
    size_t k = step.node == kNone ? current : segment(step.node);
    current = k;
    int64_t b = t.bytes_during[i];
    if (k == K - 1)
      last = std::max(last, b);
    else if (step.phase == Phase::kForward || step.phase == Phase::kLoss)
      forward[k] = std::max(forward[k], b);
    else
      backward[k] = std::max(backward[k], b);
  }
  std::vector<int64_t> out = forward;
  out.push_back(last);
  out.insert(out.end(), backward.rbegin(), backward.rend());
  return out;
}

// A realistic batch: activations dominate the step, as when people need a plan.
int64_t RealisticBatch(const std::string& model) {
  if (model == "vit_b_16" || model == "swin_t" || model == "gpt_deep") return 16;
  return 32;
}

class PlannerCorpus : public ::testing::TestWithParam<std::string> {
 protected:
  TrainingGraph Load(int64_t batch, Optimizer optimizer = Optimizer::kSgd) {
    LoadOptions o;
    o.batch = batch;
    o.optimizer = optimizer;
    o.cpu_kernels = testing::VerifiedKernels();
    return LoadTrainingGraph(testing::CorpusModel(GetParam()), o);
  }
};

TEST_P(PlannerCorpus, OneSegmentIsThePlainTrainingStep) {
  for (Optimizer opt : {Optimizer::kSgd, Optimizer::kAdam}) {
    TrainingGraph g = Load(2, opt);
    MemoryTimeline plain = Simulate(BuildTrainingSchedule(g));
    MemoryTimeline one = Simulate(BuildSegmentedSchedule(g, {}));
    EXPECT_EQ(one.peak_bytes, plain.peak_bytes);
    EXPECT_EQ(one.bytes_during, plain.bytes_during);
    EXPECT_EQ(one.bytes_after, plain.bytes_after);
  }
}

// The DP never replays a schedule: its tables must give exactly the replayed peak, for any
// segmentation over the candidates, under both allocator policies.
TEST_P(PlannerCorpus, SegmentTablesGiveTheReplayedPeak) {
  // Parameters cost nothing here so that activations and gradients decide every phase.
  CostModel no_params;
  no_params.tensor_bytes = [](const Tensor& t) {
    return t.category == TensorCategory::kParameter ? 0 : t.bytes;
  };
  TrainingGraph g = ApplyCostModel(Load(2), no_params);
  planner::GraphFacts f = planner::ComputeGraphFacts(g);
  std::vector<NodeId> candidates = planner::SelectCutCandidates(g, f, 300);
  ASSERT_FALSE(candidates.empty());
  for (AllocatorPolicy policy : {AllocatorPolicy::kExact, AllocatorPolicy::kCudaCaching}) {
    planner::SegmentCosts costs = planner::ComputeSegmentCosts(g, f, candidates, policy);
    std::mt19937 rng(42);
    std::vector<std::vector<NodeId>> samples = {
        {}, candidates, {candidates.back()}, {candidates.front()}};
    for (double density : {0.02, 0.1, 0.3, 0.7}) {
      for (int rep = 0; rep < 4; ++rep) {
        std::vector<NodeId> cuts;
        std::bernoulli_distribution keep(density);
        for (NodeId c : candidates)
          if (keep(rng)) cuts.push_back(c);
        samples.push_back(cuts);
      }
    }
    for (const std::vector<NodeId>& cuts : samples) {
      Schedule s = BuildFromCuts(g, cuts);
      MemoryTimeline t = Simulate(s, {policy});
      ASSERT_EQ(planner::PredictPeak(costs, f, cuts), t.peak_bytes) << cuts.size() << " cuts";
      ASSERT_EQ(planner::PredictPhasePeaks(costs, f, cuts), PhasePeaks(g, s, t, cuts))
          << cuts.size() << " cuts";
    }
  }
}

TEST_P(PlannerCorpus, EveryStrategyReplaysWithinItsBudget) {
  TrainingGraph g = Load(RealisticBatch(GetParam()));
  const CostModel cost;
  PlanOptions o;
  o.milp_time_limit_seconds = 2;
  const int64_t baseline = PlanNone(g, cost, o).predicted_peak_bytes;
  for (double fraction : {0.75, 0.5}) {
    o.budget_bytes = static_cast<int64_t>(fraction * static_cast<double>(baseline));
    std::vector<std::string> strategies = {"none",     "speed",   "bottleneck", "sqrt",
                                           "sections", "optimal", "auto"};
    if (MilpAvailable() && g.nodes.size() <= 300) strategies.push_back("milp");
    Plan best_optimal;
    for (const std::string& s : strategies) {
      o.strategy = s;
      Plan p = MakePlan(g, cost, o);
      // Replay never trust: rebuild the schedule from the plan's sections alone.
      MemoryTimeline t = Simulate(p.recomputed.empty() ? BuildSegmentedSchedule(g, p.segments)
                                                       : ReplaySelective(g, p.recomputed).schedule);
      EXPECT_EQ(p.predicted_peak_bytes, t.peak_bytes) << s;
      EXPECT_EQ(p.feasible, p.predicted_peak_bytes + p.margin_bytes <= o.budget_bytes) << s;
      // Budget-aware strategies never do worse than the plain step; the heuristics (speed,
      // bottleneck, sqrt) ignore the budget, and recomputing a conv adds its backward
      // workspace, so they may.
      if (s != "speed" && s != "bottleneck" && s != "sqrt")
        EXPECT_LE(p.predicted_peak_bytes, baseline) << s;
      for (const std::string& note : p.notes) {
        EXPECT_EQ(note.find("internal"), std::string::npos) << s << ": " << note;
        EXPECT_EQ(note.find("may not be exact"), std::string::npos) << s << ": " << note;
      }
      if (s == "optimal") best_optimal = p;
    }
    // Half the baseline fits everywhere except where one op's backward alone needs more: the
    // stems of VGG-16 (77% at batch 32) and ResNet-18 (66%), whose full-resolution
    // activations dominate; no segmentation, however fine, goes below that. And gpt's loss
    // at batch 32: its backward holds the logits, their log-probabilities and one gradient of
    // their size, 3 x 32x128x8192 floats = 384 MiB, beside 2 x 28.18 MiB of parameters and
    // gradients: 440.4 MiB, 56% of the 785.97 MiB baseline (since GELU is fused, the blocks
    // keep less and the loss is a larger share).
    if (fraction == 0.5 && GetParam() != "vgg16" && GetParam() != "resnet18" &&
        GetParam() != "gpt") {
      // The replayed peak fits; the segment-border margin on top may need micro-batches
      // (planner_microbatch_test holds that 50% fits with them).
      EXPECT_LE(best_optimal.predicted_peak_bytes, o.budget_bytes);
    }
    // optimal reaches the least recompute among all strategies that fit (it covers them
    // when the candidate set holds every position).
    for (const std::string& s : {"speed", "bottleneck", "sqrt", "sections"}) {
      o.strategy = s;
      Plan p = MakePlan(g, cost, o);
      bool exhaustive = std::any_of(
          best_optimal.notes.begin(), best_optimal.notes.end(),
          [](const std::string& n) { return n.find("every segmentation") != std::string::npos; });
      if (p.feasible && exhaustive) {
        EXPECT_TRUE(best_optimal.feasible) << s;
        EXPECT_LE(best_optimal.recompute_flops, p.recompute_flops) << s;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, PlannerCorpus, ::testing::ValuesIn(testing::TestCorpus()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           name.erase(std::remove(name.begin(), name.end(), '_'), name.end());
                           return name;
                         });

}  // namespace
}  // namespace memplan
