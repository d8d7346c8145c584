// `milp`: the segmentation problem as a mixed-integer program, in the spirit of Checkmate
// (binary decisions per stage, one memory constraint per stage, recompute as the objective),
// solved by COIN-OR CBC under a time limit. It is an independent reference for `optimal`:
// the same memory model (the per-segment tables of segment_costs.h), no dynamic program.
//
// Over boundaries 0 = b_0 < b_1 < ... < b_M < b_{M+1} = N (candidate cuts b_1..b_M):
//   x_ij in {0,1}  segment [b_i, b_j) is used (flow from 0 to N: one path of segments)
//   z_k = sum_i x_ik  a cut at b_k
//   c_r >= z_k for every cut storage r crosses      (r is a checkpoint)
//   h_rR >= z_k for every cut in (producer(r), R]   (r is alive during the backward of a
//                                                    segment ending after its reader R)
//   forward  of (i, j):  P + sum_{r produced before b_i} bytes_r c_r + Fwd(i, j)         <= B
//   backward of (i, j):  P + sum_{r produced before b_i} bytes_r h_r,R(r,j) + Phase(i, j) <= B
//   last segment (i, N): P + sum_r bytes_r c_r + Phase(i, N)                              <= B
//   (each only when x_ij = 1: big-M with the largest possible left side)
//   minimise sum_i prefixFLOPs(b_i) x_iN.
// With the budget infeasible, the same constraints with B a variable minimise B instead.
#include <algorithm>
#include <cmath>
#include <map>

#include "optimal.h"
#include "planner_internal.h"

#ifdef MEMPLAN_HAVE_CBC
#include <CbcModel.hpp>

#include "cbc_problem.h"
#endif

namespace memplan {

#ifndef MEMPLAN_HAVE_CBC
bool MilpAvailable() { return false; }
namespace planner {
Plan RunMilp(Context&, const PlanOptions&) {
  throw MemplanError(
      "the milp strategy is not available: memplan was built without COIN-OR CBC "
      "(coinor-libcbc-dev)");
}
}  // namespace planner
#else
bool MilpAvailable() { return true; }

namespace planner {
namespace {

struct MilpResult {
  bool found = false;
  bool proven_optimal = false;
  std::vector<NodeId> cuts;
  double objective = 0;
};

class MilpBuilder : public CbcProblem {
 public:
  // Returns the column values of the best solution, empty if none was found.
  std::vector<double> Solve(double seconds, bool* proven) {
    OsiClpSolverInterface solver;
    Load(solver);
    CbcModel model(solver);
    model.setLogLevel(0);
    model.messageHandler()->setLogLevel(0);
    model.setMaximumSeconds(seconds);
    model.setIntegerTolerance(1e-9);
    model.setAllowableGap(1e-9);
    model.setAllowableFractionGap(1e-9);
    model.setAllowablePercentageGap(1e-7);
    // CBC ignores improvements below the cutoff increment (1e-5 by default): the objective is
    // a fraction of the forward FLOPs, where 1e-5 is a real difference.
    model.setDblParam(CbcModel::CbcCutoffIncrement, 1e-12);
    model.branchAndBound();
    *proven = model.isProvenOptimal();
    const double* x = model.bestSolution();
    if (!x) return {};
    return std::vector<double>(x, x + columns());
  }
};

// budget < 0: minimise the peak instead of the recompute.
MilpResult SolveMilp(const SegmentCosts& c, const GraphFacts& f, int64_t budget, double seconds) {
  const size_t nb = c.size(), N = nb - 1;
  const bool min_peak = budget < 0;
  // Bytes in units that put the largest left side near 1e4: with big-M rows of 1e6 and more,
  // CBC declared suboptimal solutions optimal on resnet50 (node LPs wrongly infeasible).
  int64_t top = 1;
  for (size_t i = 0; i < N; ++i)
    top = std::max(top, c.persistent + c.crossing_bytes[i] + std::min(c.Phase(i, N), c.limit));
  const double unit = std::max(1.0, static_cast<double>(top) / 1e4);
  auto u = [unit](int64_t bytes) { return static_cast<double>(bytes) / unit; };
  const double total_flops = std::max(1.0, c.prefix_flops.back());

  MilpResult result;
  if (!min_peak && c.floor > budget) return result;
  MilpBuilder m;
  const double budget_u = min_peak ? 0 : u(budget);
  int bvar = -1;
  if (min_peak) bvar = m.AddColumn(u(c.floor), u(top) + 1, 1.0, false);

  // Segments that cannot fit whatever the checkpoints are left out.
  std::map<std::pair<size_t, size_t>, int> x;
  for (size_t i = 0; i + 1 < nb; ++i) {
    for (size_t j = i + 1; j < nb; ++j) {
      int64_t need = c.persistent + (j < N ? std::max(c.Fwd(i, j), c.Phase(i, j)) : c.Phase(i, j));
      if (need >= kInfinite / 2 || (!min_peak && need > budget)) continue;
      double cost = !min_peak && j == N ? c.prefix_flops[i] / total_flops : 0;
      x[{i, j}] = m.AddColumn(0, 1, cost, true);
    }
  }
  // Flow conservation; z_k as a column.
  std::vector<int> z(nb, -1);
  for (size_t k = 0; k < nb; ++k) {
    std::vector<std::pair<int, double> > in, out;
    for (const auto& [ij, col] : x) {
      if (ij.second == k) in.push_back({col, 1});
      if (ij.first == k) out.push_back({col, 1});
    }
    if (k == 0) {
      m.AddRow(out, 1, 1);
      continue;
    }
    if (k == N) {
      m.AddRow(in, 1, 1);
      continue;
    }
    z[k] = m.AddColumn(0, 1, 0, false);
    std::vector<std::pair<int, double> > terms = in;
    terms.push_back({z[k], -1});
    m.AddRow(terms, 0, 0);
    terms = in;
    for (auto [col, coef] : out) terms.push_back({col, -1});
    m.AddRow(terms, 0, 0);
  }
  // Checkpoint indicators: c_r = h_r,lastreader; h_r,R >= z_k for cuts k in (producer, R].
  const size_t num_roots = f.root.size();
  std::vector<std::map<NodeId, int> > h(num_roots);
  auto h_col = [&](size_t r, NodeId reader) {
    auto it = h[r].find(reader);
    if (it != h[r].end()) return it->second;
    int col = m.AddColumn(0, 1, 0, false);
    h[r][reader] = col;
    for (size_t k = 1; k < N; ++k) {
      if (c.pos[k] > f.root[r].producer && c.pos[k] <= reader)
        m.AddRow({{col, 1}, {z[k], -1}}, 0, 1e30);
    }
    return col;
  };
  std::vector<char> crossable(num_roots, 0);
  for (size_t k = 1; k < N; ++k) {
    for (int32_t r : c.crossing[k]) crossable[r] = 1;
  }
  // The largest reader of r below b (or kNone).
  auto reader_below = [&](size_t r, NodeId b) {
    const std::vector<NodeId>& rd = f.root[r].readers;
    auto it = std::lower_bound(rd.begin(), rd.end(), b);
    if (it == rd.begin()) return static_cast<NodeId>(kNone);
    NodeId v = *(it - 1);
    return v > f.root[r].producer ? v : static_cast<NodeId>(kNone);
  };
  auto add_budget_row = [&](std::vector<std::pair<int, double> > terms, double fixed_u, int xcol) {
    double max_lhs = fixed_u;
    for (const auto& t : terms) max_lhs += t.second;
    double rhs = min_peak ? 0 : budget_u;
    double big = max_lhs - (min_peak ? u(c.floor) : budget_u);
    if (big <= 0) return;  // holds whatever the checkpoints are
    if (min_peak) terms.push_back({bvar, -1});
    terms.push_back({xcol, big});
    m.AddRow(terms, -1e30, rhs - fixed_u + big);
  };
  for (const auto& [ij, col] : x) {
    const auto [i, j] = ij;
    const NodeId a = c.pos[i], b = c.pos[j];
    std::vector<std::pair<int, double> > produced_before, held;
    for (size_t r = 0; r < num_roots; ++r) {
      if (!crossable[r] || f.root[r].producer >= a) continue;
      double bytes = u(c.root_bytes[r]);
      produced_before.push_back({h_col(r, f.root[r].last_reader), bytes});
      if (j < N) {
        NodeId reader = reader_below(r, b);
        if (reader != kNone) held.push_back({h_col(r, reader), bytes});
      }
    }
    if (j < N) {
      add_budget_row(produced_before, u(c.persistent + c.Fwd(i, j)), col);
      add_budget_row(held, u(c.persistent + c.Phase(i, j)), col);
    } else {
      std::vector<std::pair<int, double> > all;
      for (size_t r = 0; r < num_roots; ++r) {
        if (crossable[r]) all.push_back({h_col(r, f.root[r].last_reader), u(c.root_bytes[r])});
      }
      add_budget_row(all, u(c.persistent + c.Phase(i, N)), col);
    }
  }

  std::vector<double> sol = m.Solve(seconds, &result.proven_optimal);
  if (sol.empty()) return result;
  result.found = true;
  // Walk the chosen path of segments from boundary 0.
  size_t at = 0;
  while (at != N) {
    size_t next = N;
    for (const auto& [ij, col] : x) {
      if (ij.first == at && sol[col] > 0.5) {
        next = ij.second;
        break;
      }
    }
    if (next != N) result.cuts.push_back(c.pos[next]);
    if (next == at) break;
    at = next;
  }
  return result;
}

}  // namespace

Plan RunMilp(Context& ctx, const PlanOptions& o) {
  auto start = Clock::now();
  if (o.budget_bytes <= 0 || ctx.baseline_peak() <= o.budget_bytes)
    return ctx.Finish("milp", {}, o.budget_bytes, start);
  bool all_positions = false;
  const SegmentCosts* costs = &ctx.costs(o.milp_max_candidates, o.budget_bytes, &all_positions);
  std::vector<std::string> notes;
  MilpResult r = SolveMilp(*costs, ctx.facts(), o.budget_bytes, o.milp_time_limit_seconds);
  if (!r.found) {
    double left = std::max(1.0, o.milp_time_limit_seconds - SecondsSince(start));
    costs = &ctx.costs(o.milp_max_candidates, ctx.baseline_peak(), &all_positions);
    r = SolveMilp(*costs, ctx.facts(), -1, left);
    notes.push_back(
        r.found ? "no segmentation over the candidate cuts fits the budget; this is the smallest "
                  "peak CBC found"
                : "CBC found no solution within the time limit; the plan is the plain step");
  }
  Plan p = ctx.Finish("milp", r.cuts, o.budget_bytes, start);
  notes.push_back(
      std::string(r.proven_optimal ? "CBC proved optimality"
                                   : "CBC stopped at the time limit (not proven optimal)") +
      " over " + (all_positions ? "every distinct cut position (" : "candidate cut positions (") +
      std::to_string(costs->size() - 2) + ")");
  p.notes.insert(p.notes.end(), notes.begin(), notes.end());
  return p;
}

}  // namespace planner
#endif

}  // namespace memplan
