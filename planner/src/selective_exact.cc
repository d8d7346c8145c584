// An exact reference for `selective` (plan.h's selective recompute): the drop set of least
// predicted recompute seconds (ScheduleRecomputeSeconds of the replayed schedule) whose replayed
// peak fits the budget, over the same decisions (DroppableStorages). For graphs of up to a few
// hundred nodes; tests check it against brute force on small graphs, and the benchmark measures
// the fast search's gap to it.
//
// The replayed memory is not linear in the drop set (recompute chains, kept inputs held for a
// recompute, storages recomputed twice), so the method is logic-based Benders on CBC:
//   1. A MILP over x_r in {0,1} (root r dropped) whose constraints every drop set that fits the
//      budget satisfies (a relaxation) and whose objective is at most the drop set's replayed
//      seconds (a lower bound).
//   2. Solve; replay every solution CBC kept (BuildSelectiveSchedule, Simulate); keep the
//      cheapest that fits as the incumbent; add a no-good cut excluding each replayed set
//      exactly:  sum_{r in D} (1 - x_r) + sum_{r not in D} x_r >= 1.
//   3. Stop when the MILP has no solution cheaper than the incumbent (CBC's cutoff): proven
//      optimal. At the time limit the answer is the incumbent with a lower bound (the last
//      MILP optimum CBC proved, or its best possible objective), not proven.
// `selective`'s plan is the first incumbent (it only sets the cutoff: the proof does not rely on
// it). Every replayed set is excluded, so the loop ends; a set that fits costs at least the MILP
// optimum over the sets not yet excluded, and the excluded ones were replayed: when the MILP
// optimum reaches the incumbent, nothing cheaper fits.
//
// Why the relaxation and the bound are valid (selective_schedule.cc is the semantics):
//   Canonical sets. A dropped storage no backward op saves (unsaved) that no recompute step
//   reads changes nothing but its own life: kept, it dies after its last forward reader as
//   dropped; at a byproduct recompute of its producer it is a discarded copy instead of being
//   held until the end of the chain. Removing such storages from a drop set gives the same
//   recompute steps and never more bytes at any step. So the optimum is reached by a set where
//   every dropped unsaved u is read by a recompute step; that step runs the producer of a
//   dropped root reading u (through views: GraphFacts' readers), hence
//     (C)  x_u <= sum_{r dropped, producer(r) reads u} x_r.
//   Conversely every set satisfying (C) recomputes every dropped root at least once (the
//   dropped root of largest producer is saved, since (C) needs a later one; downwards by (C)).
//   Objective. Each dropped root's producer runs at least once as a recompute step:
//     seconds >= sum_n seconds_n y_n,  y_n >= x_r for every root r that n produces.
//   Memory, at the steps the replay shares with the plain step (setup, forward, loss, backward,
//   optimizer: the replay only inserts recompute steps). Every buffer alive in the plain step at
//   such a step t is alive in the replay too (gradients, extras and workspaces are the same;
//   kept storages live at least their plain life), except a dropped saved root k in its window
//     W_k = (forward step of its last reader, backward step of its last saver):
//   dropped, it is freed after its last forward reader and recomputed before its last saver's
//   backward (or earlier), then held until its first saver's backward, its plain end. The row:
//     plain(t) - sum_{k: t in W_k} bytes_k d_k + sum_i bytes_i h_i <= budget,
//   where d_k (k dead at t) and h_i (kept i alive at t past its plain end) may be any values
//   the real replay satisfies these constraints with:
//     d_k <= x_k, and d_k <= 1 - m_k with m_k (k recomputed by step t): m_s >= x_s for a saved
//       s whose last saver's backward is at or before t (s was recomputed before it), and
//       m_k >= x_k + m_q - 1 when q's producer reads k (recomputing q recomputes its dropped
//       inputs not held; a saved k is then held until its first saver's backward, after t);
//     h_i >= x_j - x_i at steps up to the loss, for j whose producer reads i, after i's plain
//       end: j is recomputed after the loss, reading i, which a kept i lives until;
//     h_i >= d_j - x_i after the loss, before j's last saver's backward: a dead dropped saved j
//       is still to be recomputed, reading i.
//   With the true indicators every constraint holds and the row's left side is at most the
//   replay's bytes at t; the MILP may pick other values, which only lowers the left side.
//   Recompute steps themselves (chain transients, workspaces) are left out.
// Tests replay every subset of small graphs and check each part: the rows' bytes never exceed
// the replay's, the objective never exceeds its seconds, and the reference equals brute force.
#include <algorithm>
#include <climits>
#include <cmath>
#include <set>

#include "planner_internal.h"

#ifdef MEMPLAN_HAVE_CBC
#include <CbcModel.hpp>

#include "cbc_problem.h"
#endif

namespace memplan {
namespace planner {
namespace {

// The relaxation of one graph: windows, holds and the plain step's bytes.
class Relaxation {
 public:
  Relaxation(const TrainingGraph& g, const GraphFacts& f, const std::vector<double>& seconds,
             const SimulatorOptions& sim)
      : f_(f), seconds_(seconds) {
    const Schedule plain = BuildSelectiveSchedule(g, f, {});
    plain_ = Simulate(plain, sim).bytes_during;
    const int num_nodes = f.num_nodes;
    std::vector<int> forward(num_nodes, -1), backward(num_nodes, -1);
    for (size_t i = 0; i < plain.steps.size(); ++i) {
      const Step& s = plain.steps[i];
      if (s.node == kNone) continue;
      if (s.phase == Phase::kForward || s.phase == Phase::kLoss)
        forward[s.node] = static_cast<int>(i);
      if (s.phase == Phase::kBackward) backward[s.node] = static_cast<int>(i);
      if (s.phase == Phase::kLoss) loss_step_ = static_cast<int>(i);
    }
    const size_t num_roots = f.root.size();
    std::vector<NodeId> last_saver(num_roots, kNone);
    for (const Node& n : g.nodes) {
      if (!n.has_backward) continue;
      for (TensorId t : n.saved_for_backward) {
        const int32_t r = f.root_of[t];
        if (r >= 0) last_saver[r] = std::max(last_saver[r], n.id);
      }
    }
    index_.assign(num_roots, -1);
    for (size_t r = 0; r < num_roots; ++r) {
      if (f.root[r].producer == f.loss_node) continue;
      index_[r] = static_cast<int>(roots_.size());
      roots_.push_back(static_cast<int32_t>(r));
    }
    const size_t n = roots_.size();
    bytes_.resize(n);
    saved_.resize(n);
    window_.assign(n, {0, -1});
    plain_free_.assign(n, -1);
    recompute_by_.assign(n, loss_step_ + 1);
    readers_.resize(n);
    for (size_t k = 0; k < n; ++k) {
      const int32_t r = roots_[k];
      const GraphFacts::Root& root = f.root[r];
      bytes_[k] = AccountedBytes(g.tensors[root.tensor].bytes, sim.policy);
      saved_[k] = root.first_saver != kNone;
      if (saved_[k] && last_saver[r] != kNone && backward[last_saver[r]] >= 0)
        window_[k] = {forward[root.last_reader] + 1, backward[last_saver[r]] - 1};
      plain_free_[k] = saved_[k] ? backward[root.first_saver] : forward[root.last_reader];
      // Dropped, it is recomputed (reading its producer's inputs) after the loss and, saved,
      // before its last saver's backward.
      if (saved_[k] && last_saver[r] != kNone && backward[last_saver[r]] >= 0)
        recompute_by_[k] = backward[last_saver[r]];
    }
    descending_.resize(n);
    for (size_t k = 0; k < n; ++k) descending_[k] = static_cast<int>(k);
    std::sort(descending_.begin(), descending_.end(), [&](int a, int b) {
      return f.root[roots_[a]].producer > f.root[roots_[b]].producer;
    });
    // readers_[k]: the candidates whose producer reads candidate k (through views).
    for (size_t k = 0; k < n; ++k) {
      const std::vector<NodeId>& rd = f.root[roots_[k]].readers;
      for (size_t j = 0; j < n; ++j) {
        if (j != k && std::binary_search(rd.begin(), rd.end(), f.root[roots_[j]].producer))
          readers_[k].push_back(static_cast<int>(j));
      }
    }
  }

  size_t size() const { return roots_.size(); }
  TensorId tensor(size_t k) const { return f_.root[roots_[k]].tensor; }
  int index_of_root(int32_t r) const { return index_[r]; }

  // (C): every dropped unsaved candidate is read by the producer of another dropped one.
  bool Canonical(const std::vector<char>& x) const {
    for (size_t k = 0; k < size(); ++k) {
      if (!x[k] || saved_[k]) continue;
      if (std::none_of(readers_[k].begin(), readers_[k].end(), [&](int j) { return x[j] != 0; }))
        return false;
    }
    return true;
  }
  // Pair (j, i): j's producer reads i. At step t, with j dropped and i kept, either i is held
  // (for j's recompute still to come) or j was already recomputed (`coverable`: only after the
  // loss, and only for a saved j, which is recomputed before its last saver's backward).
  bool Active(int j, int i, int t) const { return t > plain_free_[i] && t < recompute_by_[j]; }
  bool Coverable(int j, int t) const { return saved_[j] && t > loss_step_; }
  // Whether a dropped s, whose producer reads k, makes a dropped k alive at step t: s is saved
  // and t is at or after its last saver's backward, so s was recomputed by then, and its
  // recompute recomputed k, which stays held until its first saver's backward (after t when t
  // is in k's window).
  bool Early(int s, int t) const { return saved_[s] && recompute_by_[s] <= t; }
  // Candidates in descending producer order (a reader's producer comes after the producer of
  // what it reads).
  const std::vector<int>& Descending() const { return descending_; }
  // Per candidate: whether it was recomputed at or before step t for sure: a dropped saved s
  // with Early(s, t), and, transitively, every dropped storage its producer reads (a recompute
  // recomputes its dropped inputs that are not held; a saved one is then held until its first
  // saver's backward).
  std::vector<char> Materialized(const std::vector<char>& x, int t) const {
    std::vector<char> m(size(), 0);
    for (int k : descending_) {
      if (!x[k]) continue;
      m[k] = (saved_[k] && Early(k, t)) ||
             std::any_of(readers_[k].begin(), readers_[k].end(), [&](int q) { return m[q] != 0; });
    }
    return m;
  }
  bool EarlyAlive(const std::vector<char>& x, int k, int t) const {
    const std::vector<char> m = Materialized(x, t);
    return std::any_of(readers_[k].begin(), readers_[k].end(), [&](int q) { return m[q] != 0; });
  }

  // The rows' bytes at every step of the plain schedule: the plain step's, less the dropped
  // storages in their windows, plus the cheapest cover of the active pairs (a weighted vertex
  // cover of a bipartite graph: a minimum cut, which is what the MILP's LP finds too).
  std::vector<int64_t> Bytes(const std::vector<char>& x) const {
    std::vector<int64_t> b = plain_;
    for (int t = 0; t < static_cast<int>(b.size()); ++t) {
      const std::vector<char> m = Materialized(x, t);
      for (size_t k = 0; k < size(); ++k) {
        if (x[k] && !m[k] && window_[k].first <= t && t <= window_[k].second) b[t] -= bytes_[k];
      }
    }
    for (int t = 0; t < static_cast<int>(b.size()); ++t) b[t] += Cover(x, t);
    return b;
  }
  // The least bytes covering the active pairs at step t (dropped j, kept i): i held, or (after
  // the loss) j counted alive, giving up its credit. A weighted vertex cover of a bipartite
  // graph: max flow from a source through j (bytes_j when coverable, else unbounded) to i
  // (bytes_i), what the MILP's rows give too (their LP is integral here).
  int64_t Cover(const std::vector<char>& x, int t) const {
    std::vector<int> js, is;
    std::vector<std::pair<int, int>> pairs;
    for (size_t i = 0; i < size(); ++i) {
      if (x[i]) continue;
      for (int j : readers_[i]) {
        // A j an earlier recompute made alive needs no held input.
        if (x[j] && Active(j, static_cast<int>(i), t) && !(Coverable(j, t) && EarlyAlive(x, j, t)))
          pairs.push_back({j, static_cast<int>(i)});
      }
    }
    if (pairs.empty()) return 0;
    // Nodes: 0 source, 1 sink, then j's and i's.
    std::vector<int> id(2 * size(), -1);
    int n = 2;
    for (auto [j, i] : pairs) {
      if (id[j] < 0) id[j] = n++;
      if (id[size() + i] < 0) id[size() + i] = n++;
    }
    const int64_t kInf = INT64_MAX / 4;
    std::vector<std::vector<int64_t>> cap(n, std::vector<int64_t>(n, 0));
    for (auto [j, i] : pairs) {
      cap[0][id[j]] = Coverable(j, t) ? bytes_[j] : kInf;
      cap[id[j]][id[size() + i]] = kInf;
      cap[id[size() + i]][1] = bytes_[i];
    }
    int64_t flow = 0;
    for (;;) {  // Edmonds-Karp
      std::vector<int> prev(n, -1);
      prev[0] = 0;
      std::vector<int> queue = {0};
      for (size_t q = 0; q < queue.size() && prev[1] < 0; ++q) {
        for (int v = 0; v < n; ++v) {
          if (prev[v] < 0 && cap[queue[q]][v] > 0) {
            prev[v] = queue[q];
            queue.push_back(v);
          }
        }
      }
      if (prev[1] < 0) break;
      int64_t add = kInf;
      for (int v = 1; v != 0; v = prev[v]) add = std::min(add, cap[prev[v]][v]);
      for (int v = 1; v != 0; v = prev[v]) {
        cap[prev[v]][v] -= add;
        cap[v][prev[v]] += add;
      }
      flow += add;
    }
    return flow;
  }

  double Seconds(const std::vector<char>& x) const {
    std::set<NodeId> run;
    for (size_t k = 0; k < size(); ++k) {
      if (x[k]) run.insert(f_.root[roots_[k]].producer);
    }
    double s = 0;
    for (NodeId n : run) s += seconds_[n];
    return s;
  }

  const GraphFacts& f_;
  const std::vector<double>& seconds_;
  std::vector<int64_t> plain_;
  int loss_step_ = -1;
  std::vector<int32_t> roots_;  // the candidates: roots not produced by the loss node
  std::vector<int> index_;      // per root: its candidate index, or -1
  std::vector<int64_t> bytes_;
  std::vector<char> saved_;
  std::vector<std::pair<int, int>> window_;  // plain step ranges, inclusive
  std::vector<int> plain_free_;              // the plain step that frees the candidate
  std::vector<int> recompute_by_;  // dropped, it is recomputed before this step (at least once)
  std::vector<std::vector<int>> readers_;
  std::vector<int> descending_;
};

}  // namespace
}  // namespace planner

SelectiveRelaxation RelaxSelective(const TrainingGraph& g, const CostModel& cost,
                                   const std::vector<TensorId>& dropped,
                                   const SimulatorOptions& sim) {
  PlanOptions o;
  o.simulator = sim;
  planner::Context ctx(g, cost, o);
  planner::Relaxation rel(ctx.graph(), ctx.facts(), ctx.node_seconds(), sim);
  std::vector<char> x(rel.size(), 0);
  for (TensorId t : dropped) {
    const int32_t r = t >= 0 && t < static_cast<TensorId>(ctx.facts().root_of.size())
                          ? ctx.facts().root_of[t]
                          : -1;
    const int k = r >= 0 && ctx.facts().root[r].tensor == t ? rel.index_of_root(r) : -1;
    if (k < 0)
      throw MemplanError("RelaxSelective: tensor " + std::to_string(t) +
                         " is not a droppable storage");
    x[k] = 1;
  }
  SelectiveRelaxation out;
  out.canonical = rel.Canonical(x);
  out.bytes = rel.Bytes(x);
  out.seconds = rel.Seconds(x);
  return out;
}

#ifndef MEMPLAN_HAVE_CBC
SelectiveExactResult PlanSelectiveExact(const TrainingGraph&, const CostModel&, const PlanOptions&,
                                        const SelectiveExactOptions&) {
  throw MemplanError(
      "the exact selective reference is not available: memplan was built without COIN-OR CBC "
      "(coinor-libcbc-dev)");
}
#else
namespace planner {
namespace {

struct MilpSolution {
  std::vector<std::vector<char>> sets;  // best first
  bool proven = false;                  // CBC finished: no better solution than these
  double objective = 0;                 // of the best (when any)
  double best_possible = 0;             // CBC's bound
};

class Master : private CbcProblem {
 public:
  Master(const Relaxation& rel, int64_t budget) : rel_(rel) {
    const size_t n = rel.size();
    int64_t top = 1;
    for (int64_t b : rel.plain_) top = std::max(top, b);
    unit_ = std::max(1.0, static_cast<double>(top) / 1e6);
    double total = 0;
    for (double s : rel.seconds_) total += s;
    scale_ = total > 0 ? 1.0 / total : 1.0;
    for (size_t k = 0; k < n; ++k) AddColumn(0, 1, 0, true);  // x_k: candidate k dropped
    // y_n: node n runs again (cost); h_k: candidate k kept and held for a recompute.
    std::vector<int> y(rel.f_.num_nodes, -1);
    for (size_t k = 0; k < n; ++k) {
      const NodeId p = rel.f_.root[rel.roots_[k]].producer;
      if (y[p] < 0) y[p] = AddColumn(0, 1, rel.seconds_[p] * scale_, false);
      AddRow({{y[p], 1}, {static_cast<int>(k), -1}}, 0, 1e30);
    }
    for (size_t k = 0; k < n; ++k) {
      if (rel.saved_[k]) continue;
      // (C)
      std::vector<std::pair<int, double>> c = {{static_cast<int>(k), -1}};
      for (int j : rel.readers_[k]) c.push_back({j, 1});
      AddRow(c, 0, 1e30);
    }
    // Memory rows: plain(t) - savings + cover <= budget, i.e. savings - cover >= plain(t) - budget,
    // with per-step cover columns h_i (i held) and e_j (j already recomputed).
    for (int t = 0; t < static_cast<int>(rel.plain_.size()); ++t) {
      int64_t most = rel.plain_[t];
      std::vector<std::pair<int, int>> pairs;
      std::vector<char> held(n, 0);
      for (size_t i = 0; i < n; ++i) {
        for (int j : rel.readers_[i]) {
          if (rel.Active(j, static_cast<int>(i), t)) {
            pairs.push_back({j, static_cast<int>(i)});
            if (!held[i]) most += rel.bytes_[i];
            held[i] = 1;
          }
        }
      }
      if (most <= budget) continue;  // holds whatever is dropped
      // Credit of each dropped k in its window: x_k, or d_k (k dropped and dead at t) where an
      // early recompute may make it alive or a held input may be traded for it.
      std::vector<char> coverable(n, 0);
      for (auto [j, i] : pairs) coverable[j] = rel.Coverable(j, t);
      // m_k: k recomputed by step t (Relaxation::Materialized): m_s >= x_s for a saved s with
      // Early(s, t); m_k >= x_k + m_q - 1 for q whose producer reads k.
      std::vector<int> m(n, -1);
      for (int k : rel.Descending()) {
        const bool early = rel.saved_[k] && rel.Early(k, t);
        bool reached = false;
        for (int q : rel.readers_[k]) reached = reached || m[q] >= 0;
        if (!early && !reached) continue;
        m[k] = AddColumn(0, 1, 0, false);
        if (early) AddRow({{m[k], 1}, {k, -1}}, 0, 1e30);
        for (int q : rel.readers_[k]) {
          if (m[q] >= 0) AddRow({{m[k], 1}, {k, -1}, {m[q], -1}}, -1, 1e30);
        }
      }
      std::vector<std::pair<int, double>> terms;
      std::vector<int> credit(n, -1);
      for (size_t k = 0; k < n; ++k) {
        if (t < rel.window_[k].first || t > rel.window_[k].second) continue;
        credit[k] = static_cast<int>(k);
        if (m[k] >= 0 || coverable[k]) {
          credit[k] = AddColumn(0, 1, 0, false);
          AddRow({{credit[k], 1}, {static_cast<int>(k), -1}}, -1e30, 0);
          if (m[k] >= 0) AddRow({{credit[k], 1}, {m[k], 1}}, -1e30, 1);
        }
        terms.push_back({credit[k], rel.bytes_[k] / unit_});
      }
      // Held inputs: h_i >= x_j - x_i before the loss, h_i >= d_j - x_i after it.
      std::vector<int> h(n, -1);
      for (auto [j, i] : pairs) {
        if (h[i] < 0) {
          h[i] = AddColumn(0, 1, 0, false);
          terms.push_back({h[i], -rel.bytes_[i] / unit_});
        }
        const int cj = coverable[j] && credit[j] >= 0 ? credit[j] : j;
        AddRow({{h[i], 1}, {cj, -1}, {i, 1}}, 0, 1e30);
      }
      // A margin of 1e-6 units only weakens the row: a set that fits is never excluded.
      AddRow(terms, static_cast<double>(rel.plain_[t] - budget) / unit_ - 1e-6, 1e30);
    }
  }

  void Exclude(const std::vector<char>& x) {
    std::vector<std::pair<int, double>> terms;
    int ones = 0;
    for (size_t k = 0; k < x.size(); ++k) {
      terms.push_back({static_cast<int>(k), x[k] ? -1.0 : 1.0});
      ones += x[k] != 0;
    }
    AddRow(terms, 1.0 - ones, 1e30);
  }

  // Seconds -> the MILP's objective units and back.
  double Scaled(double seconds) const { return seconds * scale_; }
  double Seconds(double scaled) const { return scaled / scale_; }

  // cutoff: only solutions below it (scaled objective); +inf for none.
  MilpSolution Solve(double seconds_limit, double cutoff) const {
    OsiClpSolverInterface solver;
    Load(solver);
    CbcModel model(solver);
    model.setLogLevel(0);
    model.messageHandler()->setLogLevel(0);
    model.setMaximumSeconds(std::max(0.01, seconds_limit));
    model.setIntegerTolerance(1e-9);
    model.setAllowableGap(1e-12);
    model.setAllowableFractionGap(1e-12);
    model.setAllowablePercentageGap(1e-10);
    model.setDblParam(CbcModel::CbcCutoffIncrement, 1e-12);
    model.setMaximumSavedSolutions(16);
    if (std::isfinite(cutoff)) model.setCutoff(cutoff);
    model.branchAndBound();
    MilpSolution out;
    out.proven = model.isProvenOptimal() || model.isProvenInfeasible();
    out.best_possible = model.getBestPossibleObjValue();
    const size_t n = rel_.size();
    auto add = [&](const double* x) {
      std::vector<char> set(n);
      for (size_t k = 0; k < n; ++k) set[k] = x[k] > 0.5;
      if (std::find(out.sets.begin(), out.sets.end(), set) == out.sets.end())
        out.sets.push_back(std::move(set));
    };
    if (const double* x = model.bestSolution()) {
      out.objective = model.getObjValue();
      add(x);
    }
    for (int i = 0; i < model.numberSavedSolutions(); ++i) {
      if (const double* x = model.savedSolution(i)) add(x);
    }
    return out;
  }

 private:
  const Relaxation& rel_;
  double unit_ = 1, scale_ = 1;
};

}  // namespace
}  // namespace planner

SelectiveExactResult PlanSelectiveExact(const TrainingGraph& g, const CostModel& cost,
                                        const PlanOptions& options,
                                        const SelectiveExactOptions& exact) {
  using namespace planner;
  const auto start = Clock::now();
  Context ctx(g, cost, options);
  const TrainingGraph& cg = ctx.graph();
  const GraphFacts& f = ctx.facts();
  const int64_t budget = options.budget_bytes;
  SelectiveExactResult result;
  auto finish = [&](const std::vector<TensorId>& ids) {
    result.plan = ReplaySelective(cg, ids,
                                  {.facts = &f,
                                   .fingerprint = ctx.fingerprint(),
                                   .strategy = "selective-exact",
                                   .budget_bytes = budget,
                                   .baseline_peak_bytes = ctx.baseline_peak(),
                                   .sim = options.simulator});
    result.plan.predicted_recompute_seconds =
        ScheduleRecomputeSeconds(ctx.node_seconds(), result.plan.schedule);
    result.plan.solve_seconds = SecondsSince(start);
  };
  if (budget <= 0 || ctx.baseline_peak() <= budget) {
    finish({});
    result.found = result.proven = true;
    result.lower_bound = 0;
    return result;
  }
  Relaxation rel(cg, f, ctx.node_seconds(), options.simulator);
  Master master(rel, budget);
  std::vector<char> best;
  double incumbent = HUGE_VAL;
  auto ids_of = [&](const std::vector<char>& x) {
    std::vector<TensorId> ids;
    for (size_t k = 0; k < x.size(); ++k) {
      if (x[k]) ids.push_back(rel.tensor(k));
    }
    return ids;
  };
  if (exact.seed_with_search) {
    Plan s = RunSelective(ctx, options);
    if (s.feasible) {
      incumbent = s.predicted_recompute_seconds;
      best.assign(rel.size(), 0);
      for (TensorId t : s.recomputed) best[rel.index_of_root(f.root_of[t])] = 1;
    }
  }
  double bound = 0;  // scaled: no set not yet excluded costs less
  bool proven = false;
  std::set<std::vector<char>> replayed;
  while (result.iterations < exact.max_iterations) {
    const double left = exact.time_limit_seconds - SecondsSince(start);
    if (left <= 0) break;
    // Only strictly cheaper solutions: ties with the incumbent cannot improve it.
    const double cutoff =
        std::isfinite(incumbent) ? master.Scaled(incumbent) * (1 - 1e-9) : HUGE_VAL;
    MilpSolution sol = master.Solve(left, cutoff);
    ++result.iterations;

    if (sol.sets.empty()) {
      if (sol.proven) {
        proven = true;  // nothing cheaper than the incumbent (or nothing at all) fits
      } else {
        bound = std::max(bound, sol.best_possible);
      }
      break;
    }
    bound = std::max(bound, sol.proven ? sol.objective : sol.best_possible);
    for (const std::vector<char>& x : sol.sets) {
      if (!replayed.insert(x).second) continue;
      const Schedule s = BuildSelectiveSchedule(cg, f, ids_of(x));
      const int64_t peak = Simulate(s, options.simulator).peak_bytes;
      ++result.replays;
      const double seconds = ScheduleRecomputeSeconds(ctx.node_seconds(), s);
      if (peak <= budget && seconds < incumbent) {
        incumbent = seconds;
        best = x;
      }
      master.Exclude(x);
      ++result.cuts;
    }
    if (sol.proven && std::isfinite(incumbent) &&
        sol.objective >= master.Scaled(incumbent) * (1 - 1e-9)) {
      proven = true;
      break;
    }
  }
  result.proven = proven;
  result.found = std::isfinite(incumbent);
  result.lower_bound =
      result.found ? std::min(incumbent, master.Seconds(bound)) : master.Seconds(bound);
  if (proven && result.found) result.lower_bound = incumbent;
  finish(result.found ? ids_of(best) : std::vector<TensorId>{});
  result.plan.notes.push_back(
      std::string("selective-exact: ") +
      (proven ? (result.found ? "proven optimal" : "proven: no drop set fits the budget")
              : "not proven (time or iteration limit); lower bound " +
                    std::to_string(result.lower_bound) + " s") +
      " after " + std::to_string(result.iterations) + " MILP solves and " +
      std::to_string(result.replays) + " replays over " + std::to_string(rel.size()) +
      " droppable storages");
  return result;
}
#endif

}  // namespace memplan
