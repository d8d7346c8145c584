// Peaks and breakdowns of small graphs, computed by hand in the comments.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "memplan/analyzer.h"
#include "memplan/lifetimes.h"
#include "testing/graph_builder.h"

namespace memplan {
namespace {

using testing::GraphBuilder;

int64_t Category(const MemoryTimeline& t, MemoryCategory c) {
  return t.breakdown_at_peak[static_cast<int>(c)];
}

// Most tests below specify the step with kept gradients (zero_grad(set_to_none=False)):
// gradients are persistent and each contribution is a temporary added into them. The
// GradientsSetToNone tests specify PyTorch's default, where the backward creates them.
LoadOptions Kept(LoadOptions o = {}) {
  o.grads = GradientLifetime::kKept;
  return o;
}

// The kernels the convolution rules below were measured on: oneDNN's AVX-512 ones with
// LibTorch's two intra-op threads (2-core machines). Set, not detected: the expected bytes are
// those kernels' on every machine.
constexpr CpuKernels kAvx512TwoThreads{CpuIsa::kAvx512Core, 2};

// x[1,100] -> MatMul w1[100,100] -> y1 -> Relu -> y2 -> MatMul w2[100,10] -> logits -> CE
GraphBuilder Chain() {
  GraphBuilder b;
  b.Input("x", {-1, 100}).Param("w1", {100, 100}).Param("w2", {100, 10});
  b.Node("MatMul", {"x", "w1"}, {"y1"})
      .Node("Relu", {"y1"}, {"y2"})
      .Node("MatMul", {"y2", "w2"}, {"logits"});
  return b.Output("logits");
}

TEST(TrainingMemory, ChainPeakIsFirstWeightGradient) {
  Analysis a = Analyze(Chain().Load(Kept()));
  // Persistent: x 400 + w1 40000 + w2 4000 + target 8 + grads 44000 = 88408 B.
  // The peak is MatMul1's backward: y2 and grad y2 are gone; grad y1 (400 B) is read, and
  // the new gradient of w1 (40000 B) is alive before it is added into w1's gradient. The loss
  // (4 B) and the seed gradient (4 B) live until the backward call returns: + 8 B.
  EXPECT_EQ(a.timeline.peak_bytes, 88408 + 400 + 40000 + 8);
  EXPECT_EQ(Category(a.timeline, MemoryCategory::kParameter), 44000);
  EXPECT_EQ(Category(a.timeline, MemoryCategory::kGradient), 44000);
  EXPECT_EQ(Category(a.timeline, MemoryCategory::kInput), 408);
  EXPECT_EQ(Category(a.timeline, MemoryCategory::kTemporary), 40000);
  // grad y1 (400 B) is still alive: MatMul1's backward reads it; so is the seed (4 B).
  EXPECT_EQ(Category(a.timeline, MemoryCategory::kActivationGradient), 400 + 4);
  EXPECT_EQ(Category(a.timeline, MemoryCategory::kActivation), 4);  // the loss
}

TEST(TrainingMemory, ChainForwardKeepsOnlySavedActivations) {
  Analysis a = Analyze(Chain().Load(Kept()));
  // Steps: setup, MatMul1, Relu, MatMul2, loss, ...
  // After Relu: y1 is dead (MatMul1 saves x, not its output; Relu saves its output y2).
  EXPECT_EQ(a.timeline.bytes_after[2], 88408 + 400);
  // During the loss: y2 400 + logits 40 + loss 4 + log-probabilities 40.
  EXPECT_EQ(a.timeline.bytes_during[4], 88408 + 400 + 40 + 4 + 40);
  // After the loss: logits are dead, log-probabilities stay for backward, and the loss value
  // (4 B) stays until the backward call through it returns.
  EXPECT_EQ(a.timeline.bytes_after[4], 88408 + 400 + 40 + 4);
}

TEST(TrainingMemory, ChainBackwardOfLossHoldsItsWorkspace) {
  Analysis a = Analyze(Chain().Load(Kept()));
  // Loss backward: + seed 4 + grad logits 40 + grad of log-probabilities 40 (workspace), beside
  // the loss 4.
  EXPECT_EQ(a.timeline.bytes_during[5], 88408 + 400 + 40 + 4 + 40 + 40 + 4);
  // MatMul2 backward: grad y2 400 and the new grad of w2 4000 join y2 and grad logits (and the
  // loss and the seed, 8 B, held until the backward call returns).
  EXPECT_EQ(a.timeline.bytes_during[6], 88408 + 400 + 40 + 400 + 4000 + 8);
}

TEST(TrainingMemory, AdamAddsTwoStatesPerParameter) {
  Analysis sgd = Analyze(Chain().Load(Kept()));
  LoadOptions adam_opt;
  adam_opt.optimizer = Optimizer::kAdam;
  Analysis adam = Analyze(Chain().Load(Kept(adam_opt)));
  // Adam: exp_avg and exp_avg_sq, 2 x 44000 B, alive the whole step.
  EXPECT_EQ(Category(adam.timeline, MemoryCategory::kOptimizerState), 2 * 44000);
  EXPECT_EQ(adam.timeline.peak_bytes, sgd.timeline.peak_bytes + 2 * 44000);
}

TEST(TrainingMemory, BatchScalesActivationsNotParameters) {
  LoadOptions b4;
  b4.batch = 4;
  Analysis a = Analyze(Chain().Load(Kept(b4)));
  // Batch 4: x 1600 + target 32; activations x4; params and grads unchanged.
  // Peak: persistent 1600 + 44000 + 32 + 44000 = 89632; + grad y1 1600 + new grad w1 40000
  // + the loss and the seed 8.
  EXPECT_EQ(a.timeline.peak_bytes, 89632 + 1600 + 40000 + 8);
}

// A residual block: b is read by MatMul w2 and by the Add (a skip connection).
// x -> MatMul w1 -> a -> Relu -> b -> MatMul w2 -> c -> Add(c, b) -> d -> MatMul w3 -> logits
GraphBuilder Residual() {
  GraphBuilder b;
  b.Input("x", {-1, 100}).Param("w1", {100, 100}).Param("w2", {100, 100}).Param("w3", {100, 10});
  b.Node("MatMul", {"x", "w1"}, {"a"})
      .Node("Relu", {"a"}, {"b"})
      .Node("MatMul", {"b", "w2"}, {"c"});
  b.Node("Add", {"c", "b"}, {"d"}).Node("MatMul", {"d", "w3"}, {"logits"});
  return b.Output("logits");
}

TEST(TrainingMemory, SkipConnectionAccumulatesGradient) {
  Analysis a = Analyze(Residual().Load(Kept()));
  // Persistent: x 400 + params 84000 + target 8 + grads 84000 = 168408.
  // Backward order: loss, MatMul w3, Add, MatMul w2, Relu, MatMul w1.
  // Add's backward hands grad d itself to both c and b (no copy, as ATen's add does);
  // MatMul w2's backward then adds a second gradient into b's through a 400 B temporary.
  // The peak is MatMul w2's backward: b 400 + grad d (= grad c = grad b) 400 + that
  // temporary 400 + the new grad of w2 40000 = 41200. MatMul w1's backward holds less:
  // grad a 400 + the new grad of w1 40000. The loss and the seed (8 B) are alive throughout.
  EXPECT_EQ(a.timeline.peak_bytes, 168408 + 41200 + 8);
  size_t add_backward = 0;
  for (size_t i = 0; i < a.schedule.steps.size(); ++i) {
    const Step& s = a.schedule.steps[i];
    if (s.phase == Phase::kBackward && a.graph.nodes[s.node].op_type == "Add") add_backward = i;
  }
  ASSERT_GT(add_backward, 0u);
  // During Add's backward: b (saved by Relu and MatMul w2) 400 + grad d 400 + the loss and the
  // seed 8; nothing new.
  EXPECT_EQ(a.timeline.bytes_during[add_backward], 168408 + 2 * 400 + 8);
  // During MatMul w2's backward: b, the shared gradient, the temporary, the new grad of w2.
  EXPECT_EQ(a.timeline.bytes_during[add_backward + 1], 168408 + 400 + 400 + 400 + 40000 + 8);
}

TEST(TrainingMemory, SharedWeightHasOneGradient) {
  GraphBuilder b;
  b.Input("x", {-1, 100}).Param("w", {100, 100}).Param("head", {100, 10});
  b.Node("MatMul", {"x", "w"}, {"h1"})
      .Node("Relu", {"h1"}, {"r"})
      .Node("MatMul", {"r", "w"}, {"h2"});
  b.Node("MatMul", {"h2", "head"}, {"logits"}).Output("logits");
  Analysis a = Analyze(b.Load(Kept()));
  // w counts once: 40000 + head 4000.
  EXPECT_EQ(a.graph.param_bytes(), 44000);
  EXPECT_EQ(Category(a.timeline, MemoryCategory::kGradient), 44000);
  // Each use of w produces its own 40000 B gradient that is added into w's gradient.
  int temporaries = 0;
  for (const Buffer& buf : a.schedule.buffers) {
    if (buf.category == MemoryCategory::kTemporary && buf.tensor == a.graph.FindTensor("w"))
      ++temporaries;
  }
  EXPECT_EQ(temporaries, 2);
}

TEST(TrainingMemory, ViewsShareStorage) {
  // Reshape of a contiguous tensor is a view: no bytes of its own.
  GraphBuilder b;
  b.Input("x", {-1, 4, 25}).Param("w", {100, 10}).Ints("shape", {-1, 100});
  b.Node("Relu", {"x"}, {"r"})
      .Node("Reshape", {"r", "shape"}, {"flat"})
      .Node("MatMul", {"flat", "w"}, {"logits"});
  b.Output("logits");
  Analysis a = Analyze(b.Load(Kept()));
  const TrainingGraph& g = a.graph;
  EXPECT_EQ(g.tensor(g.FindTensor("flat")).storage, g.FindTensor("r"));
  // Forward during MatMul: persistent (x 400 + w 4000 + shape 16 + target 8 + grad w 4000)
  // + r 400 + logits 40; flat adds nothing.
  EXPECT_EQ(a.timeline.bytes_during[3], 8424 + 400 + 40);
}

TEST(TrainingMemory, TransposeThenReshapeCopies) {
  // A transposed view is not contiguous, so the reshape after it copies.
  GraphBuilder b;
  b.Input("x", {-1, 4, 25}).Param("w", {100, 10}).Ints("shape", {-1, 100});
  b.Node("Relu", {"x"}, {"r"})
      .Node("Transpose", {"r"}, {"t"})
      .Attr("perm", std::vector<int64_t>{0, 2, 1});
  b.Node("Reshape", {"t", "shape"}, {"flat"})
      .Node("MatMul", {"flat", "w"}, {"logits"})
      .Output("logits");
  TrainingGraph g = b.Load(Kept());
  EXPECT_EQ(g.tensor(g.FindTensor("t")).storage, g.FindTensor("r"));
  EXPECT_FALSE(g.tensor(g.FindTensor("t")).contiguous);
  EXPECT_FALSE(g.tensor(g.FindTensor("flat")).is_view());
}

TEST(TrainingMemory, ReshapeOfTransposeIsAViewWhenStridesAllow) {
  // r [1,6,4] (strides [24,4,1]) -> Transpose(0,2,1) -> t [1,4,6], strides [24,1,4].
  // Reshape to [4,6] only drops the size-1 dim: ATen's computeStride finds strides [1,4]
  // (chunk "6" at stride 4, then chunk "4" at stride 1), so it is a view, not a copy.
  GraphBuilder b;
  b.Input("x", {-1, 6, 4}).Param("w", {6, 10}).Ints("shape", {4, 6});
  b.Node("Relu", {"x"}, {"r"})
      .Node("Transpose", {"r"}, {"t"})
      .Attr("perm", std::vector<int64_t>{0, 2, 1});
  b.Node("Reshape", {"t", "shape"}, {"flat"})
      .Node("MatMul", {"flat", "w"}, {"logits"})
      .Output("logits");
  TrainingGraph g = b.Load(Kept());
  const Tensor& flat = g.tensor(g.FindTensor("flat"));
  EXPECT_EQ(flat.storage, g.FindTensor("r"));
  EXPECT_FALSE(flat.contiguous);
  EXPECT_EQ(flat.strides, (std::vector<int64_t>{1, 4}));
}

TEST(TrainingMemory, BatchedMatMulSavesTheCopyOfANonViewableOperand) {
  // x [2,3,4,5] -> Relu r -> Transpose(1,0,2,3) -> t [3,2,4,5], strides [20,60,5,1].
  // at::matmul reshapes t to [6,4,5] for bmm: dims 4,5 form one chunk (stride 5 = 5 x 1),
  // but dims 3 (stride 20) and 2 (stride 60) do not merge (20 != 2 x 60): a copy of
  // 3*2*4*5 floats = 480 B, which bmm saves for the gradient of w instead of t.
  GraphBuilder b;
  b.Input("x", {-1, 3, 4, 5}).Param("w", {3, 2, 5, 7});
  b.Node("Relu", {"x"}, {"r"})
      .Node("Transpose", {"r"}, {"t"})
      .Attr("perm", std::vector<int64_t>{1, 0, 2, 3});
  b.Node("MatMul", {"t", "w"}, {"logits"}).Output("logits");
  LoadOptions o;
  o.batch = 2;
  TrainingGraph g = b.Load(Kept(o));
  const Node& mm = g.node(2);
  ASSERT_EQ(mm.saved_extras.size(), 1u);
  EXPECT_EQ(mm.saved_extras[0].bytes, 480);
  // t has no gradient (x is an input), so w is not saved; neither is t itself.
  EXPECT_TRUE(mm.saved_for_backward.empty());
}

TEST(TrainingMemory, BroadcastMulGradientNeedsAnOutputSizedTemporary) {
  // h [2,100] * s [100]: grad s = (grad * h) at the output's shape [2,100] (800 B), only
  // then summed to [100]; h has the output's shape and needs no temporary.
  GraphBuilder b;
  b.Input("x", {-1, 100}).Param("w", {100, 100}).Param("s", {100});
  b.Node("MatMul", {"x", "w"}, {"h"}).Node("Mul", {"h", "s"}, {"logits"}).Output("logits");
  LoadOptions o;
  o.batch = 2;
  TrainingGraph g = b.Load(Kept(o));
  EXPECT_EQ(g.node(1).backward_workspace_bytes, 800);
}

// ScatterND (reduction none) is at::index_put with one int64 index tensor per index column,
// negative indices wrapped by at::where: new tensors, which index_put's backward keeps (the
// index input itself is not kept). Indices [3,1]: one column of 3 rows, 3 x 8 = 24 B.
GraphBuilder ScatterRows(bool trained) {
  GraphBuilder b;
  b.Input("x", {-1, 4}).Ints("rows", {0, 2, 4}).Ints("shape", {3, 1});
  if (trained) {
    b.Param("table", {6, 4}).Param("upd", {3, 4});
  } else {
    b.Input("table", {6, 4}).Input("upd", {3, 4});
  }
  b.Node("Reshape", {"rows", "shape"}, {"idx"})
      .Node("ScatterND", {"table", "idx", "upd"}, {"t"})
      .Node("Transpose", {"t"}, {"tt"})
      .Attr("perm", std::vector<int64_t>{1, 0})
      .Node("MatMul", {"x", "tt"}, {"y"});
  b.Param("bias", {6}).Node("Add", {"y", "bias"}, {"logits"});
  return b.Output("logits");
}

const Node& OnlyNode(const TrainingGraph& g, const std::string& op) {
  const Node* found = nullptr;
  for (const Node& n : g.nodes) {
    if (n.op_type == op) {
      EXPECT_EQ(found, nullptr) << "one " << op;
      found = &n;
    }
  }
  EXPECT_NE(found, nullptr) << op;
  return *found;
}

TEST(TrainingMemory, ScatterNDSavesItsWrappedIndexColumns) {
  LoadOptions o;
  o.batch = 2;
  TrainingGraph g = ScatterRows(/*trained=*/true).Load(Kept(o));
  const Node& s = OnlyNode(g, "ScatterND");
  ASSERT_TRUE(s.has_backward);
  ASSERT_EQ(s.saved_extras.size(), 1u);
  EXPECT_EQ(s.saved_extras[0].bytes, 24);
  EXPECT_TRUE(s.saved_for_backward.empty());
  EXPECT_EQ(s.forward_workspace_bytes, 0);
}

TEST(TrainingMemory, ScatterNDWithoutABackwardHoldsItsIndexColumnsWhileItRuns) {
  LoadOptions o;
  o.batch = 2;
  TrainingGraph g = ScatterRows(/*trained=*/false).Load(Kept(o));
  const Node& s = OnlyNode(g, "ScatterND");
  ASSERT_FALSE(s.has_backward);
  EXPECT_TRUE(s.saved_extras.empty());
  EXPECT_EQ(s.forward_workspace_bytes, 24);
}

TEST(TrainingMemory, ConvBatchNormPoolSaveTheirExtras) {
  GraphBuilder b;
  b.Input("x", {-1, 3, 8, 8}).Param("w", {4, 3, 3, 3}).Param("scale", {4}).Param("bias", {4});
  b.Param("mean", {4}).Param("var", {4}).Param("fc", {64, 10}).Ints("shape", {-1, 64});
  b.Node("Conv", {"x", "w"}, {"c"}).Attr("pads", std::vector<int64_t>{1, 1, 1, 1});
  b.Node("BatchNormalization", {"c", "scale", "bias", "mean", "var"}, {"bn", "rm", "rv"})
      .Attr("training_mode", int64_t{1});
  b.Node("Relu", {"bn"}, {"r"});
  b.Node("MaxPool", {"r"}, {"p"})
      .Attr("kernel_shape", std::vector<int64_t>{2, 2})
      .Attr("strides", std::vector<int64_t>{2, 2});
  b.Node("Reshape", {"p", "shape"}, {"flat"})
      .Node("MatMul", {"flat", "fc"}, {"logits"})
      .Output("logits");
  TrainingGraph g = b.Load(Kept());
  // Running mean / var are not trained: they feed BatchNormalization's statistics inputs.
  EXPECT_EQ(g.tensor(g.FindTensor("mean")).category, TensorCategory::kConstant);
  EXPECT_EQ(g.tensor(g.FindTensor("scale")).category, TensorCategory::kParameter);
  const Node& bn = g.node(1);
  ASSERT_EQ(bn.saved_extras.size(), 2u);
  EXPECT_EQ(bn.saved_extras[0].bytes + bn.saved_extras[1].bytes,
            2 * 4 * 4);  // mean + invstd, 4 channels
  // The running-statistics outputs are the inputs, updated in place.
  EXPECT_EQ(g.tensor(g.FindTensor("rm")).storage, g.FindTensor("mean"));
  const Node& pool = g.node(3);
  ASSERT_EQ(pool.saved_extras.size(), 1u);
  EXPECT_EQ(pool.saved_extras[0].bytes, 4 * 4 * 4 * 8);  // int64 indices of the [1,4,4,4] output
  EXPECT_EQ(g.tensor(g.FindTensor("p")).shape, (std::vector<int64_t>{1, 4, 4, 4}));
}

TEST(TrainingMemory, InferenceDropoutIsAView) {
  GraphBuilder b;
  b.Input("x", {-1, 100}).Param("w", {100, 10});
  b.Node("MatMul", {"x", "w"}, {"h"}).Node("Dropout", {"h"}, {"d"}).Output("d");
  TrainingGraph g = b.Load(Kept());
  EXPECT_TRUE(g.node(1).saved_extras.empty());
  EXPECT_EQ(g.tensor(g.FindTensor("d")).storage, g.FindTensor("h"));
}

TEST(TrainingMemory, InferenceDropoutPassesItsGradientThrough) {
  // The executor runs an inactive Dropout as the identity (no autograd node): grad h is
  // grad d itself, so Dropout's backward step allocates nothing.
  GraphBuilder b;
  b.Input("x", {-1, 100}).Param("w", {100, 10});
  b.Node("MatMul", {"x", "w"}, {"h"}).Node("Dropout", {"h"}, {"d"}).Output("d");
  TrainingGraph g = b.Load(Kept());
  Schedule s = BuildTrainingSchedule(g);
  int dropout_steps = 0;
  for (const Step& st : s.steps) {
    if (st.phase != Phase::kBackward || st.node != 1) continue;
    ++dropout_steps;
    EXPECT_TRUE(st.allocs.empty());
  }
  EXPECT_EQ(dropout_steps, 1);
}

// A small weight read through a view is trained, not folded: its values change every step, so
// Transpose(w) is no constant even though w's 32 elements are known at load.
GraphBuilder TransposedWeight() {
  GraphBuilder b;
  b.Input("x", {-1, 8}).Param("w", {4, 8});
  b.Node("Transpose", {"w"}, {"wt"}).Attr("perm", std::vector<int64_t>{1, 0});
  b.Node("MatMul", {"x", "wt"}, {"y"});
  return b.Output("y");
}

TEST(TrainingMemory, WeightReadThroughATransposeIsTrained) {
  LoadOptions o;
  o.batch = 1;
  o.loss = LossKind::kSum;
  TrainingGraph g = TransposedWeight().Load(Kept(o));
  const TensorId w = g.FindTensor("w"), wt = g.FindTensor("wt");
  EXPECT_EQ(g.parameters, (std::vector<TensorId>{w}));
  EXPECT_EQ(g.tensor(w).category, TensorCategory::kParameter);
  EXPECT_FALSE(g.tensor(wt).value.has_value());  // not folded
  EXPECT_TRUE(g.tensor(wt).requires_grad);
  EXPECT_EQ(g.tensor(wt).storage, w);  // a view of the weight
  EXPECT_TRUE(g.tensor(w).has_gradient);
  Analysis a = Analyze(g);
  // Persistent: x 1x8x4 = 32 + w 4x8x4 = 128 + w's gradient 128 = 288 B (SGD: no state).
  // Forward: y [1,4] 16 B and the loss 4 B: 308 B. The peak is MatMul's backward: the seed
  // (4 B; grad y is a broadcast view of it), mm's contiguous copy of grad y (16 B) and wt's
  // new gradient x^T grad y [8,4] (128 B), before Transpose hands it on to be added into w's
  // gradient, beside the loss (4 B, held until the backward call returns): 288 + 4 + 16 + 128
  // + 4 = 440 B.
  EXPECT_EQ(a.timeline.peak_bytes, 440);
  EXPECT_EQ(Category(a.timeline, MemoryCategory::kParameter), 128);
  EXPECT_EQ(Category(a.timeline, MemoryCategory::kGradient), 128);
  EXPECT_EQ(Category(a.timeline, MemoryCategory::kInput), 32);
}

// ---- gradients set to None between steps (optimizer.zero_grad()'s default) ----

int64_t BuffersOf(const Schedule& s, TensorId t, MemoryCategory c) {
  int64_t n = 0;
  for (const Buffer& buf : s.buffers) n += buf.tensor == t && buf.category == c;
  return n;
}

TEST(GradientsSetToNone, AreBornInTheBackwardAndDieAfterTheOptimizer) {
  Analysis a = Analyze(Chain().Load());
  // Steps: setup, MatMul1, Relu, MatMul2, loss, loss', MatMul2', Relu', MatMul1', optimizer.
  // Persistent without gradients: x 400 + w1 40000 + w2 4000 + target 8 = 44408.
  EXPECT_EQ(a.timeline.bytes_after[0], 44408);
  // MatMul2's backward: y2 400 (saved) + grad logits 40 + grad y2 400 + w2's gradient 4000,
  // which becomes .grad (no temporary) and stays; the loss and the seed (8 B) stay until the
  // backward call returns.
  EXPECT_EQ(a.timeline.bytes_during[6], 44408 + 400 + 40 + 400 + 4000 + 8);
  // The peak is MatMul1's backward: w2's gradient 4000 + grad y1 400 + w1's 40000 + 8.
  EXPECT_EQ(a.timeline.peak_bytes, 44408 + 4000 + 400 + 40000 + 8);
  EXPECT_EQ(a.timeline.peak_step, 8);
  EXPECT_EQ(Category(a.timeline, MemoryCategory::kGradient), 44000);
  EXPECT_EQ(Category(a.timeline, MemoryCategory::kTemporary), 0);
  // The optimizer step holds every gradient; after it only the persistent state is left.
  EXPECT_EQ(a.timeline.bytes_during[9], 44408 + 44000);
  EXPECT_EQ(a.timeline.bytes_after[9], 44408);
  // Kept gradients cost 44000 B more from the setup on: their peak is 40000 B higher.
  EXPECT_EQ(Analyze(Chain().Load(Kept())).timeline.peak_bytes, 44408 + 44000 + 400 + 40000 + 8);
}

TEST(GradientsSetToNone, ASharedWeightsFirstContributionBecomesItsGradient) {
  GraphBuilder b;
  b.Input("x", {-1, 100}).Param("w", {100, 100}).Param("head", {100, 10});
  b.Node("MatMul", {"x", "w"}, {"h1"})
      .Node("Relu", {"h1"}, {"r"})
      .Node("MatMul", {"r", "w"}, {"h2"});
  b.Node("MatMul", {"h2", "head"}, {"logits"}).Output("logits");
  Analysis a = Analyze(b.Load());
  // Persistent: x 400 + w 40000 + head 4000 + target 8 = 44408. Autograd holds w's first
  // contribution (from MatMul(r, w), 40000 B) until the second arrives (MatMul(x, w), a
  // 40000 B temporary added into it), then AccumulateGrad takes the sum as .grad. The peak is
  // that second backward: head's gradient 4000 + the held sum 40000 + grad h1 400 + the
  // temporary 40000 + the loss and the seed 8 (held until the backward call returns).
  EXPECT_EQ(a.timeline.peak_bytes, 44408 + 4000 + 40000 + 400 + 40000 + 8);
  EXPECT_EQ(Category(a.timeline, MemoryCategory::kGradient), 44000);
  EXPECT_EQ(Category(a.timeline, MemoryCategory::kTemporary), 40000);
  const TensorId w = a.graph.FindTensor("w");
  EXPECT_EQ(BuffersOf(a.schedule, w, MemoryCategory::kGradient), 1);
  EXPECT_EQ(BuffersOf(a.schedule, w, MemoryCategory::kTemporary), 1);
}

TEST(GradientsSetToNone, AGradientThroughATransposeIsTakenInTheWeightsLayout) {
  LoadOptions o;
  o.loss = LossKind::kSum;
  Analysis a = Analyze(TransposedWeight().Load(o));
  // Persistent: x 32 + w 128 = 160 B. MatMul's backward: the seed 4 + mm's contiguous copy of
  // grad y 16 + grad wt [8,4] 128 + the loss 4 = 312, the peak. mm computes wt's gradient in wt's
  // own (transposed) layout, so Transpose's backward hands w a contiguous one, which AccumulateGrad
  // takes as .grad: no new buffer; grad wt's 128 B live through the optimizer step.
  EXPECT_EQ(a.timeline.peak_bytes, 160 + 4 + 16 + 128 + 4);
  EXPECT_EQ(a.timeline.bytes_during.back(), 160 + 128);
  EXPECT_EQ(BuffersOf(a.schedule, a.graph.FindTensor("w"), MemoryCategory::kGradient), 0);
}

TEST(GradientsSetToNone, AGradientThroughAReshapeIsTakenAsItIs) {
  GraphBuilder b;
  b.Input("x", {-1, 8}).Param("w", {32}).Ints("shape", {8, 4});
  b.Node("Reshape", {"w", "shape"}, {"wr"}).Node("MatMul", {"x", "wr"}, {"y"}).Output("y");
  LoadOptions o;
  o.loss = LossKind::kSum;
  Analysis a = Analyze(b.Load(o));
  // Persistent: x 32 + w 128 + shape 16 = 176 B. MatMul's backward: seed 4 + copy 16 + grad wr
  // 128 + the loss 4 = 328, the peak. Reshape's backward hands w a contiguous view of grad wr,
  // which AccumulateGrad takes as .grad: no new buffer, grad wr's storage lives through the
  // optimizer.
  EXPECT_EQ(a.timeline.peak_bytes, 176 + 4 + 16 + 128 + 4);
  EXPECT_EQ(a.timeline.bytes_during.back(), 176 + 128);
  EXPECT_EQ(BuffersOf(a.schedule, a.graph.FindTensor("w"), MemoryCategory::kGradient), 0);
}

// The sum loss's backward hands on its input's gradient as the seed expanded to the input's
// shape: a broadcast view (stride 0, no bytes). mm's backward copies such a gradient to a
// contiguous one before multiplying (measured with LibTorch's counting allocator), a
// temporary of the gradient's full size; relu's backward reads it as it is.
Analysis SumLossAnalysis(const GraphBuilder& b) {
  LoadOptions o;
  o.batch = 3;
  o.loss = LossKind::kSum;
  return Analyze(b.Load(Kept(o)));
}

int64_t BytesNamed(const Schedule& s, const std::string& part) {
  int64_t bytes = 0;
  for (const Buffer& buf : s.buffers)
    if (buf.name.find(part) != std::string::npos) bytes += buf.bytes;
  return bytes;
}

// x[4,8] + Reshape(p[2,4]) to [8] (broadcast over the batch) -> a -> MatMul w[8,3] -> logits.
GraphBuilder ReshapedBroadcastBias() {
  GraphBuilder b;
  b.Input("x", {-1, 8}).Param("p", {2, 4}).Param("w", {8, 3}).Ints("shape", {8});
  b.Node("Reshape", {"p", "shape"}, {"pr"})
      .Node("Add", {"x", "pr"}, {"a"})
      .Node("MatMul", {"a", "w"}, {"logits"});
  return b.Output("logits");
}

TEST(GradientsSetToNone, ABroadcastInputsReducedGradientIsItsOwnBuffer) {
  LoadOptions o;
  o.batch = 4;
  Analysis a = Analyze(ReshapedBroadcastBias().Load(o));
  // Add's backward hands pr the incoming gradient (grad a [4,8], 128 B) summed over the batch:
  // the engine's sum_to makes a new [8] tensor of 32 B, and grad a dies when its last reader
  // (that Add) has run. Reshape's backward hands p a contiguous view of it, which AccumulateGrad
  // takes as .grad: grad pr's 32 B live through the optimizer step, grad a's 128 B do not.
  EXPECT_EQ(BytesNamed(a.schedule, "grad pr"), 32);
  EXPECT_EQ(BuffersOf(a.schedule, a.graph.FindTensor("p"), MemoryCategory::kGradient), 0);
  // Persistent: x 128 + p 32 + w 96 + shape 8 + target 4 x 8 = 296 B. The optimizer step holds
  // w's gradient (96 B) and p's (32 B).
  EXPECT_EQ(a.timeline.bytes_after[0], 296);
  EXPECT_EQ(a.timeline.bytes_during.back(), 296 + 96 + 32);
  // Kept gradients: the same 32 B reduced gradient, added into p's gradient by AccumulateGrad.
  Analysis k = Analyze(ReshapedBroadcastBias().Load(Kept(o)));
  EXPECT_EQ(BytesNamed(k.schedule, "grad pr"), 32);
  EXPECT_EQ(k.timeline.bytes_during.back(), 296 + 96 + 32);
}

// x[3,5] -> MatMul w[5,4] -> y[3,4], sum loss.
TEST(TrainingMemory, SumLossGradientIsCopiedByMatMul) {
  GraphBuilder b;
  b.Input("x", {-1, 5}).Param("w", {5, 4}).Node("MatMul", {"x", "w"}, {"y"}).Output("y");
  Analysis a = SumLossAnalysis(b);
  // Persistent: x 60 + w 80 + w's gradient 80 = 220 B. MatMul's backward: the seed (4 B;
  // grad y is a broadcast view of it), the new gradient of w (80 B) and the contiguous copy
  // of grad y (3x4x4 = 48 B), beside the loss (4 B, held until the backward call returns):
  // 220 + 4 + 80 + 48 + 4 = 356 B (the forward reaches 220 + 48 + 4).
  EXPECT_EQ(a.timeline.peak_bytes, 356);
  EXPECT_EQ(Category(a.timeline, MemoryCategory::kTemporary), 80 + 48);
  EXPECT_EQ(BytesNamed(a.schedule, "broadcast"), 48);
}

// The broadcast view reaches MatMul through a Transpose, which hands it on as a view.
TEST(TrainingMemory, SumLossGradientThroughAViewIsCopiedByMatMul) {
  GraphBuilder b;
  b.Input("x", {-1, 5}).Param("w", {5, 4}).Node("MatMul", {"x", "w"}, {"y"});
  b.Node("Transpose", {"y"}, {"yt"}).Attr("perm", std::vector<int64_t>{1, 0}).Output("yt");
  Analysis a = SumLossAnalysis(b);
  // As above (yt is a view of y, its gradient a view of the seed): 220 + 4 + 80 + 48 + 4 = 356 B.
  EXPECT_EQ(a.timeline.peak_bytes, 356);
  EXPECT_EQ(BytesNamed(a.schedule, "broadcast"), 48);
}

// Relu's backward reads the broadcast view without a copy and makes a new contiguous gradient,
// so the MatMul before it copies nothing either.
TEST(TrainingMemory, SumLossGradientIsReadInPlaceByRelu) {
  GraphBuilder b;
  b.Input("x", {-1, 5}).Param("w", {5, 4}).Node("MatMul", {"x", "w"}, {"h"});
  b.Node("Relu", {"h"}, {"y"}).Output("y");
  Analysis a = SumLossAnalysis(b);
  // Persistent 220 B. Forward: h 48 + y 48 (Relu saves y) = 316 B. Relu's backward: grad h
  // (48 B) beside y, the seed and the loss: 220 + 48 + 4 + 48 + 4 = 324 B. MatMul's backward:
  // grad h and the new gradient of w, beside the loss and the seed (both held until the
  // backward call returns): 220 + 48 + 80 + 8 = 356 B, the peak.
  EXPECT_EQ(a.timeline.peak_bytes, 356);
  EXPECT_EQ(BytesNamed(a.schedule, "broadcast"), 0);
}

// Add hands the broadcast view on to its same-shaped input; a second consumer's gradient is
// summed into a new tensor, which MatMul reads without a copy.
TEST(TrainingMemory, SumLossGradientSummedWithAnotherIsNotCopied) {
  GraphBuilder through_add;
  through_add.Input("x", {-1, 5}).Param("w", {5, 4}).Param("p", {3, 4});
  through_add.Node("MatMul", {"x", "w"}, {"h"}).Node("Add", {"h", "p"}, {"y"}).Output("y");
  // Persistent: x 60 + w 80 + p 48 + their gradients 128 = 316 B. MatMul's backward: the
  // seed 4 + w's new gradient 80 + the copy of grad h 48 + the loss 4 = 452 B (Add's backward
  // adds the view into p's gradient in place).
  Analysis a = SumLossAnalysis(through_add);
  EXPECT_EQ(a.timeline.peak_bytes, 316 + 4 + 80 + 48 + 4);
  EXPECT_EQ(BytesNamed(a.schedule, "broadcast"), 48);

  GraphBuilder summed;
  summed.Input("x", {-1, 5}).Param("w", {5, 4});
  summed.Node("MatMul", {"x", "w"}, {"h"}).Node("Add", {"h", "h"}, {"y"}).Output("y");
  // h's two gradients (both views of the seed) are summed into a new 48 B tensor, which
  // MatMul reads as it is: 220 (x, w, w's gradient) + 48 + w's new gradient 80 + the loss and
  // the seed 8 = 356 B.
  Analysis s = SumLossAnalysis(summed);
  EXPECT_EQ(s.timeline.peak_bytes, 220 + 48 + 80 + 8);
  EXPECT_EQ(BytesNamed(s.schedule, "broadcast"), 0);
}

// ReduceSum's backward expands its incoming gradient back to the input's shape, a broadcast
// view, whatever the loss.
TEST(TrainingMemory, ReduceSumHandsOnABroadcastGradient) {
  GraphBuilder b;
  b.Input("x", {-1, 5}).Param("w", {5, 4}).Node("MatMul", {"x", "w"}, {"h"});
  b.Ints("axes", {1}).Node("ReduceSum", {"h", "axes"}, {"y"}).Output("y");
  Analysis a = Analyze(b.Load(Kept({/*batch=*/3})));  // cross-entropy over y's one class
  // grad h is no new buffer (a view of grad y, 3x1x4 = 12 B); MatMul copies it (48 B).
  EXPECT_EQ(BytesNamed(a.schedule, "grad h"), 0);
  EXPECT_EQ(BytesNamed(a.schedule, "broadcast"), 48);
}

TEST(TrainingMemory, SimulatorRejectsDoubleAllocation) {
  Schedule s;
  BufferId b = s.AddBuffer({"t", 10, MemoryCategory::kActivation, kNone});
  s.steps.push_back({Phase::kForward, kNone, {b}, {}});
  s.steps.push_back({Phase::kForward, kNone, {b}, {}});
  EXPECT_THROW(Simulate(s), MemplanError);
}

TEST(TrainingMemory, CudaPolicyRoundsTo512) {
  Schedule s;
  BufferId a = s.AddBuffer({"a", 1, MemoryCategory::kActivation, kNone});
  BufferId b = s.AddBuffer({"b", 513, MemoryCategory::kActivation, kNone});
  s.steps.push_back({Phase::kForward, kNone, {a, b}, {}});
  // 1 B -> 512 B, 513 B -> 1024 B.
  EXPECT_EQ(Simulate(s, {AllocatorPolicy::kCudaCaching}).peak_bytes, 512 + 1024);
  EXPECT_EQ(Simulate(s).peak_bytes, 514);
}

// A hand-made schedule: a (setup, never freed), b (forward 1 -> backward 3), c allocated by a
// recompute step 2 and freed by it, then b again in step 4.
Schedule HandSchedule() {
  Schedule s;
  const BufferId a = s.AddBuffer({"a", 10, MemoryCategory::kParameter, kNone});
  const BufferId b = s.AddBuffer({"b", 20, MemoryCategory::kActivation, kNone});
  const BufferId c = s.AddBuffer({"c", 30, MemoryCategory::kActivation, kNone});
  s.steps = {Step{Phase::kSetup, kNone, {a}, {}, {}}, Step{Phase::kForward, 0, {b}, {}, {}},
             Step{Phase::kRecompute, 0, {c}, {c}, {}}, Step{Phase::kBackward, 0, {}, {b}, {}},
             Step{Phase::kBackward, 1, {b}, {b}, {}}};
  return s;
}

TEST(BufferLifetimes, SpansRunFromAllocationToFree) {
  const std::vector<BufferSpan> spans = BufferSpans(HandSchedule());
  ASSERT_EQ(spans.size(), 4u);  // a, b, c, and b's second allocation
  EXPECT_EQ(spans[0].buffer, 0);
  EXPECT_EQ(spans[0].free_step, -1) << "never freed";
  EXPECT_EQ(spans[1].buffer, 1);
  EXPECT_EQ(spans[1].alloc_step, 1);
  EXPECT_EQ(spans[1].free_step, 3);
  EXPECT_TRUE(spans[2].recomputed);
  EXPECT_EQ(spans[2].alloc_step, 2);
  EXPECT_EQ(spans[2].free_step, 2);
  EXPECT_EQ(spans[3].alloc_step, 4);
  EXPECT_FALSE(spans[3].recomputed);
}

TEST(BufferLifetimes, AliveDuringAStepIncludesWhatItFrees) {
  const Schedule s = HandSchedule();
  EXPECT_EQ(AliveDuring(s, 0), (std::vector<BufferId>{0}));
  EXPECT_EQ(AliveDuring(s, 2), (std::vector<BufferId>{0, 1, 2})) << "c lives within step 2";
  EXPECT_EQ(AliveDuring(s, 3), (std::vector<BufferId>{0, 1}))
      << "b is freed by step 3, after its work";
  EXPECT_EQ(AliveDuring(s, 4), (std::vector<BufferId>{0, 1}));
  // The same sums as the simulator's bytes_during: 10, 30, 60, 30, 30.
  const MemoryTimeline t = Simulate(s);
  for (size_t i = 0; i < s.steps.size(); ++i) {
    int64_t bytes = 0;
    for (BufferId b : AliveDuring(s, i)) bytes += s.buffers[b].bytes;
    EXPECT_EQ(bytes, t.bytes_during[i]) << "step " << i;
  }
}

// oneDNN's blocked layouts pad channels to 16 (LibTorch 2.14 CPU, oneDNN 3.12, AVX-512; measured
// with samples/pytorch_peer_bench.py's posix_memalign counter on
// aten::convolution_backward alone: 802,816 B and 6,127,616 B above the gradients, and
// 1,160,320 B above the output in the forward).
TEST(TrainingMemory, ConvBackwardCountsOneDnnPaddedBlockedCopies) {
  // An SE block's tail: h = x * s (s [1,C,1,1] broadcast), then a 1x1 conv on h (which has a
  // gradient), and a strided 3x3 conv on its own input.
  GraphBuilder b = testing::SqueezeExcitationTail();
  LoadOptions o;
  o.batch = 4;
  o.cpu_kernels = kAvx512TwoThreads;
  TrainingGraph g = b.Load(Kept(o));
  // 1x1 conv: X = Y = 4*440*49*4 = 344,960; W = 440*440*4 = 774,400. Blocked (448 channels):
  // xB = yB = 4*448*49*4 = 351,232, wB = 448*448*4 = 802,816.
  //   backward data:    yB + wB + xB = 1,505,280, then xB + grad x = 696,192;
  //   backward weights (one thread per output-channel block, no minibatch split):
  //                     grad x + yB + xB + wB = 1,850,240, then grad x + wB + grad w = 1,922,176.
  //   workspace = 1,922,176 - (grad x 344,960 + grad w 774,400) = 802,816.
  //   forward: xB + wB + yB = 1,505,280 above nothing; less the output 344,960 = 1,160,320.
  const Node& c = g.node(1);
  EXPECT_EQ(c.backward_workspace_bytes, 802816);
  EXPECT_EQ(c.forward_workspace_bytes, 1160320);
  // Strided 3x3: X = 4*64*56*56*4 = 3,211,264; W = 128*64*9*4 = 294,912; Y = 4*128*28*28*4 =
  // 1,605,632 (64 and 128 channels: no padding). Its input gradient comes from a channels-last
  // kernel and is copied twice: 3X = 9,633,792; weights: X + Y + X + W = 8,323,072.
  //   workspace = 9,633,792 - (3,211,264 + 294,912) = 6,127,616.
  const Node& c2 = g.node(3);
  EXPECT_EQ(c2.backward_workspace_bytes, 6127616);
}

// A kernel wider than 14 (ViT's 16x16 patch embedding) is beyond oneDNN's jit backward weights:
// gemm_convolution_bwd_weights runs on the dense tensors. Measured with
// samples/pytorch_peer_bench.py's counter on aten::convolution_backward alone (LibTorch 2.14.1,
// 2 threads): 10,039,552 B above the gradients at batch 1, 20,078,848 B at batch 4.
TEST(TrainingMemory, WideKernelConvBackwardRunsOneDnnGemm) {
  for (int64_t batch : {1, 4}) {
    GraphBuilder b;
    b.Input("x", {-1, 3, 224, 224}).Param("w", {768, 3, 16, 16}).Param("bias", {768});
    b.Node("Conv", {"x", "w", "bias"}, {"c"}).Attr("strides", std::vector<int64_t>{16, 16});
    b.Node("ReduceMean", {"c"}, {"logits"})
        .Attr("axes", std::vector<int64_t>{2, 3})
        .Attr("keepdims", int64_t{0})
        .Output("logits");
    LoadOptions o;
    o.batch = batch;
    o.cpu_kernels = kAvx512TwoThreads;
    TrainingGraph g = b.Load(o);
    // W = 768*3*16*16*4 = 2,359,296; the im2col matrix: 3*16*16 rows x 14*14 output pixels x 4 B
    // = 602,112. Each thread holds 4W + col = 10,039,296, plus 256 B. One image: one thread,
    // 10,039,552. Four images, 196 / 2 = 98 < 256 pixels per thread: both threads, 20,078,848.
    const int64_t per_thread = 4 * 2359296 + 602112;
    EXPECT_EQ(g.node(0).backward_workspace_bytes, (batch == 1 ? 1 : 2) * per_thread + 256)
        << "batch " << batch;
  }
}

// ViT's patch embedding: conv, reshape, transpose. The gradient reaching the convolution is the
// transposed view of a contiguous one, which convolution backward copies (measured on
// aten::convolution_backward fed a permuted gradient: 602,112 B more, the output's size).
TEST(TrainingMemory, ConvBackwardCopiesAPermutedIncomingGradient) {
  for (bool transpose : {true, false}) {
    GraphBuilder b;
    b.Input("x", {-1, 3, 32, 32}).Param("w", {16, 3, 4, 4}).Ints("shape", {-1, 16, 64});
    b.Param("s", {transpose ? 16 : 64});
    b.Node("Conv", {"x", "w"}, {"c"}).Attr("strides", std::vector<int64_t>{4, 4});
    b.Node("Reshape", {"c", "shape"}, {"r"});
    if (transpose) {
      b.Node("Transpose", {"r"}, {"t"}).Attr("perm", std::vector<int64_t>{0, 2, 1});
    } else {
      b.Node("Identity", {"r"}, {"t"});
    }
    b.Node("Mul", {"t", "s"}, {"m"})
        .Node("ReduceMean", {"m"}, {"logits"})
        .Attr("axes", std::vector<int64_t>{1})
        .Attr("keepdims", int64_t{0})
        .Output("logits");
    LoadOptions o;
    o.batch = 2;
    const TrainingGraph g = b.Load(o);
    const Schedule s = BuildTrainingSchedule(g);
    // Mul's backward writes t's gradient [2,64,16], contiguous; Transpose hands back its permuted
    // view [2,16,64] (strides [1024,1,16]), Reshape re-views it as [2,16,8,8] (strides
    // [1024,1,128,16]): not contiguous, so a copy of 2*16*8*8*4 = 8,192 B. Without the transpose
    // the gradient stays contiguous: no copy.
    int64_t copies = 0;
    for (const Buffer& buf : s.buffers) {
      if (buf.name.find("contiguous copy of the strided") != std::string::npos) copies += buf.bytes;
    }
    EXPECT_EQ(copies, transpose ? 8192 : 0) << (transpose ? "transposed" : "not transposed");
  }
}

// ConvNeXt's block as the dynamo exporter writes it: channels-last activations (permute, layer
// norm, permute back) feed oneDNN's nhwc kernels. Expected bytes measured on LibTorch 2.14.1 with
// the profiler's allocation events (2 threads, no bias), computed here by hand.
TEST(TrainingMemory, ChannelsLastConvolutionsAndLayerNorm) {
  GraphBuilder b;
  // x [N,16,16,96] (NHWC) * s -> h; Transpose(0,3,1,2) -> t [N,96,16,16] with channels-last
  // strides [24576,1,1536,96]; depthwise 7x7 conv -> d; 2x2 stride-2 conv 96 -> 192 -> c.
  // A stem-like branch: z [N,96,16,16] * s3 -> Transpose(0,2,3,1) (not contiguous) -> layer norm.
  b.Input("x", {-1, 16, 16, 96})
      .Param("s", {96})
      .Param("dw", {96, 1, 7, 7})
      .Param("w", {192, 96, 2, 2});
  b.Input("z", {-1, 96, 16, 16}).Param("s3", {1, 96, 1, 1}).Param("g", {96}).Param("beta", {96});
  b.Node("Mul", {"x", "s"}, {"h"})
      .Node("Transpose", {"h"}, {"t"})
      .Attr("perm", std::vector<int64_t>{0, 3, 1, 2});
  b.Node("Conv", {"t", "dw"}, {"d"})
      .Attr("group", int64_t{96})
      .Attr("pads", std::vector<int64_t>{3, 3, 3, 3});
  b.Node("Conv", {"d", "w"}, {"c"}).Attr("strides", std::vector<int64_t>{2, 2});
  b.Node("Mul", {"z", "s3"}, {"h3"})
      .Node("Transpose", {"h3"}, {"p"})
      .Attr("perm", std::vector<int64_t>{0, 2, 3, 1});
  b.Node("LayerNormalization", {"p", "g", "beta"}, {"ln"}).Attr("axis", int64_t{-1});
  b.Node("ReduceMean", {"c"}, {"m"})
      .Attr("axes", std::vector<int64_t>{2, 3})
      .Attr("keepdims", int64_t{0});
  b.Node("ReduceMean", {"ln"}, {"m2"})
      .Attr("axes", std::vector<int64_t>{1, 2})
      .Attr("keepdims", int64_t{0});
  b.Node("Concat", {"m", "m2"}, {"logits"}).Attr("axis", int64_t{1}).Output("logits");
  LoadOptions o;
  o.batch = 4;
  o.cpu_kernels = kAvx512TwoThreads;
  TrainingGraph g = b.Load(Kept(o));
  // Both convolutions write channels-last outputs, as their input is.
  EXPECT_EQ(g.tensor(g.FindTensor("d")).strides, (std::vector<int64_t>{24576, 1, 1536, 96}));
  EXPECT_EQ(g.tensor(g.FindTensor("c")).strides, (std::vector<int64_t>{12288, 1, 1536, 192}));
  // Depthwise 7x7: W = 96*49*4 = 18,816 (96 channels: no padding, the weight is already
  // channels-last). Forward: its Goihw16g reorder, 18,816 above the output. Backward weights: the
  // kernel is wider than 3, so oneDNN's generic kernel writes gOIhw16i16o (each group's 1x1 padded
  // to 16x16): 256 * 18,816 = 4,816,896, beside the dense gradient and one more weight-sized
  // buffer: 4,816,896 + 18,816 = 4,835,712 above the gradients.
  const Node& dwc = g.node(2);
  EXPECT_EQ(dwc.forward_workspace_bytes, 18816);
  EXPECT_EQ(dwc.backward_workspace_bytes, 4835712);
  // 2x2 stride 2: W = 192*96*4*4 = 294,912. Forward: the channels-last weight copy, its blocked
  // reorder and the scratchpad 4,096 + 2 * 4,120: 294,912 + 294,912 + 12,336 = 602,160 above the
  // output. Backward: the weight copy and three weight-sized buffers at once, the peak 4W above the
  // input gradient, 3W = 884,736 above both gradients.
  const Node& dense = g.node(3);
  EXPECT_EQ(dense.forward_workspace_bytes, 602160);
  EXPECT_EQ(dense.backward_workspace_bytes, 884736);
  // Layer norm on the permuted p [4,16,16,96] (not contiguous): native_layer_norm copies it
  // forward and backward: 4*16*16*96*4 = 393,216 each time.
  const Node& ln = g.node(6);
  EXPECT_EQ(ln.op_type, "LayerNormalization");
  EXPECT_EQ(ln.forward_workspace_bytes, 393216);
  EXPECT_EQ(ln.backward_workspace_bytes, 393216);
}

}  // namespace
}  // namespace memplan
