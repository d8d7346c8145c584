// PlanForBudget: the budget, the strategy and the micro-batch fallback in one call.
#include <utility>

#include "memplan/planner.h"

namespace memplan {

BudgetPlan PlanForBudget(const TrainingGraph& g, const GraphAtBatch& graph_at_batch, const CostModel& cost,
                         const BudgetPlanOptions& options) {
  const GraphAtBatch at_batch = [&](int64_t batch) { return batch == g.batch ? g : graph_at_batch(batch); };
  BudgetPlan out;
  PlanOptions plan_options = options.plan;
  // 1. The budget: a size, or a percentage of the plain step's peak.
  plan_options.budget_bytes = options.budget.bytes;
  if (options.budget.percent > 0) {
    plan_options.budget_bytes =
        options.budget.Resolve(Simulate(BuildTrainingSchedule(g), plan_options.simulator).peak_bytes);
  }
  // 2. The sweep; without a budget, the plan is for the smallest budget it reaches.
  if (options.sweep) {
    out.sweep = SweepBudgets(g, cost, plan_options);
    if (options.budget.bytes <= 0 && options.budget.percent <= 0) plan_options.budget_bytes = out.sweep.min_budget_bytes;
  }
  out.budget_bytes = plan_options.budget_bytes;
  // 3. The plan at the whole batch, or at the micro-batch count asked for.
  const int64_t k = options.micro_batches;
  out.plan = k > 1 ? PlanMicroBatched(at_batch, g.batch, cost, plan_options, k) : MakePlan(g, cost, plan_options);
  // 4. Checkpointing alone does not fit: split the batch (gradient accumulation).
  if (!out.plan.feasible && k == 0 && g.batch > 1) {
    Plan split = PlanMicroBatched(at_batch, g.batch, cost, plan_options, 0);
    if (split.feasible) out.plan = std::move(split);
    else out.smallest = std::move(split);
  }
  // 5. Nothing fits: the smallest peak any strategy reaches.
  if (!out.plan.feasible && out.smallest.schedule.steps.empty()) out.smallest = SmallestPeakPlan(g, cost, plan_options);
  return out;
}

}  // namespace memplan
