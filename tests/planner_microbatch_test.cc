// Micro-batching: the batch split into micro-batches with gradient accumulation.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "memplan/planner.h"
#include "planner_toy_graphs.h"
#include "testing/corpus.h"
#include "testing/graph_builder.h"

namespace memplan {
namespace {

using testing::GraphBuilder;

// x[N,100] -> MatMul w1[100,100] -> y1 -> Relu -> y2 -> MatMul w2[100,10] -> logits -> CE
GraphAtBatch Chain() {
  return [](int64_t batch) {
    GraphBuilder b;
    b.Input("x", {-1, 100}).Param("w1", {100, 100}).Param("w2", {100, 10});
    b.Node("MatMul", {"x", "w1"}, {"y1"})
        .Node("Relu", {"y1"}, {"y2"})
        .Node("MatMul", {"y2", "w2"}, {"logits"});
    LoadOptions o;
    o.grads = GradientLifetime::kKept;  // the hand-computed steps keep gradients
    o.batch = batch;
    return b.Output("logits").Load(o);
  };
}

TEST(MicroBatching, TwoMicroBatchesHalveTheActivationGradient) {
  PlanOptions o;
  o.strategy = "none";
  Plan p = PlanMicroBatched(Chain(), /*batch=*/4, {}, o, /*micro_batches=*/2);
  // Micro-batch of 2: x 800 + params 44000 + target 16 + grads 44000 = 88816 persistent.
  // Peak at MatMul1's backward: grad y1 800 + the new grad of w1 40000 + the loss and the seed
  // 8 (held until the backward call returns) = 129624.
  // The other micro-batch's x 800 and target 16 stay resident: 129624 + 816 = 130440.
  EXPECT_EQ(p.micro_batches, 2);
  EXPECT_EQ(p.batch, 2);
  EXPECT_EQ(p.predicted_peak_bytes, 130440);
  // The plain step at batch 4 (88408 + 1224 persistent, + grad y1 1600 + 40000 + 8).
  EXPECT_EQ(p.baseline_peak_bytes, 131240);
}

// With gradients set to None, the first micro-batch's backward creates them and the later ones
// run their forward beside them and add into them: a micro-batch steps as with kept gradients.
TEST(MicroBatching, WithGradientsSetToNoneLaterMicroBatchesHoldTheGradients) {
  GraphAtBatch none = [](int64_t batch) {
    LoadOptions o;
    o.batch = batch;
    GraphBuilder b;
    b.Input("x", {-1, 100}).Param("w1", {100, 100}).Param("w2", {100, 10});
    b.Node("MatMul", {"x", "w1"}, {"y1"})
        .Node("Relu", {"y1"}, {"y2"})
        .Node("MatMul", {"y2", "w2"}, {"logits"});
    return b.Output("logits").Load(o);
  };
  PlanOptions o;
  o.strategy = "none";
  Plan p = PlanMicroBatched(none, /*batch=*/4, {}, o, /*micro_batches=*/2);
  // As TwoMicroBatchesHalveTheActivationGradient: 130440 B.
  EXPECT_EQ(p.predicted_peak_bytes, 130440);
  // The whole batch's plain step with gradients set to None: persistent x 1600 + params 44000
  // + target 32 = 45632; the peak is MatMul1's backward, w2's gradient 4000 + grad y1 1600 +
  // w1's gradient 40000 + the loss and the seed 8: 91240 B, less than the split.
  EXPECT_EQ(p.baseline_peak_bytes, 45632 + 4000 + 1600 + 40000 + 8);
  // So a search that may split keeps the whole batch when it fits.
  o.budget_bytes = 100000;
  Plan searched = PlanMicroBatched(none, /*batch=*/4, {}, o, /*micro_batches=*/0);
  EXPECT_TRUE(searched.feasible);
  EXPECT_EQ(searched.micro_batches, 1);
}

TEST(MicroBatching, SearchSplitsOnlyWhenCheckpointingCannotFit) {
  PlanOptions o;
  o.strategy = "optimal";
  // At batch 4 no segmentation goes below 131240 B (persistent + grad y1 + new grad w1 are
  // alive whatever is recomputed); two micro-batches reach 130440 B.
  o.budget_bytes = 131000;
  Plan p = PlanMicroBatched(Chain(), 4, {}, o);
  EXPECT_TRUE(p.feasible);
  EXPECT_EQ(p.micro_batches, 2);
  EXPECT_EQ(p.predicted_peak_bytes, 130440);
  // A budget the plain step meets needs no split.
  o.budget_bytes = 131240;
  EXPECT_EQ(PlanMicroBatched(Chain(), 4, {}, o).micro_batches, 1);
}

TEST(MicroBatching, ImpossibleBudgetReturnsTheSmallestPeak) {
  PlanOptions o;
  o.budget_bytes = 1000;  // below the parameters alone
  Plan p = PlanMicroBatched(Chain(), 4, {}, o);
  EXPECT_FALSE(p.feasible);
  EXPECT_EQ(p.micro_batches, 4);  // the smallest peak splits the batch the most
}

TEST(PeakLowerBound, IsThePersistentBytesAndTheLargestForwardWorkingSet) {
  // Batch 4: persistent x 1600 + w1 40000 + w2 4000 + target 32 = 45632 B. The largest forward
  // working set is Relu's y1 + y2 (1600 + 1600; MatMul2 reads y2 and writes logits: 1760).
  EXPECT_EQ(PeakLowerBound(Chain()(4)), 45632 + 3200);
}

TEST(PeakLowerBound, ReluChainHoldsTwoActivationsAtEachRelu) {
  // x 100 + w 100 persistent; each Relu reads and writes a 100 B storage.
  EXPECT_EQ(PeakLowerBound(testing::ReluChain(6, GradientLifetime::kNone)), 400);
}

// Gradients set to None, so that what the strategies drop is most of the step.
TEST(PeakLowerBound, NoStrategyPlansBelowIt) {
  std::vector<TrainingGraph> graphs = {testing::ReluChain(6, GradientLifetime::kNone),
                                       testing::Residual(GradientLifetime::kNone)};
  for (uint32_t seed = 1; seed <= 4; ++seed)
    graphs.push_back(testing::RandomDag(seed, 14, GradientLifetime::kNone));
  for (const TrainingGraph& g : graphs) {
    const int64_t bound = PeakLowerBound(g);
    for (const std::string& strategy : StrategyNames()) {
      // manual needs checkpoints; milp's solver proves the same segmentations optimal's does.
      if (strategy == "manual" || strategy == "milp") continue;
      PlanOptions o;
      o.strategy = strategy;
      o.link = {.device_to_host_bytes_per_second = 1e12, .host_to_device_bytes_per_second = 1e12};
      o.host_budget_bytes = int64_t{1} << 30;
      const Plan p = SmallestPeakPlan(g, {}, o);
      EXPECT_GE(p.predicted_peak_bytes, bound) << strategy << " on " << g.nodes.size() << " nodes";
    }
  }
}

TEST(MicroBatching, CountMustDivideTheBatch) {
  EXPECT_THROW(PlanMicroBatched(Chain(), 4, {}, {}, 3), MemplanError);
}

TEST(MicroBatching, JsonRoundTripKeepsTheSplit) {
  PlanOptions o;
  o.strategy = "none";
  Plan p = PlanMicroBatched(Chain(), 4, {}, o, 2);
  TrainingGraph micro = Chain()(2);
  nlohmann::json j = PlanToJson(p, micro);
  EXPECT_EQ(j["batch"], 4);
  EXPECT_EQ(PlanGraphBatch(j), 2);
  EXPECT_EQ(PlanMicroBatches(j), 2);
  Plan back = PlanFromJson(j, micro);
  EXPECT_EQ(back.micro_batches, 2);
  EXPECT_EQ(back.predicted_peak_bytes, p.predicted_peak_bytes);
  // Loaded at the whole batch, the plan is refused with what to do.
  EXPECT_THROW(PlanFromJson(j, Chain()(4)), MemplanError);
}

TEST(MicroBatching, DivisorsComeFromThePrimeFactors) {
  EXPECT_EQ(Divisors(12), (std::vector<int64_t>{1, 2, 3, 4, 6, 12}));
  EXPECT_EQ(Divisors(1000000007), (std::vector<int64_t>{1, 1000000007}));  // a prime
  EXPECT_EQ(Divisors(int64_t{1} << 40).size(), 41u);                       // 2^0 .. 2^40
  // 2^63 - 1 = 7^2 x 73 x 127 x 337 x 92737 x 649657: 3 x 2^5 divisors.
  EXPECT_EQ(Divisors(INT64_MAX).size(), 96u);
}

// These walked every number up to the batch (minutes at 2^40); ctest's timeout guards them.
TEST(MicroBatching, SearchOverAPrimeBatchIsBounded) {
  PlanOptions o;
  o.budget_bytes = 1000;  // nothing fits
  Plan p = PlanMicroBatched(Chain(), /*batch=*/1000000007, {}, o);
  EXPECT_FALSE(p.feasible);
  EXPECT_EQ(p.micro_batches, 1000000007);
}

TEST(MicroBatching, SearchOverAPowerOfTwoBatchIsBounded) {
  PlanOptions o;
  o.budget_bytes = 1000;
  Plan p = PlanMicroBatched(Chain(), /*batch=*/int64_t{1} << 40, {}, o);
  EXPECT_FALSE(p.feasible);
  EXPECT_EQ(p.micro_batches, int64_t{1} << 40);
}

TEST(MicroBatching, SearchFindsTheFewestMicroBatchesThatFit) {
  // At batch 64, k micro-batches of 64/k: the peak falls as k grows; the budget of the
  // 8-way split (found by replaying it) must give k = 8, not a larger k.
  PlanOptions o;
  o.strategy = "none";
  int64_t at8 = PlanMicroBatched(Chain(), 64, {}, o, 8).predicted_peak_bytes;
  int64_t at4 = PlanMicroBatched(Chain(), 64, {}, o, 4).predicted_peak_bytes;
  ASSERT_LT(at8, at4);
  o.budget_bytes = at8;
  EXPECT_EQ(PlanMicroBatched(Chain(), 64, {}, o).micro_batches, 8);
}

// PlanForBudget, the entry point of `memplan plan` and the GUI, on Chain() at batch 4:
//   plain step 131240 B = persistent 89632 (x 1600 + w1 40000 + w2 4000 + target 32 + their
//   gradients 44000) + grad y1 1600 + the new grad of w1 40000 + the loss and the seed 8 (held
//   until the backward call returns). Checkpointing cannot go lower.
//   2 micro-batches of 2: 130440 B (above). 4 micro-batches of 1: persistent 88408 (x 400 +
//   params 44000 + target 8 + grads 44000) + grad y1 400 + grad w1 40000 + 8 = 128816, plus the
//   other three micro-batches' x and target 3 x 408 = 1224: 130040 B.
BudgetPlan PlanChainForBudget(const std::string& budget, int64_t micro_batches = 0,
                              bool sweep = false) {
  BudgetPlanOptions o;
  if (!budget.empty()) o.budget = ParseBudget("--budget", budget);
  o.plan.strategy = "optimal";
  o.micro_batches = micro_batches;
  o.sweep = sweep;
  return PlanForBudget(Chain()(4), Chain(), {}, o);
}

TEST(PlanForBudget, AFittingBudgetNeedsNoSplit) {
  BudgetPlan r = PlanChainForBudget("131240B");
  EXPECT_EQ(r.budget_bytes, 131240);
  EXPECT_TRUE(r.plan.feasible);
  EXPECT_EQ(r.plan.micro_batches, 1);
  EXPECT_EQ(r.plan.predicted_peak_bytes, 131240);
  // The smallest budget is searched whether or not the plan fits: 4 micro-batches of 1.
  EXPECT_TRUE(r.smallest_searched);
  EXPECT_EQ(r.smallest.micro_batches, 4);
  EXPECT_EQ(r.smallest_budget_bytes(), 130040);
}

// x[N,25] * w -> h0 -> Relu x4 -> sum, gradients set to None: activations dominate.
GraphAtBatch WideReluChain() {
  return [](int64_t batch) {
    GraphBuilder b;
    b.Input("x", {-1, 25}).Param("w", {25}).Node("Mul", {"x", "w"}, {"h0"});
    for (int i = 1; i <= 4; ++i)
      b.Node("Relu", {"h" + std::to_string(i - 1)}, {"h" + std::to_string(i)});
    LoadOptions o;
    o.batch = batch;
    o.loss = LossKind::kSum;
    o.grads = GradientLifetime::kNone;
    return b.Output("h4").Load(o);
  };
}

// Batch 8: no plan of the whole batch goes below x 800 + w 100 + a Relu's 800 + 800 = 2500 B, so
// at 2400 B the whole batch is never planned; the split found is the one the search from k = 1
// finds (PlanMicroBatched).
TEST(PlanForBudget, ABudgetUnderTheWholeBatchsBoundIsMetBySplitting) {
  ASSERT_EQ(PeakLowerBound(WideReluChain()(8)), 2500);
  BudgetPlanOptions o;
  o.budget = ParseBudget("--budget", "2400B");
  o.plan.strategy = "none";
  const BudgetPlan r = PlanForBudget(WideReluChain()(8), WideReluChain(), {}, o);
  PlanOptions from_one;
  from_one.strategy = "none";
  from_one.budget_bytes = 2400;
  const Plan expected = PlanMicroBatched(WideReluChain(), 8, {}, from_one);
  ASSERT_TRUE(expected.feasible);
  EXPECT_TRUE(r.plan.feasible);
  EXPECT_GT(r.plan.micro_batches, 1);
  EXPECT_EQ(r.plan.micro_batches, expected.micro_batches);
  EXPECT_EQ(r.plan.predicted_peak_bytes, expected.predicted_peak_bytes);
  // Nothing fits at 100 B: the answer is the strategy's on the whole batch, as for any budget.
  o.budget = ParseBudget("--budget", "100B");
  const BudgetPlan none_fits = PlanForBudget(WideReluChain()(8), WideReluChain(), {}, o);
  EXPECT_FALSE(none_fits.plan.feasible);
  EXPECT_EQ(none_fits.plan.micro_batches, 1);
}

// --strategy none at a budget only micro-batches meet: the plan is still `none`, split in two
// (130440 B, above), never another strategy's plan.
TEST(PlanForBudget, ANamedStrategyIsKeptWhenTheBatchIsSplit) {
  BudgetPlanOptions o;
  o.budget = ParseBudget("--budget", "131000B");
  o.plan.strategy = "none";
  BudgetPlan r = PlanForBudget(Chain()(4), Chain(), {}, o);
  EXPECT_TRUE(r.plan.feasible);
  EXPECT_EQ(r.plan.strategy, "none");
  EXPECT_EQ(r.plan.micro_batches, 2);
  EXPECT_EQ(r.plan.predicted_peak_bytes, 130440);
  EXPECT_EQ(r.smallest.strategy, "none");
}

// Nothing fits (50%: 65620 B, below the parameters and gradients): the plan and the smallest
// budget are still the named strategy's own, and no other strategy fits either.
TEST(PlanForBudget, ANamedStrategyThatCannotFitKeepsItsName) {
  BudgetPlanOptions o;
  o.budget = ParseBudget("--budget", "50%");
  o.plan.strategy = "sqrt";
  BudgetPlan r = PlanForBudget(Chain()(4), Chain(), {}, o);
  EXPECT_FALSE(r.plan.feasible);
  EXPECT_EQ(r.plan.strategy, "sqrt");
  EXPECT_EQ(r.smallest.strategy, "sqrt");
  EXPECT_TRUE(r.alternative.schedule.steps.empty());
}

// Micro-batching's time: Chain() at batch 4 in 2 micro-batches of 2 runs each op twice; the
// roofline charges a fixed cost per op run, so the split costs at least 3 (forward and twice
// that backward) x 4 ops (two MatMuls, Relu, the loss) x that cost per step.
TEST(MicroBatching, ASplitIsPricedAtLeastAtTheOpsFixedCosts) {
  PlanOptions o;
  o.strategy = "none";
  MachineRates rates = DefaultMachineRates("cpu");
  CostModel cost;
  cost.node_seconds = RooflineNodeSeconds(rates);
  Plan one = PlanMicroBatched(Chain(), 4, cost, o, 1);
  Plan two = PlanMicroBatched(Chain(), 4, cost, o, 2);
  EXPECT_EQ(one.predicted_micro_batch_seconds, 0);
  EXPECT_GE(two.predicted_micro_batch_seconds, 3 * 4 * rates.op_overhead_seconds * 0.999);
}

TEST(PlanForBudget, SplitsTheBatchWhenCheckpointingCannotFit) {
  // 131000 B: below the plain step's 131240, above 2 micro-batches' 130440.
  BudgetPlan r = PlanChainForBudget("131000B");
  EXPECT_TRUE(r.plan.feasible);
  EXPECT_EQ(r.plan.micro_batches, 2);
  EXPECT_EQ(r.plan.batch, 2);
  EXPECT_EQ(r.plan.predicted_peak_bytes, 130440);
  EXPECT_EQ(r.plan.baseline_peak_bytes, 131240);
}

TEST(PlanForBudget, OneMicroBatchNeverSplits) {
  BudgetPlan r = PlanChainForBudget("131000B", /*micro_batches=*/1);
  EXPECT_FALSE(r.plan.feasible);
  EXPECT_EQ(r.plan.micro_batches, 1);
  // The smallest answer is then the whole batch's smallest peak: 131240 B.
  EXPECT_EQ(r.smallest.micro_batches, 1);
  EXPECT_EQ(r.smallest_budget_bytes(), 131240);
}

TEST(PlanForBudget, AGivenMicroBatchCountIsKept) {
  BudgetPlan r = PlanChainForBudget("131000B", /*micro_batches=*/4);
  EXPECT_TRUE(r.plan.feasible);
  EXPECT_EQ(r.plan.micro_batches, 4);
  EXPECT_EQ(r.plan.predicted_peak_bytes, 130040);
  EXPECT_THROW(PlanChainForBudget("131000B", /*micro_batches=*/3),
               MemplanError);  // 3 does not divide 4
}

TEST(PlanForBudget, NothingFitsGivesTheSmallestPeakOverMicroBatches) {
  // 50% of the plain step: 131240 / 2 = 65620 B, below the parameters and gradients alone
  // (88000 B) at any split.
  BudgetPlan r = PlanChainForBudget("50%");
  EXPECT_EQ(r.budget_bytes, 65620);
  EXPECT_FALSE(r.plan.feasible);
  EXPECT_EQ(r.plan.micro_batches, 1);  // the strategy's answer on the whole batch
  EXPECT_EQ(r.plan.budget_bytes, 65620);
  // The smallest peak: 4 micro-batches of 1, 130040 B.
  EXPECT_EQ(r.smallest.micro_batches, 4);
  EXPECT_EQ(r.smallest_budget_bytes(), 130040);
}

// The sweep answers as the plan does, micro-batches allowed: checkpointing cannot go below the
// plain step's 131240 B, 4 micro-batches of 1 reach 130040 B (2 of 2: 130440 B, above).
TEST(PlanForBudget, SweepWithoutABudgetPlansTheSmallestFeasibleBudget) {
  BudgetPlan r = PlanChainForBudget("", 0, /*sweep=*/true);
  EXPECT_EQ(r.sweep.baseline_peak_bytes, 131240);
  EXPECT_EQ(r.sweep.min_budget_bytes, 130040);
  EXPECT_EQ(r.budget_bytes, 130040);
  EXPECT_TRUE(r.plan.feasible);
  EXPECT_EQ(r.plan.micro_batches, 4);
  ASSERT_FALSE(r.sweep.points.empty());
  EXPECT_EQ(r.sweep.points.front().micro_batches, 1);
  EXPECT_EQ(r.sweep.points.back().micro_batches, 4);
}

// With the batch kept whole, the sweep stops where checkpointing does.
TEST(PlanForBudget, SweepOfTheWholeBatchStopsAtItsSmallestPeak) {
  BudgetPlan r = PlanChainForBudget("", 1, /*sweep=*/true);
  EXPECT_EQ(r.sweep.min_budget_bytes, 131240);
  EXPECT_EQ(r.plan.micro_batches, 1);
}

// On a CUDA device the budget bounds reserved memory, which auto's choice (by the allocated peak)
// may overshoot where a strategy it passed over fits: auto fits wherever a named strategy does,
// at no more predicted overhead. gpt at batch 16 and 35% of its plain peak: auto's first choice,
// selective at 8 micro-batches, reserves 160.00 MiB of 159.99; sqrt at 8 reserves 158.
TEST(PlanForBudget, OnACudaDeviceAutoFitsWhereANamedStrategyFits) {
  const std::string path = testing::CorpusModel("gpt");
  const CudaDevice device;
  GraphAtBatch at = [&](int64_t batch) {
    TrainingGraph g = LoadTrainingGraph(path, {.batch = batch});
    PrepareGraphForCuda(g, device);
    return g;
  };
  const TrainingGraph g = at(16);
  auto plan = [&](const std::string& strategy) {
    BudgetPlanOptions o;
    o.budget = ParseBudget("--budget", "35%");
    o.plan.strategy = strategy;
    o.cuda = device;
    o.budget_reserved = true;
    return PlanForBudget(g, at, {}, o).plan;
  };
  const Plan automatic = plan("auto");
  int fitted = 0;
  for (const std::string& strategy : {"sqrt", "optimal", "selective"}) {
    const Plan named = plan(strategy);
    if (!named.feasible) continue;
    ++fitted;
    EXPECT_TRUE(automatic.feasible) << strategy << " fits";
    EXPECT_LE(automatic.predicted_overhead_seconds(), named.predicted_overhead_seconds() + 1e-12)
        << strategy;
  }
  EXPECT_GT(fitted, 0);
  EXPECT_LE(automatic.predicted_reserved_peak_bytes, automatic.budget_bytes);
}

// Every corpus model fits half its baseline at batch 32: by checkpointing where it can, by
// splitting the batch where one op's backward alone needs more.
class MicroBatchCorpus : public ::testing::TestWithParam<std::string> {};

TEST_P(MicroBatchCorpus, HalfTheBaselineFits) {
  std::string path = testing::CorpusModel(GetParam());
  GraphAtBatch at = [&](int64_t batch) {
    LoadOptions o;
    o.batch = batch;
    return LoadTrainingGraph(path, o);
  };
  int64_t batch =
      GetParam() == "gpt_deep" || GetParam() == "swin_t" || GetParam() == "vit_b_16" ? 16 : 32;
  PlanOptions o;
  o.strategy = "optimal";
  int64_t baseline = Simulate(BuildTrainingSchedule(at(batch))).peak_bytes;
  o.budget_bytes = baseline / 2;
  Plan p = PlanMicroBatched(at, batch, {}, o);
  EXPECT_TRUE(p.feasible) << p.predicted_peak_bytes << " > " << o.budget_bytes;
  EXPECT_EQ(p.baseline_peak_bytes, baseline);
  // Replay never trust: the micro-batch graph's schedule from the sections alone, plus the
  // rest of the batch's inputs.
  TrainingGraph micro = at(p.batch);
  micro.grads = SteppedGradients(micro.grads, 1, p.micro_batches);  // later micro-batches keep them
  int64_t rest = (p.micro_batches - 1) * micro.input_bytes();
  EXPECT_EQ(p.predicted_peak_bytes,
            Simulate(BuildSegmentedSchedule(micro, p.segments)).peak_bytes + rest);
}

INSTANTIATE_TEST_SUITE_P(Models, MicroBatchCorpus, ::testing::ValuesIn(testing::TestCorpus()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name;
                           for (char c : info.param)
                             if (c != '_') name += c;
                           return name;
                         });

}  // namespace
}  // namespace memplan
