// Small graphs shared by the planner suites. All: input x [1, 25] (100 B), parameter w [25]
// (100 B), a sum loss (a 4 B scalar whose seed gradient is handed on as a view).
#pragma once

#include <string>

#include "testing/graph_builder.h"

namespace memplan::testing {

inline TrainingGraph LoadSum(const GraphBuilder& b) {
  LoadOptions o;
  o.batch = 1;
  o.loss = LossKind::kSum;
  return b.Load(o);
}

// x -> Mul(w) -> h0 -> Relu -> h1 -> ... -> Relu -> hk -> sum. Nodes: 0 Mul, i Relu_i, k+1 loss.
inline TrainingGraph ReluChain(int k) {
  GraphBuilder b;
  b.Input("x", {-1, 25}).Param("w", {25}).Node("Mul", {"x", "w"}, {"h0"});
  for (int i = 1; i <= k; ++i) b.Node("Relu", {"h" + std::to_string(i - 1)}, {"h" + std::to_string(i)});
  b.Output("h" + std::to_string(k));
  return LoadSum(b);
}

}  // namespace memplan::testing
