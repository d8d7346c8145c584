// The time model: roofline seconds from FLOPs and bytes moved, plans' predicted recompute
// seconds, and calibration by measured per-node times. Rates are toy numbers chosen so that
// every expected time can be worked out by hand.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "memplan/planner.h"
#include "planner_toy_graphs.h"
#include "testing/graph_builder.h"

namespace memplan {
namespace {

using testing::ErrorOf;

using testing::GraphBuilder;
using testing::ReluChain;

constexpr double kUs = 1e-6;

MachineRates Rates(double flops_per_second, double bytes_per_second, double overhead_seconds) {
  MachineRates r;
  r.flops_per_second = flops_per_second;
  r.bytes_per_second = bytes_per_second;
  r.op_overhead_seconds = overhead_seconds;
  return r;
}

// x [1, 100] -> MatMul(w [100, 100]) -> y -> Relu -> r -> Reshape([100, 1]) -> s -> sum.
// Nodes: 0 MatMul_0, 1 Relu_1, 2 Reshape_2, 3 memplan::loss.
TrainingGraph MatMulReluReshape() {
  GraphBuilder b;
  b.Input("x", {-1, 100}).Param("w", {100, 100}).Ints("shape", {100, 1});
  b.Node("MatMul", {"x", "w"}, {"y"})
      .Node("Relu", {"y"}, {"r"})
      .Node("Reshape", {"r", "shape"}, {"s"});
  b.Output("s");
  return testing::LoadSum(b);
}

TEST(PlannerTime, RooflineIsTheSlowerOfComputeAndMemoryPlusTheOverhead) {
  TrainingGraph g = MatMulReluReshape();
  ASSERT_EQ(g.nodes.size(), 4u);
  const MachineRates rates =
      Rates(/*flops_per_second=*/1e6, /*bytes_per_second=*/4e6, /*overhead=*/1e-3);
  // MatMul: x 400 B + w 40,000 B read, y 400 B written = 40,800 B.
  EXPECT_DOUBLE_EQ(NodeBytesMoved(g, g.nodes[0]), 40800);
  // Compute-bound: 2 x 1 x 100 x 100 = 20,000 FLOPs / 1e6 = 20 ms > 40,800 B / 4e6 = 10.2 ms; + 1
  // ms.
  EXPECT_NEAR(RooflineSeconds(g, g.nodes[0], rates), 21e-3, 1e-12);
  // Relu reads 400 B and writes 400 B: memory-bound, 800 B / 4e6 = 0.2 ms > 100 FLOPs / 1e6 =
  // 0.1 ms; + 1 ms.
  EXPECT_DOUBLE_EQ(NodeBytesMoved(g, g.nodes[1]), 800);
  EXPECT_NEAR(RooflineSeconds(g, g.nodes[1], rates), 1.2e-3, 1e-12);
  // Reshape is a view: no FLOPs, no bytes, only the overhead.
  EXPECT_DOUBLE_EQ(NodeBytesMoved(g, g.nodes[2]), 0);
  EXPECT_NEAR(RooflineSeconds(g, g.nodes[2], rates), 1e-3, 1e-12);
  // The sum loss reads s (a view of r: 400 B) and writes a 4 B scalar: 404 B / 4e6 = 0.101 ms
  // (its at most 100 FLOPs take <= 0.1 ms); + 1 ms.
  EXPECT_NEAR(RooflineSeconds(g, g.nodes[3], rates), 1.101e-3, 1e-12);
}

// x [1, 4, 8, 8] -> Conv 3x3 (w [4, 4, 3, 3], pad 1) -> c -> depthwise Conv 3x3 (group 4) -> d
// -> BatchNormalization (batch statistics) -> n -> Relu -> r -> MaxPool 2x2 stride 2 -> p
// [1, 4, 4, 4] -> Dropout (ratio 0.5, training) -> q -> Reshape [1, 64] -> f -> MatMul (fc
// [64, 2]) -> y; and a grouped 1x1 Conv (group 2, w [4, 2, 1, 1]) on c beside them -> e.
// Every [1, 4, 8, 8] activation is 256 floats, 1,024 B.
TrainingGraph OneOfEachClass() {
  GraphBuilder b;
  b.Input("x", {-1, 4, 8, 8})
      .Param("w", {4, 4, 3, 3})
      .Param("dw", {4, 1, 3, 3})
      .Param("gw", {4, 2, 1, 1});
  for (const char* p : {"scale", "bias", "mean", "var"}) b.Param(p, {4});
  b.Param("fc", {64, 2}).Ints("shape", {1, 64});
  const std::vector<int64_t> pad1 = {1, 1, 1, 1};
  b.Node("Conv", {"x", "w"}, {"c"})
      .Attr("pads", pad1)
      .Attr("kernel_shape", std::vector<int64_t>{3, 3});
  b.Node("Conv", {"c", "dw"}, {"d"})
      .Attr("pads", pad1)
      .Attr("kernel_shape", std::vector<int64_t>{3, 3})
      .Attr("group", int64_t{4});
  b.Node("BatchNormalization", {"d", "scale", "bias", "mean", "var"}, {"n", "rm", "rv"})
      .Attr("training_mode", int64_t{1});
  b.Node("Relu", {"n"}, {"r"});
  b.Node("MaxPool", {"r"}, {"p"})
      .Attr("kernel_shape", std::vector<int64_t>{2, 2})
      .Attr("strides", std::vector<int64_t>{2, 2});
  b.Node("Constant", {}, {"ratio"}).Attr("value_float", 0.5);
  b.Node("Constant", {}, {"train"}).Attr("value_int", int64_t{1});
  b.Node("Dropout", {"p", "ratio", "train"}, {"q"});
  b.Node("Reshape", {"q", "shape"}, {"f"}).Node("MatMul", {"f", "fc"}, {"y"}).Output("y");
  b.Node("Conv", {"c", "gw"}, {"e"})
      .Attr("kernel_shape", std::vector<int64_t>{1, 1})
      .Attr("group", int64_t{2})
      .Output("e");
  return testing::LoadSum(b);
}

const Node& NodeNamed(const TrainingGraph& g, const std::string& name) {
  const NodeId id = g.FindNode(name);
  EXPECT_NE(id, kNone) << name;
  return g.nodes.at(id);
}

TEST(PlannerTime, EachNodeHasTheComputeClassOfItsKernel) {
  TrainingGraph g = OneOfEachClass();
  auto cls = [&](const std::string& name) { return ComputeClassOf(NodeNamed(g, name), g.tensors); };
  EXPECT_EQ(cls("Conv_0"), ComputeClass::kConv);
  EXPECT_EQ(cls("Conv_1"), ComputeClass::kDepthwiseConv);  // group 4 = its 4 input channels
  EXPECT_EQ(cls("Conv_10"), ComputeClass::kConv);          // group 2 of 4 channels: dense per group
  EXPECT_EQ(cls("BatchNormalization_2"), ComputeClass::kNormalization);
  EXPECT_EQ(cls("Relu_3"), ComputeClass::kMemory);
  EXPECT_EQ(cls("MaxPool_4"), ComputeClass::kPooling);
  EXPECT_EQ(cls("Dropout_7"), ComputeClass::kRandom);
  EXPECT_EQ(cls("Reshape_8"), ComputeClass::kMemory);
  EXPECT_EQ(cls("MatMul_9"), ComputeClass::kMatmul);

  // Without batch statistics a batch norm is an affine map, and an inactive Dropout draws nothing.
  GraphBuilder b;
  b.Input("x", {-1, 4, 2, 2});
  for (const char* p : {"scale", "bias", "mean", "var"}) b.Param(p, {4});
  b.Node("BatchNormalization", {"x", "scale", "bias", "mean", "var"}, {"n"})
      .Node("Dropout", {"n"}, {"d"})
      .Output("d");
  TrainingGraph inference = testing::LoadSum(b);
  EXPECT_EQ(ComputeClassOf(inference.nodes[0], inference.tensors), ComputeClass::kMemory);
  EXPECT_EQ(ComputeClassOf(inference.nodes[1], inference.tensors), ComputeClass::kMemory);
  EXPECT_STREQ(ComputeClassName(ComputeClass::kDepthwiseConv), "depthwise_conv");
}

TEST(PlannerTime, TheRooflinePricesEachNodeAtItsClassRates) {
  TrainingGraph g = OneOfEachClass();
  // General rates 1e6 FLOP/s and 1,000 B/s, no overhead; each class its own (0: the general).
  MachineRates r = Rates(1e6, 1e3, 0);
  auto& c = r.classes;
  c[static_cast<size_t>(ComputeClass::kConv)] = {.flops_per_second = 1e4, .bytes_per_second = 1e6};
  c[static_cast<size_t>(ComputeClass::kDepthwiseConv)] = {.flops_per_second = 1e4,
                                                          .bytes_per_second = 2e3};
  c[static_cast<size_t>(ComputeClass::kNormalization)] = {.flops_per_second = 0,
                                                          .bytes_per_second = 2e3};
  c[static_cast<size_t>(ComputeClass::kPooling)] = {.flops_per_second = 128, .bytes_per_second = 0};
  c[static_cast<size_t>(ComputeClass::kRandom)] = {.flops_per_second = 32, .bytes_per_second = 0};
  c[static_cast<size_t>(ComputeClass::kMatmul)] = {.flops_per_second = 128, .bytes_per_second = 0};
  auto seconds = [&](const std::string& name) { return RooflineSeconds(g, NodeNamed(g, name), r); };
  // Conv_0: 2 x 256 outputs x (4 channels x 9) = 18,432 FLOPs / 1e4 = 1.8432 s; its x 1,024 B +
  // w 576 B + c 1,024 B = 2,624 B / 1e6 B/s = 2.6 ms. (At the general rates: 2.624 s,
  // memory-bound.)
  EXPECT_DOUBLE_EQ(NodeBytesMoved(g, NodeNamed(g, "Conv_0")), 2624);
  EXPECT_NEAR(seconds("Conv_0"), 1.8432, 1e-12);
  EXPECT_NEAR(RooflineSeconds(g, NodeNamed(g, "Conv_0"), Rates(1e6, 1e3, 0)), 2.624, 1e-12);
  // Depthwise: 2 x 256 x 9 = 4,608 FLOPs / 1e4 = 0.4608 s < (1,024 + 144 + 1,024) B / 2e3 = 1.096
  // s.
  EXPECT_NEAR(seconds("Conv_1"), 1.096, 1e-12);
  // Batch norm: reads d 1,024 B and four [4] vectors (64 B), writes n 1,024 B (the running
  // statistics are its inputs, updated in place): 2,112 B / 2e3 = 1.056 s; its 8 x 256 FLOPs take
  // 2 ms at the general rate.
  EXPECT_DOUBLE_EQ(NodeBytesMoved(g, NodeNamed(g, "BatchNormalization_2")), 2112);
  EXPECT_NEAR(seconds("BatchNormalization_2"), 1.056, 1e-12);
  // Relu is memory: 2,048 B / 1e3 = 2.048 s.
  EXPECT_NEAR(seconds("Relu_3"), 2.048, 1e-12);
  // MaxPool: 64 outputs x a 4-element window = 256 / 128 = 2 s; its 1,280 B take 1.28 s.
  EXPECT_NEAR(seconds("MaxPool_4"), 2, 1e-12);
  // Dropout: 64 elements / 32 = 2 s.
  EXPECT_NEAR(seconds("Dropout_7"), 2, 1e-12);
  // MatMul [1, 64] x [64, 2]: 256 FLOPs / 128 = 2 s; its 256 + 512 + 8 B take 0.776 s.
  EXPECT_NEAR(seconds("MatMul_9"), 2, 1e-12);
}

TEST(PlannerTime, NewBuffersFromTheThresholdUpPayTheFreshMemoryRate) {
  TrainingGraph g = MatMulReluReshape();
  MachineRates r = Rates(/*flops_per_second=*/1e6, /*bytes_per_second=*/4e6, /*overhead=*/1e-3);
  r.fresh_bytes_per_second = 100;
  r.fresh_threshold_bytes = 400;
  // MatMul's y and Relu's r are 400 B new outputs: + 400 B / 100 B/s = 4 s on the 21 ms and
  // 1.2 ms of the roofline test above; Reshape's s is a view: nothing new.
  EXPECT_NEAR(RooflineSeconds(g, g.nodes[0], r), 4.021, 1e-12);
  EXPECT_NEAR(RooflineSeconds(g, g.nodes[1], r), 4.0012, 1e-12);
  EXPECT_NEAR(RooflineSeconds(g, g.nodes[2], r), 1e-3, 1e-12);
  r.fresh_threshold_bytes = 401;  // below the threshold malloc reuses its heap
  EXPECT_NEAR(RooflineSeconds(g, g.nodes[0], r), 21e-3, 1e-12);
  // A saved extra is a new buffer too: MaxPool's int64 indices of its 64 outputs, 512 B (its
  // output p, 256 B, stays under a 512 B threshold). 256 FLOPs / 1e6 < 1,280 B / 4e6 = 0.32 ms;
  // + 512 B / 100 B/s = 5.12 s; + 1 ms.
  TrainingGraph c = OneOfEachClass();
  r.fresh_threshold_bytes = 512;
  EXPECT_NEAR(RooflineSeconds(c, NodeNamed(c, "MaxPool_4"), r), 0.32e-3 + 5.12 + 1e-3, 1e-12);
}

TEST(PlannerTime, AFoldedNodeIsNotRunAndCostsNothing) {
  // x [1, 100] -> Shape -> s (known at analysis time: [1, 100]) -> Reshape(x, s) -> Mul(w) -> Relu.
  GraphBuilder b;
  b.Input("x", {-1, 100}).Param("w", {100});
  b.Node("Shape", {"x"}, {"s"}).Node("Reshape", {"x", "s"}, {"y"}).Node("Mul", {"y", "w"}, {"z"});
  b.Node("Relu", {"z"}, {"r"}).Output("r");
  TrainingGraph g = testing::LoadSum(b);
  ASSERT_EQ(g.nodes[0].op_type, "Shape");
  EXPECT_TRUE(NodeIsFolded(g, g.nodes[0]));
  EXPECT_FALSE(NodeIsFolded(g, g.nodes[2]));
  EXPECT_DOUBLE_EQ(RooflineSeconds(g, g.nodes[0], Rates(1e6, 4e6, 1e-3)), 0);
  // A profile never lists it: it counts as folded, not as missing.
  Calibration c =
      CalibrateNodeSeconds(g, {"p.json", 1, {{"Relu_3", "Relu", 1e-3}}}, Rates(1e6, 4e6, 1e-3));
  EXPECT_EQ(c.measured_nodes, 1);
  EXPECT_EQ(c.folded_nodes, 1);
  EXPECT_EQ(c.missing_nodes, 3);  // Reshape_1, Mul_2 and the loss
  EXPECT_DOUBLE_EQ(c.node_seconds(g, g.nodes[0]), 0);
}

TEST(PlannerTime, PredictNodeSecondsUsesTheCostModel) {
  TrainingGraph g = MatMulReluReshape();
  CostModel cost;
  cost.node_seconds = RooflineNodeSeconds(Rates(1e6, 4e6, 1e-3));
  std::vector<double> s = PredictNodeSeconds(g, cost);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_NEAR(s[0], 21e-3, 1e-12);
  EXPECT_NEAR(s[1], 1.2e-3, 1e-12);
  EXPECT_NEAR(s[2], 1e-3, 1e-12);
  // The cost model's bytes are the ones the roofline moves: every tensor 1,000 B makes the
  // MatMul's x + w + y = 3,000 B / 4e6 = 0.75 ms, under its 20 ms of compute; the Relu's
  // 2,000 B / 4e6 = 0.5 ms.
  cost.tensor_bytes = [](const Tensor&) { return int64_t{1000}; };
  s = PredictNodeSeconds(g, cost);
  EXPECT_NEAR(s[0], 21e-3, 1e-12);
  EXPECT_NEAR(s[1], 1.5e-3, 1e-12);
}

TEST(PlannerTime, WithoutNodeSecondsTheRooflineAtTheDefaultCpuRates) {
  TrainingGraph g = MatMulReluReshape();
  std::vector<double> s = PredictNodeSeconds(g, CostModel{});
  // Default cpu: 1e11 FLOP/s, 1e10 B/s, 10 us per op. MatMul: 20,000 FLOPs take 0.2 us, its
  // 40,800 B 4.08 us: 14.08 us. Reshape: 10 us.
  EXPECT_NEAR(s[0], 14.08 * kUs, 1e-15);
  EXPECT_NEAR(s[2], 10 * kUs, 1e-15);
}

// Node i of the chain takes (i + 1) x batch seconds.
CostModel LinearSeconds() {
  CostModel cost;
  cost.node_seconds = [](const TrainingGraph& g, const Node& n) {
    return static_cast<double>(n.id + 1) * static_cast<double>(g.batch);
  };
  return cost;
}

TEST(PlannerTime, PlansReportTheSecondsOfWhatTheyRecompute) {
  TrainingGraph g = ReluChain(6);  // 0 Mul, 1..6 Relu, 7 loss
  PlanOptions o;
  o.strategy = "manual";
  o.checkpoints = {"h2"};  // one cut after Relu_2 (node 2): nodes 0..2 are recomputed
  Plan p = MakePlan(g, LinearSeconds(), o);
  ASSERT_EQ(p.num_sections(), 2);
  // 1 + 2 + 3 = 6 s.
  EXPECT_DOUBLE_EQ(p.predicted_recompute_seconds, 6);
  o.checkpoints = {"h2", "h4"};  // the last cut decides: nodes 0..4, 1 + ... + 5 = 15 s
  EXPECT_DOUBLE_EQ(MakePlan(g, LinearSeconds(), o).predicted_recompute_seconds, 15);
  EXPECT_DOUBLE_EQ(PlanNone(g, LinearSeconds(), o).predicted_recompute_seconds, 0);
}

TEST(PlannerTime, MicroBatchedPlansPriceEveryMicroBatchAtItsOwnBatch) {
  GraphBuilder b;
  b.Input("x", {-1, 25}).Param("w", {25}).Node("Mul", {"x", "w"}, {"h0"});
  for (int i = 1; i <= 6; ++i)
    b.Node("Relu", {"h" + std::to_string(i - 1)}, {"h" + std::to_string(i)});
  b.Output("h6");
  auto at_batch = [&](int64_t batch) {
    LoadOptions lo;
    lo.grads = GradientLifetime::kKept;  // the hand-computed steps keep gradients
    lo.batch = batch;
    lo.loss = LossKind::kSum;
    return b.Load(lo);
  };
  PlanOptions o;
  o.strategy = "manual";
  o.checkpoints = {"h2"};
  Plan p = PlanMicroBatched(at_batch, /*batch=*/4, LinearSeconds(), o, /*micro_batches=*/2);
  ASSERT_EQ(p.micro_batches, 2);
  // Nodes 0..2 at micro-batch 2: (1 + 2 + 3) x 2 = 12 s, for each of the 2 micro-batches: 24 s.
  EXPECT_DOUBLE_EQ(p.predicted_recompute_seconds, 24);
}

TEST(PlannerTime, TheSweepCarriesThePredictedSeconds) {
  TrainingGraph g = ReluChain(8);
  PlanOptions o;
  o.strategy = "optimal";
  SweepResult s = SweepBudgets(g, LinearSeconds(), o, /*num_budgets=*/6);
  ASSERT_FALSE(s.points.empty());
  for (const SweepPoint& pt : s.points) {
    o.budget_bytes = pt.budget_bytes;
    EXPECT_DOUBLE_EQ(pt.recompute_seconds,
                     MakePlan(g, LinearSeconds(), o).predicted_recompute_seconds);
  }
  EXPECT_GT(s.points.back().recompute_seconds, 0);
}

// ReluChain(4) at batch 1, rates 1e6 FLOP/s and 1e6 B/s, no overhead (every tensor 100 B):
//   Mul_0:   reads x and w, writes h0: 300 B -> 300 us (25 FLOPs: 25 us);
//   Relu_i:  reads 100 B, writes 100 B: 200 us;
//   loss:    reads h4 (100 B), writes 4 B: 104 us.
const MachineRates kUnitRates = Rates(1e6, 1e6, 0);

MeasuredTimes Measured(int64_t batch, std::vector<MeasuredNodeTime> nodes) {
  MeasuredTimes m;
  m.source = "chain.profile.json";
  m.batch = batch;
  m.nodes = std::move(nodes);
  return m;
}

TEST(PlannerTime, CalibrationUsesMeasuredNodesAndTheMedianRatioForTheRest) {
  TrainingGraph g = ReluChain(4);  // 0 Mul_0, 1..4 Relu_i, 5 memplan::loss
  ASSERT_EQ(g.nodes.size(), 6u);
  ASSERT_NEAR(RooflineSeconds(g, g.nodes[0], kUnitRates), 300 * kUs, 1e-12);
  ASSERT_NEAR(RooflineSeconds(g, g.nodes[1], kUnitRates), 200 * kUs, 1e-12);
  // Measured / roofline: Mul_0 900 / 300 = 3, Relu_1 400 / 200 = 2, Relu_2 200 / 200 = 1.
  Calibration c = CalibrateNodeSeconds(g,
                                       Measured(1, {{"Mul_0", "Mul", 900 * kUs},
                                                    {"Relu_1", "Relu", 400 * kUs},
                                                    {"Relu_2", "Relu", 200 * kUs}}),
                                       kUnitRates);
  EXPECT_EQ(c.measured_nodes, 3);
  EXPECT_EQ(c.missing_nodes, 3);
  EXPECT_DOUBLE_EQ(c.median_ratio, 2);
  CostModel cost;
  cost.node_seconds = c.node_seconds;
  std::vector<double> s = PredictNodeSeconds(g, cost);
  EXPECT_NEAR(s[0], 900 * kUs, 1e-12);  // measured, exactly
  EXPECT_NEAR(s[1], 400 * kUs, 1e-12);
  EXPECT_NEAR(s[2], 200 * kUs, 1e-12);
  EXPECT_NEAR(s[3], 400 * kUs, 1e-12);  // Relu_3: 200 us x 2
  EXPECT_NEAR(s[4], 400 * kUs, 1e-12);  // Relu_4: 200 us x 2
  EXPECT_NEAR(s[5], 208 * kUs, 1e-12);  // the loss: 104 us x 2
  // A plan cut after Relu_3 recomputes nodes 0..3: 900 + 400 + 200 + 400 = 1,900 us.
  PlanOptions o;
  o.strategy = "manual";
  o.checkpoints = {"h3"};
  EXPECT_NEAR(MakePlan(g, cost, o).predicted_recompute_seconds, 1900 * kUs, 1e-12);
}

TEST(PlannerTime, AnEvenNumberOfMeasuredNodesTakesTheMeanOfTheMiddleRatios) {
  TrainingGraph g = ReluChain(4);
  // Ratios 1, 2, 3, 5: the median is (2 + 3) / 2 = 2.5.
  Calibration c = CalibrateNodeSeconds(g,
                                       Measured(1, {{"Relu_1", "Relu", 200 * kUs},
                                                    {"Relu_2", "Relu", 400 * kUs},
                                                    {"Relu_3", "Relu", 600 * kUs},
                                                    {"Relu_4", "Relu", 1000 * kUs}}),
                                       kUnitRates);
  EXPECT_DOUBLE_EQ(c.median_ratio, 2.5);
  EXPECT_NEAR(c.node_seconds(g, g.nodes[0]), 750 * kUs, 1e-12);  // Mul_0: 300 us x 2.5
}

TEST(PlannerTime, TimesMeasuredAtAnotherBatchScaleLinearly) {
  GraphBuilder b;
  b.Input("x", {-1, 25})
      .Param("w", {25})
      .Node("Mul", {"x", "w"}, {"h0"})
      .Node("Relu", {"h0"}, {"h1"})
      .Output("h1");
  LoadOptions lo;
  lo.grads = GradientLifetime::kKept;  // the hand-computed steps keep gradients
  lo.loss = LossKind::kSum;
  lo.batch = 1;
  TrainingGraph g1 = b.Load(lo);
  lo.batch = 4;
  TrainingGraph g4 = b.Load(lo);
  // Measured at batch 2: Mul_0 took 1,800 us, i.e. 900 us at batch 1 and 3,600 us at batch 4.
  Calibration c = CalibrateNodeSeconds(g1, Measured(2, {{"Mul_0", "Mul", 1800 * kUs}}), kUnitRates);
  EXPECT_NEAR(c.node_seconds(g1, g1.nodes[0]), 900 * kUs, 1e-12);
  EXPECT_NEAR(c.node_seconds(g4, g4.nodes[0]), 3600 * kUs, 1e-12);
  // The ratio is taken at the graph's batch: 900 us / 300 us = 3. Relu_1 at batch 4 reads and
  // writes 400 B each: 800 us x 3 = 2,400 us.
  EXPECT_DOUBLE_EQ(c.median_ratio, 3);
  EXPECT_NEAR(c.node_seconds(g4, g4.nodes[1]), 2400 * kUs, 1e-12);
  bool noted = false;
  for (const std::string& n : c.notes) noted = noted || n.find("batch 2") != std::string::npos;
  EXPECT_TRUE(noted);
}

// x [b, 25] -> Mul(w [25]) -> h0 -> Relu -> h1 -> sum, at batch b.
TrainingGraph MulReluAt(int64_t batch) {
  GraphBuilder b;
  b.Input("x", {-1, 25})
      .Param("w", {25})
      .Node("Mul", {"x", "w"}, {"h0"})
      .Node("Relu", {"h0"}, {"h1"})
      .Output("h1");
  LoadOptions lo;
  lo.grads = GradientLifetime::kKept;  // the hand-computed steps keep gradients
  lo.loss = LossKind::kSum;
  lo.batch = batch;
  return b.Load(lo);
}

TEST(PlannerTime, AMicroBatchKeepsTheFixedPartOfTheTimeMeasuredAtTheFullBatch) {
  TrainingGraph g2 = MulReluAt(2), g1 = MulReluAt(1);
  // 1e6 FLOP/s and B/s, 100 us per op. Roofline of Mul_0: batch 2 reads x 200 B + w 100 B and
  // writes h0 200 B: 500 us + 100 us = 600 us; batch 1: 300 + 100 = 400 us. Relu_1: batch 2
  // 400 B: 500 us; batch 1: 300 us.
  const MachineRates rates = Rates(1e6, 1e6, 100 * kUs);
  ASSERT_NEAR(RooflineSeconds(g2, g2.nodes[0], rates), 600 * kUs, 1e-12);
  ASSERT_NEAR(RooflineSeconds(g1, g1.nodes[0], rates), 400 * kUs, 1e-12);
  // Measured at batch 2, the graph's: Mul_0 1,200 us, Relu_1 1,000 us.
  Calibration c = CalibrateNodeSeconds(
      g2, Measured(2, {{"Mul_0", "Mul", 1200 * kUs}, {"Relu_1", "Relu", 1000 * kUs}}), rates);
  EXPECT_NEAR(c.node_seconds(g2, g2.nodes[0]), 1200 * kUs, 1e-12);
  // At batch 1 they scale as their rooflines: 1,200 x 400 / 600 = 800 us (not 600: the weight's
  // bytes and the overhead stay), 1,000 x 300 / 500 = 600 us.
  EXPECT_NEAR(c.node_seconds(g1, g1.nodes[0]), 800 * kUs, 1e-12);
  EXPECT_NEAR(c.node_seconds(g1, g1.nodes[1]), 600 * kUs, 1e-12);
  // Measured at another batch than the graph's (no roofline there): the overhead is fixed, the
  // rest per row. Graph at batch 1, Mul_0 measured 1,200 us at batch 2: 100 + 1,100 / 2 = 650 us,
  // and at batch 4: 100 + 1,100 x 2 = 2,300 us.
  Calibration other = CalibrateNodeSeconds(g1, Measured(2, {{"Mul_0", "Mul", 1200 * kUs}}), rates);
  EXPECT_NEAR(other.node_seconds(g1, g1.nodes[0]), 650 * kUs, 1e-12);
  EXPECT_NEAR(other.node_seconds(MulReluAt(4), g1.nodes[0]), 2300 * kUs, 1e-12);
  // Its median ratio compares 650 us with Mul_0's 400 us roofline at batch 1.
  EXPECT_DOUBLE_EQ(other.median_ratio, 650.0 / 400.0);
}

TEST(PlannerTime, AMeasurementOfAnotherModelIsAnErrorNamingTheFile) {
  TrainingGraph g = ReluChain(4);
  std::string e = ErrorOf([&] {
    CalibrateNodeSeconds(g, Measured(1, {{"Conv_0", "Conv", 1e-3}}), kUnitRates);
  });
  EXPECT_NE(e.find("chain.profile.json"), std::string::npos) << e;
  EXPECT_NE(e.find("another model"), std::string::npos) << e;
  EXPECT_NE(e.find("Conv_0"), std::string::npos) << e;
  // The same name with another op is another model too.
  e = ErrorOf([&] {
    CalibrateNodeSeconds(g, Measured(1, {{"Relu_1", "Sigmoid", 1e-3}}), kUnitRates);
  });
  EXPECT_NE(e.find("another model"), std::string::npos) << e;
  e = ErrorOf([&] { CalibrateNodeSeconds(g, Measured(1, {}), kUnitRates); });
  EXPECT_NE(e.find("chain.profile.json"), std::string::npos) << e;
}

TEST(PlannerTime, MachineRatesRoundTripAndRejectNonsense) {
  MachineRates r = Rates(2e11, 3e10, 4e-6);
  r.device = "cpu (LibTorch 2.9.1, 2 threads)";
  r.measured = true;
  MachineRates q = MachineRatesFromJson(nlohmann::json::parse(MachineRatesToJson(r).dump()));
  EXPECT_DOUBLE_EQ(q.flops_per_second, 2e11);
  EXPECT_DOUBLE_EQ(q.bytes_per_second, 3e10);
  EXPECT_DOUBLE_EQ(q.op_overhead_seconds, 4e-6);
  EXPECT_EQ(q.device, r.device);
  EXPECT_TRUE(q.measured);
  nlohmann::json j = MachineRatesToJson(r);
  j["flops_per_second"] = 0;
  EXPECT_NE(ErrorOf([&] { MachineRatesFromJson(j); }).find("flops_per_second"), std::string::npos);
  j = MachineRatesToJson(r);
  j["op_overhead_seconds"] = -1;
  EXPECT_NE(ErrorOf([&] { MachineRatesFromJson(j); }).find("op_overhead_seconds"),
            std::string::npos);
  j = MachineRatesToJson(r);
  j.erase("bytes_per_second");
  EXPECT_NE(ErrorOf([&] { MachineRatesFromJson(j); }).find("bytes_per_second"), std::string::npos);
}

TEST(PlannerTime, ClassRatesRoundTripAndAnOldFileWithoutThemTakesTheGeneralRates) {
  MachineRates r = Rates(2e11, 3e10, 4e-6);
  r.classes[static_cast<size_t>(ComputeClass::kConv)] = {.flops_per_second = 5e10,
                                                         .bytes_per_second = 6e9};
  r.classes[static_cast<size_t>(ComputeClass::kPooling)] = {.flops_per_second = 7e8,
                                                            .bytes_per_second = 0};
  const nlohmann::json j = MachineRatesToJson(r);
  ASSERT_TRUE(j.contains("classes"));
  EXPECT_EQ(j["classes"].size(), 2u);  // only the measured classes
  MachineRates q = MachineRatesFromJson(nlohmann::json::parse(j.dump()));
  EXPECT_DOUBLE_EQ(q.FlopsPerSecond(ComputeClass::kConv), 5e10);
  EXPECT_DOUBLE_EQ(q.BytesPerSecond(ComputeClass::kConv), 6e9);
  EXPECT_DOUBLE_EQ(q.FlopsPerSecond(ComputeClass::kPooling), 7e8);
  EXPECT_DOUBLE_EQ(q.BytesPerSecond(ComputeClass::kPooling), 3e10);  // not measured: the general
  EXPECT_DOUBLE_EQ(q.FlopsPerSecond(ComputeClass::kMatmul), 2e11);
  r.fresh_bytes_per_second = 1.5e9;
  r.fresh_threshold_bytes = int64_t{32} << 20;
  q = MachineRatesFromJson(nlohmann::json::parse(MachineRatesToJson(r).dump()));
  EXPECT_DOUBLE_EQ(q.fresh_bytes_per_second, 1.5e9);
  EXPECT_EQ(q.fresh_threshold_bytes, int64_t{32} << 20);
  // A cache written before class rates: every class at the general rates, no fresh-memory cost.
  nlohmann::json old = j;
  old.erase("classes");
  old.erase("fresh_bytes_per_second");
  old.erase("fresh_threshold_bytes");
  EXPECT_DOUBLE_EQ(MachineRatesFromJson(old).fresh_bytes_per_second, 0);
  MachineRates o = MachineRatesFromJson(old);
  for (int k = 0; k < kNumComputeClasses; ++k) {
    EXPECT_DOUBLE_EQ(o.FlopsPerSecond(static_cast<ComputeClass>(k)), 2e11);
    EXPECT_DOUBLE_EQ(o.BytesPerSecond(static_cast<ComputeClass>(k)), 3e10);
  }
  nlohmann::json bad = j;
  bad["classes"]["convolution"] = {{"flops_per_second", 1e9}};
  std::string e = ErrorOf([&] { MachineRatesFromJson(bad); });
  EXPECT_NE(e.find("unknown class 'convolution'"), std::string::npos) << e;
  EXPECT_NE(e.find("depthwise_conv"), std::string::npos) << e;  // the known ones are listed
  bad = j;
  bad["classes"]["conv"]["flops_per_second"] = -1;
  e = ErrorOf([&] { MachineRatesFromJson(bad); });
  EXPECT_NE(e.find("classes.conv.flops_per_second"), std::string::npos) << e;
  bad = j;
  bad["classes"] = 3;
  EXPECT_NE(ErrorOf([&] { MachineRatesFromJson(bad); }).find("\"classes\" must be an object"),
            std::string::npos);
}

// CUDA's offload link (memplan calibrate, the rates cache) travels with the rates; a file
// without it has none (the planner then takes DefaultLinkRates).
TEST(PlannerTime, LinkRatesRoundTripAndAFileWithoutThemHasNone) {
  MachineRates r = Rates(2e11, 3e10, 4e-6);
  EXPECT_FALSE(MachineRatesToJson(r).contains("link"));
  r.link = {.device_to_host_bytes_per_second = 2.4e10, .host_to_device_bytes_per_second = 2.6e10};
  const nlohmann::json j = MachineRatesToJson(r);
  MachineRates q = MachineRatesFromJson(nlohmann::json::parse(j.dump()));
  EXPECT_DOUBLE_EQ(q.link.device_to_host_bytes_per_second, 2.4e10);
  EXPECT_DOUBLE_EQ(q.link.host_to_device_bytes_per_second, 2.6e10);
  nlohmann::json bad = j;
  bad["link"]["host_to_device_bytes_per_second"] = 0;
  EXPECT_NE(
      ErrorOf([&] { MachineRatesFromJson(bad); }).find("link.host_to_device_bytes_per_second"),
      std::string::npos);
  bad["link"] = 5;
  EXPECT_NE(ErrorOf([&] { MachineRatesFromJson(bad); }).find("\"link\" must be an object"),
            std::string::npos);
}

TEST(PlannerTime, DefaultRatesAreTheDocumentedOnes) {
  MachineRates cpu = DefaultMachineRates("cpu");
  EXPECT_DOUBLE_EQ(cpu.flops_per_second, 100e9);
  EXPECT_DOUBLE_EQ(cpu.bytes_per_second, 10e9);
  EXPECT_DOUBLE_EQ(cpu.op_overhead_seconds, 10e-6);
  EXPECT_FALSE(cpu.measured);
  MachineRates gpu = DefaultMachineRates("cuda:1");
  EXPECT_DOUBLE_EQ(gpu.flops_per_second, 50e12);
  EXPECT_DOUBLE_EQ(gpu.bytes_per_second, 2e12);
  EXPECT_DOUBLE_EQ(gpu.op_overhead_seconds, 20e-6);
}

}  // namespace
}  // namespace memplan
