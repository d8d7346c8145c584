// Bottlenecks are the dominators of the loss in the tensor graph rooted at the data inputs:
// removing one disconnects every input from the loss.
#include <algorithm>

#include "memplan/analyzer.h"

namespace memplan {

std::vector<TensorId> FindBottlenecks(const TrainingGraph& g) {
  const int n = static_cast<int>(g.tensors.size());
  const int source = n;  // a virtual tensor feeding every data input
  std::vector<int> idom(n + 1, kNone), depth(n + 1, 0);
  idom[source] = source;
  for (TensorId i : g.inputs) {
    idom[i] = source;
    depth[i] = 1;
  }

  auto intersect = [&](int a, int b) {
    while (a != b) {
      while (depth[a] > depth[b]) a = idom[a];
      while (depth[b] > depth[a]) b = idom[b];
      if (a != b) {
        a = idom[a];
        b = idom[b];
      }
    }
    return a;
  };
  // Nodes are topological, so every predecessor's dominator is final when a node is reached.
  for (const Node& node : g.nodes) {
    int dom = kNone;
    for (TensorId in : node.inputs) {
      if (in == kNone || idom[in] == kNone) continue;  // not reachable from the data inputs
      dom = dom == kNone ? in : intersect(dom, in);
    }
    if (dom == kNone) continue;
    for (TensorId out : node.outputs) {
      if (out == kNone) continue;
      idom[out] = dom;
      depth[out] = depth[dom] + 1;
    }
  }
  std::vector<TensorId> chain;
  if (g.loss == kNone || idom[g.loss] == kNone) return chain;
  for (int t = idom[g.loss]; t != source; t = idom[t]) {
    const Tensor& tensor = g.tensors[t];
    if (tensor.category == TensorCategory::kActivation ||
        tensor.category == TensorCategory::kOutput) {
      chain.push_back(t);
    }
  }
  std::reverse(chain.begin(), chain.end());
  return chain;
}

}  // namespace memplan
