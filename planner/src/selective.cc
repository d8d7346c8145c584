// Selective recompute (plan.h): which activation storages may be dropped, and the replay that
// turns a set of dropped storages into a Plan.
#include <algorithm>

#include "graph_facts.h"
#include "memplan/plan.h"
#include "planner_internal.h"

namespace memplan {

std::vector<TensorId> RecomputableTensors(const TrainingGraph& g) {
  GraphFacts f = ComputeGraphFacts(g);
  std::vector<TensorId> out;
  for (const GraphFacts::Root& r : f.root) {
    if (r.first_saver != kNone && r.producer != f.loss_node) out.push_back(r.tensor);
  }
  return out;
}

std::vector<TensorId> DroppableStorages(const TrainingGraph& g) {
  GraphFacts f = ComputeGraphFacts(g);
  std::vector<TensorId> out;
  for (const GraphFacts::Root& r : f.root) {
    if (r.producer != f.loss_node) out.push_back(r.tensor);
  }
  return out;
}

double ScheduleRecomputeFlops(const TrainingGraph& g, const Schedule& s) {
  double flops = 0;
  for (const Step& step : s.steps) {
    if (step.phase == Phase::kRecompute && step.node != kNone)
      flops += g.nodes[step.node].forward_flops;
  }
  return flops;
}

double ScheduleRecomputeSeconds(const std::vector<double>& node_seconds, const Schedule& s) {
  double seconds = 0;
  for (const Step& step : s.steps) {
    if (step.phase == Phase::kRecompute && step.node >= 0 &&
        step.node < static_cast<NodeId>(node_seconds.size()))
      seconds += node_seconds[step.node];
  }
  return seconds;
}

Plan ReplaySelective(const TrainingGraph& g, const std::vector<TensorId>& recomputed,
                     const ReplayRequest& request) {
  const planner::StandaloneReplay r(g, request);
  return planner::ReplaySelective(g, recomputed, r.options);
}

namespace planner {

Plan ReplaySelective(const TrainingGraph& g, std::vector<TensorId> recomputed,
                     const ReplayOptions& o) {
  std::sort(recomputed.begin(), recomputed.end());
  recomputed.erase(std::unique(recomputed.begin(), recomputed.end()), recomputed.end());
  Plan p = ReplayedPlan(g, BuildSelectiveSchedule(g, *o.facts, recomputed), o);
  p.recomputed = std::move(recomputed);
  p.recompute_flops = ScheduleRecomputeFlops(g, p.schedule);
  return p;
}

}  // namespace planner
}  // namespace memplan
