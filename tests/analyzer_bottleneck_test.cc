#include <gtest/gtest.h>

#include "memplan/analyzer.h"
#include "testing/graph_builder.h"

namespace memplan {
namespace {

using testing::GraphBuilder;

std::vector<std::string> Names(const TrainingGraph& g, const std::vector<TensorId>& ids) {
  std::vector<std::string> out;
  for (TensorId t : ids) out.push_back(g.tensor(t).name);
  return out;
}

TEST(Bottlenecks, ResidualBlockSkipsTheBranch) {
  // x -> a -> b -> c -> d=c+b -> logits: every path passes a, b, d, logits; c is bypassed
  // by the skip from b to d.
  GraphBuilder b;
  b.Input("x", {-1, 8}).Param("w1", {8, 8}).Param("w2", {8, 8}).Param("w3", {8, 3});
  b.Node("MatMul", {"x", "w1"}, {"a"})
      .Node("Relu", {"a"}, {"b"})
      .Node("MatMul", {"b", "w2"}, {"c"});
  b.Node("Add", {"c", "b"}, {"d"}).Node("MatMul", {"d", "w3"}, {"logits"}).Output("logits");
  TrainingGraph g = b.Load();
  EXPECT_EQ(Names(g, FindBottlenecks(g)), (std::vector<std::string>{"a", "b", "d", "logits"}));
}

TEST(Bottlenecks, DiamondHasNoInnerCut) {
  // x -> a; a -> l, a -> r (two branches); m = l + r; m -> logits.
  GraphBuilder b;
  b.Input("x", {-1, 8})
      .Param("w", {8, 8})
      .Param("wl", {8, 8})
      .Param("wr", {8, 8})
      .Param("head", {8, 3});
  b.Node("MatMul", {"x", "w"}, {"a"})
      .Node("MatMul", {"a", "wl"}, {"l"})
      .Node("MatMul", {"a", "wr"}, {"r"});
  b.Node("Add", {"l", "r"}, {"m"}).Node("MatMul", {"m", "head"}, {"logits"}).Output("logits");
  TrainingGraph g = b.Load();
  EXPECT_EQ(Names(g, FindBottlenecks(g)), (std::vector<std::string>{"a", "m", "logits"}));
}

TEST(Bottlenecks, UNetSkipsCutOnlyAtTheEnds) {
  // Encoder e1 -> e2 -> e3 (bottom); decoder d2 = e3' + e2, d1 = d2' + e1: the long skips
  // bypass everything between e1 and d1.
  GraphBuilder b;
  b.Input("x", {-1, 8});
  for (const char* w : {"w1", "w2", "w3", "u3", "u2", "head"}) b.Param(w, {8, 8});
  b.Node("MatMul", {"x", "w1"}, {"e1"})
      .Node("MatMul", {"e1", "w2"}, {"e2"})
      .Node("MatMul", {"e2", "w3"}, {"e3"});
  b.Node("MatMul", {"e3", "u3"}, {"up3"}).Node("Add", {"up3", "e2"}, {"d2"});
  b.Node("MatMul", {"d2", "u2"}, {"up2"}).Node("Add", {"up2", "e1"}, {"d1"});
  b.Node("MatMul", {"d1", "head"}, {"logits"}).Output("logits");
  TrainingGraph g = b.Load();
  EXPECT_EQ(Names(g, FindBottlenecks(g)), (std::vector<std::string>{"e1", "d1", "logits"}));
}

TEST(Bottlenecks, TwoInputsJoinAtTheirFirstCommonTensor) {
  GraphBuilder b;
  b.Input("x", {-1, 8}).Input("y", {-1, 8}).Param("wx", {8, 8}).Param("head", {8, 3});
  b.Node("MatMul", {"x", "wx"}, {"hx"}).Node("Add", {"hx", "y"}, {"s"}).Node("Relu", {"s"}, {"r"});
  b.Node("MatMul", {"r", "head"}, {"logits"}).Output("logits");
  TrainingGraph g = b.Load();
  // hx is bypassed by the path from y.
  EXPECT_EQ(Names(g, FindBottlenecks(g)), (std::vector<std::string>{"s", "r", "logits"}));
}

}  // namespace
}  // namespace memplan
