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
#include <vector>

#include "graph_facts.h"
#include "memplan/analyzer.h"

namespace memplan::planner {

struct SegmentCosts {
  // Boundaries: pos[0] = 0, pos[1..M] the candidate cut positions (ascending), pos[M+1] = N.
  std::vector<NodeId> pos;
  int64_t persistent = 0;  // P: the setup step's bytes
  int64_t floor = 0;       // the setup and optimizer steps' peak (the same for every plan)
  // Indexed [i * pos.size() + j] for boundaries i < j; kNoValue where undefined.
  std::vector<int64_t> fwd;    // Fwd(pos[i], pos[j]) (j <= M: non-last segments)
  std::vector<int64_t> phase;  // Phase(pos[i], pos[j])
  // Per boundary: the activation storages crossing it (produced before, read at or after).
  std::vector<std::vector<int32_t>> crossing;
  std::vector<int64_t> crossing_bytes;
  std::vector<int64_t> root_bytes;  // accounted bytes per storage (GraphFacts::roots order)
  std::vector<double> prefix_flops;  // per boundary: forward FLOPs of the nodes before it

  size_t size() const { return pos.size(); }
  int64_t Fwd(size_t i, size_t j) const { return fwd[i * pos.size() + j]; }
  int64_t Phase(size_t i, size_t j) const { return phase[i * pos.size() + j]; }
};

constexpr int64_t kNoValue = INT64_MIN / 4;

// `candidates`: ascending cut positions within [1, facts.loss_node].
SegmentCosts ComputeSegmentCosts(const TrainingGraph& g, const GraphFacts& facts, const std::vector<NodeId>& candidates,
                                 AllocatorPolicy policy);

// Cut positions that are interchangeable with their neighbour are dropped: a node that
// allocates nothing, reads no activation, has no backward and no FLOPs can sit on either
// side of a cut. Returns every other position in [1, loss_node].
std::vector<NodeId> DistinctCutPositions(const TrainingGraph& g, const GraphFacts& facts);

// At most `max_count` positions out of DistinctCutPositions: all of them when they fit,
// otherwise the bottleneck cuts, then the positions where the bytes crossing the cut are a
// local minimum (smallest first), then evenly spaced positions.
std::vector<NodeId> SelectCutCandidates(const TrainingGraph& g, const GraphFacts& facts, int max_count,
                                        bool* all_positions = nullptr);

// Positions right after the producer of each bottleneck tensor (FindBottlenecks), valid cuts only.
std::vector<NodeId> BottleneckCuts(const TrainingGraph& g, const GraphFacts& facts);

// Accounted bytes of the activation storages crossing each position 0..N.
std::vector<int64_t> CrossingBytes(const TrainingGraph& g, const GraphFacts& facts);

}  // namespace memplan::planner
