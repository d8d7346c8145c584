// `selective`: which activation storages to drop and recompute (plan.h's selective recompute)
// so that the replayed peak fits the budget at the least predicted recompute seconds.
//
// A heuristic; tests compare it with brute force over every subset on small graphs. Phases:
//   1. The trajectory. From the plain step, a sequence of drop sets whose replayed peaks
//      strictly decrease, each aiming `step` below the last (its target). Each point:
//      a. greedy: on the last replay's timeline (a range-add, range-max tree over its steps)
//         kept storages are dropped one at a time, first the one with the least predicted
//         seconds per byte by which it lowers the highest step it changes, until no step is
//         above the target; replay, repeat. Two orders: bytes counted only above the target
//         (a small excess is not worth a large drop) and all of them (one large drop may be
//         worth several small ones). Small graphs take both through b-d and keep the better;
//         larger ones take the order whose first round the tree prices lower.
//      b. pruning: the most expensive dropped storages are kept again while the tree says the
//         target holds; one replay checks, a bisection over them when it does not.
//      c. exchange: one more storage dropped (the cheapest per byte first) when the tree says
//         that lets more expensive ones be kept again; replayed and pruned, kept if cheaper.
//      d. rebuild: one of the most expensive dropped storages kept again and others dropped
//         instead (a, b); kept if cheaper.
//      e. fresh: the greedy from the plain step towards the same target (uncapped on larger
//         graphs, and only when its first round is priced below the best so far), improved.
//         The incremental path is steered by the small steps it took: capped drops of small
//         storages that one larger storage, cheaper per byte, would have made unnecessary
//         (mobilenet_v2 at 90%: 37 batch-norm and clip outputs where three convolution outputs
//         do, 80% more seconds). A fresh point is a worse base for the steps after it on some
//         graphs (densenet121: it picks the large pre-concat normalisations), so the purely
//         incremental lineage (a-d from its own last point) goes on beside the trajectory and
//         is a candidate at every point.
//      The next point is the best candidate (within the target, then cheaper, then lower)
//      that peaks below the last. When nothing lowers the peak: escape moves (keep one again
//      and re-drop, drop all, any single change), else the trajectory ends.
//      c, d and the escapes spend the same number of replays at every point, fewer as graphs
//      grow (about 2e6 schedule events replayed over the trajectory): graphs of thousands of
//      nodes get a and b only, and plan in about a second.
//   2. The first point P_k of the trajectory whose replayed peak fits the budget, or, when none
//      does, the last (smallest) one, with feasible = false.
//   3. The gap: points with peaks in [peak(P_k), peak(P_k-1)) found from P_k-1 and P_k alone
//      (P_k pruned, the greedy from P_k-1 and the fresh greedy, towards limits spread over the
//      gap), whatever the budget. The plan is the cheapest of P_k and those that fit (ties: the
//      lower peak). The steps of the trajectory are coarse (0.4% of the plain peak on graphs of
//      a few hundred nodes), and a budget between two points would otherwise get the lower
//      one: gpt at 90%, 3% more seconds.
// The trajectory does not depend on the budget, only where it stops does. So the peak is
// monotone in the budget: for budgets b1 < b2 that stop at the same P_k, the plan of b1 is
// chosen among the same points as that of b2, so b2's is b1's when that fits b1, and otherwise
// its peak is > b1 >= the peak of b1's plan. When b1 stops at a later point P_j (j > k), b1's
// plan peaks at <= peak(P_j) < peak(P_k), and b2's at >= peak(P_k). That is why each point
// aims a fixed step below the last rather than at the budget: aiming at the budget would give
// each budget its own greedy path, and a looser budget could end below a tighter one's plan.
// With a 1-byte step and exact points, the first point that fits b is optimal for b (it was
// the best for a target >= b); larger graphs take a coarser step (selective_levels), and the
// gap (3) recovers part of what the coarse step gives away.
// Every estimate here only ranks and guides; every point is replayed (BuildSelectiveSchedule,
// Simulate), and the plan is the replay of its drop set.
//
// Multi-output nodes: a saved output of a node that a recompute runs anyway (a dropout's mask
// beside its dropped output) is dropped at no seconds of its own (it is materialised by that
// run), and the dropped outputs of one node are kept again together (1b, 1c), since keeping
// only some saves no seconds.
//
// The storages considered are DroppableStorages: the saved activations, and the unsaved ones
// a recompute would otherwise keep alive from the forward (dropped together with a saved one
// whose producer reads them, or alone when an earlier drop holds them).
//
// No segment-border margin (SegmentBorderMargin): a selective plan runs the plain step's one
// autograd graph; no checkpoint becomes a leaf whose .grad AccumulateGrad copies into.
#include "selective_search.h"

#include <algorithm>
#include <vector>

namespace memplan::planner {
namespace selective {

Search::Search(Context& ctx, const PlanOptions& o)
    : g_(ctx.graph()),
      f_(ctx.facts()),
      seconds_(ctx.node_seconds()),
      sim_(o.simulator),
      builder_(g_, f_, /*named=*/false) {
  const size_t num_roots = f_.root.size();
  last_saver_.assign(num_roots, kNone);
  for (const Node& n : g_.nodes) {
    for (TensorId t : n.saved_for_backward) {
      const int32_t r = f_.root_of[t];
      if (r >= 0) last_saver_[r] = std::max(last_saver_[r], n.id);
    }
  }
  bytes_.assign(num_roots, 0);
  for (size_t r = 0; r < num_roots; ++r) {
    bytes_[r] = AccountedBytes(g_.tensors[f_.root[r].tensor].bytes, sim_.policy);
    if (f_.root[r].producer != f_.loss_node) droppable_.push_back(static_cast<int32_t>(r));
  }
  seen_.assign(num_roots, 0);
}

Point Search::Replay(std::vector<char> dropped) {
  // The greedy orders and pruning often reach the same set: the last few replays are kept.
  for (const Point& c : recent_) {
    if (c.dropped == dropped) {
      return c;
    }
  }
  ++replays_;
  Point p;
  p.dropped = std::move(dropped);
  const Schedule& s = builder_.Build(Ids(p.dropped));
  MemoryTimeline t = SimulateBytes(s, sim_);
  p.x = Index(s);
  p.bytes = std::move(t.bytes_during);
  p.peak = t.peak_bytes;
  p.seconds = ScheduleRecomputeSeconds(seconds_, s);
  if (events_ == 0) {
    for (const Step& step : s.steps)
      events_ += static_cast<int64_t>(step.allocs.size() + step.frees.size());
  }
  recent_[next_recent_] = p;
  next_recent_ = (next_recent_ + 1) % kRecent;
  return p;
}

std::vector<TensorId> Search::Ids(const std::vector<char>& dropped) const {
  std::vector<TensorId> ids;
  for (int32_t r : droppable_) {
    if (dropped[r]) ids.push_back(f_.root[r].tensor);
  }
  return ids;
}

std::vector<int32_t> Search::Recomputed(const Point& p) const {
  std::vector<int32_t> out;
  for (int32_t r : droppable_) {
    if (p.dropped[r] && p.x.first_recompute[f_.root[r].producer] >= 0) out.push_back(r);
  }
  return out;
}

StepIndex Search::Index(const Schedule& s) const {
  const size_t num_nodes = g_.nodes.size();
  StepIndex x;
  x.forward.assign(num_nodes, -1);
  x.backward.assign(num_nodes, -1);
  x.group.assign(num_nodes, -1);
  x.first_recompute.assign(num_nodes, -1);
  x.last_recompute.assign(num_nodes, -1);
  x.recomputes.assign(num_nodes, 0);
  x.forward_free.assign(f_.root.size(), -1);
  std::vector<int32_t> forward_root(s.buffers.size(), -1);
  int group_start = -1;
  for (size_t i = 0; i < s.steps.size(); ++i) {
    const Step& step = s.steps[i];
    const int at = static_cast<int>(i);
    if (step.phase != Phase::kRecompute && step.phase != Phase::kBackward) group_start = -1;
    if (step.node != kNone) {
      switch (step.phase) {
        case Phase::kForward:
        case Phase::kLoss:
          x.forward[step.node] = at;
          for (BufferId b : step.allocs) {
            const TensorId t = s.buffers[b].tensor;
            if (t == kNone || s.buffers[b].category != MemoryCategory::kActivation) continue;
            const int32_t r = f_.root_of[t];
            if (r >= 0 && f_.root[r].tensor == t) forward_root[b] = r;
          }
          break;
        case Phase::kRecompute:
          if (group_start < 0) group_start = at;
          if (x.first_recompute[step.node] < 0) x.first_recompute[step.node] = at;
          x.last_recompute[step.node] = at;
          ++x.recomputes[step.node];
          break;
        case Phase::kBackward:
          x.backward[step.node] = at;
          x.group[step.node] = group_start >= 0 ? group_start : at;
          group_start = -1;
          break;
        default:
          break;
      }
    }
    for (BufferId b : step.frees) {
      if (forward_root[b] >= 0) x.forward_free[forward_root[b]] = at;
    }
  }
  return x;
}

}  // namespace selective

using selective::Point;
using selective::Search;

Plan RunSelective(Context& ctx, const PlanOptions& o) {
  auto start = Clock::now();
  const TrainingGraph& g = ctx.graph();
  Search search(ctx, o);
  Point cur = search.Replay(std::vector<char>(ctx.facts().root.size(), 0));
  search.set_origin(cur);
  // Small graphs replay fast: finer steps there (1 B on toy graphs: each point aims just
  // below the last), and replays to spare for 1c, 1d and the escapes: a replay costs about
  // 0.1-0.5 us per event (allocation or free) of the schedule; about 2e6 event-replays (a
  // second or less) over the points, at most 64 replays a point.
  const int64_t num_nodes = std::max<int64_t>(1, static_cast<int64_t>(g.nodes.size()));
  const int64_t levels =
      std::max<int64_t>(std::max(1, o.selective_levels), (int64_t{1} << 16) / num_nodes);
  const int64_t step = std::max<int64_t>(1, ctx.baseline_peak() / levels);
  const int64_t points =
      std::min<int64_t>(levels, 2 * static_cast<int64_t>(search.droppable()) + 1);
  search.set_optional_per_point(
      o.selective_replays_per_point >= 0
          ? o.selective_replays_per_point
          : static_cast<int>(
                std::min<int64_t>(64, int64_t{2000000} / std::max<int64_t>(1, search.events()) /
                                          std::max<int64_t>(1, points))));
  Point alt = cur;
  int num_points = 1;
  bool stuck = false;
  // 1. The trajectory, until a point fits. Its points do not depend on the budget: those another
  // plan of this graph searched are taken from the memo, and new ones added to it.
  Point prev;
  SelectiveTrajectory* memo = nullptr;
  if (o.selective_memo) {
    memo = &o.selective_memo->trajectories[ctx.fingerprint() + " policy " +
                                           std::to_string(static_cast<int>(o.simulator.policy)) +
                                           " step " + std::to_string(step) + " replays " +
                                           std::to_string(search.optional_per_point())];
    if (memo->dropped.empty()) {
      memo->dropped.push_back(cur.dropped);
      memo->peak.push_back(cur.peak);
      memo->alt = alt.dropped;
    }
  }
  if (memo && o.budget_bytes > 0 && cur.peak > o.budget_bytes && memo->dropped.size() > 1) {
    size_t j = 1;  // the first point within the budget, or the last one searched
    while (j + 1 < memo->dropped.size() && memo->peak[j] > o.budget_bytes) ++j;
    prev = search.Replay(memo->dropped[j - 1]);
    cur = search.Replay(memo->dropped[j]);
    num_points = static_cast<int>(j) + 1;
    if (cur.peak > o.budget_bytes) {
      stuck = memo->stuck;
      if (!stuck) alt = search.Replay(memo->alt);
    }
  }
  while (o.budget_bytes > 0 && cur.peak > o.budget_bytes && !stuck) {
    Point next = search.Next(cur, alt, cur.peak - step);
    if (memo) memo->alt = alt.dropped;
    if (next.peak >= cur.peak) {
      stuck = true;
      if (memo) memo->stuck = true;
      break;
    }
    if (memo) {
      memo->dropped.push_back(next.dropped);
      memo->peak.push_back(next.peak);
    }
    prev = std::move(cur);
    cur = std::move(next);
    ++num_points;
  }
  // 3. The cheapest point that fits among it and those in the gap above it.
  if (!stuck && num_points > 1) {
    // Four limits where points replay fast, two on graphs of thousands of nodes.
    for (Point& q : search.Gap(prev, cur, search.rich() || search.events() < 100000 ? 4 : 2)) {
      if (q.peak <= o.budget_bytes &&
          (q.seconds < cur.seconds || (q.seconds == cur.seconds && q.peak < cur.peak)))
        cur = std::move(q);
    }
  }
  // 2. The plan: that point's replay.
  Plan p = ReplaySelective(g, search.Ids(cur.dropped),
                           {.facts = &ctx.facts(),
                            .fingerprint = ctx.fingerprint(),
                            .strategy = "selective",
                            .budget_bytes = o.budget_bytes,
                            .baseline_peak_bytes = ctx.baseline_peak(),
                            .sim = o.simulator});
  p.predicted_recompute_seconds = ScheduleRecomputeSeconds(ctx.node_seconds(), p.schedule);
  p.solve_seconds = SecondsSince(start);
  int saved = 0;
  for (TensorId t : p.recomputed) saved += search.saved(ctx.facts().root_of[t]);
  p.notes.push_back("selective: " + std::to_string(saved) + " saved activations recomputed, and " +
                    std::to_string(p.recomputed.size() - saved) +
                    " unsaved storages as inputs of those recomputes (" +
                    std::to_string(num_points) + " points of the search, " +
                    std::to_string(search.replays()) + " replays)");
  if (!p.feasible && stuck) {
    p.notes.push_back(
        "no selective plan the search finds fits the budget; this is the smallest peak it reaches");
  }
  return p;
}

}  // namespace memplan::planner
