// Segmented schedules on hand-built graphs, with every expected peak worked out by hand.
//
// All graphs: input x [1, 25] (100 B), parameter w [25] (100 B), h0 = Mul(x, w), then Relus
// (each output 100 B, saved by its Relu for backward), a sum loss (a 4 B scalar whose seed
// gradient the loss's backward hands on as a view). Persistent P = x + w + grad w = 300 B.
// Mul saves only x (persistent); its backward accumulates into grad w through a 100 B
// temporary. Add saves nothing and hands its incoming gradient to both inputs (no copy, as
// ATen's add backward does).
#include <gtest/gtest.h>

#include "memplan/planner.h"
#include "planner_toy_graphs.h"
#include "testing/graph_builder.h"

namespace memplan {
namespace {

using testing::GraphBuilder;

TrainingGraph Chain(int k) { return testing::ReluChain(k); }
using testing::LoadSum;

// A U-Net-like skip: e1 is read by the next layer and, much later, by the decoder's Add.
// Nodes: 0 Mul(e0), 1 Relu(e1), 2 Relu(e2), 3 Relu(e3), 4 Relu(d2), 5 Add(d2, e1) = d1,
// 6 Relu(out), 7 loss.
TrainingGraph Skip() {
  GraphBuilder b;
  b.Input("x", {-1, 25}).Param("w", {25}).Node("Mul", {"x", "w"}, {"e0"});
  b.Node("Relu", {"e0"}, {"e1"}).Node("Relu", {"e1"}, {"e2"}).Node("Relu", {"e2"}, {"e3"});
  b.Node("Relu", {"e3"}, {"d2"}).Node("Add", {"d2", "e1"}, {"d1"}).Node("Relu", {"d1"}, {"out"});
  b.Output("out");
  return LoadSum(b);
}

int64_t SegmentedPeak(const TrainingGraph& g, const std::vector<NodeId>& cuts) {
  Schedule s = BuildSegmentedSchedule(
      g, cuts.empty() ? std::vector<std::vector<NodeId>>{} : SegmentsFromCuts(g, cuts));
  return Simulate(s).peak_bytes;
}

TEST(PlannerSchedule, ChainPlainStep) {
  TrainingGraph g = Chain(6);
  ASSERT_EQ(g.nodes.size(), 8u);
  // Backward of Relu_6: P 300 + saved h1..h6 600 + seed 4 + new grad h5 100 + the loss 4
  // (held until the backward call returns) = 1008 B.
  EXPECT_EQ(Simulate(BuildTrainingSchedule(g)).peak_bytes, 1008);
  EXPECT_EQ(SegmentedPeak(g, {}), 1008);
}

TEST(PlannerSchedule, ChainOneCut) {
  TrainingGraph g = Chain(6);
  // Cut after Relu_3 (segments [Mul, R1, R2, R3], [R4, R5, R6, loss]).
  // Last segment, backward of R6: P 300 + checkpoint h3 100 + saved h4..h6 300 + seed 4
  //   + new grad h5 100 = 804 B.
  // First segment: gradient of h3 (100) enters; recompute keeps h1, h2 (saved) and h3 (read
  //   later, held with its gradient to the segment's end). Backward of R2: P 300 + grad h3 100
  //   + h1..h3 300 + grad h2 100 + new grad h1 100 = 900 B.
  EXPECT_EQ(SegmentedPeak(g, {4}), 900);
  Schedule s = BuildSegmentedSchedule(g, SegmentsFromCuts(g, {4}));
  int recomputes = 0;
  for (const Step& step : s.steps) recomputes += step.phase == Phase::kRecompute;
  EXPECT_EQ(recomputes, 4);  // Mul, R1, R2, R3
  std::vector<TensorId> ck = SegmentCheckpoints(g, SegmentsFromCuts(g, {4}));
  ASSERT_EQ(ck.size(), 1u);
  EXPECT_EQ(g.tensors[ck[0]].name, "h3");
}

TEST(PlannerSchedule, ChainTwoCuts) {
  TrainingGraph g = Chain(6);
  // Cuts after R2 and R4: [Mul, R1, R2], [R3, R4], [R5, R6, loss].
  // Last: P 300 + checkpoints h2, h4 200 + saved h5, h6 200 + seed 4 + new grad h5 100 = 804.
  // Middle, backward of R3: P 300 + checkpoint h2 100 + grad h4 100 (held) + h3 100
  //   + h4 100 (held) + grad h3 100 + new grad h2 100 = 900.
  // First, backward of R1: P 300 + grad h2 100 + h2 100 + h1 100 + grad h1 100
  //   + new grad h0 100 = 800.
  EXPECT_EQ(SegmentedPeak(g, {3, 5}), 900);
}

TEST(PlannerSchedule, SkipPlainStep) {
  TrainingGraph g = Skip();
  // Relu(out)'s backward: P 300 + saved e1, e2, e3, d2, out 500 + seed 4 + new grad d1 100
  //   + the loss 4 = 908. Add's backward adds nothing: grad d2 and grad e1 are grad d1 itself.
  EXPECT_EQ(SegmentedPeak(g, {}), 908);
}

TEST(PlannerSchedule, SkipTensorWaitsForItsReaderSegment) {
  TrainingGraph g = Skip();
  // Cuts before nodes 3 and 5: [Mul, R e1, R e2], [R e3, R d2], [Add, R out, loss].
  // e1 crosses both cuts but the middle segment never reads it: it is freed after the last
  // segment's backward, so it is NOT alive during the middle segment's backward.
  // Middle, backward of R e3: P 300 + checkpoint e2 100 + grad d1 (= grads of d2 and e1) 100
  //   + e3 100 + d2 100 (held) + grad e3 100 + new grad e2 100 = 900 (1000 if e1 were held).
  // Last, Relu(out)'s backward: P 300 + checkpoints e1, e2, d2 300 + out 100 + seed 4
  //   + grad d1 100 = 804.
  // First, recompute + backward of R e2: P 300 + grad d1 100 + grad e2 100 + e1, e2 200
  //   (held) + the temporary second gradient of e1 100 = 800.
  EXPECT_EQ(SegmentedPeak(g, {3, 5}), 900);
}

TEST(PlannerSchedule, SkipTensorReadInBetweenStaysAlive) {
  TrainingGraph g = Skip();
  // Cuts before nodes 2 and 5: [Mul, R e1], [R e2, R e3, R d2], [Add, R out, loss].
  // e1 is read by the middle segment, so it stays alive through the middle's backward.
  // Middle, backward of R e3: P 300 + e1 100 + grad d1 (= grads of d2 and e1) 100
  //   + e2, e3 200 (saved) + d2 100 (held) + grad e3 100 + new grad e2 100 = 1000.
  EXPECT_EQ(SegmentedPeak(g, {2, 5}), 1000);
}

TEST(PlannerSchedule, SegmentsMustPartitionTheNodeOrder) {
  TrainingGraph g = Chain(3);
  EXPECT_THROW(BuildSegmentedSchedule(g, {{0, 1}, {3, 4}}), MemplanError);  // node 2 missing
  EXPECT_NO_THROW(BuildSegmentedSchedule(g, {{0, 1, 2, 3}, {4}}));  // the loss alone is fine
  EXPECT_THROW(SegmentsFromCuts(g, {5}), MemplanError);     // the loss in a non-last segment
  EXPECT_THROW(SegmentsFromCuts(g, {3, 2}), MemplanError);  // out of order
}

TEST(PlannerSchedule, RecomputeFlopsAreThePrefixBeforeTheLastCut) {
  TrainingGraph g = Chain(6);
  // Mul and every Relu compute 25 elements: 25 FLOPs each.
  EXPECT_DOUBLE_EQ(RecomputeFlops(g, {}), 0);
  EXPECT_DOUBLE_EQ(RecomputeFlops(g, {3, 5}), 5 * 25);  // Mul, R1..R4
}

}  // namespace
}  // namespace memplan
