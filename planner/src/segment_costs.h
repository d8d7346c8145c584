// Exact per-segment memory tables for the segmented schedule, so that a dynamic program can
// evaluate a segmentation's peak without replaying it.
//
// Decomposition (plan.h's semantics; derivation in segment_costs.cc). With cuts
// 0 = c_0 < c_1 < ... < c_{K-1} = L < c_K = N, persistent bytes P, and per segment [a, b):
//   forward of a non-last segment:  P + CK(a) + Fwd(a, b)
//   recompute + backward of it:     P + Held_k + Phase(a, b)
//   the last segment [L, N):        P + CK(L) + Phase(L, N)
//   setup and optimizer steps:      Floor
// where CK(a) = bytes of every checkpoint produced before a, and Held_k = the checkpoints
// still alive during segment k's backward: those produced before a whose first reader
// outside their own segment lies before b. Fwd and Phase depend on (a, b) only; CK and Held
// depend on the cuts before a through (H, S): H = bytes of checkpoints produced before a that
// nothing at or after a reads, S = the tensors crossing a that some segment between theirs
// and a already read (alive from then on). The peak is the maximum of all of these.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "graph_facts.h"
#include "memplan/analyzer.h"

namespace memplan::planner {

struct SegmentSweep;  // the per-node inputs of a row's sweep (segment_costs.cc)

// Rows (all segments from one start) are computed on first use: a DP that never reaches a
// start never pays for it. Not thread-safe; `facts` must outlive it.
class SegmentCosts {
 public:
  // Boundaries: pos[0] = 0, pos[1..M] the candidate cut positions (ascending), pos[M+1] = N.
  std::vector<NodeId> pos;
  int64_t persistent = 0;  // P: the setup step's bytes
  int64_t floor = 0;       // the setup and optimizer steps' peak (the same for every plan)
  int64_t limit = 0;       // entries are exact wherever P + entry <= limit, else kInfinite
  // Per boundary: the activation storages crossing it (produced before, read at or after).
  std::vector<std::vector<int32_t>> crossing;
  std::vector<int64_t> crossing_bytes;
  std::vector<int64_t> root_bytes;   // accounted bytes per storage (GraphFacts::roots order)
  std::vector<double> prefix_flops;  // per boundary: forward FLOPs of the nodes before it

  size_t size() const { return pos.size(); }
  // Fwd(pos[i], pos[j]) for j <= M (non-last segments), Phase(pos[i], pos[j]) for j <= M + 1.
  int64_t Fwd(size_t i, size_t j) const { return Row(i).fwd[j - i - 1]; }
  int64_t Phase(size_t i, size_t j) const { return Row(i).phase[j - i - 1]; }

 private:
  friend SegmentCosts ComputeSegmentCosts(const TrainingGraph&, const GraphFacts&,
                                          const std::vector<NodeId>&, AllocatorPolicy, int64_t);
  struct RowData {
    bool done = false;
    std::vector<int64_t> fwd, phase;  // indexed j - i - 1
  };
  const RowData& Row(size_t i) const {
    if (!rows_[i].done) ComputeRow(i);
    return rows_[i];
  }
  void ComputeRow(size_t i) const;
  std::shared_ptr<SegmentSweep> sweep_;
  mutable std::vector<RowData> rows_;
};

constexpr int64_t kNoValue = INT64_MIN / 4;
constexpr int64_t kInfinite = INT64_MAX / 4;

// `candidates`: ascending cut positions within [1, facts.loss_node]. Segments whose peak
// provably exceeds `limit` (their recompute alone, which only grows with the segment) are not
// evaluated: the sweep from a start stops there and leaves kInfinite. Budgets up to `limit`
// get exact answers from these tables.
SegmentCosts ComputeSegmentCosts(const TrainingGraph& g, const GraphFacts& facts,
                                 const std::vector<NodeId>& candidates, AllocatorPolicy policy,
                                 int64_t limit = kInfinite);

// Cut positions that are interchangeable with their neighbour are dropped: a node that
// allocates nothing, reads no activation, has no backward and no FLOPs can sit on either
// side of a cut. Returns every other position in [1, loss_node].
std::vector<NodeId> DistinctCutPositions(const TrainingGraph& g, const GraphFacts& facts);

// At most `max_count` positions out of DistinctCutPositions: all of them when they fit,
// otherwise the bottleneck cuts, then the positions where the bytes crossing the cut are a
// local minimum (smallest first), then evenly spaced positions.
std::vector<NodeId> SelectCutCandidates(const TrainingGraph& g, const GraphFacts& facts,
                                        int max_count, bool* all_positions = nullptr);

// Each row of a table sweeps the nodes after its start, so a table over M candidates of an
// N-node graph costs about M x N steps. The candidates are capped so that this stays within
// kMaxSweepSteps (a few seconds): max_candidates on graphs up to kMaxSweepSteps /
// max_candidates nodes, fewer on larger ones (50 on a million nodes), never fewer than
// kMinCutCandidates.
constexpr int64_t kMaxSweepSteps = 50'000'000;
constexpr int kMinCutCandidates = 16;
int CappedCutCandidates(int max_candidates, int num_nodes);

// Positions right after the producer of each bottleneck tensor (FindBottlenecks), valid cuts only.
std::vector<NodeId> BottleneckCuts(const TrainingGraph& g, const GraphFacts& facts);

// Accounted bytes of the activation storages crossing each position 0..N.
std::vector<int64_t> CrossingBytes(const TrainingGraph& g, const GraphFacts& facts);

}  // namespace memplan::planner
