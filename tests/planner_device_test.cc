// Planning for a device: the workspace margins a CPU keeps where its kernels' rules are
// unverified (counted against the budget, reported apart from the prediction), and the card's own
// memory as a budget on CUDA. Expected bytes computed by hand.
#include <gtest/gtest.h>

#include "memplan/analyzer.h"
#include "memplan/cuda_device.h"
#include "memplan/parse.h"
#include "memplan/planner.h"
#include "testing/graph_builder.h"

namespace memplan {
namespace {

// x[4,64,8,8] -> Conv w[64,64,1,1] -> ReduceMean -> logits -> CE (analyzer_cpu_device_test.cc):
// on SSE4.1's kernels its backward keeps a margin of 2 x (6 W + 3 (X + Y)) = 983,040 B, on top
// of the step's peak (the convolution's backward).
GraphAtBatch OneByOneConv(CpuIsa isa) {
  return [isa](int64_t batch) {
    testing::GraphBuilder b;
    b.Input("x", {-1, 64, 8, 8}).Param("w", {64, 64, 1, 1});
    b.Node("Conv", {"x", "w"}, {"y"})
        .Node("ReduceMean", {"y"}, {"logits"})
        .Attr("axes", std::vector<int64_t>{2, 3})
        .Attr("keepdims", int64_t{0});
    LoadOptions o;
    o.batch = batch;
    o.cpu_kernels = CpuKernels{isa, 2};
    return b.Output("logits").Load(o);
  };
}

constexpr int64_t kMargin = 983040;

Plan PlanAt(int64_t budget, CpuIsa isa) {
  BudgetPlanOptions o;
  o.budget = ParseBudget("--budget", std::to_string(budget) + "B");
  o.plan.strategy = "none";
  o.micro_batches = 1;
  o.search_smallest = false;
  return PlanForBudget(OneByOneConv(isa)(4), OneByOneConv(isa), {}, o).plan;
}

TEST(WorkspaceMargins, APlanPredictsWithoutThemAndKeepsThemFreeUnderTheBudget) {
  const int64_t prediction = Analyze(OneByOneConv(CpuIsa::kSse41)(4)).timeline.peak_bytes;
  const Plan fits = PlanAt(prediction + kMargin, CpuIsa::kSse41);
  EXPECT_TRUE(fits.feasible);
  EXPECT_EQ(fits.predicted_peak_bytes, prediction);
  EXPECT_EQ(fits.workspace_margin_bytes, kMargin);
  EXPECT_EQ(fits.margin_bytes, kMargin);
  EXPECT_EQ(fits.margin_by_op.at("Conv"), kMargin);
  // One byte less and the margin no longer fits, though the prediction does.
  EXPECT_FALSE(PlanAt(prediction + kMargin - 1, CpuIsa::kSse41).feasible);
}

TEST(WorkspaceMargins, VerifiedKernelsKeepNone) {
  const int64_t prediction = Analyze(OneByOneConv(CpuIsa::kAvx512Core)(4)).timeline.peak_bytes;
  const Plan p = PlanAt(prediction, CpuIsa::kAvx512Core);
  EXPECT_TRUE(p.feasible);
  EXPECT_EQ(p.workspace_margin_bytes, 0);
  EXPECT_TRUE(p.margin_by_op.empty());
}

// A card is a budget too: what it holds at the peak (reserved memory and the CUDA context) must
// fit its memory, whatever --budget says.
TEST(CardMemory, APlanThatOverflowsTheCardDoesNotFit) {
  CudaDevice card = NamedCard("l4");
  const GraphAtBatch at = [&](int64_t batch) {
    TrainingGraph g = OneByOneConv(CpuIsa::kAvx512Core)(batch);
    PrepareGraphForCuda(g, card);
    return g;
  };
  BudgetPlanOptions o;
  o.budget = ParseBudget("--budget", "1TiB");
  o.plan.strategy = "none";
  o.micro_batches = 1;
  o.search_smallest = false;
  o.cuda = card;
  o.budget_reserved = true;
  const Plan on_l4 = PlanForBudget(at(4), at, {}, o).plan;
  EXPECT_TRUE(on_l4.feasible);  // a few MiB on a 22 GiB card
  // The same card with its context and 1 MiB: the step's 2 MiB segments do not fit.
  card.total_memory_bytes = card.context_estimate_bytes() + (1 << 20);
  o.cuda = card;
  const BudgetPlan tiny = PlanForBudget(at(4), at, {}, o);
  EXPECT_FALSE(tiny.plan.feasible);
}

}  // namespace
}  // namespace memplan
