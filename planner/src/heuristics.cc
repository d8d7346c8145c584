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
    case TensorCategory::kInput: return "a data input";
    case TensorCategory::kParameter: return "a parameter";
    case TensorCategory::kConstant: return "a constant";
    default: return "an activation";
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
    throw MemplanError("the manual strategy needs the tensors to keep: --checkpoints NAME,NAME,...");
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
    if (IsPersistentTensor(t) || t.producer == kNone) {
      throw MemplanError("checkpoint '" + name + "' is " + PersistentKind(t) +
                         ", which is kept for the whole step anyway; name activations");
    }
    NodeId cut;
    if (!CutAfterProducer(g, ctx.facts(), t.id, &cut)) {
      throw MemplanError("checkpoint '" + name + "' is produced by the loss or after it ('" + g.nodes[t.producer].name +
                         "'); nothing after it is recomputed");
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
    if (per_element >= kExpensiveFlopsPerElement && CutAfterProducer(g, ctx.facts(), out.id, &cut)) cuts.push_back(cut);
  }
  return ctx.Finish("speed", SortedUnique(cuts), o.budget_bytes, start);
}

Plan RunBottleneck(Context& ctx, const PlanOptions& o) {
  auto start = Clock::now();
  const TrainingGraph& g = ctx.graph();
  std::vector<NodeId> bottlenecks = BottleneckCuts(g, ctx.facts());
  // memory_saving_gradients: about sqrt(#tensors) checkpoints, evenly spaced bottlenecks.
  size_t k = static_cast<size_t>(std::ceil(std::sqrt(static_cast<double>(ctx.facts().roots.size()))));
  std::vector<NodeId> cuts;
  if (bottlenecks.size() <= k) {
    cuts = bottlenecks;
  } else {
    for (size_t i = 0; i < k; ++i) cuts.push_back(bottlenecks[((2 * i + 1) * bottlenecks.size()) / (2 * k)]);
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
    // The nearest bottleneck within the window, else the cheapest crossing in it.
    NodeId best = kNone;
    for (NodeId b : bottlenecks) {
      if (std::abs(b - target) <= window && (best == kNone || std::abs(b - target) < std::abs(best - target))) best = b;
    }
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

Plan RunSections(Context& ctx, const PlanOptions& o) {
  auto start = Clock::now();
  const TrainingGraph& g = ctx.graph();
  const GraphFacts& f = ctx.facts();
  if (o.budget_bytes <= 0 || ctx.baseline_peak() <= o.budget_bytes) return ctx.Finish("sections", {}, o.budget_bytes, start);
  std::vector<NodeId> positions = DistinctCutPositions(g, f);
  std::vector<int64_t> crossing = CrossingBytes(g, f);
  // Cumulative activation bytes by producer: sections get equal shares of them.
  std::vector<double> cumulative(g.nodes.size() + 1, 0);
  for (const Node& n : g.nodes) {
    double bytes = 0;
    for (int32_t r : f.produced[n.id]) bytes += static_cast<double>(g.tensors[f.roots[r]].bytes);
    cumulative[n.id + 1] = cumulative[n.id] + bytes;
  }
  const double total = cumulative[f.loss_node + 1];
  const int max_sections = std::min<int>(64, static_cast<int>(positions.size()) + 1);
  Plan best;
  bool have_best = false;
  for (int k = 2; k <= max_sections; ++k) {
    std::vector<NodeId> cuts;
    for (int i = 1; i < k; ++i) {
      double share = total * i / k;
      NodeId target = static_cast<NodeId>(std::lower_bound(cumulative.begin(), cumulative.begin() + f.loss_node + 1, share) -
                                          cumulative.begin());
      // Snap to the cheapest crossing among the positions near the target.
      NodeId window = std::max<NodeId>(1, (f.loss_node + 1) / (4 * k));
      NodeId pick = kNone;
      auto lo = std::lower_bound(positions.begin(), positions.end(), target - window);
      for (auto it = lo; it != positions.end() && *it <= target + window; ++it) {
        if (pick == kNone || crossing[*it] < crossing[pick]) pick = *it;
      }
      if (pick != kNone) cuts.push_back(pick);
    }
    Plan p = ctx.Finish("sections", SortedUnique(cuts), o.budget_bytes, start);
    if (p.feasible) return p;
    if (!have_best || p.predicted_peak_bytes < best.predicted_peak_bytes) {
      best = std::move(p);
      have_best = true;
    }
  }
  if (!have_best) return ctx.Finish("sections", {}, o.budget_bytes, start);
  best.solve_seconds = SecondsSince(start);
  return best;
}

}  // namespace memplan::planner
