// `optimal`: least recompute subject to peak <= budget, by dynamic programming over cut
// positions.
//
// What it is optimal over (plan.h's execution semantics, the analyzer's memory model):
//   Recompute FLOPs = forward FLOPs of the nodes before the last cut, so the cost of a plan
//   is fixed by its last cut L. The DP visits boundaries left to right; the first boundary
//   at which some segmentation of [0, L) keeps every phase within the budget is the least
//   recompute (prefix FLOPs never decrease with L). The states at a boundary are exact: a
//   segment's peak is Fwd/Phase(a, b) (tables that depend on a and b only) plus checkpoint
//   bytes determined by (H, S) (segment_costs.h), and a state with fewer held tensors and
//   fewer dead bytes is better for every continuation, so keeping the non-dominated states
//   loses nothing. Hence: the plan has the least recompute FLOPs among ALL segmentations
//   whose cuts lie in the candidate set, and its peak is verified by replaying its schedule.
//   The candidate set is every position (up to interchangeable neighbours) on graphs with at
//   most PlanOptions::max_cut_candidates distinct positions (then the result is optimal over
//   every segmentation of the graph); on larger graphs it is the bottleneck cuts, the local
//   minima of the crossing bytes, and evenly spaced positions, and optimality holds over
//   segmentations drawn from that set. Where a position had more than
//   max_states_per_position non-dominated states the smallest are kept and the plan says
//   so in its notes (never seen on the corpus).
//   Not covered: execution orders other than plan.h's (keeping a tensor inside a segment
//   without cutting there, recomputing a segment more than once, reordering nodes,
//   offloading): those need another executor; `milp` solves the same model as a check.
#include "optimal.h"

#include <algorithm>
#include <numeric>

namespace memplan::planner {
namespace {

struct State {
  std::vector<int32_t> held;  // S: crossing storages already read by an intermediate segment
  int64_t dead = 0;           // H: checkpoint bytes nothing at or after the boundary reads
  int64_t held_bytes = 0;
  int32_t prev_pos = -1;
  int32_t prev_state = -1;
};

bool Dominates(const State& x, const State& y) {
  return x.dead <= y.dead && x.held_bytes <= y.held_bytes &&
         std::includes(y.held.begin(), y.held.end(), x.held.begin(), x.held.end());
}

// The per-boundary view the transitions need: crossing storages with their first reader at
// or after the boundary.
struct Crossing {
  std::vector<int32_t> roots;        // sorted by root index
  std::vector<NodeId> first_reader;  // parallel
  std::vector<NodeId> last_reader;   // parallel
  std::vector<int32_t> by_first;     // indices into roots, sorted by first_reader
};

Crossing MakeCrossing(const SegmentCosts& c, const GraphFacts& f, size_t i) {
  Crossing x;
  x.roots = c.crossing[i];
  for (int32_t r : x.roots) {
    x.first_reader.push_back(f.FirstReaderFrom(r, c.pos[i]));
    x.last_reader.push_back(f.root[r].last_reader);
  }
  x.by_first.resize(x.roots.size());
  std::iota(x.by_first.begin(), x.by_first.end(), 0);
  std::sort(x.by_first.begin(), x.by_first.end(),
            [&](int32_t p, int32_t q) { return x.first_reader[p] < x.first_reader[q]; });
  return x;
}

class Solver {
 public:
  Solver(const SegmentCosts& c, const GraphFacts& f, const DpOptions& o)
      : c_(c), f_(f), o_(o), nb_(c.size()) {}

  DpResult Run() {
    if (o_.fewest_segments) return RunLayered();
    DpResult result;
    const int64_t budget = o_.budget_bytes;
    if (c_.floor > budget) return result;
    live_.assign(nb_, {});
    arena_.clear();
    arena_.push_back(State{});
    live_[0].push_back(0);
    const size_t last_start = o_.fixed_last >= 0 ? static_cast<size_t>(o_.fixed_last) : nb_ - 2;
    const size_t N = nb_ - 1;  // boundary index of the end of the graph
    for (size_t i = 0; i <= last_start; ++i) {
      if (live_[i].empty()) continue;
      Crossing x = MakeCrossing(c_, f_, i);
      const int64_t ck = c_.crossing_bytes[i];
      // The last segment [pos[i], N).
      if (o_.fixed_last < 0 || static_cast<size_t>(o_.fixed_last) == i) {
        int64_t best = -1;
        for (int32_t s : live_[i]) {
          int64_t peak = c_.persistent + arena_[s].dead + ck + c_.Phase(i, N);
          if (peak <= budget && (best < 0 || arena_[s].dead < arena_[best].dead)) best = s;
        }
        if (best >= 0) return Feasible(i, best);
        if (o_.fixed_last >= 0) break;
      }
      for (int32_t s : live_[i]) Expand(i, s, x, budget, last_start, live_);
      // Free the memory of states no later transition reads (their paths stay in the arena).
    }
    result.states_capped = capped_;
    return result;
  }

 private:
  // The plan whose last segment starts at boundary i, reached through state s.
  DpResult Feasible(size_t i, int32_t s) {
    DpResult result;
    result.feasible = true;
    result.cuts = Cuts(i, s);
    result.predicted_peak = PredictPeak(c_, f_, result.cuts);
    result.recompute_flops = c_.prefix_flops[i];
    result.states_capped = capped_;
    return result;
  }

  // Breadth-first over the number of segments: layer t holds the states reached with t
  // non-last segments; the first layer from which a last segment fits wins (its earliest
  // feasible last cut, for the least recompute among the fewest segments).
  DpResult RunLayered() {
    DpResult result;
    const int64_t budget = o_.budget_bytes;
    if (c_.floor > budget) return result;
    const size_t N = nb_ - 1, last_start = nb_ - 2;
    arena_.assign(1, State{});
    live_.assign(nb_, {});
    live_[0].push_back(0);
    std::vector<std::vector<int32_t>> layer(nb_);
    layer[0].push_back(0);
    for (size_t t = 0; t < nb_; ++t) {
      for (size_t i = 0; i <= last_start; ++i) {
        int32_t best = -1;
        for (int32_t s : layer[i]) {
          if (c_.persistent + arena_[s].dead + c_.crossing_bytes[i] + c_.Phase(i, N) <= budget &&
              (best < 0 || arena_[s].dead < arena_[best].dead)) {
            best = s;
          }
        }
        if (best >= 0) return Feasible(i, best);
      }
      std::vector<std::vector<int32_t>> next(nb_);
      bool any = false;
      for (size_t i = 0; i <= last_start; ++i) {
        if (layer[i].empty()) continue;
        Crossing x = MakeCrossing(c_, f_, i);
        for (int32_t s : layer[i]) Expand(i, s, x, budget, last_start, next, &live_);
      }
      for (size_t j = 0; j < nb_; ++j) {
        any = any || !next[j].empty();
        live_[j].insert(live_[j].end(), next[j].begin(), next[j].end());
      }
      if (!any) break;
      layer = std::move(next);
    }
    result.states_capped = capped_;
    return result;
  }

  std::vector<NodeId> Cuts(size_t i, int32_t s) const {
    std::vector<NodeId> cuts;
    size_t pos = i;
    while (pos != 0) {
      cuts.push_back(c_.pos[pos]);
      const State& st = arena_[s];
      pos = static_cast<size_t>(st.prev_pos);
      s = st.prev_state;
    }
    std::reverse(cuts.begin(), cuts.end());
    return cuts;
  }

  void Expand(size_t i, int32_t sid, const Crossing& x, int64_t budget, size_t last_start,
              std::vector<std::vector<int32_t>>& target,
              const std::vector<std::vector<int32_t>>* prior = nullptr) {
    const State st = arena_[sid];  // copy: the arena grows below
    const int64_t fixed = c_.persistent + st.dead;
    const int64_t ck = c_.crossing_bytes[i];
    std::vector<char> in_held(x.roots.size(), 0);
    for (size_t k = 0, h = 0; k < x.roots.size() && h < st.held.size(); ++k) {
      while (h < st.held.size() && st.held[h] < x.roots[k]) ++h;
      if (h < st.held.size() && st.held[h] == x.roots[k]) in_held[k] = 1;
    }
    // Bytes of crossing storages alive during the segment's backward, as b grows: the held
    // ones plus those whose first reader after pos[i] lies before b.
    int64_t alive = st.held_bytes;
    size_t next_first = 0;
    for (size_t j = i + 1; j <= last_start; ++j) {
      const int64_t fwd = c_.Fwd(i, j);
      if (fixed + ck + fwd > budget) break;  // Fwd only grows with b
      const NodeId b = c_.pos[j];
      while (next_first < x.by_first.size() && x.first_reader[x.by_first[next_first]] < b) {
        int32_t k = x.by_first[next_first++];
        if (!in_held[k]) alive += c_.root_bytes[x.roots[k]];
      }
      if (fixed + alive + c_.Phase(i, j) > budget) continue;
      State next;
      next.dead = st.dead;
      next.prev_pos = static_cast<int32_t>(i);
      next.prev_state = sid;
      for (size_t k = 0; k < x.roots.size(); ++k) {
        int64_t bytes = c_.root_bytes[x.roots[k]];
        if (x.last_reader[k] < b) {
          next.dead += bytes;
        } else if (in_held[k] || x.first_reader[k] < b) {
          next.held.push_back(x.roots[k]);
          next.held_bytes += bytes;
        }
      }
      Insert(j, std::move(next), target, prior);
    }
  }

  // Keeps `cand` at boundary j unless a state there (or, with `prior`, one reached with fewer
  // segments) dominates it; drops the states it dominates.
  void Insert(size_t j, State&& cand, std::vector<std::vector<int32_t>>& target,
              const std::vector<std::vector<int32_t>>* prior) {
    if (prior) {
      for (int32_t id : (*prior)[j]) {
        if (Dominates(arena_[id], cand)) return;
      }
    }
    std::vector<int32_t>& live = target[j];
    for (int32_t id : live) {
      if (Dominates(arena_[id], cand)) return;
    }
    live.erase(std::remove_if(live.begin(), live.end(),
                              [&](int32_t id) { return Dominates(cand, arena_[id]); }),
               live.end());
    arena_.push_back(std::move(cand));
    live.push_back(static_cast<int32_t>(arena_.size() - 1));
    if (o_.max_states_per_position > 0 &&
        live.size() > static_cast<size_t>(o_.max_states_per_position)) {
      capped_ = true;
      auto worst = std::max_element(live.begin(), live.end(), [&](int32_t p, int32_t q) {
        return arena_[p].dead + arena_[p].held_bytes < arena_[q].dead + arena_[q].held_bytes;
      });
      live.erase(worst);
    }
  }

  const SegmentCosts& c_;
  const GraphFacts& f_;
  const DpOptions& o_;
  const size_t nb_;
  std::vector<State> arena_;
  std::vector<std::vector<int32_t>> live_;
  bool capped_ = false;
};

}  // namespace

DpResult SolveSegmentation(const SegmentCosts& costs, const GraphFacts& facts,
                           const DpOptions& options) {
  return Solver(costs, facts, options).Run();
}

std::vector<int64_t> PredictPhasePeaks(const SegmentCosts& c, const GraphFacts& f,
                                       const std::vector<NodeId>& cuts) {
  std::vector<size_t> idx{0};
  for (NodeId cut : cuts) {
    auto it = std::lower_bound(c.pos.begin(), c.pos.end(), cut);
    if (it == c.pos.end() || *it != cut) return {};
    idx.push_back(static_cast<size_t>(it - c.pos.begin()));
  }
  const size_t N = c.size() - 1, K = idx.size();
  std::vector<int64_t> forward, backward;  // backward: segments 0..K-2 in order
  int64_t dead = 0, last = 0;
  std::vector<int32_t> held;
  for (size_t s = 0; s < K; ++s) {
    const size_t i = idx[s];
    const int64_t ck = dead + c.crossing_bytes[i];
    if (s + 1 == K) {
      last = c.persistent + ck + c.Phase(i, N);
      break;
    }
    const size_t j = idx[s + 1];
    const NodeId a = c.pos[i], b = c.pos[j];
    forward.push_back(c.persistent + ck + c.Fwd(i, j));
    int64_t alive = dead;
    std::vector<int32_t> next_held;
    int64_t next_dead = dead;
    for (int32_t r : c.crossing[i]) {
      bool was_held = std::binary_search(held.begin(), held.end(), r);
      bool read = f.FirstReaderFrom(r, a) < b;
      if (was_held || read) alive += c.root_bytes[r];
      if (f.root[r].last_reader < b)
        next_dead += c.root_bytes[r];
      else if (was_held || read)
        next_held.push_back(r);
    }
    backward.push_back(c.persistent + alive + c.Phase(i, j));
    held = std::move(next_held);
    dead = next_dead;
  }
  std::vector<int64_t> out = forward;
  out.push_back(last);
  out.insert(out.end(), backward.rbegin(), backward.rend());
  return out;
}

int64_t PredictPeak(const SegmentCosts& c, const GraphFacts& f, const std::vector<NodeId>& cuts) {
  std::vector<int64_t> phases = PredictPhasePeaks(c, f, cuts);
  if (phases.empty()) return -1;
  return std::max(c.floor, *std::max_element(phases.begin(), phases.end()));
}

DpResult SmallestPeak(const SegmentCosts& costs, const GraphFacts& facts, int fixed_last,
                      int max_states, int64_t upper) {
  DpOptions o;
  o.fixed_last = fixed_last;
  o.max_states_per_position = max_states;
  // An upper bound that is feasible: one segment, or the fixed last cut alone.
  std::vector<NodeId> single;
  if (fixed_last > 0) single.push_back(costs.pos[fixed_last]);
  int64_t hi = upper > 0 ? upper : PredictPeak(costs, facts, single), lo = costs.floor;
  o.budget_bytes = hi;
  DpResult best = SolveSegmentation(costs, facts, o);
  // Bisection to 1e-5 of the peak (a few KiB of a GiB), then to the byte: "the smallest budget"
  // is a boundary that one byte less does not reach. The first probe of the last stretch is one
  // byte under the best peak, which is usually the answer (one more solve instead of ~13).
  const int64_t coarse = std::max<int64_t>(0, hi / 100000);
  auto bisect = [&](int64_t tolerance, bool probe_below_best) {
    while (lo + tolerance < hi) {
      const int64_t mid = probe_below_best ? hi - 1 : lo + (hi - lo) / 2;
      probe_below_best = false;
      o.budget_bytes = mid;
      DpResult r = SolveSegmentation(costs, facts, o);
      if (r.feasible) {
        hi = std::min(mid, r.predicted_peak);
        best = std::move(r);
      } else {
        lo = mid + 1;
      }
    }
  };
  bisect(coarse, /*probe_below_best=*/false);
  bisect(0, /*probe_below_best=*/true);
  return best;
}

}  // namespace memplan::planner
