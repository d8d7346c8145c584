// A segmentation (cuts between segments) as segments and checkpoints, what its recomputes cost,
// and its replay into a Plan (the schedule itself: the analyzer's BuildScheduleFromCuts).
#include <algorithm>
#include <chrono>
#include <unordered_set>

#include "graph_facts.h"
#include "memplan/plan.h"
#include "planner_internal.h"

namespace memplan {
namespace {

NodeId LossNode(const TrainingGraph& g) {
  if (g.loss == kNone || g.tensors[g.loss].producer == kNone) {
    throw MemplanError(g.model_path + ": the graph has no loss to plan for");
  }
  return g.tensors[g.loss].producer;
}

void CheckCuts(const TrainingGraph& g, const std::vector<NodeId>& cuts) {
  NodeId loss = LossNode(g);
  NodeId prev = 0;
  for (NodeId c : cuts) {
    if (c <= prev || c > loss) {
      throw MemplanError("invalid segmentation: a segment border before node " + std::to_string(c) +
                         " is out of order or puts the loss ('" + g.nodes[loss].name +
                         "') before the last segment");
    }
    prev = c;
  }
}

}  // namespace

std::vector<std::vector<NodeId>> SegmentsFromCuts(const TrainingGraph& g,
                                                  const std::vector<NodeId>& cuts) {
  CheckCuts(g, cuts);
  std::vector<std::vector<NodeId>> segments(cuts.size() + 1);
  size_t k = 0;
  for (NodeId n = 0; n < static_cast<NodeId>(g.nodes.size()); ++n) {
    if (k < cuts.size() && n == cuts[k]) ++k;
    segments[k].push_back(n);
  }
  return segments;
}

std::vector<NodeId> CutsFromSegments(const TrainingGraph& g,
                                     const std::vector<std::vector<NodeId>>& segments) {
  std::vector<NodeId> cuts;
  NodeId next = 0;
  for (size_t k = 0; k < segments.size(); ++k) {
    if (segments[k].empty())
      throw MemplanError("invalid segmentation: section " + std::to_string(k) + " is empty");
    if (k > 0) cuts.push_back(next);
    for (NodeId n : segments[k]) {
      if (n != next) {
        throw MemplanError("invalid segmentation: section " + std::to_string(k) +
                           " is not contiguous in the node order " + "(expected node " +
                           std::to_string(next) + ", got " + std::to_string(n) + ")");
      }
      ++next;
    }
  }
  if (!segments.empty() && next != static_cast<NodeId>(g.nodes.size())) {
    throw MemplanError("invalid segmentation: the sections cover " + std::to_string(next) +
                       " of the model's " + std::to_string(g.nodes.size()) + " nodes");
  }
  CheckCuts(g, cuts);
  return cuts;
}

Schedule BuildSegmentedSchedule(const TrainingGraph& g,
                                const std::vector<std::vector<NodeId>>& segments) {
  std::vector<NodeId> cuts = CutsFromSegments(g, segments);
  return planner::BuildScheduleFromCuts(g, planner::ComputeGraphFacts(g), cuts);
}

std::vector<TensorId> SegmentCheckpoints(const TrainingGraph& g,
                                         const std::vector<std::vector<NodeId>>& segments) {
  std::vector<NodeId> cuts = CutsFromSegments(g, segments);
  std::vector<int> seg_of(g.nodes.size());
  for (size_t k = 0, n = 0; n < g.nodes.size(); ++n) {
    if (k < cuts.size() && static_cast<NodeId>(n) == cuts[k]) ++k;
    seg_of[n] = static_cast<int>(k);
  }
  std::vector<TensorId> out;
  for (const Tensor& t : g.tensors) {
    if (t.producer == kNone || t.is_persistent()) continue;
    if (t.storage != kNone && g.tensors[t.storage].is_persistent()) continue;
    for (NodeId c : t.consumers) {
      if (seg_of[c] > seg_of[t.producer]) {
        out.push_back(t.id);
        break;
      }
    }
  }
  return out;
}

double RecomputeFlops(const TrainingGraph& g, const std::vector<NodeId>& cuts) {
  double flops = 0;
  if (cuts.empty()) return 0;
  for (NodeId n = 0; n < cuts.back(); ++n) flops += g.nodes[n].forward_flops;
  return flops;
}

double RecomputeSeconds(const std::vector<double>& node_seconds, const std::vector<NodeId>& cuts) {
  double seconds = 0;
  if (cuts.empty()) return 0;
  for (NodeId n = 0; n < cuts.back() && n < static_cast<NodeId>(node_seconds.size()); ++n)
    seconds += node_seconds[n];
  return seconds;
}

Plan ReplaySegmentation(const TrainingGraph& g, const std::vector<NodeId>& cuts,
                        const ReplayRequest& request) {
  const planner::StandaloneReplay r(g, request);
  return planner::ReplaySegmentation(g, cuts, r.options);
}

namespace planner {

Plan ReplayedPlan(const TrainingGraph& g, Schedule schedule, const ReplayOptions& o) {
  Plan p;
  p.strategy = o.strategy;
  p.model_path = g.model_path;
  p.batch = g.batch;
  p.model_fingerprint = o.fingerprint;
  p.budget_bytes = o.budget_bytes;
  p.schedule = std::move(schedule);
  p.timeline = Simulate(p.schedule, o.sim);
  p.predicted_peak_bytes = p.timeline.peak_bytes;
  p.baseline_peak_bytes = o.baseline_peak_bytes;
  p.forward_flops = g.forward_flops();
  p.feasible = o.budget_bytes <= 0 || p.predicted_peak_bytes <= o.budget_bytes;
  return p;
}

Plan ReplaySegmentation(const TrainingGraph& g, const std::vector<NodeId>& cuts,
                        const ReplayOptions& o) {
  std::vector<std::vector<NodeId>> segments =
      cuts.empty() ? std::vector<std::vector<NodeId>>{} : SegmentsFromCuts(g, cuts);
  CheckCuts(g, cuts);
  Plan p = ReplayedPlan(g, BuildScheduleFromCuts(g, *o.facts, cuts), o);
  p.segments = std::move(segments);
  p.checkpoints = cuts.empty() ? std::vector<TensorId>{} : SegmentCheckpoints(g, p.segments);
  p.recompute_flops = RecomputeFlops(g, cuts);
  return p;
}

}  // namespace planner

}  // namespace memplan
