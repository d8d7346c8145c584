// What the strategies share: the costed graph, its liveness facts, the baseline, and the
// (expensive) segment cost tables, computed once per planning request.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "graph_facts.h"
#include "memplan/planner.h"
#include "segment_costs.h"

namespace memplan::planner {

// `auto` is the one strategy that chooses among the others ("" means auto too).
inline bool IsAutoStrategy(const std::string& strategy) {
  return strategy == "auto" || strategy.empty();
}

// The budgets a sweep plans for: `count` evenly spaced from `baseline` down to `least`.
std::vector<int64_t> SweepBudgetLadder(int64_t baseline, int64_t least, int count);

// The points of one graph's selective trajectory (selective_search.cc), which do not depend on
// the budget: each is the search's next point below the one before, from the plain step, until
// the search is stuck. A plan for a budget stops at the first point within it; a lower budget
// goes on from where the last stopped.
struct SelectiveTrajectory {
  std::vector<std::vector<char>> dropped;  // per point, from the plain step's
  std::vector<int64_t> peak;               // per point
  std::vector<char> alt;                   // the incremental lineage after the last point
  bool stuck = false;                      // nothing lowers the last point's peak
};
// PlanOptions::selective_memo: by graph (ModelFingerprint) and the options the search reads.
struct SelectiveMemo {
  std::map<std::string, SelectiveTrajectory> trajectories;
};

class Context {
 public:
  Context(const TrainingGraph& g, const CostModel& cost, const PlanOptions& options);

  const TrainingGraph& graph() const { return *graph_; }
  const GraphFacts& facts() const { return facts_; }
  const PlanOptions& options() const { return options_; }
  const std::string& fingerprint() const { return fingerprint_; }  // ModelFingerprint
  int64_t baseline_peak() const { return baseline_; }
  // The cost model's forward seconds per node (PredictNodeSeconds), for the plans' predicted
  // recompute seconds.
  const std::vector<double>& node_seconds() const { return node_seconds_; }
  // Tables over SelectCutCandidates(max_candidates), exact for budgets up to `limit`;
  // `all_positions` says whether the candidates are every distinct position. Cached: a
  // table computed for a larger limit serves a smaller one.
  const SegmentCosts& costs(int max_candidates, int64_t limit, bool* all_positions = nullptr);

  // Replays `cuts` into a Plan for `budget` (solve_seconds from `start`).
  Plan Finish(const std::string& strategy, const std::vector<NodeId>& cuts, int64_t budget,
              std::chrono::steady_clock::time_point start) const;

 private:
  TrainingGraph costed_;
  const TrainingGraph* graph_;
  GraphFacts facts_;
  std::string fingerprint_;  // ModelFingerprint of the graph
  PlanOptions options_;
  int64_t baseline_ = 0;
  std::vector<double> node_seconds_;
  struct Tables {
    SegmentCosts costs;
    bool all_positions = false;
  };
  std::map<int, std::unique_ptr<Tables>> tables_;
};

// What a replay takes beside the graph and the plan's choice (cuts, or storages to recompute):
// the graph's facts and fingerprint already computed (a context replays every strategy's plan of
// one graph; on large graphs computing them again costs as much as the schedule), and the
// Plan's fields that the replay does not derive.
struct ReplayOptions {
  const GraphFacts* facts = nullptr;  // ComputeGraphFacts(g); required
  std::string fingerprint{};          // ModelFingerprint(g)
  std::string strategy{};             // the Plan's strategy name
  int64_t budget_bytes = 0;           // <= 0: none (every plan is feasible)
  int64_t baseline_peak_bytes = 0;    // the unplanned step's peak
  SimulatorOptions sim{};
};

// The replay of a graph on its own (the public ReplaySegmentation and ReplaySelective): the
// graph's facts and fingerprint computed for it.
struct StandaloneReplay {
  StandaloneReplay(const TrainingGraph& g, const ReplayRequest& r)
      : facts(ComputeGraphFacts(g)),
        options{.facts = &facts,
                .fingerprint = ModelFingerprint(g),
                .strategy = r.strategy,
                .budget_bytes = r.budget_bytes,
                .baseline_peak_bytes = r.baseline_peak_bytes,
                .sim = r.sim} {}
  StandaloneReplay(const StandaloneReplay&) = delete;
  StandaloneReplay& operator=(const StandaloneReplay&) = delete;
  GraphFacts facts;
  ReplayOptions options;
};

// The Plan of a replayed schedule with the fields every replay fills: ReplayOptions', g's model,
// batch and forward FLOPs, the schedule's simulated timeline, its peak and feasibility.
Plan ReplayedPlan(const TrainingGraph& g, Schedule schedule, const ReplayOptions& o);

// memplan::ReplaySegmentation with ReplayOptions.
Plan ReplaySegmentation(const TrainingGraph& g, const std::vector<NodeId>& cuts,
                        const ReplayOptions& o);

// memplan::ReplayOffload with ReplayOptions.
Plan ReplayOffload(const TrainingGraph& g, std::vector<TensorId> recomputed,
                   std::vector<OffloadChoice> offloaded, const ReplayOptions& o,
                   const OffloadRequest& request);

// memplan::ReplaySelective with ReplayOptions.
Plan ReplaySelective(const TrainingGraph& g, std::vector<TensorId> recomputed,
                     const ReplayOptions& o);

using Clock = std::chrono::steady_clock;
double SecondsSince(Clock::time_point start);

// The strategies on a shared context (the public functions wrap these).
Plan RunNone(Context& ctx, const PlanOptions& o);
Plan RunManual(Context& ctx, const PlanOptions& o);
Plan RunSpeed(Context& ctx, const PlanOptions& o);
Plan RunBottleneck(Context& ctx, const PlanOptions& o);
Plan RunSqrt(Context& ctx, const PlanOptions& o);
Plan RunSections(Context& ctx, const PlanOptions& o);
Plan RunOptimal(Context& ctx, const PlanOptions& o);
Plan RunMilp(Context& ctx, const PlanOptions& o);
Plan RunSelective(Context& ctx, const PlanOptions& o);
Plan RunOffload(Context& ctx, const PlanOptions& o);
Plan RunStrategy(Context& ctx, const PlanOptions& o);  // dispatch, including auto
// The strategies `auto` runs on g (RunAuto; PlanForBudget fits each to a reserved budget).
std::vector<std::string> AutoStrategies(const TrainingGraph& g, const PlanOptions& o);
// PlanMicroBatched(graph_at_batch, batch, cost, options, 0) whose plan at one micro-batch is
// `whole`, MakePlan's plan of graph_at_batch(batch) under `options` (made by the caller).
Plan PlanMicroBatchedAfter(const GraphAtBatch& graph_at_batch, int64_t batch, const CostModel& cost,
                           const PlanOptions& options, const Plan& whole);
// PlanMicroBatched(k = 0) for a budget that no plan of the whole batch fits (its PeakLowerBound
// is above it): the fewest micro-batches that fit, k = 1 never planned; when none fits, the plan
// at the largest k (infeasible).
Plan PlanMicroBatchedBeyondWhole(const GraphAtBatch& graph_at_batch, int64_t batch,
                                 const CostModel& cost, const PlanOptions& options);
// The smallest peak `optimal` reaches over its candidates.
Plan RunOptimalSmallestPeak(Context& ctx, const PlanOptions& o);

// On the CPU: the plan's workspace margins (rules unverified on the device's kernels, counted in
// its buffers so that budgets hold) moved from predicted_peak_bytes to margin_bytes,
// workspace_margin_bytes and margin_by_op (plan.h). Once per plan; no-op without margins.
void SplitWorkspaceMargins(Plan& p, const TrainingGraph& g, const SimulatorOptions& simulator);

}  // namespace memplan::planner
