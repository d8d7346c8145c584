// Micro-batching: split the batch when checkpointing alone cannot fit the budget.
#include <chrono>

#include "memplan/planner.h"

namespace memplan {

void ApplyMicroBatches(Plan& p, const TrainingGraph& micro, int64_t micro_batches,
                       const SimulatorOptions& simulator) {
  p.micro_batches = micro_batches;
  if (micro_batches <= 1) return;
  // The other micro-batches' inputs and targets wait in memory for the whole step.
  int64_t rest = (micro_batches - 1) * micro.input_bytes();
  if (rest > 0 && !p.schedule.steps.empty()) {
    BufferId b = p.schedule.AddBuffer({"inputs of the other " + std::to_string(micro_batches - 1) + " micro-batches",
                                       rest, MemoryCategory::kInput, kNone});
    p.schedule.steps.front().allocs.push_back(b);
  }
  p.timeline = Simulate(p.schedule, simulator);
  p.predicted_peak_bytes = p.timeline.peak_bytes;
  p.feasible = p.budget_bytes <= 0 || p.predicted_peak_bytes <= p.budget_bytes;
  p.recompute_flops *= static_cast<double>(micro_batches);
  p.forward_flops *= static_cast<double>(micro_batches);
  p.notes.push_back("the batch of " + std::to_string(micro.batch * micro_batches) + " runs as " +
                    std::to_string(micro_batches) + " micro-batches of " + std::to_string(micro.batch) +
                    " with gradient accumulation (batch-norm statistics are per micro-batch)");
}

Plan PlanMicroBatched(const GraphAtBatch& graph_at_batch, int64_t batch, const CostModel& cost,
                      const PlanOptions& options, int64_t micro_batches) {
  auto start = std::chrono::steady_clock::now();
  if (batch <= 0) throw MemplanError("batch must be positive");
  if (micro_batches > 0 && batch % micro_batches != 0) {
    throw MemplanError("--micro-batches " + std::to_string(micro_batches) + " does not divide the batch of " +
                       std::to_string(batch) + ": use a divisor of the batch");
  }
  std::vector<int64_t> candidates;
  if (micro_batches > 0) {
    candidates = {micro_batches};
  } else {
    for (int64_t k = 1; k <= batch; ++k) if (batch % k == 0) candidates.push_back(k);
  }
  int64_t baseline = 0;
  Plan best;
  bool have = false;
  for (int64_t k : candidates) {
    TrainingGraph micro = graph_at_batch(batch / k);
    if (baseline == 0) {
      baseline = k == 1 ? Simulate(BuildTrainingSchedule(micro), options.simulator).peak_bytes
                        : Simulate(BuildTrainingSchedule(graph_at_batch(batch)), options.simulator).peak_bytes;
    }
    Plan p = MakePlan(micro, cost, options);
    // Without a feasible plan at this k, the smallest peak tells whether a larger k helps.
    if (!p.feasible && options.budget_bytes > 0) p = SmallestPeakPlan(micro, cost, options);
    p.budget_bytes = options.budget_bytes;
    ApplyMicroBatches(p, micro, k, options.simulator);
    p.baseline_peak_bytes = baseline;
    if (p.feasible || !have || p.predicted_peak_bytes < best.predicted_peak_bytes) {
      best = std::move(p);
      have = true;
    }
    if (best.feasible) break;
  }
  best.solve_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return best;
}

}  // namespace memplan
