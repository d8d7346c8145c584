// Helpers of the executor suites that measure corpus models: two training steps (the second is
// the steady state) of a graph, with a plan's segments, recomputed and offloaded tensors (copies
// at once: the link's time is not what these suites measure) and micro-batches.
#pragma once

#include <cstdint>

#include "memplan/executor.h"
#include "memplan/plan.h"

namespace memplan::testing {

inline RunResult RunSteps(const TrainingGraph& g, const Plan* plan = nullptr) {
  RunOptions o;
  o.random_weights = true;
  o.steps = 2;  // the second step is the steady state
  if (plan) {
    o.segments = plan->segments;
    o.recomputed = plan->recomputed;
    o.offloaded = plan->offloaded;
    o.emulate_link = false;
    o.micro_batches = plan->micro_batches;
  }
  return RunTraining(g, o);
}

// Predicted against measured, relative to measured.
inline double Error(int64_t predicted, int64_t measured) {
  return static_cast<double>(predicted - measured) / static_cast<double>(measured);
}

}  // namespace memplan::testing
