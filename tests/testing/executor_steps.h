// Helpers of the executor suites that measure corpus models: two training steps (the second is
// the steady state) of a graph, with a plan's segments, recomputed and offloaded tensors (copies
// at once: the link's time is not what these suites measure) and micro-batches (with the
// gradients the plan was replayed with).
#pragma once

#include <cstdint>

#include "memplan/executor.h"
#include "memplan/plan.h"
#include "memplan/planner.h"

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
    // A micro-batched plan was replayed with the gradients its step keeps (SteppedGradients):
    // run it with them, as `memplan run` does. (Set to None, the first micro-batch's
    // AccumulateGrad may steal a dense view of a larger incoming gradient, a class token's
    // narrowed by Concat's backward, and keep all of it through the later micro-batches.)
    const GradientLifetime stepped = SteppedGradients(g.grads, 1, plan->micro_batches);
    if (stepped != g.grads) {
      TrainingGraph kept = g;
      kept.grads = stepped;
      return RunTraining(kept, o);
    }
  }
  return RunTraining(g, o);
}

// Predicted against measured, relative to measured.
inline double Error(int64_t predicted, int64_t measured) {
  return static_cast<double>(predicted - measured) / static_cast<double>(measured);
}

}  // namespace memplan::testing
