// Small graphs and toy costs shared by the planner suites. All graphs: input x [1, 25] (100 B),
// parameter w [25] (100 B), a sum loss (a 4 B scalar whose seed gradient is handed on as a view).
// The suites' hand-computed steps keep parameter gradients between steps (persistent, 100 B
// each) unless a test asks for gradients set to None (the analyzer's tests specify both).
#pragma once

#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>

#include "memplan/planner.h"
#include "testing/graph_builder.h"

namespace memplan::testing {

inline TrainingGraph LoadSum(const GraphBuilder& b,
                             GradientLifetime grads = GradientLifetime::kKept) {
  LoadOptions o;
  o.batch = 1;
  o.loss = LossKind::kSum;
  o.grads = grads;
  return b.Load(o);
}

// x -> Mul(w) -> h0 -> Relu -> h1 -> ... -> Relu -> hk -> sum. Nodes: 0 Mul, i Relu_i, k+1 loss.
inline TrainingGraph ReluChain(int k, GradientLifetime grads = GradientLifetime::kKept) {
  GraphBuilder b;
  b.Input("x", {-1, 25}).Param("w", {25}).Node("Mul", {"x", "w"}, {"h0"});
  for (int i = 1; i <= k; ++i)
    b.Node("Relu", {"h" + std::to_string(i - 1)}, {"h" + std::to_string(i)});
  b.Output("h" + std::to_string(k));
  return LoadSum(b, grads);
}

// Two residual blocks (y = x + Relu(Relu(x) * w)) and a U-Net-like long skip around them.
inline TrainingGraph Residual(GradientLifetime grads = GradientLifetime::kKept) {
  GraphBuilder b;
  b.Input("x", {-1, 25}).Param("w0", {25}).Param("w1", {25}).Param("w2", {25});
  b.Node("Mul", {"x", "w0"}, {"s"}).Node("Relu", {"s"}, {"a0"});
  b.Node("Relu", {"a0"}, {"b1"}).Node("Mul", {"b1", "w1"}, {"c1"}).Node("Relu", {"c1"}, {"d1"});
  b.Node("Add", {"a0", "d1"}, {"a1"});
  b.Node("Relu", {"a1"}, {"b2"}).Node("Mul", {"b2", "w2"}, {"c2"}).Node("Relu", {"c2"}, {"d2"});
  b.Node("Add", {"a1", "d2"}, {"a2"});
  b.Node("Add", {"a2", "s"}, {"u"}).Node("Sigmoid", {"u"}, {"y"});
  b.Output("y");
  return LoadSum(b, grads);
}

// A random DAG: unary and binary ops over earlier tensors (mostly recent ones, sometimes a
// long skip), parameters here and there; every dangling tensor is summed into the output.
inline TrainingGraph RandomDag(uint32_t seed, int num_ops,
                               GradientLifetime grads = GradientLifetime::kKept) {
  std::mt19937 rng(seed);
  GraphBuilder b;
  b.Input("x", {-1, 25}).Param("w0", {25}).Node("Mul", {"x", "w0"}, {"t0"});
  std::vector<std::string> tensors = {"t0"};
  std::set<std::string> dangling = {"t0"};
  const char* unary[] = {"Relu", "Sigmoid", "Tanh", "Exp"};
  const char* binary[] = {"Add", "Mul", "Sub"};
  auto pick = [&]() {
    size_t n = tensors.size();
    std::uniform_int_distribution<size_t> recent(n > 3 ? n - 3 : 0, n - 1), any(0, n - 1);
    return tensors[std::bernoulli_distribution(0.25)(rng) ? any(rng) : recent(rng)];
  };
  for (int i = 1; i < num_ops; ++i) {
    std::string out = "t" + std::to_string(i);
    int kind = std::uniform_int_distribution<int>(0, 9)(rng);
    if (kind < 5) {
      std::string in = pick();
      b.Node(unary[kind % 4], {in}, {out});
      dangling.erase(in);
    } else if (kind < 8) {
      std::string p = pick(), q = pick();
      b.Node(binary[kind % 3], {p, q}, {out});
      dangling.erase(p);
      dangling.erase(q);
    } else {
      std::string w = "w" + std::to_string(i), in = pick();
      b.Param(w, {25}).Node("Mul", {in, w}, {out});
      dangling.erase(in);
    }
    tensors.push_back(out);
    dangling.insert(out);
  }
  std::string acc;
  for (const std::string& t : dangling) {
    if (acc.empty()) {
      acc = t;
      continue;
    }
    std::string out = "sum_" + t;
    b.Node("Add", {acc, t}, {out});
    acc = out;
  }
  b.Output(acc);
  return LoadSum(b, grads);
}

// Heterogeneous toy costs: activations of 100..700 B, ops of 10..90 FLOPs. The loss scalar keeps
// its 4 B (held, with its seed gradient, until the backward call returns).
inline CostModel ToyCosts() {
  CostModel c;
  c.tensor_bytes = [](const Tensor& t) {
    if ((t.category != TensorCategory::kActivation && t.category != TensorCategory::kOutput) ||
        t.shape.empty())
      return t.bytes;
    return int64_t{100} * static_cast<int64_t>(1 + std::hash<std::string>{}(t.name) % 7);
  };
  c.node_flops = [](const Node& n) {
    return 10.0 * static_cast<double>(1 + std::hash<std::string>{}(n.name) % 9);
  };
  return c;
}

// Seconds per node by name (every other node: `others`), with the graph's own bytes.
inline CostModel Seconds(std::map<std::string, double> by_name, double others) {
  CostModel c;
  c.node_seconds = [by_name, others](const TrainingGraph&, const Node& n) {
    auto it = by_name.find(n.name);
    return it == by_name.end() ? others : it->second;
  };
  return c;
}

}  // namespace memplan::testing
