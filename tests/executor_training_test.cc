// The training step and plan execution on small hand-built graphs and on the gpt model:
// determinism, optimizer state, measured vs predicted memory, gradient exactness of plans,
// batch-norm statistics updated once per step, and clear errors on bad input.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "memplan/analyzer.h"
#include "memplan/executor.h"
#include "memplan/plan.h"
#include "testing/corpus.h"
#include "testing/cpu_calibration.h"
#include "testing/executor_steps.h"
#include "testing/graph_builder.h"

namespace memplan {
namespace {

using testing::EqualSegments;
using testing::GraphBuilder;

// x[N,3,16,16] -> Conv -> BN -> Relu -> Dropout(0.25) -> Conv(stride 2) -> BN -> Relu ->
// GlobalAveragePool -> Flatten -> Gemm -> [N,10]
GraphBuilder SmallCnn() {
  GraphBuilder b;
  b.Input("x", {-1, 3, 16, 16});
  b.Param("w1", {8, 3, 3, 3}).Param("s1", {8}).Param("b1", {8}).Param("m1", {8}).Param("v1", {8});
  b.Param("w2", {16, 8, 3, 3})
      .Param("s2", {16})
      .Param("b2", {16})
      .Param("m2", {16})
      .Param("v2", {16});
  b.Param("w3", {10, 16}).Param("b3", {10});
  b.Node("Conv", {"x", "w1"}, {"c1"})
      .Attr("pads", std::vector<int64_t>{1, 1, 1, 1})
      .Attr("kernel_shape", std::vector<int64_t>{3, 3});
  b.Node("BatchNormalization", {"c1", "s1", "b1", "m1", "v1"}, {"n1", "rm1", "rv1"})
      .Attr("training_mode", int64_t{1});
  b.Node("Relu", {"n1"}, {"r1"});
  b.Node("Constant", {}, {"ratio"}).Attr("value_float", 0.25);
  b.Node("Constant", {}, {"train"}).Attr("value_int", int64_t{1});
  b.Node("Dropout", {"r1", "ratio", "train"}, {"d1", "mask1"});
  b.Node("Conv", {"d1", "w2"}, {"c2"})
      .Attr("pads", std::vector<int64_t>{1, 1, 1, 1})
      .Attr("strides", std::vector<int64_t>{2, 2})
      .Attr("kernel_shape", std::vector<int64_t>{3, 3});
  b.Node("BatchNormalization", {"c2", "s2", "b2", "m2", "v2"}, {"n2", "rm2", "rv2"})
      .Attr("training_mode", int64_t{1});
  b.Node("Relu", {"n2"}, {"r2"});
  b.Node("GlobalAveragePool", {"r2"}, {"p"});
  b.Node("Flatten", {"p"}, {"f"});
  b.Node("Gemm", {"f", "w3", "b3"}, {"y"}).Attr("transB", int64_t{1});
  b.Output("y");
  return b;
}

// x[N,32] -> Gemm -> Relu -> Gemm -> [N,10]: no dropout or batch norm, so micro-batches
// reproduce the full batch's gradient.
GraphBuilder Mlp() { return testing::TwoLayerMlp(); }

// x[N,32] -> Gemm -> Relu -> Dropout(0.3) -> Gemm -> [N,10]: with no batch norm, any plan
// (micro-batches too) must reproduce the full batch's step, dropout masks included.
GraphBuilder DropoutMlp() {
  GraphBuilder b;
  b.Input("x", {-1, 32})
      .Param("w1", {64, 32})
      .Param("b1", {64})
      .Param("w2", {10, 64})
      .Param("b2", {10});
  b.Node("Gemm", {"x", "w1", "b1"}, {"h"}).Attr("transB", int64_t{1});
  b.Node("Relu", {"h"}, {"r"});
  b.Node("Constant", {}, {"ratio"}).Attr("value_float", 0.3);
  b.Node("Constant", {}, {"train"}).Attr("value_int", int64_t{1});
  b.Node("Dropout", {"r", "ratio", "train"}, {"d"});
  b.Node("Gemm", {"d", "w2", "b2"}, {"y"}).Attr("transB", int64_t{1});
  b.Output("y");
  return b;
}

RunOptions Options(const GraphBuilder& b, int64_t steps) {
  RunOptions o;
  o.model_bytes = b.Bytes();
  o.random_weights = true;
  o.steps = steps;
  o.seed = 3;
  o.learning_rate = 0.05;
  return o;
}

double MaxRelErr(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::fabs(static_cast<double>(b[i])));
  }
  return den > 0 ? num / den : num;
}

// Every contiguous partition of the nodes into two segments, and one into three.
std::vector<std::vector<std::vector<NodeId>>> Segmentations(const TrainingGraph& g) {
  std::vector<std::vector<std::vector<NodeId>>> out;
  NodeId n = static_cast<NodeId>(g.nodes.size());
  auto range = [](NodeId a, NodeId b) {
    std::vector<NodeId> r;
    for (NodeId i = a; i < b; ++i) r.push_back(i);
    return r;
  };
  for (NodeId cut = 1; cut < n; ++cut) out.push_back({range(0, cut), range(cut, n)});
  out.push_back({range(0, n / 3), range(n / 3, 2 * n / 3), range(2 * n / 3, n)});
  return out;
}

void ExpectSameStep(const RunResult& plain, const RunResult& planned, const std::string& what) {
  ASSERT_EQ(plain.steps.size(), planned.steps.size());
  for (size_t s = 0; s < plain.steps.size(); ++s) {
    EXPECT_NEAR(plain.steps[s].loss, planned.steps[s].loss,
                1e-5 * std::max(1.0, std::fabs(plain.steps[s].loss)))
        << what;
  }
  ASSERT_EQ(plain.gradients.size(), planned.gradients.size()) << what;
  // A parameter whose exact gradient is zero (an attention key bias: softmax does not change
  // when every key moves by the same vector) gets rounding noise, which the order of a
  // micro-batched or fused kernel's sums changes: errors are relative to the larger of the
  // parameter's gradient and 1e-3 of the model's largest, so such noise is not a difference.
  double largest = 0;
  for (const auto& [name, grad] : plain.gradients) {
    for (float v : grad) largest = std::max(largest, std::fabs(static_cast<double>(v)));
  }
  for (const auto& [name, grad] : plain.gradients) {
    ASSERT_TRUE(planned.gradients.count(name)) << what << ": " << name;
    const std::vector<float>& mine = planned.gradients.at(name);
    double err = 0, scale = 1e-3 * largest;
    for (size_t i = 0; i < grad.size() && i < mine.size(); ++i) {
      err = std::max(err, std::fabs(static_cast<double>(mine[i]) - grad[i]));
      scale = std::max(scale, std::fabs(static_cast<double>(grad[i])));
    }
    EXPECT_LE(scale > 0 ? err / scale : err, 1e-5) << what << ": gradient of " << name;
  }
  // Running statistics advance once per step whatever the plan recomputes.
  for (const auto& [name, value] : plain.buffers) {
    EXPECT_LE(MaxRelErr(planned.buffers.at(name), value), 1e-5) << what << ": buffer " << name;
  }
}

TEST(ExecutorTraining, LossDecreasesAndRunIsDeterministic) {
  GraphBuilder b = SmallCnn();
  TrainingGraph g = b.Load({/*batch=*/8});
  RunOptions o = Options(b, 6);
  RunResult r1 = RunTraining(g, o);
  RunResult r2 = RunTraining(g, o);
  ASSERT_EQ(r1.steps.size(), 6u);
  for (size_t s = 0; s < r1.steps.size(); ++s) {
    EXPECT_TRUE(std::isfinite(r1.steps[s].loss));
    EXPECT_EQ(r1.steps[s].loss, r2.steps[s].loss) << "same seed, same losses";
  }
  EXPECT_LT(r1.steps.back().loss, r1.steps.front().loss) << "training on one batch lowers its loss";
  o.seed = 4;
  RunResult r3 = RunTraining(g, o);
  EXPECT_NE(r3.steps[0].loss, r1.steps[0].loss) << "another seed, other weights";
}

TEST(ExecutorTraining, PersistentMemoryIsExactlyWhatTheAnalyzerCounts) {
  for (const char* opt : {"sgd", "momentum", "adam"}) {
    GraphBuilder b = SmallCnn();
    LoadOptions lo{/*batch=*/4};
    lo.optimizer = ParseOptimizer(opt);
    TrainingGraph g = b.Load(lo);
    Schedule s = BuildTrainingSchedule(g);
    MemoryTimeline t = Simulate(s);
    RunResult r = RunTraining(g, Options(b, 2));
    // Step 0 of the schedule is the setup: parameters, gradients, optimizer state, batch,
    // constants.
    EXPECT_EQ(r.persistent_bytes, t.bytes_after[0]) << opt;
    EXPECT_TRUE(std::isfinite(r.steps.back().loss)) << opt;
  }
}

// Gradients set to None between steps (optimizer.zero_grad()'s default) and kept: LibTorch's
// measured peak of a plain step is the analyzer's, graph by graph, and the first step is
// already the steady state (None: the gradients die after each optimizer step). The graphs
// cover a contribution taken as .grad (Gemm's transposed weight, a bias's reduced sum), two
// contributions to a shared weight, and gradients handed back through a Transpose (mm computes
// it in the transposed layout, so it lands in the weight's) and a Reshape, taken as they are.
TEST(ExecutorTraining, GradientLifetimesMeasureAsPredicted) {
  struct Case {
    const char* name;
    GraphBuilder b;
    LossKind loss;
  };
  std::vector<Case> cases;
  cases.push_back({"mlp", Mlp(), LossKind::kCrossEntropy});
  {
    GraphBuilder b;
    b.Input("x", {-1, 64}).Param("w", {64, 64}).Param("head", {64, 10});
    b.Node("MatMul", {"x", "w"}, {"h1"})
        .Node("Relu", {"h1"}, {"r"})
        .Node("MatMul", {"r", "w"}, {"h2"});
    b.Node("MatMul", {"h2", "head"}, {"logits"}).Output("logits");
    cases.push_back({"shared weight", b, LossKind::kCrossEntropy});
  }
  {
    GraphBuilder b;
    b.Input("x", {-1, 64}).Param("w", {32, 64});
    b.Node("Transpose", {"w"}, {"wt"}).Attr("perm", std::vector<int64_t>{1, 0});
    b.Node("MatMul", {"x", "wt"}, {"y"}).Node("Relu", {"y"}, {"r"}).Output("r");
    cases.push_back({"transposed weight", b, LossKind::kSum});
  }
  {
    GraphBuilder b;
    b.Input("x", {-1, 64}).Param("w", {2048}).Ints("shape", {64, 32});
    b.Node("Reshape", {"w", "shape"}, {"wr"})
        .Node("MatMul", {"x", "wr"}, {"y"})
        .Node("Relu", {"y"}, {"r"});
    b.Output("r");
    cases.push_back({"reshaped weight", b, LossKind::kSum});
  }
  for (const Case& c : cases) {
    int64_t measured[2] = {0, 0}, predicted[2] = {0, 0};
    for (GradientLifetime grads : {GradientLifetime::kNone, GradientLifetime::kKept}) {
      const std::string what = std::string(c.name) + ", grads " + GradientLifetimeName(grads);
      LoadOptions lo{/*batch=*/8};
      lo.loss = c.loss;
      lo.grads = grads;
      lo.optimizer = Optimizer::kAdam;
      TrainingGraph g = c.b.Load(lo);
      MemoryTimeline t = Simulate(BuildTrainingSchedule(g));
      RunResult r = RunTraining(g, Options(c.b, 2));
      EXPECT_EQ(r.persistent_bytes, t.bytes_after[0]) << what;
      EXPECT_EQ(r.steps[0].peak_bytes, r.steps[1].peak_bytes) << what;
      // The loss value and its seed gradient (4 B each) are held until the backward call returns,
      // as a training loop holds them, and predicted so. With gradients set to None the peak can
      // be Adam's step, whose scalar temporaries (12 B) are not modelled; all else is exact.
      const int64_t adam_scalars = grads == GradientLifetime::kNone ? 12 : 0;
      EXPECT_GE(r.steps[1].peak_bytes - t.peak_bytes, 0) << what;
      EXPECT_LE(r.steps[1].peak_bytes - t.peak_bytes, adam_scalars) << what;
      const int k = grads == GradientLifetime::kKept;
      measured[k] = r.steps[1].peak_bytes;
      predicted[k] = t.peak_bytes;
    }
    // What setting gradients to None saves is predicted but for Adam's scalars (a copy where
    // AccumulateGrad could not take a gradient as it is would be a whole weight, >= 1 KiB, more).
    EXPECT_NEAR(measured[1] - measured[0], predicted[1] - predicted[0], 12) << c.name;
  }
}

// An inference-mode Dropout is the identity, but the mask it is asked for (here a graph output)
// is a real tensor: [64, 1000] bools are 64,000 B, in the analyzer's schedule and in the executor
// alike.
TEST(ExecutorTraining, InactiveDropoutMaskIsAllocatedAsTheAnalyzerCounts) {
  GraphBuilder b;
  b.Input("x", {-1, 1000}).Param("w", {10, 1000}).Param("bias", {10});
  b.Node("Relu", {"x"}, {"r"});
  b.Node("Constant", {}, {"ratio"}).Attr("value_float", 0.5);
  b.Node("Constant", {}, {"train"}).Attr("value_int", int64_t{0});
  b.Node("Dropout", {"r", "ratio", "train"}, {"d", "mask"});
  b.Node("Gemm", {"d", "w", "bias"}, {"y"}).Attr("transB", int64_t{1});
  b.Output("y").Output("mask");
  TrainingGraph g = b.Load({/*batch=*/64});
  const Node* dropout = nullptr;
  const Node* relu = nullptr;
  for (const Node& n : g.nodes) {
    if (n.op_type == "Dropout") dropout = &n;
    if (n.op_type == "Relu") relu = &n;
  }
  ASSERT_TRUE(dropout && relu);
  const Tensor& mask = g.tensors[dropout->outputs[1]];
  EXPECT_FALSE(mask.is_view());
  EXPECT_EQ(mask.bytes, 64000);
  EXPECT_TRUE(g.tensors[dropout->outputs[0]].is_view());  // d is r itself

  RunOptions o = Options(b, 1);
  o.trace = true;
  RunResult r = RunTraining(g, o);
  int64_t after_relu = -1, during_dropout = -1;
  for (const TraceEvent& e : r.trace) {
    if (e.phase == "forward" && e.node == relu->id) after_relu = e.bytes_after;
    if (e.phase == "forward" && e.node == dropout->id) during_dropout = e.peak_during;
  }
  EXPECT_EQ(during_dropout - after_relu, 64000);
}

// An inactive Dropout (opset 10, which has no training switch; opset 13 with training_mode
// false; opset 13 training with ratio 0) is the identity in the executor as in the analyzer: its
// forward allocates nothing (d is r itself).
TEST(ExecutorTraining, InactiveDropoutsAreTheIdentity) {
  struct Case {
    const char* what;
    int64_t opset;
    int64_t mode;  // -1: no training_mode input (ratio as an attribute)
    double ratio;
  };
  for (const Case& c : {Case{"opset 10", 10, -1, 0.5}, Case{"training_mode false", 13, 0, 0.5},
                        Case{"ratio 0", 13, 1, 0.0}}) {
    GraphBuilder b;
    b.Opset(c.opset).Input("x", {-1, 1000}).Param("w", {10, 1000}).Param("bias", {10});
    b.Node("Relu", {"x"}, {"r"});
    if (c.mode < 0) {
      b.Node("Dropout", {"r"}, {"d"}).Attr("ratio", c.ratio);
    } else {
      b.Node("Constant", {}, {"ratio"}).Attr("value_float", c.ratio);
      b.Node("Constant", {}, {"train"}).Attr("value_int", c.mode);
      b.Node("Dropout", {"r", "ratio", "train"}, {"d"});
    }
    b.Node("Gemm", {"d", "w", "bias"}, {"y"}).Attr("transB", int64_t{1});
    b.Output("y");
    TrainingGraph g = b.Load({/*batch=*/64});
    const TensorId d = g.FindTensor("d");
    const NodeId dropout = g.tensors[d].producer, relu = g.tensors[g.FindTensor("r")].producer;
    EXPECT_TRUE(IsIdentityInTraining(g.nodes[dropout], g.tensors)) << c.what;
    EXPECT_EQ(g.tensors[d].storage, g.FindTensor("r")) << c.what;

    RunOptions o = Options(b, 1);
    o.trace = true;
    RunResult r = RunTraining(g, o);
    int64_t after_relu = -1, during_dropout = -1;
    for (const TraceEvent& e : r.trace) {
      if (e.phase == "forward" && e.node == relu) after_relu = e.bytes_after;
      if (e.phase == "forward" && e.node == dropout) during_dropout = e.peak_during;
    }
    EXPECT_GE(after_relu, 0) << c.what;
    EXPECT_EQ(during_dropout - after_relu, 0) << c.what;
  }
}

// A training Dropout runs what torch.nn.Dropout runs. On the CPU that is at::dropout's noise: a
// float tensor of the input's shape, scaled, times the input, and mul keeps the noise for the
// backward. [64, 1000] floats: the forward makes the noise and d, 256,000 B each, and both stay
// (d for the Gemm's weight gradient; r stays too, MatMul's backward has no use for it but Relu's
// has). A mask the graph reads is ONNX's bool mask instead: 64,000 B beside d. Either way, the
// analyzer's schedule predicts the step's peak.
TEST(ExecutorTraining, ATrainingDropoutKeepsTorchNnDropoutsNoiseOnTheCpu) {
  for (bool mask_read : {false, true}) {
    GraphBuilder b;
    b.Input("x", {-1, 250}).Param("w1", {250, 1000}).Param("w", {10, 1000}).Param("bias", {10});
    b.Node("MatMul", {"x", "w1"}, {"h"});
    b.Node("Relu", {"h"}, {"r"});
    b.Node("Constant", {}, {"ratio"}).Attr("value_float", 0.5);
    b.Node("Constant", {}, {"train"}).Attr("value_int", int64_t{1});
    b.Node("Dropout", {"r", "ratio", "train"}, {"d", "mask"});
    b.Node("Gemm", {"d", "w", "bias"}, {"y"}).Attr("transB", int64_t{1});
    b.Output("y");
    if (mask_read) b.Output("mask");
    TrainingGraph g = b.Load({/*batch=*/64});
    const NodeId dropout = g.tensors[g.FindTensor("d")].producer;
    const NodeId relu = g.tensors[g.FindTensor("r")].producer;
    RunOptions o = Options(b, 1);
    o.trace = true;
    RunResult r = RunTraining(g, o);
    int64_t after_relu = -1, during_dropout = -1, after_dropout = -1;
    for (const TraceEvent& e : r.trace) {
      if (e.phase != "forward") continue;
      if (e.node == relu) after_relu = e.bytes_after;
      if (e.node == dropout) {
        during_dropout = e.peak_during;
        after_dropout = e.bytes_after;
      }
    }
    const int64_t kept = mask_read ? 64000 + 256000 : 256000 + 256000;
    EXPECT_GE(after_relu, 0) << mask_read;
    // The ONNX path scales its masked copy with the mask alive: a 12 B scalar temporary.
    EXPECT_NEAR(during_dropout - after_relu, kept, mask_read ? 12 : 0) << mask_read;
    EXPECT_EQ(after_dropout - after_relu, kept) << mask_read;
    const MemoryTimeline t = Simulate(BuildTrainingSchedule(g));
    EXPECT_EQ(r.steps[0].peak_bytes, t.peak_bytes) << mask_read;
  }
}

// A small weight read through a Transpose is trained (the analyzer once folded Transpose(w) to a
// constant). y = x w^T summed over [3,4]: dL/dw[i][j] = sum_b x[b][j], the same for every row i.
TEST(ExecutorTraining, WeightReadThroughATransposeIsTrained) {
  GraphBuilder b;
  b.Input("x", {-1, 8}).Param("w", {4, 8});
  b.Node("Transpose", {"w"}, {"wt"}).Attr("perm", std::vector<int64_t>{1, 0});
  b.Node("MatMul", {"x", "wt"}, {"y"});
  b.Output("y");
  LoadOptions lo{/*batch=*/3};
  lo.loss = LossKind::kSum;
  TrainingGraph g = b.Load(lo);
  RunOptions o = Options(b, 2);
  o.keep_gradients = true;
  RunResult r = RunTraining(g, o);
  ASSERT_TRUE(r.gradients.count("w"));
  const std::vector<float>& gw = r.gradients.at("w");
  ASSERT_EQ(gw.size(), 32u);
  double sum = 0;
  for (int j = 0; j < 8; ++j) sum += std::fabs(gw[j]);
  EXPECT_GT(sum, 0);
  for (int i = 1; i < 4; ++i) {
    for (int j = 0; j < 8; ++j)
      EXPECT_FLOAT_EQ(gw[i * 8 + j], gw[j]) << "row " << i << ", column " << j;
  }
  // The setup holds what the analyzer counts: x 96 + w 128 B (gradients set to None between
  // steps are born in the backward).
  EXPECT_EQ(r.persistent_bytes, 96 + 128);
}

TEST(ExecutorTraining, MeasuredPeakIsNearThePrediction) {
  GraphBuilder b = SmallCnn();
  // Calibrated first where the rules are unverified on this CPU's kernels.
  TrainingGraph g =
      testing::CalibratedOnThisCpu([&](const LoadOptions& o) { return b.Load(o); }, {/*batch=*/16});
  MemoryTimeline t = Simulate(BuildTrainingSchedule(g));
  RunResult r = RunTraining(g, Options(b, 2));
  double err = static_cast<double>(t.peak_bytes - r.measured_peak_bytes) /
               static_cast<double>(r.measured_peak_bytes);
  std::printf("small cnn batch 16: predicted %lld, measured %lld (%+.2f%%)\n",
              static_cast<long long>(t.peak_bytes), static_cast<long long>(r.measured_peak_bytes),
              100 * err);
  // The README's promise for a plain step: within 1%. On a model this small oneDNN's reorders
  // and workspaces are a large share of the peak, so this holds only if the conv rules do.
  EXPECT_LE(std::fabs(err), 0.01);
  EXPECT_EQ(r.steps[0].peak_bytes, r.steps[1].peak_bytes) << "steady state from the first step";
}

// The sum loss hands its input's gradient on as a broadcast view (stride 0): mm's and gelu's
// backward copy it to a contiguous one first (a temporary of the gradient's size, here 1.5%
// and a third of the peak), relu's reads it as it is. The analyzer predicts each within 0.5%.
TEST(ExecutorTraining, SumLossBroadcastGradientCopiesAreMeasured) {
  struct Case {
    const char* name;
    GraphBuilder model;
    int64_t batch;
  };
  std::vector<Case> cases;
  GraphBuilder mm;
  mm.Input("x", {-1, 64}).Param("w", {64, 256}).Node("MatMul", {"x", "w"}, {"y"}).Output("y");
  cases.push_back({"MatMul", mm, 3});
  GraphBuilder mm_t;
  mm_t.Input("x", {-1, 64}).Param("w", {64, 256}).Node("MatMul", {"x", "w"}, {"y"});
  mm_t.Node("Transpose", {"y"}, {"yt"}).Attr("perm", std::vector<int64_t>{1, 0}).Output("yt");
  cases.push_back({"MatMul, Transpose", mm_t, 3});
  for (const char* act : {"Gelu", "Relu"}) {
    GraphBuilder b;
    b.Input("x", {-1, 8}).Param("w", {8, 1024}).Node("MatMul", {"x", "w"}, {"h"});
    b.Node(act, {"h"}, {"y"}).Output("y");
    cases.push_back({act, b, 64});
  }
  for (const Case& c : cases) {
    LoadOptions lo{/*batch=*/c.batch};
    lo.loss = LossKind::kSum;
    TrainingGraph g = c.model.Load(lo);
    MemoryTimeline t = Simulate(BuildTrainingSchedule(g));
    RunResult r = RunTraining(g, Options(c.model, 2));
    double err = static_cast<double>(t.peak_bytes - r.measured_peak_bytes) /
                 static_cast<double>(r.measured_peak_bytes);
    std::printf("sum loss, %s: predicted %lld, measured %lld (%+.2f%%)\n", c.name,
                static_cast<long long>(t.peak_bytes), static_cast<long long>(r.measured_peak_bytes),
                100 * err);
    EXPECT_LE(std::fabs(err), 0.005) << c.name;
  }
}

// x[N,32] -> Gemm -> a composite as TorchScript exports it before opsets 17/20 (erf-GELU,
// GELU's tanh approximation, or layer normalisation with its scale and bias) -> Gemm -> [N,10].
enum class Composite { kErfGelu, kTanhGelu, kLayerNorm, kRmsNorm, kSilu };
GraphBuilder CompositeMlp(Composite c) {
  GraphBuilder b;
  b.Input("x", {-1, 32})
      .Param("w1", {256, 32})
      .Param("b1", {256})
      .Param("w2", {10, 256})
      .Param("b2", {10});
  // Scale and bias as constants of known values: random weights would start a LayerNormalization's
  // scale at 1 and a Mul's operand at random, and the two graphs would train differently.
  std::vector<double> gamma(256), beta(256);
  for (int i = 0; i < 256; ++i) gamma[i] = 0.5 + i / 256.0, beta[i] = 0.01 * i - 1.0;
  b.Node("Constant", {}, {"gamma"})
      .Attr("value_floats", gamma)
      .Node("Constant", {}, {"beta"})
      .Attr("value_floats", beta);
  b.Node("Gemm", {"x", "w1", "b1"}, {"h"}).Attr("transB", int64_t{1});
  if (c == Composite::kErfGelu) testing::AppendErfGelu(b, "h", "g", std::sqrt(2.0));
  if (c == Composite::kTanhGelu) testing::AppendTanhGelu(b, "h", "g");
  if (c == Composite::kLayerNorm) testing::AppendLayerNormOps(b, "h", "g", "gamma", "beta");
  if (c == Composite::kRmsNorm) testing::AppendRmsNormOps(b, "h", "g", "gamma");
  if (c == Composite::kSilu) testing::AppendSiluOps(b, "h", "g");
  b.Node("Gemm", {"g", "w2", "b2"}, {"y"}).Attr("transB", int64_t{1});
  b.Output("y");
  return b;
}

// The fused op trains exactly like the ops it replaces, and each graph measures what the
// analyzer predicts for it: the fused one keeps less for the backward.
TEST(ExecutorTraining, FusedCompositesTrainLikeTheirOpsAndSaveLess) {
  for (Composite c : {Composite::kErfGelu, Composite::kTanhGelu, Composite::kLayerNorm,
                      Composite::kRmsNorm, Composite::kSilu}) {
    const std::string what = c == Composite::kErfGelu     ? "erf-GELU"
                             : c == Composite::kTanhGelu  ? "tanh-GELU"
                             : c == Composite::kLayerNorm ? "layer norm"
                             : c == Composite::kRmsNorm   ? "RMS norm"
                                                          : "SiLU";
    GraphBuilder b = CompositeMlp(c);
    RunOptions o = Options(b, 2);
    LoadOptions fused{/*batch=*/16};
    LoadOptions unfused = fused;
    unfused.fuse_composite_ops = false;
    TrainingGraph gf = b.Load(fused), gu = b.Load(unfused);
    ASSERT_LT(gf.nodes.size(), gu.nodes.size()) << what;
    RunResult rf = RunTraining(gf, o), ru = RunTraining(gu, o);
    ExpectSameStep(ru, rf, what);
    const int64_t pf = Simulate(BuildTrainingSchedule(gf)).peak_bytes;
    const int64_t pu = Simulate(BuildTrainingSchedule(gu)).peak_bytes;
    EXPECT_NEAR(static_cast<double>(rf.measured_peak_bytes), static_cast<double>(pf),
                0.005 * static_cast<double>(pf))
        << what;
    std::printf("%s: fused predicted %lld measured %lld; op by op predicted %lld measured %lld\n",
                what.c_str(), static_cast<long long>(pf),
                static_cast<long long>(rf.measured_peak_bytes), static_cast<long long>(pu),
                static_cast<long long>(ru.measured_peak_bytes));
    // Op by op, layer normalisation measures 190,752 B against 158,040 B predicted (+20.7%), RMS
    // normalisation 174,368 B against 158,104 B: backward temporaries of ReduceMean, Pow, Sqrt,
    // Reciprocal or Div that the rules miss. Fused they are exact, so the op-by-op form is only
    // checked for the GELUs and SiLU.
    if (c != Composite::kLayerNorm && c != Composite::kRmsNorm) {
      EXPECT_NEAR(static_cast<double>(ru.measured_peak_bytes), static_cast<double>(pu),
                  0.005 * static_cast<double>(pu))
          << what;
    }
    // [16,256] floats are 16 KiB; op by op, more of them are kept for the backward. Not for RMS
    // normalisation on the CPU: at::rms_norm is itself composite there (pow, mean, rsqrt, two
    // muls) and keeps as much; its backward's temporaries peak higher (190,680 B) than the ONNX
    // ops' do.
    if (c != Composite::kRmsNorm) EXPECT_LT(rf.measured_peak_bytes, ru.measured_peak_bytes) << what;
  }
}

// Attention fused into at::scaled_dot_product_attention trains as its ONNX ops do (within 1e-5)
// and each graph measures its prediction; the fused one keeps no T x T probabilities.
TEST(ExecutorTraining, FusedAttentionTrainsLikeItsOpsAndSavesLess) {
  GraphBuilder b = testing::AttentionBlock();
  RunOptions o = Options(b, 2);
  o.keep_gradients = true;
  LoadOptions fused{/*batch=*/8};
  LoadOptions unfused = fused;
  unfused.fuse_composite_ops = false;
  TrainingGraph gf = b.Load(fused), gu = b.Load(unfused);
  ASSERT_LT(gf.nodes.size(), gu.nodes.size());
  RunResult rf = RunTraining(gf, o), ru = RunTraining(gu, o);
  ExpectSameStep(ru, rf, "attention");
  const int64_t pf = Simulate(BuildTrainingSchedule(gf)).peak_bytes;
  const int64_t pu = Simulate(BuildTrainingSchedule(gu)).peak_bytes;
  std::printf(
      "attention: fused predicted %lld measured %lld; op by op predicted %lld measured %lld\n",
      static_cast<long long>(pf), static_cast<long long>(rf.measured_peak_bytes),
      static_cast<long long>(pu), static_cast<long long>(ru.measured_peak_bytes));
  // Within 1%, never more than 0.5% under (measured: 136 B of small buffers inside the flash
  // backward are not modelled).
  EXPECT_GE(static_cast<double>(pf), 0.995 * static_cast<double>(rf.measured_peak_bytes));
  EXPECT_NEAR(static_cast<double>(rf.measured_peak_bytes), static_cast<double>(pf),
              0.01 * static_cast<double>(pf));
  EXPECT_NEAR(static_cast<double>(ru.measured_peak_bytes), static_cast<double>(pu),
              0.01 * static_cast<double>(pu));
  EXPECT_LT(rf.measured_peak_bytes, ru.measured_peak_bytes);
}

TEST(ExecutorPlans, EverySegmentationGivesThePlainStepsGradients) {
  GraphBuilder b = SmallCnn();
  TrainingGraph g = b.Load({/*batch=*/4});
  RunOptions o = Options(b, 2);
  o.keep_gradients = true;
  RunResult plain = RunTraining(g, o);
  ASSERT_FALSE(plain.gradients.empty());
  ASSERT_FALSE(plain.buffers.empty());
  for (const auto& segments : Segmentations(g)) {
    o.segments = segments;
    RunResult planned = RunTraining(g, o);
    std::string what = std::to_string(segments.size()) + " segments, first of " +
                       std::to_string(segments[0].size()) + " nodes";
    ExpectSameStep(plain, planned, what);
    if (segments.size() > 1) EXPECT_GT(planned.steps[0].recompute_seconds, 0.0);
  }
}

TEST(ExecutorPlans, MicroBatchesAccumulateTheFullBatchGradient) {
  GraphBuilder b = Mlp();
  RunOptions o = Options(b, 2);
  o.keep_gradients = true;
  RunResult full = RunTraining(b.Load({/*batch=*/8}), o);
  o.micro_batches = 4;
  TrainingGraph micro = b.Load({/*batch=*/2});
  RunResult accumulated = RunTraining(micro, o);
  ExpectSameStep(full, accumulated, "4 micro-batches of 2");
  // The whole batch stays resident: the other micro-batches' inputs are the plan's extra.
  MemoryTimeline t = Simulate(BuildTrainingSchedule(micro));
  EXPECT_EQ(accumulated.persistent_bytes, t.bytes_after[0] + 3 * micro.input_bytes());
  o.segments = {{0, 1}, {2, 3}};
  ExpectSameStep(full, RunTraining(micro, o), "4 micro-batches of 2, two segments");
}

TEST(ExecutorPlans, MicroBatchesDrawTheFullBatchsDropoutMasks) {
  GraphBuilder b = DropoutMlp();
  RunOptions o = Options(b, 2);
  o.keep_gradients = true;
  RunResult full = RunTraining(b.Load({/*batch=*/8}), o);
  for (int k : {2, 4}) {
    o.micro_batches = k;
    TrainingGraph micro = b.Load({/*batch=*/8 / k});
    o.segments.clear();
    ExpectSameStep(full, RunTraining(micro, o), std::to_string(k) + " micro-batches");
    o.segments = EqualSegments(micro, 2);
    ExpectSameStep(full, RunTraining(micro, o), std::to_string(k) + " micro-batches, two segments");
  }
}

// A different seed draws other masks: the equality above is not the absence of dropout.
TEST(ExecutorPlans, DropoutMasksDependOnTheSeed) {
  GraphBuilder b = DropoutMlp();
  RunOptions o = Options(b, 1);
  o.keep_gradients = true;
  RunResult a = RunTraining(b.Load({/*batch=*/8}), o);
  o.seed = 4;
  RunResult c = RunTraining(b.Load({/*batch=*/8}), o);
  EXPECT_GT(MaxRelErr(c.gradients.at("w2"), a.gradients.at("w2")), 1e-3);
}

TEST(ExecutorPlans, GptMicroBatchedPlansGiveTheFullBatchsStep) {
  std::string path = testing::CorpusModel("gpt");
  RunOptions o;
  o.random_weights = true;
  o.steps = 1;
  o.keep_gradients = true;
  o.seed = 13;
  RunResult full = RunTraining(LoadTrainingGraph(path, {/*batch=*/4}), o);
  for (int k : {2, 4}) {
    TrainingGraph micro = LoadTrainingGraph(path, {/*batch=*/4 / k});
    o.micro_batches = k;
    o.segments = EqualSegments(micro, 2);
    ExpectSameStep(full, RunTraining(micro, o),
                   "gpt, " + std::to_string(k) + " micro-batches, two segments");
  }
}

TEST(ExecutorPlans, GptPlanGivesThePlainStepsGradients) {
  std::string path = testing::CorpusModel("gpt");
  TrainingGraph g = LoadTrainingGraph(path, {/*batch=*/1});
  RunOptions o;
  o.random_weights = true;
  o.steps = 1;
  o.keep_gradients = true;
  o.seed = 11;
  RunResult plain = RunTraining(g, o);
  for (int k : {2, 4}) {
    o.segments = EqualSegments(g, k);
    RunResult planned = RunTraining(g, o);
    ExpectSameStep(plain, planned, "gpt, " + std::to_string(k) + " segments");
    EXPECT_GT(planned.steps[0].recompute_seconds, 0.0);
  }
}

// A hand-built graph's plain step (two steps, gradients kept) and the options that ran it, to
// run plans of the same graph beside it.
struct PlainStep {
  TrainingGraph g;
  RunOptions o;
  RunResult plain;
};
PlainStep RunPlain(const GraphBuilder& b, int64_t batch) {
  PlainStep s{b.Load({batch}), Options(b, 2), {}};
  s.o.keep_gradients = true;
  s.plain = RunTraining(s.g, s.o);
  return s;
}

// DropoutMlp's step on a batch of 8 equals its step on 2 micro-batches of 4 with `plan` applied.
void ExpectMicroBatchesGiveTheFullBatchsStep(
    const std::function<void(const TrainingGraph&, RunOptions&)>& plan, const std::string& what) {
  GraphBuilder b = DropoutMlp();
  PlainStep full = RunPlain(b, 8);
  TrainingGraph micro = b.Load({/*batch=*/4});
  full.o.micro_batches = 2;
  plan(micro, full.o);
  ExpectSameStep(full.plain, RunTraining(micro, full.o), "2 micro-batches, " + what);
}

// Selective recompute (plan.h): a dropped storage is recomputed without autograd when the
// backward reads it, through saved-tensor hooks. The math is the plain step's: same losses and
// gradients, the forward's dropout masks, batch-norm statistics updated once.
TEST(ExecutorSelective, EachDroppedTensorGivesThePlainStepsGradients) {
  auto [g, o, plain] = RunPlain(SmallCnn(), 4);
  const std::vector<TensorId> candidates = RecomputableTensors(g);
  ASSERT_GE(candidates.size(), 6u);  // conv, BN, relu, dropout outputs and the masks' kin
  for (TensorId t : candidates) {
    o.recomputed = {t};
    RunResult planned = RunTraining(g, o);
    ExpectSameStep(plain, planned, "recomputing " + g.tensors[t].name);
    EXPECT_GT(planned.steps[1].recompute_seconds, 0.0) << g.tensors[t].name;
  }
  o.recomputed = candidates;
  ExpectSameStep(plain, RunTraining(g, o), "recomputing every candidate");
}

TEST(ExecutorSelective, MicroBatchesWithDroppedTensorsGiveTheFullBatchsStep) {
  ExpectMicroBatchesGiveTheFullBatchsStep(
      [](const TrainingGraph& g, RunOptions& o) { o.recomputed = RecomputableTensors(g); },
      "every candidate recomputed");
}

TEST(ExecutorSelective, SegmentsAndDroppedTensorsAreRefused) {
  GraphBuilder b = Mlp();
  TrainingGraph g = b.Load({/*batch=*/4});
  RunOptions o = Options(b, 1);
  o.segments = {{0, 1}, {2, 3}};
  o.recomputed = RecomputableTensors(g);
  try {
    RunTraining(g, o);
    FAIL() << "expected an error";
  } catch (const MemplanError& e) {
    EXPECT_NE(std::string(e.what()).find("does not combine"), std::string::npos) << e.what();
  }
}

// The measured peak of a selective plan is its replay's (the schedule is what the executor
// does), on real models: every candidate dropped, and every other one.
TEST(ExecutorSelective, MeasuredPeakIsTheReplayedPeak) {
  struct Case {
    const char* model;
    int64_t batch;
  };
  for (Case c : {Case{"gpt", 2}, Case{"resnet18", 4}, Case{"mobilenet_v2", 2}}) {
    TrainingGraph g = LoadTrainingGraph(testing::CorpusModel(c.model), {/*batch=*/c.batch});
    std::vector<TensorId> all = RecomputableTensors(g);
    std::vector<TensorId> half;
    for (size_t i = 0; i < all.size(); i += 2) half.push_back(all[i]);
    for (const std::vector<TensorId>* set : {&all, &half}) {
      Plan p = ReplaySelective(g, *set);
      RunOptions o;
      o.random_weights = true;
      o.steps = 2;
      o.recomputed = *set;
      RunResult r = RunTraining(g, o);
      const double err = static_cast<double>(p.predicted_peak_bytes - r.measured_peak_bytes) /
                         static_cast<double>(r.measured_peak_bytes);
      std::printf(
          "selective %-14s batch %lld, %zu of %zu dropped: predicted %lld, measured %lld "
          "(%+.3f%%), plain %lld\n",
          c.model, static_cast<long long>(c.batch), set->size(), all.size(),
          static_cast<long long>(p.predicted_peak_bytes),
          static_cast<long long>(r.measured_peak_bytes), 100 * err,
          static_cast<long long>(Simulate(BuildTrainingSchedule(g)).peak_bytes));
      EXPECT_LE(std::fabs(err), 0.01) << c.model << ", " << set->size() << " dropped";
    }
  }
}

TEST(ExecutorSelective, GptGradientsWithDroppedTensors) {
  TrainingGraph g = LoadTrainingGraph(testing::CorpusModel("gpt"), {/*batch=*/1});
  RunOptions o;
  o.random_weights = true;
  o.steps = 1;
  o.keep_gradients = true;
  o.seed = 11;
  RunResult plain = RunTraining(g, o);
  o.recomputed = RecomputableTensors(g);
  RunResult planned = RunTraining(g, o);
  ExpectSameStep(plain, planned, "gpt, every candidate recomputed");
  EXPECT_GT(planned.steps[0].recompute_seconds, 0.0);
}

// Offload (plan.h): a saved storage moves to host memory after its last forward reader and is
// prefetched for the backward. The math is the plain step's.
std::vector<OffloadChoice> OffloadEach(const std::vector<TensorId>& roots, NodeId prefetch_at) {
  std::vector<OffloadChoice> out;
  for (TensorId t : roots) out.push_back({t, /*free_after=*/0, prefetch_at});
  return out;
}

TEST(ExecutorOffload, EachOffloadedTensorGivesThePlainStepsGradients) {
  auto [g, o, plain] = RunPlain(SmallCnn(), 4);
  const std::vector<TensorId> candidates = RecomputableTensors(g);
  ASSERT_GE(candidates.size(), 6u);
  const NodeId last = static_cast<NodeId>(g.nodes.size()) - 1;
  // Prefetched at the first read (node 0: the last backward work), and at the backward's start.
  for (NodeId prefetch_at : {NodeId{0}, last}) {
    for (TensorId t : candidates) {
      o.offloaded = OffloadEach({t}, prefetch_at);
      RunResult planned = RunTraining(g, o);
      ExpectSameStep(plain, planned, "offloading " + g.tensors[t].name);
      EXPECT_EQ(planned.measured_host_peak_bytes, g.tensors[t].bytes) << g.tensors[t].name;
    }
  }
  o.offloaded = OffloadEach(candidates, last);
  ExpectSameStep(plain, RunTraining(g, o), "offloading every candidate");
}

TEST(ExecutorOffload, OffloadAndRecomputeCombine) {
  auto [g, o, plain] = RunPlain(SmallCnn(), 4);
  const std::vector<TensorId> candidates = RecomputableTensors(g);
  // Alternate: a recompute then reads offloaded storages (its inputs) from their prefetched copy.
  for (size_t first : {size_t{0}, size_t{1}}) {
    o.recomputed.clear();
    std::vector<TensorId> off;
    for (size_t i = 0; i < candidates.size(); ++i)
      ((i % 2 == first) ? o.recomputed : off).push_back(candidates[i]);
    o.offloaded = OffloadEach(off, 0);
    RunResult planned = RunTraining(g, o);
    ExpectSameStep(plain, planned, "recompute and offload alternating");
    EXPECT_GT(planned.steps[1].recompute_seconds, 0.0);
  }
}

TEST(ExecutorOffload, MicroBatchesWithOffloadedTensorsGiveTheFullBatchsStep) {
  ExpectMicroBatchesGiveTheFullBatchsStep(
      [](const TrainingGraph& g, RunOptions& o) {
        o.offloaded = OffloadEach(RecomputableTensors(g), 0);
      },
      "every candidate offloaded");
}

// A micro-batched plan is replayed with kept gradients (SteppedGradients) and runs with them, as
// `memplan run` runs it. Set to None, the first micro-batch's AccumulateGrad would steal the
// class token's gradient: Concat's backward hands it a dense narrow view of the incoming gradient
// (and Expand at a micro-batch of 1 is no copy), which then keeps every row of that gradient
// alive through the later micro-batches (vit_b_16 at 4 x 1: 602,112 B over the replay).
TEST(ExecutorOffload, MicroBatchedPlanRunsWithTheGradientsItWasReplayedWith) {
  GraphBuilder b;
  b.Input("x", {-1, 16, 32}).Param("cls", {1, 1, 32}).Param("w", {32, 32});
  b.Node("Concat", {"cls", "x"}, {"y"}).Attr("axis", int64_t{1});
  b.Node("MatMul", {"y", "w"}, {"z"});
  b.Node("Flatten", {"z"}, {"logits"}).Attr("axis", int64_t{1});
  b.Output("logits");
  const std::string path = ::testing::TempDir() + "/memplan_class_token.onnx";
  b.Save(path);
  LoadOptions lo{/*batch=*/1};
  const TrainingGraph g = LoadTrainingGraph(path, lo);  // gradients set to None
  const int64_t k = 2;
  lo.grads = SteppedGradients(lo.grads, /*devices=*/1, k);
  const TrainingGraph stepped = LoadTrainingGraph(path, lo);
  Plan p = ReplayOffload(stepped, {}, OffloadEach(RecomputableTensors(stepped), 0),
                         {.strategy = "offload"}, {});
  ASSERT_FALSE(p.offloaded.empty());
  ApplyMicroBatches(p, stepped, k, {});
  const RunResult r = testing::RunSteps(g, &p);
  EXPECT_EQ(r.measured_peak_bytes, p.predicted_peak_bytes);
  EXPECT_EQ(r.measured_host_peak_bytes, p.predicted_host_peak_bytes);
}

// On CPU the link is emulated: a copy completes B / rate after it starts (copies of a direction
// queue), and the compute stream's wait sleeps until then.
TEST(ExecutorOffload, EmulatedLinkStallsAtItsRate) {
  GraphBuilder b = SmallCnn();
  TrainingGraph g = b.Load({/*batch=*/64});
  RunOptions o = Options(b, 1);
  const std::vector<TensorId> candidates = RecomputableTensors(g);
  o.offloaded = OffloadEach(candidates, 0);
  int64_t bytes = 0;
  for (TensorId t : candidates) bytes += g.tensors[t].bytes;
  // 1 MB/s: the forward and backward of this small graph take far less than the copies, so the
  // step waits at least for the last offload's and the last prefetch's whole transfer.
  o.link = {.device_to_host_bytes_per_second = 1e6, .host_to_device_bytes_per_second = 1e6};
  RunResult slow = RunTraining(g, o);
  int64_t largest = 0;
  for (TensorId t : candidates) largest = std::max(largest, g.tensors[t].bytes);
  EXPECT_GT(slow.steps[0].stall_seconds, 2 * static_cast<double>(largest) / 1e6 * 0.9);
  EXPECT_LT(slow.steps[0].stall_seconds, 2 * static_cast<double>(bytes) / 1e6 + 1.0);
  o.emulate_link = false;
  EXPECT_EQ(RunTraining(g, o).steps[0].stall_seconds, 0.0);
}

// The measured device and host peaks of an offload plan are its replay's, on real models: the
// host's to the byte.
TEST(ExecutorOffload, MeasuredPeaksAreTheReplayedPeaks) {
  struct Case {
    const char* model;
    int64_t batch;
  };
  for (Case c : {Case{"gpt", 2}, Case{"resnet18", 4}, Case{"mobilenet_v2", 2}}) {
    TrainingGraph g = LoadTrainingGraph(testing::CorpusModel(c.model), {/*batch=*/c.batch});
    const std::vector<TensorId> all = RecomputableTensors(g);
    const NodeId last = static_cast<NodeId>(g.nodes.size()) - 1;
    std::vector<TensorId> odd, even;
    for (size_t i = 0; i < all.size(); ++i) (i % 2 ? odd : even).push_back(all[i]);
    struct Mix {
      const char* what;
      std::vector<TensorId> recomputed;
      std::vector<OffloadChoice> offloaded;
    };
    // Prefetch at the first read and at the backward's start (every prefetched copy at once);
    // freed at the last reader and at the forward's end.
    std::vector<OffloadChoice> late = OffloadEach(all, 0), early = OffloadEach(all, last);
    for (OffloadChoice& e : early) e.free_after = last;
    const Mix mixes[] = {{"all offloaded, prefetched at first read", {}, late},
                         {"all offloaded, prefetched early, freed late", {}, early},
                         {"half recomputed, half offloaded", odd, OffloadEach(even, 0)}};
    for (const Mix& m : mixes) {
      Plan p = ReplayOffload(g, m.recomputed, m.offloaded, {.strategy = "offload"}, {});
      RunResult r = testing::RunSteps(g, &p);
      std::printf(
          "offload %-14s batch %lld, %s: device predicted %lld measured %lld, host predicted "
          "%lld measured %lld, plain %lld\n",
          c.model, static_cast<long long>(c.batch), m.what,
          static_cast<long long>(p.predicted_peak_bytes),
          static_cast<long long>(r.measured_peak_bytes),
          static_cast<long long>(p.predicted_host_peak_bytes),
          static_cast<long long>(r.measured_host_peak_bytes),
          static_cast<long long>(Simulate(BuildTrainingSchedule(g)).peak_bytes));
      // Device: at most nll_loss's saved total weight over (4 B, alive from the loss's forward to
      // its backward, not modelled); the loss and its seed gradient are.
      EXPECT_GE(r.measured_peak_bytes, p.predicted_peak_bytes) << c.model << ": " << m.what;
      EXPECT_LE(r.measured_peak_bytes, p.predicted_peak_bytes + 4) << c.model << ": " << m.what;
      EXPECT_EQ(r.measured_host_peak_bytes, p.predicted_host_peak_bytes)
          << c.model << ": " << m.what;
    }
  }
}

// One set of ops: whatever memplan can analyze and plan, it can also run, and the executor
// implements no op the analyzer has no memory rule for, except the known gaps below.
TEST(ExecutorOps, EveryOpWithARuleHasAKernelAndTheReverse) {
  // Kernels written for the ONNX backend conformance cases that have no analyzer rule yet (no
  // shape, FLOPs or saved-tensor rule): models using them are refused by `memplan analyze`.
  // Adding a rule means removing the op here; a new kernel without a rule fails this test.
  const std::set<std::string> kernels_without_rule = {"Acos",
                                                      "Acosh",
                                                      "Asin",
                                                      "Asinh",
                                                      "Atan",
                                                      "Atanh",
                                                      "Compress",
                                                      "Cosh",
                                                      "DepthToSpace",
                                                      "Det",
                                                      "EyeLike",
                                                      "Hardmax",
                                                      "LRN",
                                                      "MeanVarianceNormalization",
                                                      "NegativeLogLikelihoodLoss",
                                                      "OneHot",
                                                      "ReduceL1",
                                                      "ReduceLogSum",
                                                      "ReduceLogSumExp",
                                                      "Scatter",
                                                      "Shrink",
                                                      "Sinh",
                                                      "SoftmaxCrossEntropyLoss",
                                                      "SpaceToDepth",
                                                      "Tan",
                                                      "ThresholdedRelu",
                                                      "Xor"};
  const std::vector<std::string> rules = SupportedOpTypes(), kernels = ExecutorOpTypes();
  const std::set<std::string> with_rule(rules.begin(), rules.end()),
      with_kernel(kernels.begin(), kernels.end());
  for (const std::string& op : with_rule)
    EXPECT_TRUE(with_kernel.count(op)) << op << ": a rule, no kernel";
  for (const std::string& op : with_kernel) {
    if (kernels_without_rule.count(op)) {
      EXPECT_FALSE(with_rule.count(op))
          << op << " has a rule now: remove it from kernels_without_rule";
    } else {
      EXPECT_TRUE(with_rule.count(op)) << op << ": a kernel, no rule";
    }
  }
}

TEST(ExecutorErrors, OpTheExecutorLacksIsNamedBeforeWork) {
  TrainingGraph g = SmallCnn().Load({/*batch=*/2});
  g.nodes[2].op_type = "FancyRelu";
  try {
    CheckExecutorSupports(g);
    FAIL() << "expected an error";
  } catch (const MemplanError& e) {
    EXPECT_NE(std::string(e.what()).find("FancyRelu"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(g.nodes[2].name), std::string::npos) << e.what();
  }
  EXPECT_THROW(RunTraining(g, Options(SmallCnn(), 1)), MemplanError);
}

TEST(ExecutorErrors, SegmentsMustPartitionTheNodes) {
  GraphBuilder b = SmallCnn();
  TrainingGraph g = b.Load({/*batch=*/2});
  RunOptions o = Options(b, 1);
  o.segments = {{0, 1, 2}, {4, 5}};
  EXPECT_THROW(RunTraining(g, o), MemplanError);
  o.segments = {{0, 1, 2}};
  EXPECT_THROW(RunTraining(g, o), MemplanError);
}

TEST(ExecutorErrors, OutOfMemoryIsAClearError) {
  GraphBuilder b = SmallCnn();
  TrainingGraph g = b.Load({/*batch=*/16});
  RunOptions o = Options(b, 1);
  RunResult ok = RunTraining(g, o);
  o.memory_limit_bytes = ok.persistent_bytes + (ok.measured_peak_bytes - ok.persistent_bytes) / 2;
  try {
    RunTraining(g, o);
    FAIL() << "expected out of memory";
  } catch (const MemplanError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("out of memory"), std::string::npos) << m;
    EXPECT_NE(m.find("--budget"), std::string::npos) << m;
  }
  // The meter's limit is lifted afterwards: the next run works.
  o.memory_limit_bytes = 0;
  EXPECT_NO_THROW(RunTraining(g, o));
}

TEST(ExecutorErrors, MissingWeightsAskForRandomWeights) {
  std::string dir = ::testing::TempDir() + "/memplan_noweights";
  ::mkdir(dir.c_str(), 0755);
  std::string src = testing::CorpusModel("resnet18");
  std::string dst = dir + "/resnet18.onnx";
  {
    std::ifstream in(src, std::ios::binary);
    std::ofstream out(dst, std::ios::binary);
    out << in.rdbuf();
  }
  TrainingGraph g = LoadTrainingGraph(dst, {/*batch=*/1});
  EXPECT_FALSE(g.weights_present);
  RunOptions o;
  o.steps = 1;
  try {
    RunTraining(g, o);
    FAIL() << "expected an error";
  } catch (const MemplanError& e) {
    EXPECT_NE(std::string(e.what()).find("--random-weights"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace memplan
