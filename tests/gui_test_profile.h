// Profiles for the dashboard's tests, built by hand the way the profiler's backends record them
// (memplan/profiler.h), until a test can run `memplan run --profile` (which needs LibTorch).
#pragma once

#include <string>

#include "memplan/analyzer.h"
#include "memplan/profiler.h"

namespace memplan::gui::fixtures {

// x [N, 16] -> MatMul(w1 [16, 16]) -> h -> Relu -> r -> MatMul(w2 [16, 4]) -> y, a sum loss.
// Nodes: 0 "MatMul_0", 1 "Relu_1", 2 "MatMul_2", then the loss.
TrainingGraph ToyGraph(int64_t batch = 2);
// Writes the toy model to `path` (for the window tests).
void SaveToyModel(const std::string& path);

// The plain step of `a` as the CPU backend records it, with every scope's memory exactly the
// prediction: at schedule step i, a slice of the step's scope (nested in a slice of its phase)
// lasting (i + 1) ms with its allocations at its start and its frees at its end; so the bytes
// alive during each slice are the simulator's bytes_during[i]. Node names from the graph,
// per-node totals by AggregateProfile, each node's predicted time 80% of its measured time.
// `workspace_bytes` > 0: the Relu's forward also allocates and frees that many bytes in the
// middle of its slice (a temporary the analyzer does not know of).
Profile ProfileOfSchedule(const Analysis& a, int64_t workspace_bytes = 0);

// A profile of a checkpointed step, built from per-node totals alone (no slices or events),
// with round numbers; seconds:
//   forward   mm1 (MatMul) seg 0   4 ms, predicted 5 ms
//   forward   relu (Relu)  seg 0   1 ms, predicted unknown (0)
//   forward   mm2 (MatMul) seg 1   6 ms, predicted 3 ms
//   recompute mm1          seg 0   3 ms, predicted 2.5 ms
//   recompute relu         seg 0   1 ms, predicted 0.5 ms
//   backward  (phase)      seg 1   0.5 ms
//   backward  mm2          seg 1   8 ms, predicted 8 ms
//   optimizer (phase)      seg 0   2 ms
// Step 30 ms, peak 3 MiB; recompute of segment 0: 4 ms measured, 3 ms predicted.
Profile HandMadeProfile();

}  // namespace memplan::gui::fixtures
