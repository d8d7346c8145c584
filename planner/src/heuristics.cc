// The strategies in use today, on plan.h's segment model: none, manual (a checkpoint
// collection), speed and bottleneck (memory_saving_gradients), sqrt (Chen et al.) and
// sections (partialflow). Each picks cut positions; Context::Finish replays them.
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "optimal.h"
#include "planner_internal.h"

namespace memplan::planner {
namespace {

std::vector<NodeId> SortedUnique(std::vector<NodeId> cuts) {
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  return cuts;
}

// The cut that keeps tensor t: right after its producer, when that is a valid cut.
bool CutAfterProducer(const TrainingGraph& g, const GraphFacts& f, TensorId t, NodeId* cut) {
  NodeId p = g.tensors[t].producer;
  if (p == kNone || p + 1 > f.loss_node) return false;
  *cut = p + 1;
  return true;
}

const char* PersistentKind(const Tensor& t) {
  switch (t.category) {
    case TensorCategory::kInput:
      return "a data input";
    case TensorCategory::kParameter:
      return "a parameter";
    case TensorCategory::kConstant:
      return "a constant";
    default:
      return "an activation";
  }
}

}  // namespace

Plan RunNone(Context& ctx, const PlanOptions& o) {
  return ctx.Finish("none", {}, o.budget_bytes, Clock::now());
}

Plan RunManual(Context& ctx, const PlanOptions& o) {
  auto start = Clock::now();
  const TrainingGraph& g = ctx.graph();
  if (o.checkpoints.empty()) {
    throw MemplanError(
        "the manual strategy needs the tensors to keep: --checkpoints NAME,NAME,...");
  }
  std::unordered_map<std::string, TensorId> by_name;
  for (const Tensor& t : g.tensors) by_name.emplace(t.name, t.id);
  std::vector<NodeId> cuts;
  for (const std::string& name : o.checkpoints) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      throw MemplanError("checkpoint '" + name + "' is not a tensor of " + g.model_path +
                         " (see the tensor names in `memplan analyze --json`)");
    }
    const Tensor& t = g.tensors[it->second];
    if (t.is_persistent() || t.producer == kNone) {
      throw MemplanError("checkpoint '" + name + "' is " + PersistentKind(t) +
                         ", which is kept for the whole step anyway; name activations");
    }
    NodeId cut;
    if (!CutAfterProducer(g, ctx.facts(), t.id, &cut)) {
      throw MemplanError("checkpoint '" + name + "' is produced by the loss or after it ('" +
                         g.nodes[t.producer].name + "'); nothing after it is recomputed");
    }
    cuts.push_back(cut);
  }
  return ctx.Finish("manual", SortedUnique(cuts), o.budget_bytes, start);
}

Plan RunSpeed(Context& ctx, const PlanOptions& o) {
  auto start = Clock::now();
  const TrainingGraph& g = ctx.graph();
  std::vector<NodeId> cuts;
  for (const Node& n : g.nodes) {
    if (ctx.facts().produced[n.id].empty()) continue;
    const Tensor& out = g.tensors[n.outputs[0]];
    double per_element = out.numel() > 0 ? n.forward_flops / static_cast<double>(out.numel()) : 0;
    NodeId cut;
    if (per_element >= kExpensiveFlopsPerElement && CutAfterProducer(g, ctx.facts(), out.id, &cut))
      cuts.push_back(cut);
  }
  return ctx.Finish("speed", SortedUnique(cuts), o.budget_bytes, start);
}

Plan RunBottleneck(Context& ctx, const PlanOptions& o) {
  auto start = Clock::now();
  const TrainingGraph& g = ctx.graph();
  std::vector<NodeId> bottlenecks = BottleneckCuts(g, ctx.facts());
  // memory_saving_gradients: about sqrt(#tensors) checkpoints, evenly spaced bottlenecks.
  size_t k =
      static_cast<size_t>(std::ceil(std::sqrt(static_cast<double>(ctx.facts().root.size()))));
  std::vector<NodeId> cuts;
  if (bottlenecks.size() <= k) {
    cuts = bottlenecks;
  } else {
    for (size_t i = 0; i < k; ++i)
      cuts.push_back(bottlenecks[((2 * i + 1) * bottlenecks.size()) / (2 * k)]);
  }
  return ctx.Finish("bottleneck", SortedUnique(cuts), o.budget_bytes, start);
}

Plan RunSqrt(Context& ctx, const PlanOptions& o) {
  auto start = Clock::now();
  const TrainingGraph& g = ctx.graph();
  const GraphFacts& f = ctx.facts();
  std::vector<NodeId> positions = DistinctCutPositions(g, f);
  if (positions.empty()) return ctx.Finish("sqrt", {}, o.budget_bytes, start);
  const NodeId n = f.loss_node + 1;
  const int k = std::max(1, static_cast<int>(std::lround(std::sqrt(static_cast<double>(n)))));
  std::vector<NodeId> bottlenecks = BottleneckCuts(g, f);
  std::vector<int64_t> crossing = CrossingBytes(g, f);
  const NodeId window = std::max<NodeId>(1, n / (2 * k));
  std::vector<NodeId> cuts;
  for (int i = 1; i < k; ++i) {
    const NodeId target = static_cast<NodeId>((static_cast<int64_t>(i) * n) / k);
    // The nearest bottleneck within the window (the sorted list's neighbours of the target;
    // the lower one on a tie), else the cheapest crossing in it.
    NodeId best = kNone;
    auto above = std::lower_bound(bottlenecks.begin(), bottlenecks.end(), target);
    if (above != bottlenecks.begin() && target - *(above - 1) <= window) best = *(above - 1);
    if (above != bottlenecks.end() && *above - target <= window &&
        (best == kNone || *above - target < target - best))
      best = *above;
    if (best == kNone) {
      auto lo = std::lower_bound(positions.begin(), positions.end(), target - window);
      for (auto it = lo; it != positions.end() && *it <= target + window; ++it) {
        if (best == kNone || crossing[*it] < crossing[best]) best = *it;
      }
    }
    if (best != kNone) cuts.push_back(best);
  }
  return ctx.Finish("sqrt", SortedUnique(cuts), o.budget_bytes, start);
}

// partialflow: the fewest sections whose replayed peak fits, found exactly over the same
// candidate cuts as `optimal` by a breadth-first DP over the number of sections; among the
// fewest, the least recompute.
Plan RunSections(Context& ctx, const PlanOptions& o) {
  auto start = Clock::now();
  if (o.budget_bytes <= 0 || ctx.baseline_peak() <= o.budget_bytes)
    return ctx.Finish("sections", {}, o.budget_bytes, start);
  const SegmentCosts* costs = &ctx.costs(o.max_cut_candidates, o.budget_bytes);
  DpOptions dp;
  dp.budget_bytes = o.budget_bytes;
  dp.max_states_per_position = o.max_states_per_position;
  dp.fewest_segments = true;
  DpResult r = SolveSegmentation(*costs, ctx.facts(), dp);
  std::string note = "the fewest sections that fit, over " + std::to_string(costs->size() - 2) +
                     " candidate cut positions";
  if (!r.feasible) {
    costs = &ctx.costs(o.max_cut_candidates, ctx.baseline_peak());
    r = SmallestPeak(*costs, ctx.facts(), -1, o.max_states_per_position);
    note = "no split into sections fits the budget; this is the smallest peak sections reach";
  }
  Plan p = ctx.Finish("sections", r.cuts, o.budget_bytes, start);
  p.notes.push_back(note);
  return p;
}

}  // namespace memplan::planner
