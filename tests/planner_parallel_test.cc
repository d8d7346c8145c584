// Data parallelism (plan.h's contract): buckets and padding, per-rank persistent memory per
// shard mode, the lazily allocated flat gradients of shard gradients, the communication phase,
// the sharded optimizer's transients, the plan JSON, the budget entry point; and on corpus
// models, the ordering of the shard modes' peaks and the persistent table.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "memplan/planner.h"
#include "testing/corpus.h"
#include "testing/graph_builder.h"

namespace memplan {
namespace {

using testing::GraphBuilder;

// Three parameters of 10, 7 and 3 float elements (40, 28, 12 B), one per input, concatenated.
TrainingGraph ThreeParams(Optimizer opt = Optimizer::kSgd, int64_t batch = 1) {
  GraphBuilder b;
  b.Input("x", {-1, 10}).Input("y", {-1, 7}).Input("z", {-1, 3});
  b.Param("a", {10}).Param("b", {7}).Param("c", {3});
  b.Node("Mul", {"x", "a"}, {"ha"}).Node("Mul", {"y", "b"}, {"hb"}).Node("Mul", {"z", "c"}, {"hc"});
  b.Node("Concat", {"ha", "hb", "hc"}, {"out"}).Attr("axis", int64_t{1});
  LoadOptions o;
  o.grads = GradientLifetime::kKept;  // the hand-computed steps keep gradients
  o.batch = batch;
  o.loss = LossKind::kSum;
  o.optimizer = opt;
  return b.Output("out").Load(o);
}

// x[N,25] -> Mul w0[25] -> h0 -> Relu -> h1 -> Mul w1[25] -> h2 -> sum. Backward order: the
// loss, Mul(w1), Relu, Mul(w0).
TrainingGraph Chain(Optimizer opt = Optimizer::kSgd, int64_t batch = 1) {
  GraphBuilder b;
  b.Input("x", {-1, 25}).Param("w0", {25}).Param("w1", {25});
  b.Node("Mul", {"x", "w0"}, {"h0"}).Node("Relu", {"h0"}, {"h1"}).Node("Mul", {"h1", "w1"}, {"h2"});
  LoadOptions o;
  o.grads = GradientLifetime::kKept;  // the hand-computed steps keep gradients
  o.batch = batch;
  o.loss = LossKind::kSum;
  o.optimizer = opt;
  return b.Output("h2").Load(o);
}

ParallelLayout Layout(int64_t devices, ShardMode shard, int64_t bucket_bytes) {
  ParallelLayout l;
  l.devices = devices;
  l.shard = shard;
  l.bucket_bytes = bucket_bytes;
  return l;
}

Plan Plain(const TrainingGraph& g) {
  PlanOptions o;
  o.strategy = "none";
  return PlanNone(g, {}, o);
}

Plan Parallel(const TrainingGraph& g, const ParallelLayout& l) {
  Plan p = Plain(g);
  ApplyDataParallel(p, g, l);
  return p;
}

// Bytes the setup step allocates per category.
int64_t SetupBytes(const Plan& p, MemoryCategory c) {
  int64_t sum = 0;
  for (BufferId b : p.schedule.steps.front().allocs) {
    if (p.schedule.buffers[b].category == c) sum += p.schedule.buffers[b].bytes;
  }
  return sum;
}

size_t StepOfNode(const Plan& p, const TrainingGraph& g, Phase phase, const std::string& node) {
  for (size_t i = 0; i < p.schedule.steps.size(); ++i) {
    const Step& s = p.schedule.steps[i];
    if (s.phase == phase && s.node != kNone && g.nodes[s.node].name == node) return i;
  }
  ADD_FAILURE() << "no " << PhaseName(phase) << " step of " << node;
  return 0;
}

std::string NodeProducing(const TrainingGraph& g, const std::string& tensor) {
  return g.nodes[g.tensors[g.FindTensor(tensor)].producer].name;
}

// Steps from `first` on are `expected` (phase, node name; "" for none).
void ExpectStepsFrom(const Plan& p, const TrainingGraph& g, size_t first,
                     const std::vector<std::pair<Phase, std::string>>& expected) {
  ASSERT_GE(p.schedule.steps.size(), first + expected.size());
  for (size_t k = 0; k < expected.size(); ++k) {
    const Step& st = p.schedule.steps[first + k];
    EXPECT_EQ(st.phase, expected[k].first) << k;
    EXPECT_EQ(st.node == kNone ? "" : g.nodes[st.node].name, expected[k].second) << k;
  }
}

TEST(Parallel, ShardModeNamesRoundTrip) {
  for (ShardMode m :
       {ShardMode::kNone, ShardMode::kOptimizer, ShardMode::kGradients, ShardMode::kParameters})
    EXPECT_EQ(ParseShardMode(ShardModeName(m)), m);
  try {
    ParseShardMode("zero2");
    FAIL();
  } catch (const MemplanError& e) {
    EXPECT_NE(std::string(e.what()).find("'zero2'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("gradients"), std::string::npos) << e.what();
  }
}

TEST(Parallel, BucketsGroupGreedilyAndPad) {
  TrainingGraph g = ThreeParams();
  // a (40 B) fills the 40 B bucket; b (28 B) starts the next, c (12 B) joins it (28 < 40).
  // Padded to a multiple of 4 ranks: 10 -> 12 elements (48 B), 7 + 3 = 10 -> 12 (48 B).
  std::vector<ParameterBucket> buckets = ParameterBuckets(g, Layout(4, ShardMode::kOptimizer, 40));
  ASSERT_EQ(buckets.size(), 2u);
  ASSERT_EQ(buckets[0].parameters.size(), 1u);
  EXPECT_EQ(g.tensors[buckets[0].parameters[0]].name, "a");
  ASSERT_EQ(buckets[1].parameters.size(), 2u);
  EXPECT_EQ(g.tensors[buckets[1].parameters[0]].name, "b");
  EXPECT_EQ(g.tensors[buckets[1].parameters[1]].name, "c");
  EXPECT_EQ(buckets[1].offsets, (std::vector<int64_t>{0, 7}));
  for (const ParameterBucket& b : buckets) {
    EXPECT_EQ(b.elements, 12);
    EXPECT_EQ(b.bytes, 48);
    EXPECT_EQ(b.shard_elements(), 3);
  }
  // A bucket larger than every parameter holds them all: 20 elements, padded to 21 for 3 ranks.
  buckets = ParameterBuckets(g, Layout(3, ShardMode::kNone, 1 << 20));
  ASSERT_EQ(buckets.size(), 1u);
  EXPECT_EQ(buckets[0].offsets, (std::vector<int64_t>{0, 10, 17}));
  EXPECT_EQ(buckets[0].elements, 21);
  EXPECT_EQ(buckets[0].bytes, 84);
  // 1 B buckets: every parameter on its own.
  EXPECT_EQ(ParameterBuckets(g, Layout(2, ShardMode::kNone, 1)).size(), 3u);
}

TEST(Parallel, PersistentBytesPerRankFollowTheTable) {
  // Buckets of 48 B twice on 4 ranks: P = 96 B, S = 24 B. mult: SGD 0, momentum 1, Adam 2.
  //   none:      parameters P, gradients P, state mult x P
  //   optimizer: parameters P, gradients P, state mult x S
  //   gradients: parameters P, gradients S, state mult x S
  //   parameters: parameters S, gradients S, state mult x S
  struct Row {
    ShardMode shard;
    int64_t params, grads, state_per_mult;
  };
  for (Optimizer opt : {Optimizer::kSgd, Optimizer::kMomentum, Optimizer::kAdam}) {
    const int64_t mult = opt == Optimizer::kSgd ? 0 : opt == Optimizer::kMomentum ? 1 : 2;
    TrainingGraph g = ThreeParams(opt);
    for (Row r :
         {Row{ShardMode::kNone, 96, 96, 96}, Row{ShardMode::kOptimizer, 96, 96, 24},
          Row{ShardMode::kGradients, 96, 24, 24}, Row{ShardMode::kParameters, 24, 24, 24}}) {
      SCOPED_TRACE(std::string(OptimizerName(opt)) + " " + ShardModeName(r.shard));
      ParallelLayout l = Layout(4, r.shard, 40);
      RankPersistent rp = RankPersistentBytes(g, l);
      EXPECT_EQ(rp.parameters, r.params);
      EXPECT_EQ(rp.gradients, r.grads);
      EXPECT_EQ(rp.optimizer_state, mult * r.state_per_mult);
      // The replayed schedule's setup step allocates exactly that (shard gradients: the
      // shards; the flat gradients come later), besides the inputs x, y, z (80 B).
      Plan p = Parallel(g, l);
      EXPECT_EQ(SetupBytes(p, MemoryCategory::kParameter), r.params);
      EXPECT_EQ(SetupBytes(p, MemoryCategory::kGradient), r.grads);
      EXPECT_EQ(SetupBytes(p, MemoryCategory::kOptimizerState), mult * r.state_per_mult);
      EXPECT_EQ(SetupBytes(p, MemoryCategory::kInput), 80);
      EXPECT_EQ(p.layout.devices, 4);
    }
  }
}

TEST(Parallel, OneDeviceLeavesThePlanAsItWas) {
  for (Optimizer opt : {Optimizer::kSgd, Optimizer::kAdam}) {
    TrainingGraph g = Chain(opt);
    Plan before = Plain(g);
    Plan after = before;
    ApplyDataParallel(after, g, Layout(1, ShardMode::kOptimizer, 40));
    EXPECT_EQ(after.timeline.bytes_during, before.timeline.bytes_during);
    EXPECT_EQ(after.timeline.bytes_after, before.timeline.bytes_after);
    EXPECT_EQ(after.schedule.buffers.size(), before.schedule.buffers.size());
    EXPECT_EQ(after.schedule.steps.size(), before.schedule.steps.size());
    EXPECT_EQ(after.predicted_peak_bytes, before.predicted_peak_bytes);
    EXPECT_EQ(after.predicted_comm_seconds, 0);
  }
}

TEST(Parallel, ShardGradientsAllocatesEachFlatGradientAtItsFirstBackward) {
  // Chain on 2 ranks, 100 B buckets: w0 and w1 (25 elements, 100 B) each a bucket of 26
  // elements (104 B), shard 52 B. One device holds w0, w1 and their gradients: 400 B.
  //   none:      parameters 208 + gradients 208           = 416 (+16 against one device)
  //   gradients: parameters 208 + gradient shards 104     = 312 (-88) until bucket 1's flat
  //              gradient (104) comes with Mul(w1)'s backward, where bucket 1 is also reduced;
  //              bucket 0's comes and goes with Mul(w0)'s.
  TrainingGraph g = Chain();
  Plan one = Plain(g);
  Plan none = Parallel(g, Layout(2, ShardMode::kNone, 100));
  Plan lazy = Parallel(g, Layout(2, ShardMode::kGradients, 100));
  const std::string mul0 = NodeProducing(g, "h0"), mul1 = NodeProducing(g, "h2");
  const size_t b_mul1 = StepOfNode(one, g, Phase::kBackward, mul1),
               b_mul0 = StepOfNode(one, g, Phase::kBackward, mul0);
  ASSERT_LT(b_mul1, b_mul0);
  for (size_t i = 0; i < b_mul1; ++i) {  // up to the backward of Mul(w1), the steps are the same
    SCOPED_TRACE("step " + one.schedule.StepLabel(g, i));
    EXPECT_EQ(none.timeline.bytes_during[i] - one.timeline.bytes_during[i], 16);
    EXPECT_EQ(lazy.timeline.bytes_during[i] - one.timeline.bytes_during[i], -88);
  }
  // Each of the two backward steps reading a parameter is split in two (the op, then the
  // accumulation that allocates the flat gradient) and followed by its bucket's communication.
  const std::vector<std::pair<Phase, std::string>> tail = {
      {Phase::kBackward, mul1},    {Phase::kBackward, mul1},
      {Phase::kCommunication, ""}, {Phase::kBackward, NodeProducing(g, "h1")},
      {Phase::kBackward, mul0},    {Phase::kBackward, mul0},
      {Phase::kCommunication, ""}, {Phase::kOptimizer, ""}};
  ExpectStepsFrom(lazy, g, b_mul1, tail);
  // Bucket 1's flat gradient lives from the accumulation step (which frees w1's 100 B
  // temporary) to the communication step right after; bucket 0's likewise, so the backward of
  // Relu runs with none, 88 B below one device.
  EXPECT_EQ(lazy.timeline.bytes_during[b_mul1 + 1], lazy.timeline.bytes_after[b_mul1] + 104);
  EXPECT_EQ(lazy.timeline.bytes_after[b_mul1 + 1], lazy.timeline.bytes_after[b_mul1] + 104 - 100);
  EXPECT_EQ(lazy.timeline.bytes_after[b_mul1 + 2], lazy.timeline.bytes_after[b_mul1] - 100);
  const size_t relu = StepOfNode(one, g, Phase::kBackward, NodeProducing(g, "h1"));
  EXPECT_EQ(lazy.timeline.bytes_during[b_mul1 + 3] - one.timeline.bytes_during[relu], -88);
  // Mul(w0)'s is the call's last backward step: the loss and its seed (8 B) die after its
  // accumulation, as the backward call returns.
  EXPECT_EQ(lazy.timeline.bytes_during[b_mul1 + 5], lazy.timeline.bytes_after[b_mul1 + 4] + 104);
  EXPECT_EQ(lazy.timeline.bytes_after[b_mul1 + 6], lazy.timeline.bytes_after[b_mul1 + 4] - 100 - 8);
}

TEST(Parallel, ShardGradientsAllocatesTheFlatGradientAfterTheOpsWorkspaceBeforeItsTemporary) {
  // Chain at batch 1 on 2 ranks, 100 B buckets, with a backward workspace of W = 1000 B given to
  // Mul(w1). Its one-device backward step starts with B bytes alive (among them the loss's 4 B
  // gradient, of which SumLoss hands h2's gradient on as a view, and which the backward call
  // holds until it returns), allocates grad h1 (100), the temporary of w1's new gradient (100)
  // and W, and frees all but grad h1. Shard gradients (persistent 400 - 88) splits it as
  // LibTorch runs it: the op (W freed at its end), then AccumulateGrad (the flat gradient, 104,
  // allocated beside
  // grad h1 and the temporary, which it then frees); bucket 1's communication right after frees
  // the flat gradient.
  TrainingGraph g = Chain();
  const std::string mul1 = NodeProducing(g, "h2");
  g.nodes[g.tensors[g.FindTensor("h2")].producer].backward_workspace_bytes = 1000;
  Plan one = Plain(g);
  Plan lazy = Parallel(g, Layout(2, ShardMode::kGradients, 100));
  const size_t op = StepOfNode(one, g, Phase::kBackward, mul1);
  ASSERT_EQ(StepOfNode(lazy, g, Phase::kBackward, mul1), op);
  const int64_t before = one.timeline.bytes_after[op - 1];  // B
  EXPECT_EQ(one.timeline.bytes_during[op], before + 100 + 100 + 1000);
  EXPECT_EQ(one.timeline.bytes_after[op], before + 100);
  // The op: as on one device, less the 88 B the persistent buffers save.
  EXPECT_EQ(lazy.timeline.bytes_during[op], before - 88 + 100 + 100 + 1000);
  EXPECT_EQ(lazy.timeline.bytes_after[op], before - 88 + 100 + 100);
  // The accumulation: 1000 B below the flat gradient allocated beside the op's workspace.
  EXPECT_EQ(lazy.schedule.steps[op + 1].node, lazy.schedule.steps[op].node);
  EXPECT_EQ(lazy.timeline.bytes_during[op + 1], before - 88 + 100 + 100 + 104);
  EXPECT_EQ(lazy.timeline.bytes_after[op + 1], before - 88 + 100 + 104);
  // The communication: the flat gradient freed; one device's bytes after the step, less 88.
  EXPECT_EQ(lazy.schedule.steps[op + 2].phase, Phase::kCommunication);
  EXPECT_EQ(lazy.timeline.bytes_after[op + 2], one.timeline.bytes_after[op] - 88);
  // With W = 1000 the peak of the three is the op's, which holds no flat gradient.
  EXPECT_EQ(std::max({lazy.timeline.bytes_during[op], lazy.timeline.bytes_during[op + 1],
                      lazy.timeline.bytes_during[op + 2]}),
            before - 88 + 1200);
}

TEST(Parallel, ShardGradientsKeepsAGradientHandedOnByAViewOpUntilTheFlatGradientIsAllocated) {
  // x[1,257] -> MatMul(x, Transpose(w[256,257])) -> y[1,256] -> sum, on 2 ranks, one bucket
  // (w: 65,792 elements, P = 263,168 B, shard P/2; w is larger than the analyzer folds to a
  // constant). MatMul's backward makes wt's gradient G (P bytes); Transpose's
  // backward hands G on as w's gradient (a view), which AccumulateGrad adds into w's .grad: G
  // lives until then. One device: the Transpose step frees G. Shard gradients: the op step frees
  // nothing, the accumulation step allocates the flat gradient (P) beside G, then frees G, and
  // the communication frees the flat gradient. The setup holds the P/2 shard where one device
  // holds the P gradient: P/2 less throughout. Transpose's is the last backward step: the loss
  // and the seed (8 B) die after it (one device) or after its accumulation (shard gradients),
  // as the backward call returns.
  const int64_t P = 256 * 257 * 4;
  GraphBuilder b;
  b.Input("x", {-1, 257}).Param("w", {256, 257});
  b.Node("Transpose", {"w"}, {"wt"}).Attr("perm", std::vector<int64_t>{1, 0});
  b.Node("MatMul", {"x", "wt"}, {"y"});
  LoadOptions o;
  o.grads = GradientLifetime::kKept;  // the hand-computed steps keep gradients
  o.batch = 1;
  o.loss = LossKind::kSum;
  TrainingGraph g = b.Output("y").Load(o);
  Plan one = Plain(g);
  Plan lazy = Parallel(g, Layout(2, ShardMode::kGradients, 1024));
  const std::string transpose = NodeProducing(g, "wt");
  const size_t op = StepOfNode(one, g, Phase::kBackward, transpose);
  ASSERT_EQ(StepOfNode(lazy, g, Phase::kBackward, transpose), op);
  const int64_t before = one.timeline.bytes_after[op - 1];  // G among them
  EXPECT_EQ(one.timeline.bytes_after[op], before - P - 8);
  EXPECT_EQ(lazy.timeline.bytes_after[op], before - P / 2);
  EXPECT_EQ(lazy.schedule.steps[op + 1].node, lazy.schedule.steps[op].node);
  EXPECT_EQ(lazy.timeline.bytes_during[op + 1], before - P / 2 + P);
  EXPECT_EQ(lazy.timeline.bytes_after[op + 1], before - P / 2 - 8);
  EXPECT_EQ(lazy.schedule.steps[op + 2].phase, Phase::kCommunication);
  EXPECT_EQ(lazy.timeline.bytes_after[op + 2], before - P / 2 - P - 8);
}

// x[2,4] -> Gemm(x, w[3,4], bias[3], transB = 1) -> h[2,3] -> Mul c[3] -> out -> sum. With
// 48 B buckets on 2 ranks: bucket 0 = w (12 elements, 48 B), bucket 1 = bias and c (6, 24 B).
TrainingGraph GemmThenScale() {
  GraphBuilder b;
  b.Input("x", {-1, 4}).Param("w", {3, 4}).Param("bias", {3}).Param("c", {3});
  b.Node("Gemm", {"x", "w", "bias"}, {"h"}).Attr("transB", int64_t{1});
  b.Node("Mul", {"h", "c"}, {"out"});
  LoadOptions o;
  o.grads = GradientLifetime::kKept;  // the hand-computed steps keep gradients
  o.batch = 2;
  o.loss = LossKind::kSum;
  return b.Output("out").Load(o);
}

TEST(Parallel, AGemmsBiasCompletesItsBucketBeforeItsTransposedWeightOpensTheNext) {
  // The executor's Gemm multiplies by w.t(): autograd accumulates the bias (read directly)
  // first, then w after TBackward0. Mul's backward opened bucket 1 (c); the bias is its last
  // gradient, so bucket 1 is reduced (its 24 B flat gradient freed) before w's AccumulateGrad
  // allocates bucket 0's 48 B one. With A the bytes after Gemm's op step (w's 48 B and the
  // bias's 12 B gradient temporaries, bucket 1's flat gradient among them):
  //   accumulation of the bias: frees 12             -> A - 12
  //   reduce-scatter of bucket 1: frees 24           -> A - 36
  //   accumulation of w: + 48 (during A + 12), - 48,
  //     and the loss and its seed (8 B) as the backward call returns -> A - 44
  //   reduce-scatter of bucket 0: frees 48           -> A - 92
  // Accumulating both at once would have held both flat gradients: A + 48 - 12 = A + 36.
  TrainingGraph g = GemmThenScale();
  const std::vector<ParameterBucket> buckets =
      ParameterBuckets(g, Layout(2, ShardMode::kGradients, 48));
  ASSERT_EQ(buckets.size(), 2u);
  ASSERT_EQ(buckets[0].bytes, 48);
  ASSERT_EQ(buckets[1].bytes, 24);
  Plan p = Parallel(g, Layout(2, ShardMode::kGradients, 48));
  const std::string gemm = NodeProducing(g, "h");
  const size_t op = StepOfNode(p, g, Phase::kBackward, gemm);
  const std::vector<std::pair<Phase, std::string>> tail = {
      {Phase::kBackward, gemm}, {Phase::kBackward, gemm},    {Phase::kCommunication, ""},
      {Phase::kBackward, gemm}, {Phase::kCommunication, ""}, {Phase::kOptimizer, ""}};
  ExpectStepsFrom(p, g, op, tail);
  const int64_t a = p.timeline.bytes_after[op];
  EXPECT_EQ(p.timeline.bytes_after[op + 1], a - 12);
  EXPECT_EQ(p.timeline.bytes_after[op + 2], a - 36);
  EXPECT_EQ(p.timeline.bytes_during[op + 3], a + 12);
  EXPECT_EQ(p.timeline.bytes_after[op + 3], a - 44);
  EXPECT_EQ(p.timeline.bytes_after[op + 4], a - 92);
  // Each communication step names the bucket it reduces: the flat gradient it frees carries it
  // (what the executor reads to run the reduce-scatter there).
  for (const auto& [step, bucket] : {std::pair<size_t, int>{op + 2, 1}, {op + 4, 0}}) {
    ASSERT_EQ(p.schedule.steps[step].frees.size(), 1u);
    const Buffer& flat = p.schedule.buffers[p.schedule.steps[step].frees[0]];
    EXPECT_EQ(flat.category, MemoryCategory::kGradient);
    EXPECT_EQ(flat.bucket, bucket);
    EXPECT_EQ(flat.bytes, buckets[bucket].bytes);
  }
}

TEST(Parallel, ShardParametersReleasesABucketTheBiasCompletesBeforeTheTransposedWeightAccumulates) {
  // As above with shard parameters: bucket 1 (24 B gathered) was gathered for Mul's backward,
  // and bucket 0 (48 B) with it, one bucket ahead (FSDP2's backward prefetch), so no gather
  // stands between Mul's backward and Gemm's. The bias is the call's last gradient of bucket 1, so
  // its gathered parameters go with its reduce-scatter, before w's accumulation:
  //   accumulation of the bias: frees 12                      -> A - 12
  //   release of bucket 1, reduce-scatter of bucket 1: 24 + 24 -> A - 60
  //   accumulation of w: + 48 (during A - 12), - 48, and the loss and its seed (8 B) as the
  //     backward call returns                                  -> A - 68
  //   release of bucket 0, reduce-scatter of bucket 0: 48 + 48 -> A - 164
  // (The flat gradient born at the first accumulation: ParallelLayout::flat_gradient_at_reduce
  // false; FlatGradientAtReduceIsBornAfterTheBucketsReleaseBesideItsGradient has the default.)
  TrainingGraph g = GemmThenScale();
  ParallelLayout l = Layout(2, ShardMode::kParameters, 48);
  l.flat_gradient_at_reduce = false;
  Plan p = Parallel(g, l);
  const std::string gemm = NodeProducing(g, "h");
  const size_t op = StepOfNode(p, g, Phase::kBackward, gemm);
  ASSERT_EQ(p.schedule.steps[op - 1].phase, Phase::kBackward);  // bucket 0 came with bucket 1
  const std::vector<std::pair<Phase, std::string>> tail = {
      {Phase::kBackward, gemm},    {Phase::kBackward, gemm}, {Phase::kCommunication, ""},
      {Phase::kCommunication, ""}, {Phase::kBackward, gemm}, {Phase::kCommunication, ""},
      {Phase::kCommunication, ""}, {Phase::kOptimizer, ""}};
  ExpectStepsFrom(p, g, op, tail);
  const int64_t a = p.timeline.bytes_after[op];
  EXPECT_EQ(p.timeline.bytes_after[op + 1], a - 12);
  EXPECT_EQ(p.timeline.bytes_after[op + 3], a - 60);
  EXPECT_EQ(p.timeline.bytes_during[op + 4], a - 12);
  EXPECT_EQ(p.timeline.bytes_after[op + 4], a - 68);
  EXPECT_EQ(p.timeline.bytes_after[op + 6], a - 164);
}

TEST(Parallel, ShardGradientsWithMicroBatchesHoldsTheFlatGradientsFromTheSetup) {
  // Every micro-batch after the first runs with the flat gradients alive (plan.h): with 2
  // micro-batches the setup holds the shards (2 x 52) and the flat gradients (2 x 104).
  TrainingGraph g = Chain();
  Plan p = Plain(g);
  ApplyMicroBatches(p, g, 2, {});
  ApplyDataParallel(p, g, Layout(2, ShardMode::kGradients, 100));
  EXPECT_EQ(SetupBytes(p, MemoryCategory::kGradient), 104 + 208);
  EXPECT_EQ(p.micro_batches, 2);
}

TEST(Parallel, CommunicationPhaseFollowsTheBackwardUnlessShardGradientsReducesInIt) {
  // Shard none and optimizer: one step per bucket right after the one-device step's last
  // backward step, freeing nothing. Shard gradients with 2 micro-batches (the schedule models
  // one that holds every flat gradient throughout): the same steps free the flat gradients
  // (104 B each).
  TrainingGraph g = Chain();
  for (ShardMode m : {ShardMode::kNone, ShardMode::kOptimizer, ShardMode::kGradients}) {
    SCOPED_TRACE(ShardModeName(m));
    const int64_t k = m == ShardMode::kGradients ? 2 : 1;
    Plan one = Plain(g);
    if (k > 1) ApplyMicroBatches(one, g, k, {});
    Plan p = Plain(g);
    if (k > 1) ApplyMicroBatches(p, g, k, {});
    ApplyDataParallel(p, g, Layout(2, m, 100));
    const size_t first = one.schedule.steps.size() - 1;
    ASSERT_GE(p.schedule.steps.size(), first + 3);
    EXPECT_EQ(p.schedule.steps[first - 1].phase, Phase::kBackward);
    EXPECT_EQ(p.schedule.steps[first].phase, Phase::kCommunication);
    EXPECT_EQ(p.schedule.steps[first + 1].phase, Phase::kCommunication);
    EXPECT_EQ(p.schedule.steps[first + 2].phase, Phase::kOptimizer);
    const int64_t freed = m == ShardMode::kGradients ? 104 : 0;
    EXPECT_EQ(p.timeline.bytes_after[first - 1] - p.timeline.bytes_after[first], freed);
    EXPECT_EQ(p.timeline.bytes_after[first] - p.timeline.bytes_after[first + 1], freed);
  }
}

TEST(Parallel, ShardedOptimizerHoldsOneShardTemporaryAtATime) {
  // Adam, Chain on 2 ranks, buckets of 104 B, S_b = 52 B. Shard gradients' persistent bytes:
  // x 100 + parameters 208 + gradient shards 104 + Adam state 2 x 104 = 620. Each bucket's
  // update allocates Adam's 52 B denominator, then the all-gather a 52 B copy, one at a time:
  // the optimizer phase peaks at 620 + 52 = 672.
  TrainingGraph g = Chain(Optimizer::kAdam);
  Plan p = Parallel(g, Layout(2, ShardMode::kGradients, 100));
  EXPECT_EQ(p.timeline.bytes_after.front(), 620);
  int64_t optimizer_peak = 0;
  int optimizer_steps = 0;
  for (size_t i = 0; i < p.schedule.steps.size(); ++i) {
    if (p.schedule.steps[i].phase != Phase::kOptimizer) continue;
    ++optimizer_steps;
    optimizer_peak = std::max(optimizer_peak, p.timeline.bytes_during[i]);
    EXPECT_EQ(p.timeline.bytes_after[i], 620);
  }
  EXPECT_EQ(optimizer_steps,
            1 + 2 * 2);  // the one-device step, then update and all-gather per bucket
  EXPECT_EQ(optimizer_peak, 672);
  // Shard none keeps the one-device update: Adam's temporary of the largest parameter (100 B)
  // over x 100 + parameters 208 + gradients 208 + state 416 = 932.
  Plan none = Parallel(g, Layout(2, ShardMode::kNone, 100));
  EXPECT_EQ(none.timeline.bytes_during.back(), 932 + 100);
}

TEST(Parallel, ShardParametersGathersEachBucketAroundItsReadersInEveryPass) {
  // Chain (SGD, batch 1) on 2 ranks, 100 B buckets: bucket 0 = w0, bucket 1 = w1, each 104 B
  // (26 elements), shard 52 B. Persistent: x 100 + parameter shards 104 + gradient shards 104 =
  // 308, 192 B below one device's 500 (x, w0, w1 and their gradients).
  // Forward: bucket 0 gathered (104) right before Mul(w0) and released with it; bucket 1 likewise
  // around Mul(w1). Backward: bucket 1 gathered before Mul(w1)'s backward and released after its
  // accumulation (the flat gradient, 104, comes with it and goes with the reduce-scatter);
  // Relu's backward runs with nothing gathered; bucket 0 likewise around Mul(w0)'s backward.
  // The flat gradient is born at the first accumulation (ParallelLayout::
  // flat_gradient_at_reduce false; the default, FSDP2's order, is
  // FlatGradientAtReduceIsBornAfterTheBucketsReleaseBesideItsGradient's).
  TrainingGraph g = Chain();
  Plan one = Plain(g);
  ParallelLayout l = Layout(2, ShardMode::kParameters, 100);
  l.flat_gradient_at_reduce = false;
  Plan p = Parallel(g, l);
  EXPECT_EQ(SetupBytes(p, MemoryCategory::kParameter), 104);
  EXPECT_EQ(SetupBytes(p, MemoryCategory::kGradient), 104);
  EXPECT_EQ(p.timeline.bytes_after.front(), 308);
  const std::string mul0 = NodeProducing(g, "h0"), relu = NodeProducing(g, "h1"),
                    mul1 = NodeProducing(g, "h2");
  const std::vector<std::pair<Phase, std::string>> expected = {
      {Phase::kSetup, ""},
      {Phase::kCommunication, ""},
      {Phase::kForward, mul0},  // gather 0; Mul(w0) releases it
      {Phase::kForward, relu},
      {Phase::kCommunication, ""},
      {Phase::kForward, mul1},  // gather 1; Mul(w1) releases it
      {Phase::kLoss, NodeProducing(g, g.tensors[g.loss].name)},
      {Phase::kBackward, NodeProducing(g, g.tensors[g.loss].name)},
      {Phase::kCommunication, ""},
      {Phase::kCommunication, ""},  // gather 1, and bucket 0 prefetched
      {Phase::kBackward, mul1},
      {Phase::kBackward, mul1},  // op, accumulation
      {Phase::kCommunication, ""},
      {Phase::kCommunication, ""},  // release 1, reduce-scatter 1
      {Phase::kBackward, relu},
      {Phase::kBackward, mul0},
      {Phase::kBackward, mul0},
      {Phase::kCommunication, ""},
      {Phase::kCommunication, ""},
      {Phase::kOptimizer, ""},
      {Phase::kOptimizer, ""},
      {Phase::kOptimizer, ""}};  // one-device step, 2 updates
  ASSERT_EQ(p.schedule.steps.size(), expected.size());
  ExpectStepsFrom(p, g, 0, expected);
  // The forward: 192 below one device, plus the gathered bucket while its reader runs.
  const size_t f0 = StepOfNode(one, g, Phase::kForward, mul0),
               f1 = StepOfNode(one, g, Phase::kForward, mul1);
  EXPECT_EQ(p.timeline.bytes_during[2], one.timeline.bytes_during[f0] - 192 + 104);
  EXPECT_EQ(p.timeline.bytes_after[2], one.timeline.bytes_after[f0] - 192);
  EXPECT_EQ(p.timeline.bytes_during[3],
            one.timeline.bytes_during[f0 + 1] - 192);  // Relu: none gathered
  EXPECT_EQ(p.timeline.bytes_during[5], one.timeline.bytes_during[f1] - 192 + 104);
  EXPECT_EQ(p.timeline.bytes_after[5], one.timeline.bytes_after[f1] - 192);
  // The backward of Mul(w1): the op with bucket 1 gathered and bucket 0 prefetched (104 each);
  // the accumulation adds the flat gradient (104) and frees w1's 100 B temporary; the release
  // and the reduce-scatter return 104 each.
  const size_t b1 = StepOfNode(one, g, Phase::kBackward, mul1);
  EXPECT_EQ(p.timeline.bytes_during[10], one.timeline.bytes_during[b1] - 192 + 208);
  EXPECT_EQ(p.timeline.bytes_during[11], p.timeline.bytes_after[10] + 104);
  EXPECT_EQ(p.timeline.bytes_after[11], p.timeline.bytes_after[10] + 104 - 100);
  EXPECT_EQ(p.timeline.bytes_after[13], p.timeline.bytes_after[11] - 208);
  EXPECT_EQ(p.timeline.bytes_after[13], one.timeline.bytes_after[b1] - 192 + 104);
  // Relu's backward: as on one device, less 192, with bucket 0 gathered ahead of Mul(w0).
  EXPECT_EQ(p.timeline.bytes_during[14], one.timeline.bytes_during[b1 + 1] - 192 + 104);
  // The optimizer updates shards in place (SGD: nothing allocated).
  EXPECT_EQ(p.timeline.bytes_during.back(), 308);
}

// x[N,8] -> /fc1/MatMul (fc1.w [8,8], 256 B) -> /fc1/Add (fc1.b [8], 32 B) -> /act/Relu ->
// /fc2/MatMul (fc2.w [8,4], 128 B) -> /Mul (scale [4], 16 B, the root's own) -> sum. Module
// units in forward order: /fc1 (288 B), /fc2 (128 B), the root (16 B).
TrainingGraph Scoped() {
  GraphBuilder b;
  b.Input("x", {-1, 8}).Param("fc1.w", {8, 8}).Param("fc1.b", {8});
  b.Param("fc2.w", {8, 4}).Param("scale", {4});
  b.Node("MatMul", {"x", "fc1.w"}, {"h0"}).Name("/fc1/MatMul");
  b.Node("Add", {"h0", "fc1.b"}, {"h1"}).Name("/fc1/Add");
  b.Node("Relu", {"h1"}, {"h2"}).Name("/act/Relu");
  b.Node("MatMul", {"h2", "fc2.w"}, {"h3"}).Name("/fc2/MatMul");
  b.Node("Mul", {"h3", "scale"}, {"y"}).Name("/Mul");
  LoadOptions o;
  o.grads = GradientLifetime::kKept;  // the ranks' graphs keep gradients (SteppedGradients)
  o.batch = 1;
  o.loss = LossKind::kSum;
  return b.Output("y").Load(o);
}

std::vector<std::vector<std::string>> BucketNames(const TrainingGraph& g, const ParallelLayout& l) {
  std::vector<std::vector<std::string>> out;
  for (const ParameterBucket& b : ParameterBuckets(g, l)) {
    out.emplace_back();
    for (TensorId t : b.parameters) out.back().push_back(g.tensors[t].name);
  }
  return out;
}

TEST(Parallel, ShardedBucketsAreWholeModuleUnitsGroupedUpToTheBucketSize) {
  TrainingGraph g = Scoped();
  using Names = std::vector<std::vector<std::string>>;
  EXPECT_EQ(ModuleUnitOf(g, g.FindTensor("fc1.b")), "/fc1");
  EXPECT_EQ(ModuleUnitOf(g, g.FindTensor("scale")), "");
  for (ShardMode m : {ShardMode::kGradients, ShardMode::kParameters}) {
    // 1 B: one bucket per module, as fully_shard on each module that owns parameters.
    EXPECT_EQ(BucketNames(g, Layout(2, m, 1)), (Names{{"fc1.w", "fc1.b"}, {"fc2.w"}, {"scale"}}));
    // 300 B: /fc1 (288) fills a bucket, /fc2 (128) would pass 300 with it; /fc2 + root = 144.
    EXPECT_EQ(BucketNames(g, Layout(2, m, 300)), (Names{{"fc1.w", "fc1.b"}, {"fc2.w", "scale"}}));
    // 100 B: every unit is larger than the bucket or would pass it: a bucket each.
    EXPECT_EQ(BucketNames(g, Layout(2, m, 100)), (Names{{"fc1.w", "fc1.b"}, {"fc2.w"}, {"scale"}}));
  }
  // DDP's buckets (shard none) split modules: 256 + 32 + 128 = 416 >= 300 closes the first.
  EXPECT_EQ(BucketNames(g, Layout(2, ShardMode::kNone, 300)),
            (Names{{"fc1.w", "fc1.b", "fc2.w"}, {"scale"}}));
  // Padding on 2 ranks: /fc1 72 elements (288 B), /fc2 + root 36 elements (144 B).
  const std::vector<ParameterBucket> b =
      ParameterBuckets(g, Layout(2, ShardMode::kParameters, 300));
  EXPECT_EQ(b[0].bytes, 288);
  EXPECT_EQ(b[1].bytes, 144);
}

TEST(Parallel, ShardParametersGathersUnitsAroundTheirModulesAndPrefetchesOneInTheBackward) {
  // Scoped() on 2 ranks, one bucket per module: 0 = /fc1 (288 B), 1 = /fc2 (128 B), 2 = the
  // root (16 B). Forward: each gathered right before its module's first node and released after
  // its last (/fc1: both of its nodes). Backward (root, /fc2, /fc1 in order): each bucket but
  // the first is gathered together with the one before it, FSDP2's backward prefetch.
  TrainingGraph g = Scoped();
  Plan p = Parallel(g, Layout(2, ShardMode::kParameters, 1));
  std::vector<std::string> events;  // "g0" gathered, "r0" released, node names between
  const Step* last = nullptr;       // the last step with a node
  for (const Step& st : p.schedule.steps) {
    for (BufferId b : st.allocs) {
      const Buffer& buf = p.schedule.buffers[b];
      if (buf.bucket >= 0 && buf.category == MemoryCategory::kParameter)
        events.push_back("g" + std::to_string(buf.bucket));
    }
    if (st.node != kNone && !(last && last->node == st.node && last->phase == st.phase))
      events.push_back(g.nodes[st.node].name);  // an op and its accumulation step: once
    if (st.node != kNone) last = &st;
    for (BufferId b : st.frees) {
      const Buffer& buf = p.schedule.buffers[b];
      if (buf.bucket >= 0 && buf.category == MemoryCategory::kParameter)
        events.push_back("r" + std::to_string(buf.bucket));
    }
  }
  const std::string loss = NodeProducing(g, g.tensors[g.loss].name);
  const std::vector<std::string> expected = {
      // forward
      "g0", "/fc1/MatMul", "/fc1/Add", "r0", "/act/Relu", "g1", "/fc2/MatMul", "r1", "g2", "/Mul",
      "r2", loss,
      // backward: the root, with /fc2 prefetched; /fc2 with /fc1 prefetched; Relu; /fc1
      loss, "g2", "g1", "/Mul", "r2", "g0", "/fc2/MatMul", "r1", "/act/Relu", "/fc1/Add",
      "/fc1/MatMul", "r0"};
  EXPECT_EQ(events, expected);
  // The all-gathers: 2 per bucket (one per pass), each priced: 2 x 3 all-gathers + 3
  // reduce-scatters of (N-1)/N x P_b / bandwidth + latency.
  ParallelLayout l = Layout(2, ShardMode::kParameters, 1);
  l.link_bytes_per_second = 1000;
  l.link_latency_seconds = 0.01;
  Plan q = Parallel(g, l);
  // (288 + 128 + 16) / 2 / 1000 = 0.216 s of bytes and 0.01 s per collective, 3 times over.
  EXPECT_NEAR(q.predicted_comm_seconds, 3 * (0.216 + 3 * 0.01), 1e-12);
}

TEST(Parallel, GradientShardsSetToNoneAreBornAtTheReduceScatterAndFreedAfterTheStep) {
  // Chain on 2 ranks, 100 B buckets: each bucket's gradient shard (52 B) is allocated by its
  // reduce-scatter step instead of the setup, and zero_grad() frees both after the optimizer.
  // The steps are the same; until a shard is born the step holds 52 B less per unborn shard,
  // and after the last step 104 B less.
  for (ShardMode m : {ShardMode::kGradients, ShardMode::kParameters}) {
    TrainingGraph g = Chain();
    ParallelLayout l = Layout(2, m, 100);
    const Plan kept = Parallel(g, l);
    l.gradient_shards = GradientLifetime::kNone;
    const Plan none = Parallel(g, l);
    EXPECT_EQ(SetupBytes(kept, MemoryCategory::kGradient), 104);
    EXPECT_EQ(SetupBytes(none, MemoryCategory::kGradient), 0);
    ASSERT_EQ(none.schedule.steps.size(), kept.schedule.steps.size());
    int64_t born = 0;
    for (size_t i = 0; i < none.schedule.steps.size(); ++i) {
      for (BufferId b : none.schedule.steps[i].allocs) {
        const Buffer& buf = none.schedule.buffers[b];
        if (buf.name.find("gradient shard") != std::string::npos) {
          EXPECT_EQ(none.schedule.steps[i].phase, Phase::kCommunication);
          born += buf.bytes;
        }
      }
      const bool last = i + 1 == none.schedule.steps.size();
      EXPECT_EQ(kept.timeline.bytes_after[i] - none.timeline.bytes_after[i],
                last ? 104 : 104 - born)
          << ShardModeName(m) << " step " << i;
    }
    EXPECT_EQ(born, 104);
  }
}

TEST(Parallel, FlatGradientAtReduceIsBornAfterTheBucketsReleaseBesideItsGradient) {
  // Chain on 2 ranks, shard parameters, 100 B buckets: w0 and w1 each a bucket of 104 B. Mul(w1)'s
  // backward runs with buckets 1 and 0 gathered (0 prefetched) and allocates grad h1 and w1's
  // gradient (100 B each); the loss's 4 B gradient it reads is held until the backward call
  // returns: B + 200 during it and after.
  //   flat gradient at the first accumulation: the accumulation step allocates bucket 1's flat
  //     gradient beside them (B + 200 + 104 = B + 304), then frees w1's gradient;
  //   at reduce (FSDP2): w1's gradient stays; bucket 1 is released (B + 96), then the
  //     communication step allocates the flat gradient (B + 200) and frees it with w1's
  //     gradient (B - 4). The most bytes around Mul(w1)'s gradient: B + 304 -> B + 200.
  TrainingGraph g = Chain();
  ParallelLayout l = Layout(2, ShardMode::kParameters, 100);
  l.flat_gradient_at_reduce = false;
  const Plan first = Parallel(g, l);
  l.flat_gradient_at_reduce = true;
  const Plan at_reduce = Parallel(g, l);
  l.flat_gradient_at_reduce.reset();  // shard parameters' default: FSDP2's order
  EXPECT_EQ(Parallel(g, l).timeline.bytes_during, at_reduce.timeline.bytes_during);
  const std::string mul1 = NodeProducing(g, "h2");
  const size_t a = StepOfNode(first, g, Phase::kBackward, mul1);
  ASSERT_EQ(StepOfNode(at_reduce, g, Phase::kBackward, mul1), a);
  for (size_t i = 0; i <= a; ++i)  // the same steps up to Mul(w1)'s backward
    EXPECT_EQ(at_reduce.timeline.bytes_during[i], first.timeline.bytes_during[i]) << i;
  const int64_t base = first.timeline.bytes_after[a - 1];
  ExpectStepsFrom(first, g, a,
                  {{Phase::kBackward, mul1},
                   {Phase::kBackward, mul1},
                   {Phase::kCommunication, ""},
                   {Phase::kCommunication, ""}});
  const MemoryTimeline& f = first.timeline;
  EXPECT_EQ(f.bytes_during[a], base + 200);
  EXPECT_EQ(f.bytes_during[a + 1], base + 304);
  ExpectStepsFrom(at_reduce, g, a,
                  {{Phase::kBackward, mul1},
                   {Phase::kCommunication, ""},
                   {Phase::kCommunication, ""},
                   {Phase::kBackward, NodeProducing(g, "h1")}});
  const MemoryTimeline& t = at_reduce.timeline;
  EXPECT_EQ(t.bytes_during[a], base + 200);
  EXPECT_EQ(t.bytes_after[a], base + 200);
  EXPECT_EQ(t.bytes_after[a + 1], base + 96);
  EXPECT_EQ(t.bytes_during[a + 2], base + 200);
  EXPECT_EQ(t.bytes_after[a + 2], base - 4);
  EXPECT_EQ(*std::max_element(f.bytes_during.begin() + a, f.bytes_during.begin() + a + 4),
            base + 304);
  EXPECT_EQ(*std::max_element(t.bytes_during.begin() + a, t.bytes_during.begin() + a + 3),
            base + 200);
}

// The first step allocating a buffer whose name contains `name` (from step `from` on).
size_t StepAllocating(const Plan& p, const std::string& name, size_t from = 0) {
  for (size_t i = from; i < p.schedule.steps.size(); ++i) {
    for (BufferId b : p.schedule.steps[i].allocs) {
      if (p.schedule.buffers[b].name.find(name) != std::string::npos) return i;
    }
  }
  ADD_FAILURE() << "no step allocates " << name;
  return 0;
}

ParallelLayout Fsdp2(ParallelLayout l, bool staged) {
  l.runtime = ShardRuntime::kFsdp2;
  l.staged_collectives = staged;
  return l;
}

TEST(Parallel, Fsdp2HoldsAForwardAllGatherOutputUntilTheNextGatherIsCopiedOut) {
  // Chain on 2 ranks, 100 B buckets: bucket 0 = w0, bucket 1 = w1, 104 B each (25 floats padded
  // to 26). Up to the forward's gather of bucket 1 memplan's runtime and FSDP2's differ by
  // bucket 0's all-gather output O0 (104 B), which FSDP2 still holds. Let B be memplan's bytes
  // while it gathers bucket 1 (its gathered parameters included):
  //   FSDP2's gather step: B + 104 (O0), with Gloo's staging copy B + 208;
  //   its copy-out allocates O1 beside O0: B + 208, then frees O0: B + 104 after.
  // After Mul(w1), the pass's last forward node, O1 goes too: the loss runs as in memplan's.
  TrainingGraph g = Chain();
  const ParallelLayout l = Layout(2, ShardMode::kParameters, 100);
  const Plan mine = Parallel(g, l);
  const size_t m1 = StepAllocating(mine, "bucket 1 gathered");
  const int64_t b = mine.timeline.bytes_during[m1];
  for (bool staged : {false, true}) {
    const Plan fsdp2 = Parallel(g, Fsdp2(l, staged));
    const MemoryTimeline& t = fsdp2.timeline;
    const size_t g1 = StepAllocating(fsdp2, "bucket 1 gathered");
    EXPECT_EQ(t.bytes_during[g1], b + (staged ? 208 : 104)) << staged;
    EXPECT_EQ(t.bytes_after[g1], b + 104) << staged;
    ASSERT_EQ(StepAllocating(fsdp2, "bucket 1 all-gather output"), g1 + 1);
    EXPECT_EQ(t.bytes_during[g1 + 1], b + 208) << staged;
    EXPECT_EQ(t.bytes_after[g1 + 1], b + 104) << staged;
    const std::string loss = NodeProducing(g, g.tensors[g.loss].name);
    EXPECT_EQ(t.bytes_during[StepOfNode(fsdp2, g, Phase::kLoss, loss)],
              mine.timeline.bytes_during[StepOfNode(mine, g, Phase::kLoss, loss)])
        << staged;
  }
}

TEST(Parallel, Fsdp2CopiesOutAPrefetchedBucketRightBeforeItsFirstBackwardStep) {
  // Chain's backward on 2 ranks, 100 B buckets: Mul(w1)'s backward gathers bucket 1 and
  // prefetches bucket 0; Mul(w0)'s is bucket 0's first. FSDP2 copies each gathered bucket out
  // into its unsharded parameters while the all-gather output is alive, then frees the output:
  // a 104 B transient, right after bucket 1's gather and right before Mul(w0)'s backward, each
  // 104 B above memplan's bytes at that point; before Mul(w0)'s, FSDP2 also still holds bucket
  // 1's reduce-scatter input (104 B, the next test). Gloo's staging copy adds 104 B to each
  // gather.
  TrainingGraph g = Chain();
  const ParallelLayout l = Layout(2, ShardMode::kParameters, 100);
  const Plan mine = Parallel(g, l);
  const size_t loss_bwd = StepOfNode(mine, g, Phase::kBackward, NodeProducing(g, "h2")) - 3;
  const size_t m1 = StepAllocating(mine, "bucket 1 gathered", loss_bwd);
  const size_t m0 = StepAllocating(mine, "bucket 0 gathered", loss_bwd);
  ASSERT_EQ(m0, m1 + 1);  // the prefetch
  const size_t mul0 = StepOfNode(mine, g, Phase::kBackward, NodeProducing(g, "h0"));
  for (bool staged : {false, true}) {
    const Plan fsdp2 = Parallel(g, Fsdp2(l, staged));
    const MemoryTimeline& t = fsdp2.timeline;
    const size_t g1 = StepAllocating(fsdp2, "bucket 1 gathered", loss_bwd);
    EXPECT_EQ(t.bytes_during[g1], mine.timeline.bytes_during[m1] + (staged ? 104 : 0));
    ASSERT_EQ(StepAllocating(fsdp2, "bucket 1 all-gather output", g1), g1 + 1);
    EXPECT_EQ(t.bytes_during[g1 + 1], mine.timeline.bytes_during[m1] + 104);
    EXPECT_EQ(t.bytes_after[g1 + 1], mine.timeline.bytes_after[m1]);
    EXPECT_EQ(StepAllocating(fsdp2, "bucket 0 gathered", g1), g1 + 2);
    EXPECT_EQ(t.bytes_during[g1 + 2], mine.timeline.bytes_during[m0] + (staged ? 104 : 0));
    const size_t f0 = StepOfNode(fsdp2, g, Phase::kBackward, NodeProducing(g, "h0"));
    ASSERT_EQ(StepAllocating(fsdp2, "bucket 0 all-gather output", g1), f0 - 1);
    EXPECT_EQ(t.bytes_during[f0 - 1], mine.timeline.bytes_after[mul0 - 1] + 104 + 104);
  }
}

TEST(Parallel, Fsdp2HoldsAReduceScatterInputUntilTheNextReduceScatter) {
  // Chain on 2 ranks, 100 B buckets, FSDP2's order, gradient shards kept. memplan's runtime
  // reduces bucket 1 in one step from Y bytes: the flat gradient (104) beside w1's gradient
  // (100), both freed: Y + 104 during, Y - 100 after. FSDP2's: the flat gradient allocated
  // and w1's gradient freed (Y + 104, then Y + 4), then the reduce-scatter's output (52 B, added
  // into the kept shard and freed) with Gloo's staging copy of the input (104): Y + 160, and the
  // flat gradient stays (Y + 4) until bucket 0's reduce-scatter starts. After the backward,
  // nothing is held: the optimizer sees memplan's bytes.
  TrainingGraph g = Chain();
  const ParallelLayout l = Layout(2, ShardMode::kParameters, 100);
  const Plan mine = Parallel(g, l);
  const Plan fsdp2 = Parallel(g, Fsdp2(l, /*staged=*/true));
  const size_t m = StepAllocating(mine, "bucket 1 flat gradients");
  const int64_t y = mine.timeline.bytes_after[m - 1];
  EXPECT_EQ(mine.timeline.bytes_during[m], y + 104);
  EXPECT_EQ(mine.timeline.bytes_after[m], y - 100);
  const size_t f = StepAllocating(fsdp2, "bucket 1 flat gradients");
  const MemoryTimeline& t = fsdp2.timeline;
  EXPECT_EQ(t.bytes_after[f - 1], y);
  EXPECT_EQ(t.bytes_during[f], y + 104);
  EXPECT_EQ(t.bytes_after[f], y + 4);
  EXPECT_EQ(t.bytes_during[f + 1], y + 160);
  EXPECT_EQ(t.bytes_after[f + 1], y + 4);
  // Bucket 0's reduce-scatter first frees bucket 1's input: a step of its own.
  const size_t f0 = StepAllocating(fsdp2, "bucket 0 flat gradients");
  EXPECT_EQ(t.bytes_after[f0 - 1], t.bytes_after[f0 - 2] - 104);
  EXPECT_EQ(t.bytes_after.back(), mine.timeline.bytes_after.back());
  EXPECT_EQ(t.bytes_during.back(), mine.timeline.bytes_during.back());
}

TEST(Parallel, Fsdp2IsAPredictionOfShardParametersWithOneMicroBatch) {
  TrainingGraph g = Chain();
  for (ShardMode m : {ShardMode::kNone, ShardMode::kOptimizer, ShardMode::kGradients}) {
    Plan p = Plain(g);
    try {
      ApplyDataParallel(p, g, Fsdp2(Layout(2, m, 100), false));
      FAIL() << ShardModeName(m);
    } catch (const MemplanError& e) {
      EXPECT_NE(std::string(e.what()).find("--shard parameters"), std::string::npos) << e.what();
    }
  }
  // The plan JSON carries the runtime, and a plan read back replays FSDP2's buffers.
  const Plan p = Parallel(g, Fsdp2(Layout(2, ShardMode::kParameters, 100), true));
  const nlohmann::json j = PlanToJson(p, g);
  EXPECT_EQ(j["layout"]["runtime"], "fsdp2");
  EXPECT_EQ(j["layout"]["staged_collectives"], true);
  EXPECT_EQ(PlanLayout(j).runtime, ShardRuntime::kFsdp2);
  EXPECT_EQ(PlanFromJson(j, g).timeline.bytes_during, p.timeline.bytes_during);
  EXPECT_FALSE(
      PlanToJson(Parallel(g, Layout(2, ShardMode::kParameters, 100)), g)["layout"].contains(
          "runtime"));
  nlohmann::json bad = j;
  bad["layout"]["runtime"] = "deepspeed";
  EXPECT_THROW(PlanLayout(bad), MemplanError);
  EXPECT_EQ(ParseShardRuntime("memplan"), ShardRuntime::kMemplan);
}

TEST(Parallel, ShardParametersGathersAgainInEachSegmentsRecompute) {
  // Chain with a checkpoint after Mul(w0): segments {Mul(w0)} and {Relu, Mul(w1), loss}.
  // Passes: forward of segment 0 (gathers bucket 0), forward of segment 1 (bucket 1), backward
  // of segment 1 (bucket 1), recompute of segment 0 (bucket 0), backward of segment 0 (bucket
  // 0): bucket 0 is gathered 3 times, bucket 1 twice. At 1000 B/s and 10 ms per collective on
  // 2 ranks, an all-gather or a reduce-scatter of 104 B costs 52 / 1000 + 0.01 = 0.062 s:
  // (1 reduce-scatter + 3 gathers) + (1 + 2) = 7 x 0.062 = 0.434 s.
  TrainingGraph g = Chain();
  PlanOptions o;
  o.strategy = "manual";
  o.checkpoints = {"h0"};
  Plan p = PlanManual(g, {}, o);
  ASSERT_EQ(p.segments.size(), 2u);
  ParallelLayout l = Layout(2, ShardMode::kParameters, 100);
  l.link_bytes_per_second = 1000;
  l.link_latency_seconds = 0.01;
  ApplyDataParallel(p, g, l);
  int gathers[2] = {0, 0};
  for (const Step& st : p.schedule.steps) {
    for (BufferId b : st.allocs) {
      const std::string& name = p.schedule.buffers[b].name;
      if (name == "bucket 0 gathered parameters") ++gathers[0];
      if (name == "bucket 1 gathered parameters") ++gathers[1];
    }
  }
  EXPECT_EQ(gathers[0], 3);
  EXPECT_EQ(gathers[1], 2);
  EXPECT_NEAR(p.predicted_comm_seconds, 0.434, 1e-12);
  // Every gathered buffer is released: after the step, only the persistent bytes remain.
  EXPECT_EQ(p.timeline.bytes_after.back(), p.timeline.bytes_after.front());
}

// The forward and recompute steps (phase, node) that release a gathered bucket, in order.
std::vector<std::pair<Phase, NodeId>> ForwardReleasesOf(
    const TrainingGraph& g, const std::vector<std::vector<NodeId>>& segs) {
  Schedule s = BuildSegmentedSchedule(g, segs);
  AddDataParallelSteps(s, g, segs, /*micro_batches=*/1, Layout(2, ShardMode::kParameters, 1024));
  std::vector<std::pair<Phase, NodeId>> out;
  for (const Step& st : s.steps) {
    if (st.phase != Phase::kForward && st.phase != Phase::kLoss && st.phase != Phase::kRecompute)
      continue;
    for (BufferId b : st.frees) {
      if (s.buffers[b].bucket == 0) out.push_back({st.phase, st.node});
    }
  }
  return out;
}

TEST(Parallel, ShardParametersReleasesAfterTheLastReaderInEachSegment) {
  // x -> Mul(w) -> h -> Mul(h, w) -> y (w read twice, and through a Transpose view in a second
  // graph below): one segment releases bucket 0 after the second Mul; two segments {Mul} and
  // {Mul, loss} release it after each (and after the first Mul's recompute).
  GraphBuilder b;
  b.Input("x", {-1, 4}).Param("w", {4});
  b.Node("Mul", {"x", "w"}, {"h"}).Node("Mul", {"h", "w"}, {"y"});
  LoadOptions lo;
  lo.grads = GradientLifetime::kKept;  // the hand-computed steps keep gradients
  lo.batch = 1;
  lo.loss = LossKind::kSum;
  TrainingGraph g = b.Output("y").Load(lo);
  const std::vector<int> bucket_of =
      BucketOfTensor(g, ParameterBuckets(g, Layout(2, ShardMode::kParameters, 1024)));
  const NodeId first = g.tensors[g.FindTensor("h")].producer,
               second = g.tensors[g.FindTensor("y")].producer;
  EXPECT_EQ(BucketsReadBy(g, g.nodes[first], bucket_of), std::vector<int>{0});
  using Release = std::pair<Phase, NodeId>;
  EXPECT_EQ(ForwardReleasesOf(g, {}), (std::vector<Release>{{Phase::kForward, second}}));
  std::vector<std::vector<NodeId>> two = {{first}, {}};
  for (const Node& n : g.nodes) {
    if (n.id != first) two[1].push_back(n.id);
  }
  EXPECT_EQ(ForwardReleasesOf(g, two),
            (std::vector<Release>{
                {Phase::kForward, first}, {Phase::kForward, second}, {Phase::kRecompute, first}}));
  // A view of a weight reads the weight's bucket: MatMul(x, Transpose(w)) reads it twice over.
  GraphBuilder t;
  t.Input("x", {-1, 257}).Param("w", {256, 257});
  t.Node("Transpose", {"w"}, {"wt"}).Attr("perm", std::vector<int64_t>{1, 0});
  t.Node("MatMul", {"x", "wt"}, {"y"});
  TrainingGraph tg = t.Output("y").Load(lo);
  const std::vector<int> tb =
      BucketOfTensor(tg, ParameterBuckets(tg, Layout(2, ShardMode::kParameters, 1024)));
  const NodeId matmul = tg.tensors[tg.FindTensor("y")].producer;
  EXPECT_EQ(BucketsReadBy(tg, tg.nodes[matmul], tb), std::vector<int>{0});
  EXPECT_EQ(ForwardReleasesOf(tg, {}), (std::vector<Release>{{Phase::kForward, matmul}}));
}

TEST(Parallel, CommSecondsFollowTheRingModel) {
  // Two buckets of 104 B on 2 ranks at 1000 B/s and 10 ms per collective. (N-1)/N = 1/2:
  //   none:      all-reduce 2 x 52 / 1000 + 0.01 = 0.114 per bucket            -> 0.228
  //   optimizer: all-reduce 0.114 + all-gather 52 / 1000 + 0.01 = 0.176         -> 0.352
  //   gradients: reduce-scatter 0.062 + all-gather 0.062 = 0.124                -> 0.248
  TrainingGraph g = Chain();
  for (auto [m, seconds] :
       {std::pair{ShardMode::kNone, 0.228}, std::pair{ShardMode::kOptimizer, 0.352},
        std::pair{ShardMode::kGradients, 0.248}}) {
    ParallelLayout l = Layout(2, m, 100);
    l.link_bytes_per_second = 1000;
    l.link_latency_seconds = 0.01;
    EXPECT_NEAR(Parallel(g, l).predicted_comm_seconds, seconds, 1e-12) << ShardModeName(m);
  }
}

TEST(Parallel, JsonRoundTripReplaysTheSamePlan) {
  TrainingGraph g = Chain(Optimizer::kAdam, /*batch=*/3);  // the rank's graph: 2 ranks x 3 rows
  ParallelLayout l = Layout(2, ShardMode::kGradients, 100);
  l.link_bytes_per_second = 2e9;
  Plan p = Parallel(g, l);
  nlohmann::json j = PlanToJson(p, g);
  EXPECT_EQ(j["batch"], 6);
  EXPECT_EQ(j["micro_batch"], 3);
  ASSERT_TRUE(j.contains("layout"));
  EXPECT_EQ(j["layout"]["devices"], 2);
  EXPECT_EQ(j["layout"]["shard"], "gradients");
  EXPECT_EQ(j["layout"]["bucket_bytes"], 100);
  EXPECT_EQ(j["layout"]["buckets"], nlohmann::json::parse(R"([["w0"], ["w1"]])"));
  EXPECT_EQ(PlanGraphBatch(j), 3);
  EXPECT_EQ(PlanLayout(j).shard, ShardMode::kGradients);
  Plan back = PlanFromJson(j, g);
  EXPECT_EQ(back.predicted_peak_bytes, p.predicted_peak_bytes);
  EXPECT_EQ(back.timeline.bytes_during, p.timeline.bytes_during);
  EXPECT_EQ(back.layout.devices, 2);
  EXPECT_EQ(back.layout.link_bytes_per_second, 2e9);
  EXPECT_DOUBLE_EQ(back.predicted_comm_seconds, p.predicted_comm_seconds);
  // Loaded at the whole batch (6), the plan is refused with the batch to use.
  LoadOptions whole;
  whole.grads = GradientLifetime::kKept;  // the hand-computed steps keep gradients
  try {
    PlanFromJson(j, Chain(Optimizer::kAdam, 6));
    FAIL();
  } catch (const MemplanError& e) {
    EXPECT_NE(std::string(e.what()).find("2 devices"), std::string::npos) << e.what();
  }
  // Edited buckets are refused.
  nlohmann::json edited = j;
  edited["layout"]["buckets"] = nlohmann::json::parse(R"([["w0", "w1"]])");
  EXPECT_THROW(PlanFromJson(edited, g), MemplanError);
  // A plan without a layout (written before data parallelism) is one device.
  Plan plain = Plain(g);
  nlohmann::json old = PlanToJson(plain, g);
  EXPECT_FALSE(old.contains("layout"));
  EXPECT_EQ(PlanLayout(old).devices, 1);
  EXPECT_EQ(PlanFromJson(old, g).layout.devices, 1);
  // When the flat gradient is born (ParallelLayout::flat_gradient_at_reduce): shard gradients'
  // default is the first accumulation, shard parameters' FSDP2's order; the file says which, and
  // one written before the field was planned with the first accumulation.
  EXPECT_EQ(j["layout"]["flat_gradient_at_reduce"], false);
  const Plan zero3 = Parallel(g, Layout(2, ShardMode::kParameters, 100));
  nlohmann::json z = PlanToJson(zero3, g);
  EXPECT_EQ(z["layout"]["flat_gradient_at_reduce"], true);
  EXPECT_EQ(PlanLayout(z).flat_gradient_at_reduce, std::optional<bool>(true));
  EXPECT_EQ(PlanFromJson(z, g).timeline.bytes_during, zero3.timeline.bytes_during);
  z["layout"].erase("flat_gradient_at_reduce");
  EXPECT_EQ(PlanLayout(z).flat_gradient_at_reduce, std::optional<bool>(false));
  ParallelLayout first = Layout(2, ShardMode::kParameters, 100);
  first.flat_gradient_at_reduce = false;
  EXPECT_EQ(PlanFromJson(z, g).timeline.bytes_during, Parallel(g, first).timeline.bytes_during);
  EXPECT_NE(Parallel(g, first).timeline.bytes_during, zero3.timeline.bytes_during);
  z["layout"]["flat_gradient_at_reduce"] = "yes";
  EXPECT_THROW(PlanLayout(z), MemplanError);
  // A batch that is not the layout's product is refused.
  nlohmann::json bad = j;
  bad["batch"] = 5;
  EXPECT_THROW(PlanGraphBatch(bad), MemplanError);
}

GraphAtBatch ChainAt(Optimizer opt) {
  return [opt](int64_t batch) { return Chain(opt, batch); };
}

TEST(Parallel, PlanForBudgetPlansTheRanksShare) {
  BudgetPlanOptions o;
  o.plan.strategy = "none";
  o.layout = Layout(2, ShardMode::kOptimizer, 100);
  TrainingGraph whole = Chain(Optimizer::kMomentum, 8);
  BudgetPlan r = PlanForBudget(whole, ChainAt(Optimizer::kMomentum), {}, o);
  EXPECT_EQ(r.plan.batch, 4);  // 8 rows on 2 ranks
  EXPECT_EQ(r.plan.layout.devices, 2);
  // The rank's plan is ApplyDataParallel of the plain step of the graph at batch 4.
  TrainingGraph rank = Chain(Optimizer::kMomentum, 4);
  EXPECT_EQ(r.plan.predicted_peak_bytes, Parallel(rank, o.layout).predicted_peak_bytes);
  // The baseline is the one-device plain step at the whole batch (what a percentage is of).
  EXPECT_EQ(r.plan.baseline_peak_bytes, Simulate(BuildTrainingSchedule(whole)).peak_bytes);
  // 50% of it: the budget is per device.
  o.budget.percent = 50;
  r = PlanForBudget(whole, ChainAt(Optimizer::kMomentum), {}, o);
  EXPECT_EQ(r.budget_bytes, Simulate(BuildTrainingSchedule(whole)).peak_bytes / 2);
}

TEST(Parallel, ShardAutoTakesTheCheapestLayoutThatFits) {
  TrainingGraph whole = Chain(Optimizer::kAdam, 2);
  TrainingGraph rank = Chain(Optimizer::kAdam, 1);
  BudgetPlanOptions o;
  o.plan.strategy = "none";
  o.layout = Layout(2, ShardMode::kNone, 100);
  o.shard_auto = true;
  o.micro_batches = 1;
  // No budget: every layout fits and none communicates least.
  BudgetPlan r = PlanForBudget(whole, ChainAt(Optimizer::kAdam), {}, o);
  EXPECT_EQ(r.plan.layout.shard, ShardMode::kNone);
  ASSERT_FALSE(r.plan.notes.empty());
  EXPECT_NE(r.plan.notes.back().find("shard auto: chose none"), std::string::npos)
      << r.plan.notes.back();
  // A budget below none's peak: sharding must fit it, and gradients (reduce-scatter +
  // all-gather) communicates less than optimizer (all-reduce + all-gather) when both fit.
  const int64_t none_peak = Parallel(rank, Layout(2, ShardMode::kNone, 100)).predicted_peak_bytes;
  const int64_t optimizer_peak =
      Parallel(rank, Layout(2, ShardMode::kOptimizer, 100)).predicted_peak_bytes;
  const int64_t gradients_peak =
      Parallel(rank, Layout(2, ShardMode::kGradients, 100)).predicted_peak_bytes;
  ASSERT_LT(optimizer_peak, none_peak);
  o.budget.bytes = optimizer_peak;
  r = PlanForBudget(whole, ChainAt(Optimizer::kAdam), {}, o);
  EXPECT_TRUE(r.plan.feasible);
  EXPECT_EQ(r.plan.layout.shard,
            gradients_peak <= optimizer_peak ? ShardMode::kGradients : ShardMode::kOptimizer);
  // Nothing fits: the smallest per-rank peak over the modes.
  o.budget.bytes = 10;
  r = PlanForBudget(whole, ChainAt(Optimizer::kAdam), {}, o);
  EXPECT_FALSE(r.plan.feasible);
  EXPECT_EQ(r.smallest.predicted_peak_bytes, std::min({none_peak, optimizer_peak, gradients_peak}));
}

TEST(Parallel, TheSmallestPerRankBudgetIsTheLeastThePlanFits) {
  // Chain at batch 128 on 2 ranks of 64 rows, SGD, 100 B buckets (w0 and w1, 26 elements, 104 B
  // each), one micro-batch. Mul(h1, w1)'s backward holds at once: x (64 x 25 floats, 6400 B),
  // the saved h1 (6400), the incoming loss gradient (4) and the loss (4, held until the backward
  // call returns), grad h1 = grad h2 * w1 (6400), grad h2 * h1 before its sum over the rows (a
  // workspace, 6400) and that sum, w1's new gradient (100): 19308 B beside the persistent
  // buffers, whatever the strategy (every one of them is read by that step). Per rank, the
  // persistent buffers are:
  //   none:       parameters 208 + gradients 208                         -> 6400 + 416 = 6816
  //   gradients:  parameters 208 + gradient shards 104 (the flat gradient of bucket 1 comes
  //               after the workspace is freed)                          -> 6400 + 312 = 6712
  //   parameters: shards 104 + gradient shards 104, and both buckets gathered there (bucket 1
  //               for Mul(h1, w1), bucket 0 prefetched with it)          -> 6400 + 416 = 6816
  // so the smallest per-rank budgets are 26124, 26020 and 26124 B. The search bisects between
  // the rank's persistent bytes and the rewritten smallest-peak plan (19308 B apart: more than
  // its 4 KiB resolution), over the plans the budget's own call makes.
  struct Case {
    ShardMode shard;
    int64_t smallest;
  };
  const TrainingGraph whole = Chain(Optimizer::kSgd, 128);
  for (Case c : {Case{ShardMode::kNone, 26124}, Case{ShardMode::kGradients, 26020},
                 Case{ShardMode::kParameters, 26124}}) {
    SCOPED_TRACE(ShardModeName(c.shard));
    BudgetPlanOptions o;
    o.plan.strategy = "auto";
    o.layout = Layout(2, c.shard, 100);
    o.micro_batches = 1;
    // Nothing fits 1 byte: the answer is the smallest budget.
    o.budget.bytes = 1;
    BudgetPlan r = PlanForBudget(whole, ChainAt(Optimizer::kSgd), {}, o);
    EXPECT_FALSE(r.plan.feasible);
    EXPECT_EQ(r.smallest_budget_bytes(), c.smallest);
    // At that budget the plan printed fits it ...
    o.budget.bytes = c.smallest;
    r = PlanForBudget(whole, ChainAt(Optimizer::kSgd), {}, o);
    EXPECT_TRUE(r.plan.feasible);
    EXPECT_EQ(r.plan.budget_needed_bytes(), c.smallest);
    EXPECT_EQ(r.plan.layout.shard, c.shard);
    // ... and one byte below, nothing does, and the answer is the same.
    o.budget.bytes = c.smallest - 1;
    r = PlanForBudget(whole, ChainAt(Optimizer::kSgd), {}, o);
    EXPECT_FALSE(r.plan.feasible);
    EXPECT_EQ(r.smallest_budget_bytes(), c.smallest);
  }
}

TEST(Parallel, BadInputsGiveClearErrors) {
  TrainingGraph whole = Chain(Optimizer::kSgd, 6);
  BudgetPlanOptions o;
  o.plan.strategy = "none";
  o.layout = Layout(4, ShardMode::kNone, 100);
  try {
    PlanForBudget(whole, ChainAt(Optimizer::kSgd), {}, o);
    FAIL();
  } catch (const MemplanError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("batch of 6"), std::string::npos) << m;
    EXPECT_NE(m.find("4 devices"), std::string::npos) << m;
    EXPECT_NE(m.find("multiple of 4"), std::string::npos) << m;
  }
  o.layout.devices = 2;
  o.micro_batches = 2;  // 6 / 2 = 3 rows per rank do not split in 2
  try {
    PlanForBudget(whole, ChainAt(Optimizer::kSgd), {}, o);
    FAIL();
  } catch (const MemplanError& e) {
    EXPECT_NE(std::string(e.what()).find("2 micro-batches"), std::string::npos) << e.what();
  }
  o.micro_batches = 0;
  o.layout.shard = ShardMode::kParameters;
  o.plan.strategy = "selective";
  try {
    PlanForBudget(whole, ChainAt(Optimizer::kSgd), {}, o);
    FAIL();
  } catch (const MemplanError& e) {
    EXPECT_NE(std::string(e.what()).find("selective does not combine with --shard parameters"),
              std::string::npos)
        << e.what();
  }
  TrainingGraph g = Chain();
  Plan p = Plain(g);
  EXPECT_THROW(ApplyDataParallel(p, g, Layout(0, ShardMode::kNone, 100)), MemplanError);
  // A selective plan recomputes inside the backward, where no gather span is defined.
  Plan selective = ReplaySelective(g, {g.FindTensor("h1")}, {.strategy = "selective"});
  try {
    ApplyDataParallel(selective, g, Layout(2, ShardMode::kParameters, 100));
    FAIL();
  } catch (const MemplanError& e) {
    EXPECT_NE(std::string(e.what()).find("selective plan"), std::string::npos) << e.what();
  }
}

// Corpus: per-rank peaks by shard mode, and the setup step holds plan.h's table computed from
// the analysis' own parameter bytes. (peak(optimizer) >= peak(gradients) does not hold under
// the contract: a bucket's flat gradient lives from the first to the last backward step that
// reads one of its parameters, and buckets follow g.parameters (forward) order, so on resnet18
// the buckets holding layer4 are all alive at its peak in layer4's backward, with the shards.)
class ParallelCorpus : public ::testing::TestWithParam<std::string> {};

TEST_P(ParallelCorpus, ShardingLowersThePerRankPeakByTheTable) {
  const std::string path = testing::ModelCacheDir() + "/" + GetParam() + ".onnx";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is not in the model cache";
  for (int64_t n : {2, 4}) {
    LoadOptions lo;
    lo.grads = GradientLifetime::kKept;  // the hand-computed steps keep gradients
    lo.batch = 8 / n;
    lo.optimizer = Optimizer::kAdam;
    TrainingGraph g = LoadTrainingGraph(path, lo);
    // The analysis' own trained parameter bytes: Psi, and the padded total per rank.
    int64_t psi = 0;
    for (TensorId t : g.parameters) psi += g.tensors[t].has_gradient ? g.tensors[t].bytes : 0;
    int64_t padded = 0;
    const ParallelLayout base = Layout(n, ShardMode::kNone, 25 << 20);
    for (const ParameterBucket& b : ParameterBuckets(g, base)) padded += b.bytes;
    // Padding adds fewer than n elements (4 B each) per bucket.
    EXPECT_GE(padded, psi);
    EXPECT_LT(padded - psi, static_cast<int64_t>(ParameterBuckets(g, base).size()) * n * 4);
    const int64_t shard = padded / n;
    int64_t peak[3];
    std::vector<int64_t> during[3];
    int i = 0;
    for (ShardMode m : {ShardMode::kNone, ShardMode::kOptimizer, ShardMode::kGradients}) {
      SCOPED_TRACE(std::string(ShardModeName(m)) + " on " + std::to_string(n));
      ParallelLayout l = base;
      l.shard = m;
      Plan p = Parallel(g, l);
      // Adam: state 2x; plan.h's table.
      EXPECT_EQ(SetupBytes(p, MemoryCategory::kParameter) -
                    SetupBytes(Plain(g), MemoryCategory::kParameter),
                padded - psi);
      EXPECT_EQ(SetupBytes(p, MemoryCategory::kGradient),
                m == ShardMode::kGradients ? shard : padded);
      EXPECT_EQ(SetupBytes(p, MemoryCategory::kOptimizerState),
                2 * (m == ShardMode::kNone ? padded : shard));
      during[i] = p.timeline.bytes_during;
      peak[i++] = p.predicted_peak_bytes;
    }
    // Sharding the optimizer state only removes bytes.
    EXPECT_GE(peak[0], peak[1]);
    // Shard gradients holds S instead of P until the backward starts (at the loss: P - S
    // fewer bytes than shard optimizer); at most every flat gradient is alive besides the
    // shards, so its peak lies between optimizer's - (P - S) and optimizer's + S.
    const Plan plain = Plain(g);
    const size_t loss =
        StepOfNode(plain, g, Phase::kLoss, g.nodes[g.tensors[g.loss].producer].name);
    EXPECT_EQ(during[1][loss] - during[2][loss], padded - shard);
    EXPECT_LE(peak[2], peak[1] + shard);
    EXPECT_GE(peak[2], peak[1] - (padded - shard));
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ParallelCorpus, ::testing::Values("resnet18", "gpt"));

}  // namespace
}  // namespace memplan
