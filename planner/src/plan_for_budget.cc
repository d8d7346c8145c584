// PlanForBudget: the budget, the strategy, the micro-batch fallback and the data-parallel
// layout in one call.
#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "memplan/planner.h"
#include "planner_internal.h"

namespace memplan {
namespace {

// Steps 3 and 4 of the one-device plan: the strategy at the batch of `g`, or at k micro-batches,
// falling back to the fewest micro-batches that fit.
Plan PlanBatch(const TrainingGraph& g, const GraphAtBatch& at_batch, const CostModel& cost,
               const PlanOptions& o, int64_t k) {
  if (k == 0 && g.batch > 1 && o.budget_bytes > 0 && PeakLowerBound(g) > o.budget_bytes) {
    // No plan of the whole batch fits: the splits first, and the whole batch's plan (the
    // answer when none fits) only when none does.
    Plan split = planner::PlanMicroBatchedBeyondWhole(at_batch, g.batch, cost, o);
    return split.feasible ? split : MakePlan(g, cost, o);
  }
  Plan plan = k > 1 ? PlanMicroBatched(at_batch, g.batch, cost, o, k) : MakePlan(g, cost, o);
  if (!plan.feasible && k == 0 && g.batch > 1) {
    // Its plan at k = 1 is `plan` (at_batch(g.batch) is g): not planned again.
    Plan split = planner::PlanMicroBatchedAfter(at_batch, g.batch, cost, o, plan);
    if (split.feasible) plan = std::move(split);
  }
  return plan;
}

// Step time as `auto` prices layouts: recompute, micro-batching and communication.
double StepSeconds(const Plan& p) { return p.predicted_overhead_seconds(); }

// A plan for a CUDA device: its reserved peak, and its fit in the quantity the budget bounds.
void OnDevice(Plan& p, const BudgetPlanOptions& options) {
  if (!options.cuda || p.schedule.steps.empty()) return;
  const DeviceMemory m = PredictDeviceMemory(p.schedule, *options.cuda);
  p.predicted_reserved_peak_bytes = m.reserved_peak_bytes;
  // cuDNN workspaces not measured: kept free as the segment borders' copies are (at other steps).
  p.margin_bytes = std::max(p.margin_bytes, m.workspace_margin_bytes);
  p.budget_of = options.budget_reserved && options.layout.devices == 1 ? "reserved" : "allocated";
  p.feasible = p.budget_bytes <= 0 || p.budget_needed_bytes() <= p.budget_bytes;
  // The card is a budget too: what nvidia-smi shows (reserved and context) must fit its memory.
  const int64_t total = options.cuda->total_memory_bytes;
  if (total > 0 && m.card_peak_bytes() + p.margin_bytes > total) p.feasible = false;
}

// The most the reserved peak may take on a card of known memory: its memory less the context.
int64_t CardLimit(const BudgetPlanOptions& options) {
  if (!options.cuda || options.cuda->total_memory_bytes <= 0) return 0;
  return std::max<int64_t>(
      1, options.cuda->total_memory_bytes - options.cuda->context_estimate_bytes());
}

// On a CUDA device with the budget on reserved memory, a plan of PlanBatch(..., k) that
// overshoots it: the strategies plan the allocated peak, so their budget is lowered by what the
// reserved peak overshoots (a few rounds), then raised halfway back while the plan still fits.
Plan FitReserved(Plan plan, const TrainingGraph& g, const GraphAtBatch& at_batch,
                 const CostModel& cost, const PlanOptions& plan_options, int64_t k,
                 const BudgetPlanOptions& options) {
  if (!options.cuda || plan_options.budget_bytes <= 0) return plan;
  // PlanBatch split the batch: no plan of the whole batch fits the budget, nor any lower inner
  // budget, so the rounds plan the splits alone (the whole batch's search is the costliest).
  const bool splits_only = k == 0 && plan.micro_batches > 1;
  // The strategies' plan against `inner` bytes, judged against the budget on the device.
  auto plan_within = [&](int64_t inner) {
    PlanOptions at = plan_options;
    at.budget_bytes = inner;
    Plan p = splits_only ? planner::PlanMicroBatchedBeyondWhole(at_batch, g.batch, cost, at)
                         : PlanBatch(g, at_batch, cost, at, k);
    p.budget_bytes = plan_options.budget_bytes;
    OnDevice(p, options);
    return p;
  };
  int64_t inner = plan_options.budget_bytes;
  int64_t too_high = 0;  // the lowest inner budget whose plan overshot the reserved budget
  for (int round = 0; round < 4 && !plan.feasible; ++round) {
    const int64_t over = plan.budget_needed_bytes() - plan_options.budget_bytes;
    // A plan may sit well under its inner budget (its peak is where no decision helps, the
    // reserved overshoot is fragmentation): lowering from the budget would replan the same
    // plan, so lower from the allocated peak the plan needs.
    too_high = std::min(inner, plan.predicted_peak_bytes + plan.margin_bytes);
    // Reserved memory grows by pages (2 MiB, the small pool's): a smaller step rarely frees one.
    const int64_t step = plan.budget_of == "reserved" ? (int64_t{2} << 20) : 512;
    inner = too_high - std::max(over, step);
    if (inner < 1) break;
    Plan p = plan_within(inner);
    if (p.feasible || p.budget_needed_bytes() < plan.budget_needed_bytes()) plan = std::move(p);
  }
  // Lowered by a whole overshoot, the inner budget may be lower than the reserved budget
  // needs (the overshoot is the plan's, and another plan fragments less): twice, the inner
  // budget halfway back up, kept when its plan fits too and is faster.
  for (int round = 0; round < 2 && too_high > 0 && plan.feasible; ++round) {
    if (too_high - inner < (1 << 20)) break;
    const int64_t mid = inner + (too_high - inner) / 2;
    Plan p = plan_within(mid);
    if (p.feasible) {
      inner = mid;
      if (StepSeconds(p) < StepSeconds(plan)) plan = std::move(p);
    } else {
      too_high = mid;
    }
  }
  return plan;
}

// A plan judged against `budget` (the smallest-peak plan was searched with another one).
void JudgeAgainst(Plan& p, int64_t budget, const BudgetPlanOptions& options) {
  p.budget_bytes = budget;
  p.feasible = budget <= 0 || p.budget_needed_bytes() <= budget;
  OnDevice(p, options);
}

// One shard mode on N ranks: the one-device planners see the rank's graph, whose persistent
// bytes differ from the rank's; they plan against the budget moved by that difference, and the
// replay after ApplyDataParallel decides. When the replay overshoots (the optimizer phase's
// transients, the lazily allocated flat gradients), the planners' budget is lowered by the
// overshoot and they plan again (a few times at most).
Plan PlanRank(const TrainingGraph& rank, const GraphAtBatch& at_batch, const CostModel& cost,
              const PlanOptions& o, int64_t k, const ParallelLayout& layout, int64_t baseline) {
  ParallelLayout one = layout;
  one.devices = 1;
  const int64_t saved =
      RankPersistentBytes(rank, one).total() - RankPersistentBytes(rank, layout).total();
  auto rewrite = [&](Plan p) {
    p.budget_bytes = o.budget_bytes;
    ApplyDataParallel(p, p.batch == rank.batch ? rank : at_batch(p.batch), layout, o.simulator);
    p.baseline_peak_bytes = baseline;
    return p;
  };
  PlanOptions moved = o;
  // Shard parameters gathers in forward and recompute passes, which selective recompute has not.
  if (layout.shard == ShardMode::kParameters) moved.auto_selective_max_nodes = 0;
  if (o.budget_bytes > 0) moved.budget_bytes = std::max<int64_t>(1, o.budget_bytes + saved);
  Plan best = rewrite(PlanBatch(rank, at_batch, cost, moved, k));
  for (int attempt = 0; attempt < 3 && !best.feasible && o.budget_bytes > 0; ++attempt) {
    const int64_t over = best.predicted_peak_bytes + best.margin_bytes - o.budget_bytes;
    if (moved.budget_bytes - over < 1) break;
    moved.budget_bytes -= over;
    Plan p = rewrite(PlanBatch(rank, at_batch, cost, moved, k));
    if (p.feasible || p.predicted_peak_bytes < best.predicted_peak_bytes) best = std::move(p);
  }
  return best;
}

// The smallest per-rank budget of one shard mode, searched over the plans PlanRank makes (the
// code path of the plans printed): the one-device smallest-peak plan (at every micro-batch count
// the search reaches, or at k) rewritten for the ranks bounds it from above, the rank's
// persistent bytes from below, and the budget is bisected between the two (to 0.5%), so that
// checkpointed per-rank plans below the per-rank unplanned peak are found. Judged against o's
// budget.
Plan SmallestRank(const TrainingGraph& rank, const GraphAtBatch& at_batch, const CostModel& cost,
                  const PlanOptions& o, int64_t k, const ParallelLayout& layout, int64_t baseline) {
  PlanOptions none_fits = o;
  none_fits.budget_bytes = 1;
  if (layout.shard == ShardMode::kParameters) none_fits.auto_selective_max_nodes = 0;
  Plan best = SmallestPeakMicroBatched(at_batch, rank.batch, cost, none_fits, k);
  ApplyDataParallel(best, best.batch == rank.batch ? rank : at_batch(best.batch), layout,
                    o.simulator);
  best.baseline_peak_bytes = baseline;
  int64_t lo = RankPersistentBytes(rank, layout).total(), hi = best.budget_needed_bytes();
  for (int i = 0; i < 12 && hi - lo > std::max<int64_t>(hi / 200, 4096); ++i) {
    PlanOptions at = o;
    at.budget_bytes = lo + (hi - lo) / 2;
    Plan p = PlanRank(rank, at_batch, cost, at, k, layout, baseline);
    if (!p.feasible) {
      lo = at.budget_bytes + 1;
      continue;
    }
    hi = std::min(hi, p.budget_needed_bytes());
    if (p.budget_needed_bytes() < best.budget_needed_bytes()) best = std::move(p);
  }
  best.budget_bytes = o.budget_bytes;
  best.feasible = o.budget_bytes <= 0 || best.budget_needed_bytes() <= o.budget_bytes;
  return best;
}

// The answers agree: the plan printed never needs less than "the smallest budget", and a sweep
// reports the same smallest budget as the plan.
void Settle(BudgetPlan& out, const TrainingGraph& g, const BudgetPlanOptions& options) {
  // The device the plans are for: memplan run warns when one runs on another.
  std::optional<CpuDevice> cpu;
  if (!options.cuda) {
    cpu = options.cpu ? *options.cpu : CpuDeviceOfThisMachine();
    if (!options.cpu) cpu->kernels = g.cpu_kernels;
  }
  for (Plan* p : {&out.plan, &out.smallest, &out.alternative}) {
    if (options.cuda) {
      p->device_fingerprint = options.cuda->fingerprint();
      p->device_summary = options.cuda->device +
                          (options.cuda->name.empty() ? "" : " (" + options.cuda->name + ")") +
                          "; " + options.cuda->source;
      continue;
    }
    planner::SplitWorkspaceMargins(*p, g, options.plan.simulator);
    p->cpu_device = cpu;
    p->device_fingerprint = cpu->fingerprint();
    p->device_summary = cpu->summary();
  }
  const int64_t card = CardLimit(options);
  if (card > 0 && out.budget_bytes == card) {
    out.plan.notes.push_back("the budget is the card's memory less its CUDA context (" +
                             std::to_string(card) +
                             " B of reserved memory): " + options.cuda->source);
  }
  if (out.smallest.schedule.steps.empty() ||
      out.plan.budget_needed_bytes() < out.smallest_budget_bytes()) {
    out.smallest = out.plan;
  }
  if (options.sweep) {
    out.sweep.min_budget_bytes = out.smallest_budget_bytes();
    out.sweep.min_budget_strategy = out.smallest.strategy;
  }
}

}  // namespace

BudgetPlan PlanForBudget(const TrainingGraph& g, const GraphAtBatch& graph_at_batch,
                         const CostModel& cost, const BudgetPlanOptions& options) {
  const int64_t n = options.layout.devices;
  const GraphAtBatch at_batch = [&](int64_t batch) {
    TrainingGraph r = batch == g.batch ? g : graph_at_batch(batch);
    r.grads = SteppedGradients(r.grads, n, 1);
    return r;
  };
  const int64_t k = options.micro_batches;
  if (n < 1) throw MemplanError("--devices must be at least 1 (got " + std::to_string(n) + ")");
  if (n > 1 && options.layout.shard == ShardMode::kParameters && !options.shard_auto &&
      options.plan.strategy == "selective") {
    throw MemplanError(
        "--strategy selective does not combine with --shard parameters yet (its recompute runs "
        "inside the backward, where no parameter gather is scheduled); use another --strategy or "
        "--shard gradients");
  }
  if (n > 1 && (g.batch % n != 0 || (k > 1 && (g.batch / n) % k != 0))) {
    throw MemplanError(
        "the batch of " + std::to_string(g.batch) + " does not split into " + std::to_string(n) +
        " devices" + (k > 1 ? " x " + std::to_string(k) + " micro-batches" : std::string()) +
        ": use a --batch that is a multiple of " + std::to_string(n * (k > 1 ? k : 1)) +
        " or another --devices" + (k > 1 ? " / --micro-batches" : ""));
  }
  BudgetPlan out;
  PlanOptions plan_options = options.plan;
  planner::SelectiveMemo memo;  // every plan below searches each selective point once
  if (!plan_options.selective_memo) plan_options.selective_memo = &memo;
  // 1. The budget: a size, or a percentage of the one-device plain step's peak at the whole batch.
  plan_options.budget_bytes = options.budget.bytes;
  int64_t baseline = 0;
  if (options.budget.percent > 0 || n > 1)
    baseline = Simulate(BuildTrainingSchedule(g), plan_options.simulator).peak_bytes;
  // A percentage is of the predicted step, not of its workspace margins (those are what the
  // budget keeps free on top of a prediction: SplitWorkspaceMargins).
  if (options.budget.percent > 0) {
    SimulatorOptions prediction = plan_options.simulator;
    prediction.count_margins = false;
    plan_options.budget_bytes =
        options.budget.Resolve(Simulate(BuildTrainingSchedule(g), prediction).peak_bytes);
  }
  const int64_t card = CardLimit(options);
  const bool card_bounds = card > 0 && plan_options.budget_bytes > card;
  if (card_bounds) plan_options.budget_bytes = card;
  const bool no_budget = options.budget.bytes <= 0 && options.budget.percent <= 0;
  if (n == 1) {
    // 2. The smallest budget under these options (the strategy asked for, the micro-batches
    // allowed): one answer for the JSON, the exit message and the sweep.
    // (Searched after the plan when the caller only needs it for a plan that does not fit.)
    const bool smallest_first = options.search_smallest || options.sweep;
    auto search_smallest = [&] {
      out.smallest = SmallestPeakMicroBatched(at_batch, g.batch, cost, plan_options, k);
      out.smallest_searched = true;
      JudgeAgainst(out.smallest, plan_options.budget_bytes, options);
    };
    if (smallest_first) search_smallest();
    // 3. The sweep: what this call answers for budgets from the plain step's down to the
    // smallest; without a budget, the plan is for the smallest.
    if (options.sweep) {
      const int64_t least = out.smallest_budget_bytes();
      if (baseline == 0)
        baseline = Simulate(BuildTrainingSchedule(g), plan_options.simulator).peak_bytes;
      out.sweep.baseline_peak_bytes = baseline;
      out.sweep.min_budget_bytes = least;
      out.sweep.min_budget_strategy = out.smallest.strategy;
      std::vector<SweepPoint> points;
      for (int64_t budget :
           planner::SweepBudgetLadder(baseline, std::min(least, baseline), /*count=*/12)) {
        PlanOptions o = plan_options;
        o.budget_bytes = budget;
        Plan p = PlanBatch(g, at_batch, cost, o, k);
        OnDevice(p, options);
        if (p.feasible) points.push_back(SweepPointOf(p, o.budget_bytes));
      }
      out.sweep.points = ParetoFront(std::move(points));
      if (no_budget) plan_options.budget_bytes = least;
    }
    out.budget_bytes = plan_options.budget_bytes;
    if (out.smallest_searched) JudgeAgainst(out.smallest, plan_options.budget_bytes, options);
    // 4. The plan at the whole batch, or at the micro-batch count asked for; when
    // checkpointing alone does not fit, split the batch (gradient accumulation).
    out.plan = PlanBatch(g, at_batch, cost, plan_options, k);
    OnDevice(out.plan, options);
    const int64_t first_split = out.plan.micro_batches;
    const bool auto_overshot = options.cuda && !out.plan.feasible &&
                               planner::IsAutoStrategy(plan_options.strategy) &&
                               plan_options.budget_bytes > 0;
    out.plan = FitReserved(std::move(out.plan), g, at_batch, cost, plan_options, k, options);
    // A budget lowered for one split's fragmentation may have pushed the batch into more
    // micro-batches than the reserved budget needs: a split between the first one and the
    // chosen one, fitted on its own, may fit too (the fewest that does, kept when faster).
    if (options.cuda && k == 0 && out.plan.feasible && out.plan.micro_batches > first_split) {
      for (int64_t d : Divisors(g.batch)) {
        if (d <= first_split || d >= out.plan.micro_batches) continue;
        Plan p = PlanBatch(g, at_batch, cost, plan_options, d);
        OnDevice(p, options);
        p = FitReserved(std::move(p), g, at_batch, cost, plan_options, d, options);
        if (!p.feasible) continue;
        if (StepSeconds(p) < StepSeconds(out.plan)) out.plan = std::move(p);
        break;
      }
    }
    // `auto` chooses among the strategies by their allocated peak: on the device, the one it chose
    // may fragment past the reserved budget where one it passed over fits, or fit it only at a
    // lowered inner budget, slower than another's own plan. Each is then fitted on its own, the
    // fastest that fits kept, so that auto fits wherever a named strategy does, no slower.
    if (auto_overshot) {
      for (const std::string& strategy : planner::AutoStrategies(g, plan_options)) {
        PlanOptions one = plan_options;
        one.strategy = strategy;
        Plan p = PlanBatch(g, at_batch, cost, one, k);
        OnDevice(p, options);
        p = FitReserved(std::move(p), g, at_batch, cost, one, k, options);
        if (p.feasible && (!out.plan.feasible || StepSeconds(p) < StepSeconds(out.plan))) {
          p.notes.push_back("auto: " + strategy +
                            " fitted the reserved budget on its own (the strategy auto chose by "
                            "the allocated peak did not)");
          out.plan = std::move(p);
        }
      }
    }
    if (!out.smallest_searched && !out.plan.feasible) search_smallest();
    // 5. A named strategy that does not fit: whether `auto` finds a plan that does.
    if (!out.plan.feasible && !planner::IsAutoStrategy(plan_options.strategy) &&
        plan_options.budget_bytes > 0) {
      PlanOptions any = plan_options;
      any.strategy = "auto";
      Plan other = PlanBatch(g, at_batch, cost, any, k);
      OnDevice(other, options);
      if (other.feasible) out.alternative = std::move(other);
    }
    Settle(out, g, options);
    return out;
  }

  // Data parallelism: each shard mode planned per rank on the graph at batch / N.
  const TrainingGraph rank = at_batch(g.batch / n);
  std::vector<ShardMode> modes = {options.layout.shard};
  if (options.shard_auto) {
    modes = {ShardMode::kNone, ShardMode::kOptimizer, ShardMode::kGradients};
    if (options.plan.strategy != "selective") modes.push_back(ShardMode::kParameters);
  }
  // The smallest per-rank budget over the shard modes tried and the micro-batches.
  auto search_smallest = [&] {
    for (ShardMode m : modes) {
      ParallelLayout layout = options.layout;
      layout.shard = m;
      Plan p = SmallestRank(rank, at_batch, cost, plan_options, k, layout, baseline);
      if (out.smallest.schedule.steps.empty() ||
          p.budget_needed_bytes() < out.smallest_budget_bytes())
        out.smallest = std::move(p);
    }
    out.smallest_searched = true;
  };
  // The one-device sweep of the whole batch. Without a budget, the plan is the smallest
  // per-rank plan (searched first: the answer and the plan printed are one plan).
  if (options.sweep) out.sweep = SweepBudgets(g, cost, plan_options);
  if (no_budget && options.sweep) {
    search_smallest();
    out.plan = out.smallest;
    out.budget_bytes = plan_options.budget_bytes;
    OnDevice(out.plan, options);
    Settle(out, g, options);
    return out;
  }
  out.budget_bytes = plan_options.budget_bytes;
  std::string tried;
  bool chosen = false;
  for (ShardMode m : modes) {
    ParallelLayout layout = options.layout;
    layout.shard = m;
    Plan p = PlanRank(rank, at_batch, cost, plan_options, k, layout, baseline);
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s (%s, %.3g s recompute + %.3g s communication)",
                  ShardModeName(m), p.feasible ? "fits" : "does not fit",
                  p.predicted_recompute_seconds, p.predicted_comm_seconds);
    tried += (tried.empty() ? "" : ", ") + std::string(buf);
    const bool better = !chosen || (p.feasible && !out.plan.feasible) ||
                        (p.feasible == out.plan.feasible &&
                         (p.feasible ? StepSeconds(p) < StepSeconds(out.plan)
                                     : p.predicted_peak_bytes < out.plan.predicted_peak_bytes));
    if (better) out.plan = std::move(p);
    chosen = true;
  }
  if (options.shard_auto) {
    out.plan.notes.push_back(std::string("shard auto: chose ") +
                             ShardModeName(out.plan.layout.shard) + " among " + tried);
  }
  OnDevice(out.plan, options);  // reported; with devices > 1 the budget bounds the allocated peak
  // Nothing fits: the smallest per-rank peak over the shard modes tried and the micro-batches
  // (searched only then: it plans every shard mode again).
  if (!out.plan.feasible) search_smallest();
  Settle(out, g, options);
  return out;
}

namespace planner {

// A plan's workspace margins (Buffer::margin_bytes: rules unverified on the device's kernels)
// are planned as bytes, so that budgets hold; reported apart from the prediction: the peak without
// them, margin_bytes with them, and by op type (op types are the same at every batch).
void SplitWorkspaceMargins(Plan& p, const TrainingGraph& g, const SimulatorOptions& simulator) {
  if (p.schedule.steps.empty() || p.workspace_margin_bytes > 0) return;
  SimulatorOptions without = simulator;
  without.count_margins = false;
  std::map<std::string, int64_t> by_op;
  for (const Step& st : p.schedule.steps) {
    for (BufferId b : st.allocs) {
      const int64_t m = p.schedule.buffers[b].margin_bytes;
      if (m <= 0 || st.node == kNone || st.node >= static_cast<NodeId>(g.nodes.size())) continue;
      int64_t& op = by_op[g.nodes[st.node].op_type];
      op = std::max(op, m);
    }
  }
  if (by_op.empty()) return;
  const MemoryTimeline prediction = Simulate(p.schedule, without);
  const int64_t margin = p.predicted_peak_bytes - prediction.peak_bytes;
  if (margin <= 0) return;
  p.timeline = prediction;
  p.predicted_peak_bytes = prediction.peak_bytes;
  p.margin_bytes += margin;
  p.workspace_margin_bytes = margin;
  p.margin_by_op = std::move(by_op);
  // The baseline as predicted too, when it is this graph's plain step (one device, whole batch).
  if (p.baseline_peak_bytes > 0 && g.batch == p.batch * p.micro_batches * p.layout.devices)
    p.baseline_peak_bytes = Simulate(BuildTrainingSchedule(g), without).peak_bytes;
}

}  // namespace planner
}  // namespace memplan
