// The dynamic program behind `optimal` (and the tables `milp` shares).
#pragma once

#include <cstdint>
#include <vector>

#include "segment_costs.h"

namespace memplan::planner {

struct DpOptions {
  int64_t budget_bytes = 0;
  // -1: any last cut, the one with the least prefix FLOPs wins. Otherwise the boundary index
  // the last segment must start at.
  int fixed_last = -1;
  int max_states_per_position = 64;  // 0: unlimited
  // Fewest segments first (partialflow's sections), then the least recompute among them.
  bool fewest_segments = false;
};

struct DpResult {
  bool feasible = false;
  std::vector<NodeId> cuts;    // the chosen cut positions (empty: one segment)
  int64_t predicted_peak = 0;  // the decomposition's peak for `cuts`
  double recompute_flops = 0;
  bool states_capped = false;  // some position had more states than allowed
};

// Least recompute (the earliest feasible last cut) such that every phase fits the budget.
DpResult SolveSegmentation(const SegmentCosts& costs, const GraphFacts& facts,
                           const DpOptions& options);

// The decomposition's peak for a segmentation whose cuts are boundaries of `costs` (-1 when a
// cut is not a boundary).
int64_t PredictPeak(const SegmentCosts& costs, const GraphFacts& facts,
                    const std::vector<NodeId>& cuts);

// The same per phase, in schedule order: the forward of segments 0..K-2, the last segment
// (its forward and backward), then the recompute + backward of segments K-2..0. (Tests
// compare each with the replayed timeline.)
std::vector<int64_t> PredictPhasePeaks(const SegmentCosts& costs, const GraphFacts& facts,
                                       const std::vector<NodeId>& cuts);

// The smallest budget for which SolveSegmentation is feasible (binary search over bytes, to the
// byte), optionally with the last cut fixed.
// `upper`: a budget known to be feasible (0: the peak of the fixed last cut alone, or the
// plain step's).
DpResult SmallestPeak(const SegmentCosts& costs, const GraphFacts& facts, int fixed_last,
                      int max_states, int64_t upper = 0);

}  // namespace memplan::planner
