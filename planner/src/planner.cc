// The planner's entry points: cost model, the shared context, optimal, auto, the smallest
// reachable peak and the budget sweep.
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>

#include "memplan/json_read.h"
#include "optimal.h"
#include "planner_internal.h"

namespace memplan {

TrainingGraph ApplyCostModel(const TrainingGraph& g, const CostModel& cost) {
  TrainingGraph out = g;
  if (cost.tensor_bytes) {
    for (Tensor& t : out.tensors) t.bytes = cost.tensor_bytes(g.tensors[t.id]);
  }
  if (cost.node_flops) {
    for (Node& n : out.nodes) n.forward_flops = cost.node_flops(g.nodes[n.id]);
  }
  return out;
}

namespace planner {

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

Context::Context(const TrainingGraph& g, const CostModel& cost, const PlanOptions& options)
    : graph_(&g), options_(options) {
  if (cost.tensor_bytes || cost.node_flops) {
    costed_ = ApplyCostModel(g, cost);
    graph_ = &costed_;
  }
  facts_ = ComputeGraphFacts(*graph_);
  if (facts_.loss_node == kNone)
    throw MemplanError(g.model_path + ": the graph has no loss to plan for");
  fingerprint_ = ModelFingerprint(*graph_);
  baseline_ = Simulate(BuildScheduleFromCuts(*graph_, facts_, {}), options_.simulator).peak_bytes;
  // Seconds on the costed graph: the bytes and FLOPs the plans describe.
  CostModel seconds_only;
  seconds_only.node_seconds = cost.node_seconds;
  node_seconds_ = PredictNodeSeconds(*graph_, seconds_only);
}

const SegmentCosts& Context::costs(int max_candidates, int64_t limit, bool* all_positions) {
  max_candidates = CappedCutCandidates(max_candidates, static_cast<int>(graph_->nodes.size()));
  std::unique_ptr<Tables>& t = tables_[max_candidates];
  if (!t || t->costs.limit < limit) {
    t = std::make_unique<Tables>();
    std::vector<NodeId> candidates =
        SelectCutCandidates(*graph_, facts_, max_candidates, &t->all_positions);
    t->costs = ComputeSegmentCosts(*graph_, facts_, candidates, options_.simulator.policy, limit);
  }
  if (all_positions) *all_positions = t->all_positions;
  return t->costs;
}

Plan Context::Finish(const std::string& strategy, const std::vector<NodeId>& cuts, int64_t budget,
                     Clock::time_point start) const {
  Plan p = ReplaySegmentation(*graph_, cuts,
                              {.facts = &facts_,
                               .fingerprint = fingerprint_,
                               .strategy = strategy,
                               .budget_bytes = budget,
                               .baseline_peak_bytes = baseline_,
                               .sim = options_.simulator});
  p.predicted_recompute_seconds = RecomputeSeconds(node_seconds_, cuts);
  p.solve_seconds = SecondsSince(start);
  return p;
}

Plan RunOptimal(Context& ctx, const PlanOptions& o) {
  auto start = Clock::now();
  if (o.budget_bytes <= 0 || ctx.baseline_peak() <= o.budget_bytes)
    return ctx.Finish("optimal", {}, o.budget_bytes, start);
  bool all_positions = false;
  const SegmentCosts* costs = &ctx.costs(o.max_cut_candidates, o.budget_bytes, &all_positions);
  DpOptions dp;
  dp.budget_bytes = o.budget_bytes;
  dp.max_states_per_position = o.max_states_per_position;
  DpResult r = SolveSegmentation(*costs, ctx.facts(), dp);
  std::vector<std::string> notes;
  if (r.feasible) {
    // Among the segmentations with this (least) recompute, the one with the smallest peak.
    auto last =
        std::lower_bound(costs->pos.begin(), costs->pos.end(), r.cuts.empty() ? 0 : r.cuts.back());
    DpResult refined =
        SmallestPeak(*costs, ctx.facts(), static_cast<int>(last - costs->pos.begin()),
                     o.max_states_per_position, o.budget_bytes);
    if (refined.feasible && refined.predicted_peak <= r.predicted_peak) {
      refined.states_capped = refined.states_capped || r.states_capped;
      r = std::move(refined);
    }
  } else {
    costs = &ctx.costs(o.max_cut_candidates, ctx.baseline_peak(), &all_positions);
    r = SmallestPeak(*costs, ctx.facts(), -1, o.max_states_per_position);
    notes.push_back(
        "no segmentation over the candidate cuts fits the budget; this is the smallest peak they "
        "reach");
  }
  Plan p = ctx.Finish("optimal", r.cuts, o.budget_bytes, start);
  notes.push_back(
      all_positions
          ? "optimal over every segmentation of the node order (" +
                std::to_string(costs->size() - 2) + " distinct cut positions)"
          : "optimal over segmentations whose cuts lie in " + std::to_string(costs->size() - 2) +
                " candidate positions (bottlenecks, crossing-bytes minima, evenly spaced)");
  if (r.states_capped)
    notes.push_back(
        "the DP dropped states beyond max_states_per_position: the result may not be exact");
  if (r.predicted_peak != p.predicted_peak_bytes) {
    notes.push_back("internal: the DP predicted " + std::to_string(r.predicted_peak) +
                    " B but the replay peaks at " + std::to_string(p.predicted_peak_bytes) + " B");
  }
  p.notes.insert(p.notes.end(), notes.begin(), notes.end());
  return p;
}

Plan RunOptimalSmallestPeak(Context& ctx, const PlanOptions& o) {
  auto start = Clock::now();
  const SegmentCosts& costs = ctx.costs(o.max_cut_candidates, ctx.baseline_peak());
  DpResult r = SmallestPeak(costs, ctx.facts(), -1, o.max_states_per_position);
  return ctx.Finish("optimal", r.cuts, o.budget_bytes, start);
}

namespace {

bool SelectiveInAuto(const Context& ctx, const PlanOptions& o) {
  return static_cast<int64_t>(ctx.graph().nodes.size()) <= o.auto_selective_max_nodes;
}

// Among plans that fit, the least predicted recompute time (the cost model's seconds: FLOPs
// alone call memory-bound recompute free), then FLOPs, then the lower peak.
bool Better(const Plan& a, const Plan& b) {
  if (a.feasible != b.feasible) return a.feasible;
  if (!a.feasible) return a.predicted_peak_bytes < b.predicted_peak_bytes;
  if (a.predicted_overhead_seconds() != b.predicted_overhead_seconds())
    return a.predicted_overhead_seconds() < b.predicted_overhead_seconds();
  if (a.recompute_flops != b.recompute_flops) return a.recompute_flops < b.recompute_flops;
  return a.predicted_peak_bytes < b.predicted_peak_bytes;
}

PlanCandidate CandidateOf(const Plan& p) {
  PlanCandidate c;
  c.strategy = p.strategy;
  c.predicted_peak_bytes = p.predicted_peak_bytes;
  c.margin_bytes = p.margin_bytes;
  c.sections = p.num_sections();
  c.feasible = p.feasible;
  c.predicted_recompute_seconds = p.predicted_recompute_seconds;
  c.recompute_flops = p.recompute_flops;
  return c;
}

Plan RunAuto(Context& ctx, const PlanOptions& o) {
  auto start = Clock::now();
  Plan best = RunNone(ctx, o);
  if (best.feasible) {
    best.notes.push_back("auto: the plain step fits the budget");
    return best;
  }
  std::vector<PlanCandidate> candidates = {CandidateOf(best)};
  for (const std::string& strategy : AutoStrategies(ctx.graph(), o)) {
    PlanOptions one = o;
    one.strategy = strategy;
    Plan p = RunStrategy(ctx, one);
    candidates.push_back(CandidateOf(p));
    if (Better(p, best)) best = std::move(p);
  }
  best.candidates = std::move(candidates);
  best.notes.push_back("auto: chose " + best.strategy + " among " +
                       std::to_string(best.candidates.size()) + " candidates (plan candidates)");
  best.solve_seconds = SecondsSince(start);
  return best;
}

}  // namespace

std::vector<std::string> AutoStrategies(const TrainingGraph& g, const PlanOptions& o) {
  std::vector<std::string> s = {"optimal", "sections", "sqrt", "bottleneck", "speed"};
  const int64_t nodes = static_cast<int64_t>(g.nodes.size());
  if (nodes <= o.auto_selective_max_nodes) {
    s.push_back("selective");
    if (o.auto_offload) s.push_back("offload");
  }
  if (MilpAvailable() && o.auto_milp_max_nodes > 0 && nodes <= o.auto_milp_max_nodes)
    s.push_back("milp");
  return s;
}

Plan RunStrategy(Context& ctx, const PlanOptions& o) {
  const std::string& s = o.strategy;
  if (IsAutoStrategy(s)) return RunAuto(ctx, o);
  if (s == "none") return RunNone(ctx, o);
  if (s == "manual") return RunManual(ctx, o);
  if (s == "speed") return RunSpeed(ctx, o);
  if (s == "bottleneck") return RunBottleneck(ctx, o);
  if (s == "sqrt") return RunSqrt(ctx, o);
  if (s == "sections") return RunSections(ctx, o);
  if (s == "optimal") return RunOptimal(ctx, o);
  if (s == "milp") return RunMilp(ctx, o);
  if (s == "selective") return RunSelective(ctx, o);
  if (s == "offload") return RunOffload(ctx, o);
  std::string names;
  for (const std::string& n : StrategyNames()) names += (names.empty() ? "" : ", ") + n;
  throw MemplanError("unknown strategy '" + s + "' (one of " + names + ")");
}

}  // namespace planner

using planner::Context;

#define MEMPLAN_STRATEGY(Public, Run)                                                      \
  Plan Public(const TrainingGraph& g, const CostModel& cost, const PlanOptions& options) { \
    Context ctx(g, cost, options);                                                         \
    return planner::Run(ctx, options);                                                     \
  }
MEMPLAN_STRATEGY(PlanNone, RunNone)
MEMPLAN_STRATEGY(PlanManual, RunManual)
MEMPLAN_STRATEGY(PlanSpeed, RunSpeed)
MEMPLAN_STRATEGY(PlanBottleneck, RunBottleneck)
MEMPLAN_STRATEGY(PlanSqrt, RunSqrt)
MEMPLAN_STRATEGY(PlanSections, RunSections)
MEMPLAN_STRATEGY(PlanOptimal, RunOptimal)
MEMPLAN_STRATEGY(PlanMilp, RunMilp)
MEMPLAN_STRATEGY(PlanSelective, RunSelective)
MEMPLAN_STRATEGY(PlanOffload, RunOffload)
#undef MEMPLAN_STRATEGY

int64_t SegmentBorderMargin(const TrainingGraph& g) {
  int64_t margin = 0;
  for (const Node& n : g.nodes) {
    if (!n.gradient_passes_through || !n.has_backward) continue;
    int receivers = 0;
    int64_t largest = 0;
    for (TensorId i : n.inputs) {
      if (i == kNone || !g.tensors[i].has_gradient) continue;
      ++receivers;
      largest = std::max(largest, g.tensors[i].bytes);
    }
    if (receivers > 1) margin = std::max(margin, largest);
  }
  return margin;
}

// Strategies plan segmented schedules against the budget less the margin; the plain step
// (no segments) and selective plans (one segment, one autograd graph) need none.
namespace {

// Strategies whose search includes the plain step (no cut): when nothing else fits the budget
// less the margin, the plain step is still their answer. The fixed heuristics and `manual` are
// not searches: their plan is their cuts.
bool SearchesThePlainStep(const std::string& strategy) {
  return planner::IsAutoStrategy(strategy) || strategy == "optimal" || strategy == "sections" ||
         strategy == "milp";
}

Plan MakePlanIn(Context& ctx, const PlanOptions& options) {
  const TrainingGraph& g = ctx.graph();
  const int64_t margin =
      options.budget_bytes > 0 && options.strategy != "selective" && options.strategy != "offload"
          ? SegmentBorderMargin(g)
          : 0;
  if (margin == 0) return planner::RunStrategy(ctx, options);
  if (options.strategy == "auto" || options.strategy.empty() || options.strategy == "none") {
    Plan plain = planner::RunNone(ctx, options);
    if (plain.feasible || options.strategy == "none") return plain;
  }
  PlanOptions reduced = options;
  reduced.budget_bytes = std::max<int64_t>(1, options.budget_bytes - margin);
  Plan p = planner::RunStrategy(ctx, reduced);
  p.budget_bytes = options.budget_bytes;
  p.margin_bytes = p.segments.size() > 1 ? margin : 0;
  p.feasible = p.predicted_peak_bytes + p.margin_bytes <= options.budget_bytes;
  if (!p.feasible && SearchesThePlainStep(options.strategy)) {
    // The plain step needs no margin: it may fit where no segmentation does.
    Plan plain = planner::RunNone(ctx, options);
    if (plain.feasible) {
      plain.strategy = p.strategy;
      plain.notes.push_back("no segmentation fits the budget less the margin; the plain step fits");
      return plain;
    }
  }
  if (p.margin_bytes > 0) {
    p.notes.push_back(
        "kept a margin of " + std::to_string(margin) +
        " B under the budget for gradient copies at segment borders (SegmentBorderMargin)");
  }
  if (!planner::IsAutoStrategy(options.strategy)) return p;
  // `auto` planned everything against the reduced budget; its candidates are judged against the
  // whole, and selective plans, which need no margin, are planned against the whole.
  std::vector<PlanCandidate> candidates = p.candidates;
  std::optional<Plan> selective;
  if (planner::SelectiveInAuto(ctx, options)) selective = planner::RunSelective(ctx, options);
  for (PlanCandidate& c : candidates) {
    if (c.strategy == "selective" && selective) c = planner::CandidateOf(*selective);
    c.margin_bytes = c.sections > 1 ? margin : 0;
    c.feasible = c.predicted_peak_bytes + c.margin_bytes <= options.budget_bytes;
  }
  if (selective && planner::Better(*selective, p)) {
    selective->notes.push_back(
        "auto: chose selective (planned against the whole budget: it needs no margin)");
    p = std::move(*selective);
  }
  p.candidates = std::move(candidates);
  return p;
}

}  // namespace

Plan MakePlan(const TrainingGraph& g, const CostModel& cost, const PlanOptions& options) {
  Context ctx(g, cost, options);
  return MakePlanIn(ctx, options);
}

const std::vector<std::string>& StrategyNames() {
  static const std::vector<std::string> names = {"auto",       "none",      "manual",   "speed",
                                                 "bottleneck", "sqrt",      "sections", "optimal",
                                                 "milp",       "selective", "offload"};
  return names;
}

namespace {

// The smallest budget a plan of options.strategy fits (auto: of any strategy): the least
// peak + margin over what each strategy reaches when nothing fits. A named strategy reports its
// own least, so that "what X reaches at best" is X's answer.
Plan SmallestPeakIn(Context& ctx, const PlanOptions& options) {
  PlanOptions o = options;
  o.budget_bytes = 1;  // nothing fits: every strategy reports its smallest peak
  const int64_t margin = SegmentBorderMargin(ctx.graph());
  auto settle = [&](Plan& p) {
    p.budget_bytes = options.budget_bytes;
    p.margin_bytes = p.segments.size() > 1 ? margin : 0;
    p.feasible = options.budget_bytes <= 0 ||
                 p.predicted_peak_bytes + p.margin_bytes <= options.budget_bytes;
    p.candidates.clear();
    // Notes written for the budget of 1 B ("nothing fits") would contradict the real budget.
    p.notes.clear();
  };
  if (!planner::IsAutoStrategy(options.strategy)) {
    Plan p = MakePlanIn(ctx, o);
    settle(p);
    p.notes.push_back("the smallest peak " + options.strategy + " reaches");
    return p;
  }
  std::vector<Plan> plans;
  plans.push_back(planner::RunNone(ctx, o));
  plans.push_back(planner::RunOptimalSmallestPeak(ctx, o));
  for (auto run :
       {planner::RunSections, planner::RunSqrt, planner::RunBottleneck, planner::RunSpeed}) {
    plans.push_back(run(ctx, o));
  }
  if (planner::SelectiveInAuto(ctx, options)) plans.push_back(planner::RunSelective(ctx, o));
  size_t best = 0;
  for (size_t i = 0; i < plans.size(); ++i) {
    settle(plans[i]);
    const int64_t need = plans[i].predicted_peak_bytes + plans[i].margin_bytes;
    if (need < plans[best].predicted_peak_bytes + plans[best].margin_bytes) best = i;
  }
  plans[best].notes.push_back("the smallest peak any strategy reaches");
  return std::move(plans[best]);
}

}  // namespace

Plan SmallestPeakPlan(const TrainingGraph& g, const CostModel& cost, const PlanOptions& options) {
  Context ctx(g, cost, options);
  return SmallestPeakIn(ctx, options);
}

SweepResult SweepBudgets(const TrainingGraph& g, const CostModel& cost, const PlanOptions& options,
                         int num_budgets) {
  Context ctx(g, cost, options);
  SweepResult s;
  s.baseline_peak_bytes = ctx.baseline_peak();
  Plan smallest = SmallestPeakIn(ctx, options);
  s.min_budget_bytes = smallest.predicted_peak_bytes + smallest.margin_bytes;
  s.min_budget_strategy = smallest.strategy;
  std::vector<SweepPoint> all;
  for (int64_t budget :
       planner::SweepBudgetLadder(s.baseline_peak_bytes, s.min_budget_bytes, num_budgets)) {
    PlanOptions o = options;
    o.budget_bytes = budget;
    Plan p = MakePlanIn(ctx, o);  // as `memplan plan --budget` plans it: margin included
    if (p.feasible) all.push_back(SweepPointOf(p, budget));
  }
  s.points = ParetoFront(std::move(all));
  return s;
}

std::vector<int64_t> planner::SweepBudgetLadder(int64_t baseline, int64_t least, int count) {
  count = std::max(2, count);
  std::vector<int64_t> budgets;
  for (int i = 0; i < count; ++i) {
    const double t = static_cast<double>(i) / (count - 1);
    budgets.push_back(
        std::llround(static_cast<double>(baseline) * (1 - t) + static_cast<double>(least) * t));
  }
  return budgets;
}

SweepPoint SweepPointOf(const Plan& p, int64_t budget_bytes) {
  SweepPoint pt;
  pt.budget_bytes = budget_bytes;
  pt.strategy = p.strategy;
  pt.peak_bytes = p.predicted_peak_bytes;
  pt.recompute_flops = p.recompute_flops;
  pt.recompute_seconds = p.predicted_recompute_seconds;
  pt.overhead = p.overhead();
  pt.num_checkpoints = static_cast<int>(p.checkpoints.size());
  pt.num_sections = p.num_sections();
  pt.micro_batches = p.micro_batches;
  pt.micro_batch_seconds = p.predicted_micro_batch_seconds;
  pt.stall_seconds = p.predicted_stall_seconds;
  pt.num_offloaded = static_cast<int>(p.offloaded.size());
  pt.solve_seconds = p.solve_seconds;
  return pt;
}

std::vector<SweepPoint> ParetoFront(std::vector<SweepPoint> all) {
  // Drop a point when another has no larger peak and no more recompute time (the seconds `auto`
  // minimises; FLOPs call memory-bound recompute free).
  std::vector<SweepPoint> front;
  for (size_t i = 0; i < all.size(); ++i) {
    bool dominated = false;
    for (size_t j = 0; j < all.size() && !dominated; ++j) {
      if (i == j) continue;
      const SweepPoint &a = all[j], &b = all[i];
      bool no_worse = a.peak_bytes <= b.peak_bytes && a.overhead_seconds() <= b.overhead_seconds();
      bool better = a.peak_bytes < b.peak_bytes || a.overhead_seconds() < b.overhead_seconds();
      dominated = no_worse && (better || j < i);  // identical points: keep the first
    }
    if (!dominated) front.push_back(all[i]);
  }
  return front;
}

nlohmann::json SweepToJson(const SweepResult& s) {
  nlohmann::json points = nlohmann::json::array();
  for (const SweepPoint& p : s.points) {
    points.push_back({{"budget_bytes", p.budget_bytes},
                      {"strategy", p.strategy},
                      {"peak_bytes", p.peak_bytes},
                      {"recompute_flops", p.recompute_flops},
                      {"predicted_recompute_seconds", p.recompute_seconds},
                      {"overhead", p.overhead},
                      {"checkpoints", p.num_checkpoints},
                      {"sections", p.num_sections},
                      {"micro_batches", p.micro_batches},
                      {"predicted_micro_batch_seconds", p.micro_batch_seconds},
                      {"solve_seconds", p.solve_seconds}});
    if (p.num_offloaded > 0) {
      points.back()["offloaded"] = p.num_offloaded;
      points.back()["predicted_stall_seconds"] = p.stall_seconds;
    }
  }
  return {{"baseline_peak_bytes", s.baseline_peak_bytes},
          {"min_budget_bytes", s.min_budget_bytes},
          {"min_budget_strategy", s.min_budget_strategy},
          {"points", std::move(points)}};
}

SweepResult SweepFromJson(const nlohmann::json& j) {
  using namespace json_read;
  // Byte and node counts are JSON integers: 4e2 or 400.5 is an edited file.
  auto bytes = [](const json& v, const std::string& field) {
    if (v.is_number() && !v.is_number_integer()) Bad(field, "is not a whole number");
    return Count(v, field);
  };
  auto whole = [&](const json& v, const std::string& field) {
    const int64_t n = bytes(v, field);
    if (n > INT32_MAX) Bad(field, "is too large");
    return static_cast<int>(n);
  };
  auto point = [&](const json& v, const std::string& f) {
    Object(v, f);
    SweepPoint p;
    p.budget_bytes = Get(v, f, "budget_bytes", bytes);
    p.strategy = Get(v, f, "strategy", String);
    p.peak_bytes = Get(v, f, "peak_bytes", bytes);
    p.recompute_flops = Get(v, f, "recompute_flops", Real);
    p.recompute_seconds = Get(v, f, "predicted_recompute_seconds", Seconds);
    p.overhead = Get(v, f, "overhead", Real);
    p.num_checkpoints = Get(v, f, "checkpoints", whole);
    p.num_sections = Get(v, f, "sections", whole);
    if (v.contains("micro_batches"))
      p.micro_batches = std::max(1, Get(v, f, "micro_batches", whole));
    if (v.contains("predicted_micro_batch_seconds")) {
      p.micro_batch_seconds = Get(v, f, "predicted_micro_batch_seconds", Seconds);
    }
    p.solve_seconds = Get(v, f, "solve_seconds", Seconds);
    if (v.contains("offloaded")) p.num_offloaded = Get(v, f, "offloaded", whole);
    if (v.contains("predicted_stall_seconds"))
      p.stall_seconds = Get(v, f, "predicted_stall_seconds", Seconds);
    return p;
  };
  Object(j, "sweep");
  SweepResult s;
  s.baseline_peak_bytes = Get(j, "", "baseline_peak_bytes", bytes);
  s.min_budget_bytes = Get(j, "", "min_budget_bytes", bytes);
  s.min_budget_strategy = Get(j, "", "min_budget_strategy", String);
  s.points = Get(j, "", "points", ArrayOf(point));
  return s;
}

}  // namespace memplan
