// Composite subgraphs fused back into the op the source model runs (analyzer/src/fusion.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <set>
#include <string>

#include "memplan/training_graph.h"
#include "testing/graph_builder.h"

namespace memplan {
namespace {

using testing::GraphBuilder;

// x[N,4] -> MatMul w[4,4] -> h -> erf-GELU as TorchScript exports it (AppendErfGelu) -> y.
GraphBuilder TorchScriptGelu(double divisor = std::sqrt(2.0)) {
  GraphBuilder b;
  b.Input("x", {-1, 4}).Param("w", {4, 4}).Node("MatMul", {"x", "w"}, {"h"});
  return testing::AppendErfGelu(b, "h", "y", divisor);
}

int CountOp(const TrainingGraph& g, const std::string& op) {
  int n = 0;
  for (const Node& node : g.nodes) n += node.op_type == op;
  return n;
}

// Bytes of the distinct activations some backward op reads.
int64_t SavedActivationBytes(const TrainingGraph& g) {
  std::set<TensorId> saved;
  for (const Node& n : g.nodes) {
    for (TensorId t : n.saved_for_backward) {
      if (!g.tensor(t).is_persistent()) saved.insert(t);
    }
  }
  int64_t bytes = 0;
  for (TensorId t : saved) bytes += g.tensor(t).bytes;
  return bytes;
}

TEST(Fusion, TorchScriptErfGeluBecomesOneGeluNode) {
  GraphBuilder b = TorchScriptGelu();
  b.Output("y");
  TrainingGraph g = b.Load({.batch = 3});
  // MatMul, Gelu and the appended loss; the Div, Erf, Add, two Muls and three Constants are gone.
  ASSERT_EQ(g.nodes.size(), 3u);
  EXPECT_EQ(CountOp(g, "Gelu"), 1);
  const Node& gelu = g.nodes[1];
  ASSERT_EQ(gelu.op_type, "Gelu");
  ASSERT_EQ(gelu.inputs.size(), 1u);
  EXPECT_EQ(g.tensor(gelu.inputs[0]).name, "h");
  ASSERT_EQ(gelu.outputs.size(), 1u);
  EXPECT_EQ(g.tensor(gelu.outputs[0]).name, "y");
  EXPECT_EQ(g.FindTensor("gelu_d"), kNone);
  EXPECT_EQ(g.FindTensor("gelu_e"), kNone);
  for (size_t i = 0; i < g.tensors.size(); ++i)
    EXPECT_EQ(g.tensors[i].id, static_cast<TensorId>(i));
  bool noted = false;
  for (const std::string& note : g.notes)
    noted = noted || note.find("fused 1 erf-GELU") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(Fusion, FusedGeluSavesOnlyItsInput) {
  GraphBuilder b = TorchScriptGelu();
  b.Output("y");
  // Activations are [3,4] floats, 48 B each. Op by op, the backward reads d (Erf), h and a
  // (the Mul of the two): 144 B. Gelu reads h alone: 48 B. (MatMul saves only x and w, which
  // stay alive anyway.)
  EXPECT_EQ(SavedActivationBytes(b.Load({.batch = 3, .fuse_composite_ops = false})), 144);
  EXPECT_EQ(SavedActivationBytes(b.Load({.batch = 3})), 48);
}

TEST(Fusion, HalfFirstAndMultiplyByInverseSqrtTwoAreFusedToo) {
  // 0.5 * h first, x / √2 written as h * (1/√2): the same function.
  GraphBuilder b;
  b.Input("x", {-1, 4}).Param("w", {4, 4}).Node("MatMul", {"x", "w"}, {"h"});
  b.Node("Constant", {}, {"inv_sqrt2"}).Attr("value_float", 1.0 / std::sqrt(2.0));
  b.Node("Mul", {"inv_sqrt2", "h"}, {"d"});
  b.Node("Erf", {"d"}, {"e"});
  b.Node("Constant", {}, {"one"}).Attr("value_float", 1.0);
  b.Node("Add", {"one", "e"}, {"a"});
  b.Node("Constant", {}, {"half"}).Attr("value_float", 0.5);
  b.Node("Mul", {"h", "half"}, {"hh"});
  b.Node("Mul", {"a", "hh"}, {"y"}).Output("y");
  TrainingGraph g = b.Load({.batch = 3});
  EXPECT_EQ(CountOp(g, "Gelu"), 1);
  EXPECT_EQ(g.nodes.size(), 3u);
}

TEST(Fusion, TorchsTanhApproximationBecomesGeluTanh) {
  GraphBuilder b;
  b.Input("x", {-1, 4}).Param("w", {4, 4}).Node("MatMul", {"x", "w"}, {"h"});
  testing::AppendTanhGelu(b, "h", "y").Output("y");
  TrainingGraph g = b.Load({.batch = 3});
  // MatMul, Gelu, loss: the 9 ops and 4 constants of the approximation are one node.
  ASSERT_EQ(g.nodes.size(), 3u);
  ASSERT_EQ(g.nodes[1].op_type, "Gelu");
  EXPECT_EQ(g.nodes[1].attr_string("approximate", ""), "tanh");
  EXPECT_EQ(g.tensor(g.nodes[1].inputs[0]).name, "h");
  // Fused, the backward reads h alone: 3x4 floats, 48 B.
  EXPECT_EQ(SavedActivationBytes(g), 48);
}

TEST(Fusion, Gpt2sNewGeluWithPowAndHalfFirstIsFused) {
  // Hugging Face's NewGELUActivation: 0.5 * x * (1 + tanh(√(2/π) * (x + 0.044715 * x ** 3))).
  GraphBuilder b;
  b.Input("x", {-1, 4}).Param("w", {4, 4}).Node("MatMul", {"x", "w"}, {"h"});
  b.Node("Constant", {}, {"half"}).Attr("value_float", 0.5).Node("Mul", {"h", "half"}, {"hh"});
  b.Node("Constant", {}, {"three"}).Attr("value_float", 3.0).Node("Pow", {"h", "three"}, {"cube"});
  b.Node("Constant", {}, {"c"}).Attr("value_float", 0.044715).Node("Mul", {"cube", "c"}, {"t"});
  b.Node("Add", {"h", "t"}, {"s"});
  b.Node("Constant", {}, {"k"}).Attr("value_float", 0.7978846).Node("Mul", {"s", "k"}, {"in"});
  b.Node("Tanh", {"in"}, {"th"});
  b.Node("Constant", {}, {"one"}).Attr("value_float", 1.0).Node("Add", {"th", "one"}, {"a"});
  b.Node("Mul", {"hh", "a"}, {"y"}).Output("y");
  TrainingGraph g = b.Load({.batch = 3});
  ASSERT_EQ(g.nodes.size(), 3u);
  EXPECT_EQ(g.nodes[1].attr_string("approximate", ""), "tanh");
}

// x[N,8] -> MatMul w[8,8] -> h -> layer normalisation op by op (AppendLayerNormOps) -> y.
GraphBuilder TorchScriptLayerNorm() {
  GraphBuilder b;
  b.Input("x", {-1, 8}).Param("w", {8, 8}).Param("gamma", {8}).Param("beta", {8});
  b.Node("MatMul", {"x", "w"}, {"h"});
  return testing::AppendLayerNormOps(b, "h", "y", "gamma", "beta");
}

TEST(Fusion, TorchScriptLayerNormBecomesLayerNormalization) {
  GraphBuilder b = TorchScriptLayerNorm();
  b.Output("y");
  TrainingGraph g = b.Load({.batch = 3});
  ASSERT_EQ(g.nodes.size(), 3u);  // MatMul, LayerNormalization, loss
  const Node& ln = g.nodes[1];
  ASSERT_EQ(ln.op_type, "LayerNormalization");
  ASSERT_EQ(ln.inputs.size(), 3u);
  EXPECT_EQ(g.tensor(ln.inputs[0]).name, "h");
  EXPECT_EQ(g.tensor(ln.inputs[1]).name, "gamma");
  EXPECT_EQ(g.tensor(ln.inputs[2]).name, "beta");
  EXPECT_EQ(ln.attr_int("axis", 0), 1);  // the last of h's two axes
  EXPECT_NEAR(ln.attr_float("epsilon", 0), 1e-5, 1e-12);
}

TEST(Fusion, FusedLayerNormSavesItsInputNotItsIntermediates) {
  GraphBuilder b = TorchScriptLayerNorm();
  b.Output("y");
  // h is [3,8] floats, 96 B. Op by op the backward reads d = h - mean (Pow, Div: 96 B),
  // s = sqrt(var + eps) ([3,1]: 12 B, Sqrt and Div) and d / s (the Mul by gamma: 96 B): 204 B.
  // LayerNormalization reads h (96 B) and keeps its mean and 1/std as saved extras.
  EXPECT_EQ(SavedActivationBytes(b.Load({.batch = 3, .fuse_composite_ops = false})), 204);
  EXPECT_EQ(SavedActivationBytes(b.Load({.batch = 3})), 96);
}

// Bytes of the distinct activations some backward op reads, plus the extras the model's ops
// save (not the appended loss's log-probabilities).
int64_t SavedBytesWithExtras(const TrainingGraph& g) {
  int64_t bytes = SavedActivationBytes(g);
  for (const Node& n : g.nodes) {
    if (n.op_type.find("Loss") != std::string::npos) continue;
    for (const SavedExtra& e : n.saved_extras) bytes += e.bytes;
  }
  return bytes;
}

GraphBuilder DynamoRmsNorm() {
  GraphBuilder b;
  b.Input("x", {-1, 8}).Param("w", {8, 8}).Param("gamma", {8});
  b.Node("MatMul", {"x", "w"}, {"h"});
  return testing::AppendRmsNormOps(b, "h", "y", "gamma");
}

TEST(Fusion, DynamoRmsNormBecomesRMSNormalization) {
  GraphBuilder b = DynamoRmsNorm();
  b.Output("y");
  TrainingGraph g = b.Load({.batch = 3});
  ASSERT_EQ(g.nodes.size(), 3u);  // MatMul, RMSNormalization, loss
  const Node& n = g.nodes[1];
  ASSERT_EQ(n.op_type, "RMSNormalization");
  ASSERT_EQ(n.inputs.size(), 2u);
  EXPECT_EQ(g.tensor(n.inputs[0]).name, "h");
  EXPECT_EQ(g.tensor(n.inputs[1]).name, "gamma");
  EXPECT_EQ(n.attr_int("axis", 0), 1);
  EXPECT_NEAR(n.attr_float("epsilon", 0), 1e-6, 1e-12);
  EXPECT_EQ(g.FindTensor("rms_r"), kNone);
}

TEST(Fusion, FusedRmsNormSavesWhatAtRmsNormSaves) {
  GraphBuilder b = DynamoRmsNorm();
  b.Output("y");
  // h and the normalised tensor are [3,8] floats, 96 B; per-row statistics [3,1], 12 B.
  // Op by op: Pow keeps h, Sqrt its output s, Reciprocal its output r, Mul(h, r) keeps h and r,
  // Mul(gamma, n) keeps n: h + s + r + n = 96 + 12 + 12 + 96 = 216 B.
  // at::rms_norm (CPU, composite): h, 1/rms (12 B) and the normalised tensor (96 B): 204 B.
  EXPECT_EQ(SavedBytesWithExtras(b.Load({.batch = 3, .fuse_composite_ops = false})), 216);
  EXPECT_EQ(SavedBytesWithExtras(b.Load({.batch = 3})), 204);
}

TEST(Fusion, AnUnscaledOrBatchAxisRmsNormIsNotFused) {
  GraphBuilder b;
  b.Input("x", {-1, 8}).Param("w", {8, 8});
  b.Node("MatMul", {"x", "w"}, {"h"});
  b.Node("Constant", {}, {"two"}).Attr("value_float", 2.0).Node("Pow", {"h", "two"}, {"sq"});
  b.Node("ReduceMean", {"sq"}, {"m"}).Attr("axes", std::vector<int64_t>{0});
  b.Node("Constant", {}, {"eps"}).Attr("value_float", 1e-6).Node("Add", {"m", "eps"}, {"ve"});
  b.Node("Sqrt", {"ve"}, {"s"})
      .Node("Reciprocal", {"s"}, {"r"})
      .Node("Mul", {"h", "r"}, {"y"})
      .Output("y");
  TrainingGraph g = b.Load({.batch = 3});
  EXPECT_EQ(CountOp(g, "RMSNormalization"), 0);
  EXPECT_EQ(CountOp(g, "Reciprocal"), 1);
}

TEST(Fusion, SigmoidTimesItsInputBecomesSwish) {
  GraphBuilder b;
  b.Input("x", {-1, 8}).Param("w", {8, 8}).Node("MatMul", {"x", "w"}, {"h"});
  testing::AppendSiluOps(b, "h", "y").Output("y");
  TrainingGraph g = b.Load({.batch = 3});
  ASSERT_EQ(g.nodes.size(), 3u);
  ASSERT_EQ(g.nodes[1].op_type, "Swish");
  EXPECT_EQ(g.nodes[1].attr_float("alpha", 1.0), 1.0);
  // Op by op: Sigmoid keeps its output s, Mul(h, s) keeps h and s: 2 x 96 B. at::silu keeps h.
  EXPECT_EQ(SavedBytesWithExtras(b.Load({.batch = 3, .fuse_composite_ops = false})), 192);
  EXPECT_EQ(SavedBytesWithExtras(g), 96);
}

TEST(Fusion, SigmoidTimesAnotherTensorIsNotSilu) {
  GraphBuilder b;
  b.Input("x", {-1, 8}).Param("w", {8, 8}).Param("v", {8, 8});
  b.Node("MatMul", {"x", "w"}, {"h"}).Node("MatMul", {"x", "v"}, {"u"});
  b.Node("Sigmoid", {"h"}, {"s"}).Node("Mul", {"u", "s"}, {"y"}).Output("y");
  EXPECT_EQ(CountOp(b.Load({.batch = 3}), "Swish"), 0);
  // The sigmoid read twice stays too.
  GraphBuilder c;
  c.Input("x", {-1, 8}).Param("w", {8, 8}).Node("MatMul", {"x", "w"}, {"h"});
  c.Node("Sigmoid", {"h"}, {"s"})
      .Node("Mul", {"h", "s"}, {"p"})
      .Node("Add", {"p", "s"}, {"y"})
      .Output("y");
  EXPECT_EQ(CountOp(c.Load({.batch = 3}), "Swish"), 0);
}

TEST(Fusion, ExportedAttentionBecomesScaledDotProductAttention) {
  TrainingGraph g = testing::AttentionBlock().Load({.batch = 3});
  // The projections and their Transposes stay (K^T is an input); the rest is one node.
  ASSERT_EQ(CountOp(g, "memplan.ScaledDotProductAttention"), 1);
  EXPECT_EQ(CountOp(g, "Softmax"), 0);
  EXPECT_EQ(CountOp(g, "IsNaN"), 0);
  const Node* a = nullptr;
  for (const Node& n : g.nodes)
    if (n.op_type == "memplan.ScaledDotProductAttention") a = &n;
  ASSERT_EQ(a->inputs.size(), 4u);
  EXPECT_EQ(g.tensor(a->inputs[0]).name, "q");
  EXPECT_EQ(g.tensor(a->inputs[1]).name, "kt");
  EXPECT_EQ(g.tensor(a->inputs[2]).name, "v");
  EXPECT_EQ(g.tensor(a->inputs[3]).name, "mask");
  EXPECT_EQ(a->attr_float("scale", 0), 0.5);
  EXPECT_EQ(a->attr_int("nan_to_zero", 0), 1);
  EXPECT_EQ(g.tensor(a->outputs[0]).name, "heads");
}

TEST(Fusion, FusedAttentionKeepsNoProbabilities) {
  testing::GraphBuilder b = testing::AttentionBlock();
  // Batch 3: q, k, v and the output are [3,2,16,4] floats, 1,536 B; the scores [3,2,16,16], 6,144 B
  // (as bools, 1,536 B). Op by op: MatMul(q, k^T) keeps contiguous copies of q and k^T for bmm
  // (transposed views do not fold into [6,16,4]), Softmax its output p, Where the NaN mask,
  // MatMul(p0, v) p0 and a copy of v: 1536 + 1536 + 6144 + 1536 + 6144 + 1536 = 18,432 B. Flash
  // attention: q and v (views of the projections), its output, a contiguous copy of k (1,536 B
  // each) and a float log-sum-exp per row ([3,2,16]: 384 B) = 6,528 B. (The mask is a constant.)
  EXPECT_EQ(SavedBytesWithExtras(b.Load({.batch = 3, .fuse_composite_ops = false})), 18432);
  EXPECT_EQ(SavedBytesWithExtras(b.Load({.batch = 3})), 6528);
}

// The fused attention node of AttentionBlock at `batch`, loaded for LibTorch's `threads`
// intra-op threads (what the workspace rules read).
Node FusedAttentionAt(int64_t batch, const char* threads) {
  TrainingGraph g = testing::AttentionBlock().Load(
      {.batch = batch, .cpu_kernels = CpuKernels{CpuIsa::kAvx512Core, std::atoll(threads)}});
  for (const Node& n : g.nodes)
    if (n.op_type == "memplan.ScaledDotProductAttention") return n;
  ADD_FAILURE() << "no fused attention";
  return Node{};
}

TEST(Fusion, FusedAttentionHoldsTheFlashKernelsPerThreadBlocks) {
  const Node a = FusedAttentionAt(3, "2");
  // q [3,2,16,4], K^T [3,2,4,16]: qSplit = kvSplit = 16 (under 32 rows, 512 keys). The contiguous
  // copy of K (1,536 B) and, per thread, 16 x 16 scores + 16 maxima + 16 sums + 16 x 4 outputs =
  // 352 floats: 1536 + 2 x 1408 = 4,352 B.
  EXPECT_EQ(a.forward_workspace_bytes, 4352);
  // Its backward: two float 16 x 16 blocks per thread (2 x 2 x 1024 B), and one float per row of
  // a query block (64 B) in each chunk of the parallel loop over batch x heads, all alive at
  // once: 6 items on 2 threads are 2 chunks of 3. 4096 + 2 x 64 = 4,224 B.
  EXPECT_EQ(a.backward_workspace_bytes, 4224);
}

TEST(Fusion, FusedAttentionBackwardHoldsOneRowBlockPerParallelChunk) {
  // Four threads: the per-thread blocks are 4 x 2 x 1024 = 8,192 B, whatever the batch.
  // Batch 1: 1 x 2 heads = 2 items, on min(4, 2) = 2 threads: 2 chunks of 1, 2 x 64 B:
  // 8192 + 128 = 8,320 B.
  EXPECT_EQ(FusedAttentionAt(1, "4").backward_workspace_bytes, 8320);
  // Batch 3: 6 items on 4 threads: chunks of ceil(6 / 4) = 2, so 3 chunks (the fourth thread has
  // none): 8192 + 3 x 64 = 8,384 B.
  EXPECT_EQ(FusedAttentionAt(3, "4").backward_workspace_bytes, 8384);
  // One thread: one chunk, 2 x 1024 + 64 = 2,112 B.
  EXPECT_EQ(FusedAttentionAt(3, "1").backward_workspace_bytes, 2112);
}

TEST(Fusion, AttentionWithDropoutOrATrainedMaskIsNotFused) {
  testing::GraphBuilder b;
  b.Input("x", {-1, 2, 16, 4}).Param("w", {4, 4}).Param("bias", {16, 16});
  b.Node("MatMul", {"x", "w"}, {"q"})
      .Node("Transpose", {"q"}, {"qt"})
      .Attr("perm", std::vector<int64_t>{0, 1, 3, 2});
  b.Node("MatMul", {"q", "qt"}, {"s"})
      .Node("Add", {"s", "bias"}, {"sb"})
      .Node("Softmax", {"sb"}, {"p"});
  b.Node("MatMul", {"p", "q"}, {"y"}).Output("y");
  EXPECT_EQ(CountOp(b.Load({.batch = 3}), "memplan.ScaledDotProductAttention"), 0);
}

TEST(Fusion, ANormalisationOverTheBatchAxisIsNotLayerNorm) {
  GraphBuilder b;
  b.Input("x", {-1, 8}).Param("w", {8, 8}).Param("gamma", {8}).Param("beta", {8});
  b.Node("MatMul", {"x", "w"}, {"h"});
  b.Node("ReduceMean", {"h"}, {"m"})
      .Attr("axes", std::vector<int64_t>{0})
      .Node("Sub", {"h", "m"}, {"d"});
  b.Node("Constant", {}, {"two"}).Attr("value_float", 2.0).Node("Pow", {"d", "two"}, {"sq"});
  b.Node("ReduceMean", {"sq"}, {"v"}).Attr("axes", std::vector<int64_t>{0});
  b.Node("Constant", {}, {"eps"}).Attr("value_float", 1e-5).Node("Add", {"v", "eps"}, {"ve"});
  b.Node("Sqrt", {"ve"}, {"s"}).Node("Div", {"d", "s"}, {"n"});
  b.Node("Mul", {"n", "gamma"}, {"ns"}).Node("Add", {"ns", "beta"}, {"y"}).Output("y");
  TrainingGraph g = b.Load({.batch = 3});
  EXPECT_EQ(CountOp(g, "LayerNormalization"), 0);
  EXPECT_EQ(CountOp(g, "Sqrt"), 1);
}

TEST(Fusion, AHalfPrecisionGeluWithItsRoundedConstantsIsFused) {
  // In fp16, √2 is stored as 1.4140625 (1.6e-4 below): still GELU's constant. (FLOAT16 is 10.)
  GraphBuilder b;
  b.Input("x", {-1, 4}).Param("w", {4, 4}).Node("MatMul", {"x", "w"}, {"h32"});
  b.Node("Cast", {"h32"}, {"h"}).Attr("to", int64_t{10});
  for (const auto& [name, value] :
       {std::pair<std::string, double>{"r2", 1.4140625}, {"one", 1.0}, {"half", 0.5}}) {
    b.Node("Constant", {}, {name + "32"}).Attr("value_float", value);
    b.Node("Cast", {name + "32"}, {name}).Attr("to", int64_t{10});
  }
  b.Node("Div", {"h", "r2"}, {"d"}).Node("Erf", {"d"}, {"e"}).Node("Add", {"e", "one"}, {"a"});
  b.Node("Mul", {"h", "a"}, {"m"}).Node("Mul", {"m", "half"}, {"y"}).Output("y");
  TrainingGraph g = b.Load({.batch = 3});
  EXPECT_EQ(CountOp(g, "Gelu"), 1);
  EXPECT_EQ(CountOp(g, "Erf"), 0);
}

TEST(Fusion, AnIntermediateReadElsewhereIsNotFused) {
  // erf(h/√2) is also a model output: it must exist, so nothing is fused.
  GraphBuilder b = TorchScriptGelu();
  b.Output("y").Output("gelu_e");
  TrainingGraph g = b.Load({.batch = 3});
  EXPECT_EQ(CountOp(g, "Gelu"), 0);
  EXPECT_EQ(CountOp(g, "Erf"), 1);
}

TEST(Fusion, AnotherConstantIsNotGelu) {
  GraphBuilder b = TorchScriptGelu(/*divisor=*/2.0);
  b.Output("y");
  TrainingGraph g = b.Load({.batch = 3});
  EXPECT_EQ(CountOp(g, "Gelu"), 0);
  EXPECT_EQ(CountOp(g, "Erf"), 1);
}

TEST(Fusion, AProductThatBroadcastsBeyondTheInputIsNotFused) {
  // The half-first form, with 0.5 of shape [1,1,1]: the result is [1,N,4], not h's GELU.
  GraphBuilder b;
  b.Input("x", {-1, 4}).Param("w", {4, 4}).Node("MatMul", {"x", "w"}, {"h"});
  b.Node("Constant", {}, {"sqrt2"}).Attr("value_float", std::sqrt(2.0));
  b.Node("Div", {"h", "sqrt2"}, {"d"}).Node("Erf", {"d"}, {"e"});
  b.Node("Constant", {}, {"one"}).Attr("value_float", 1.0).Node("Add", {"e", "one"}, {"a"});
  b.Node("Constant", {}, {"half"}).Attr("value_floats", std::vector<double>{0.5});
  b.Ints("shape", {1, 1, 1}).Node("Reshape", {"half", "shape"}, {"half3"});
  b.Node("Mul", {"h", "half3"}, {"hh"}).Node("Mul", {"hh", "a"}, {"y"}).Output("y");
  TrainingGraph g = b.Load({.batch = 3});
  ASSERT_EQ(g.tensor(g.FindTensor("y")).shape, (std::vector<int64_t>{1, 3, 4}));
  EXPECT_EQ(CountOp(g, "Gelu"), 0);
  EXPECT_EQ(CountOp(g, "Erf"), 1);
}

}  // namespace
}  // namespace memplan
