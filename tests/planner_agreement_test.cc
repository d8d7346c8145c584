// The planner tells one truth (issue "The planner does what it is asked"): on real models, the
// smallest budget PlanForBudget reports is the one its plans fit, for `auto` and for each named
// strategy, with and without micro-batching; `auto` is never worse than a strategy it could
// have named; and a named strategy's plan is that strategy's.
#include <gtest/gtest.h>

#include "memplan/planner.h"
#include "testing/corpus.h"

namespace memplan {
namespace {

struct Model {
  std::string name;
  int64_t batch;
};

class PlannerAgreementCorpus : public ::testing::TestWithParam<Model> {
 protected:
  void SetUp() override {
    path_ = testing::CorpusModel(GetParam().name);
    graph_ = At(GetParam().batch);
  }
  TrainingGraph At(int64_t batch) const {
    LoadOptions o;
    o.batch = batch;
    return LoadTrainingGraph(path_, o);
  }
  BudgetPlan PlanAt(const std::string& strategy, const std::string& budget, int64_t micro_batches,
                    bool sweep = false, bool smallest = true) const {
    BudgetPlanOptions o;
    o.budget = ParseBudget("--budget", budget);
    o.plan.strategy = strategy;
    o.micro_batches = micro_batches;
    o.sweep = sweep;
    o.search_smallest = smallest;
    return PlanForBudget(
        graph_, [this](int64_t b) { return At(b); }, {}, o);
  }
  std::string path_;
  TrainingGraph graph_;
};

std::string Bytes(int64_t b) { return std::to_string(b) + "B"; }

// The smallest budget is a boundary: a plan fits it, and nothing fits one byte less; the sweep
// says the same number.
TEST_P(PlannerAgreementCorpus, TheSmallestBudgetIsWhereThePlansStartToFit) {
  const std::pair<const char*, int64_t> cases[] = {
      {"auto", 0}, {"auto", 1}, {"optimal", 1}, {"selective", 0}};
  for (const auto& [strategy, k] : cases) {
    {
      SCOPED_TRACE(std::string(strategy) + ", micro-batches " + (k == 0 ? "auto" : "1"));
      const BudgetPlan first = PlanAt(strategy, "50%", k);
      ASSERT_TRUE(first.smallest_searched);
      const int64_t least = first.smallest_budget_bytes();
      EXPECT_LE(least, first.plan.predicted_peak_bytes + first.plan.margin_bytes);
      const BudgetPlan at = PlanAt(strategy, Bytes(least), k, /*sweep=*/k == 1);
      EXPECT_TRUE(at.plan.feasible) << at.plan.predicted_peak_bytes << " + " << at.plan.margin_bytes
                                    << " > " << least << " (" << at.plan.strategy << ")";
      EXPECT_EQ(at.smallest_budget_bytes(), least);
      if (k == 1) EXPECT_EQ(at.sweep.min_budget_bytes, least);
      const BudgetPlan below =
          PlanAt(strategy, Bytes(least - 1), k, /*sweep=*/false, /*smallest=*/false);
      EXPECT_FALSE(below.plan.feasible) << below.plan.strategy << " fits " << least - 1;
      if (std::string(strategy) != "auto") {
        EXPECT_EQ(first.plan.strategy, strategy);
        EXPECT_EQ(at.plan.strategy, strategy);
        EXPECT_EQ(below.plan.strategy, strategy);
      }
    }
  }
}

// `auto` runs every strategy it could choose on the same graph: where one fits, auto fits at no
// more predicted seconds, and auto's smallest budget is no larger than any of theirs.
TEST_P(PlannerAgreementCorpus, AutoIsAtLeastAsGoodAsEveryStrategy) {
  const BudgetPlan least = PlanAt("auto", "1%", 1);
  for (const char* budget : {"75%", "50%"}) {
    const BudgetPlan best = PlanAt("auto", budget, 1, /*sweep=*/false, /*smallest=*/false);
    for (const char* strategy :
         {"speed", "bottleneck", "sqrt", "sections", "optimal", "selective"}) {
      SCOPED_TRACE(std::string(strategy) + " at " + budget);
      const BudgetPlan named = PlanAt(strategy, budget, 1, /*sweep=*/false, /*smallest=*/false);
      EXPECT_EQ(named.plan.strategy, strategy);
      if (named.plan.feasible) {
        EXPECT_TRUE(best.plan.feasible);
        EXPECT_LE(best.plan.predicted_overhead_seconds(),
                  named.plan.predicted_overhead_seconds() * (1 + 1e-12));
      }
      // No strategy reaches a smaller budget than auto's smallest.
      EXPECT_LE(least.smallest_budget_bytes(), named.plan.budget_needed_bytes());
    }
  }
}

// `optimal` searches every segmentation over its candidate cuts, which include the ones `sqrt`
// picks: it never needs a larger budget than sqrt.
TEST_P(PlannerAgreementCorpus, OptimalReachesWhatSqrtReaches) {
  for (int64_t k : {int64_t{1}, int64_t{0}}) {
    const BudgetPlan optimal = PlanAt("optimal", "1%", k);
    const BudgetPlan sqrt = PlanAt("sqrt", "1%", k);
    EXPECT_LE(optimal.smallest_budget_bytes(), sqrt.smallest_budget_bytes())
        << "micro-batches " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, PlannerAgreementCorpus,
                         ::testing::Values(Model{"resnet18", 8}, Model{"gpt", 4}),
                         [](const ::testing::TestParamInfo<Model>& info) {
                           std::string name;
                           for (char c : info.param.name)
                             if (c != '_') name += c;
                           return name;
                         });

}  // namespace
}  // namespace memplan
