// Offload (plan.h): schedules on hand-built chains with every device peak, host peak and stall
// worked out by hand; the `offload` strategy's choice between keeping, recomputing and offloading;
// its plan JSON.
//
// ReluChain(3): input x [1, 25] (100 B), parameter w (100 B), h0 = Mul(x, w), h_i = Relu(h_{i-1})
// for i = 1..3, a sum loss (4 B; its seed gradient is handed on as a view; both live until the
// backward call returns). Persistent P = x + w + grad w = 300 B. Mul saves only x; each Relu
// saves its output; h0 is saved by nobody. Nodes: 0 Mul, 1..3 Relu_i, 4 loss. The plain step's
// peak is Relu_3's backward: P 300 + h1, h2, h3 300 + the loss and the seed 8 + grad h2 100
// = 708 B.
//
// Times: every node's forward 1 s, its backward 2 s (ScheduleStepSeconds). Forward steps end at
// Mul 1, Relu_1 2, Relu_2 3, Relu_3 4, loss 5; the backward work starts at loss 5, Relu_3 7,
// Relu_2 9, Relu_1 11, Mul 13. A link of 50 B/s copies a 100 B storage in 2 s.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "memplan/caching_allocator.h"
#include "memplan/planner.h"
#include "memplan/storage_facts.h"
#include "planner_toy_graphs.h"
#include "testing/corpus.h"

namespace memplan {
namespace {

TensorId T(const TrainingGraph& g, const std::string& name) { return g.FindTensor(name); }

constexpr LinkRates kSlowLink{.device_to_host_bytes_per_second = 50,
                              .host_to_device_bytes_per_second = 50};

Plan Offload(const TrainingGraph& g, const std::vector<OffloadChoice>& offloaded,
             const std::vector<std::string>& recomputed = {}, LinkRates link = kSlowLink) {
  std::vector<TensorId> ids;
  for (const std::string& n : recomputed) ids.push_back(T(g, n));
  return ReplayOffload(g, ids, offloaded, {.strategy = "offload"},
                       {.link = link, .node_seconds = std::vector<double>(g.nodes.size(), 1.0)});
}

int StepOf(const Schedule& s, Phase phase, bool wait, const std::string& buffer) {
  for (size_t i = 0; i < s.steps.size(); ++i) {
    const Step& step = s.steps[i];
    if (step.phase == phase && step.copy_wait == wait && step.copy_to >= 0 &&
        s.buffers[step.copy_to].name == buffer)
      return static_cast<int>(i);
  }
  return -1;
}

TEST(OffloadSchedule, NothingOffloadedIsThePlainStepWithoutStall) {
  TrainingGraph g = testing::ReluChain(3);
  Plan p = Offload(g, {});
  EXPECT_EQ(p.predicted_peak_bytes, 708);
  EXPECT_EQ(p.predicted_host_peak_bytes, 0);
  EXPECT_EQ(p.predicted_stall_seconds, 0);
}

TEST(OffloadSchedule, TheDeviceCopyLeavesAtItsWaitAndComesBackForItsReader) {
  TrainingGraph g = testing::ReluChain(3);
  // h1 (last forward reader Relu_2) is freed on the device after the loss's forward step, and
  // prefetched before Relu_1's backward, its only reader there. Relu_3's backward:
  // P 300 + h2, h3 200 + the loss and the seed 8 + grad h2 100 = 608 B (the loss step:
  // P + h1, h2, h3 + 4 = 604 B). Relu_1's backward: P 300 + grad h1 100 + h1 (prefetched) 100
  // + grad h0 100 + 8 = 608 B.
  Plan p = Offload(g, {{.tensor = T(g, "h1"), .free_after = 4, .prefetch_at = 1}});
  EXPECT_EQ(p.predicted_peak_bytes, 608);
  // One 100 B storage in pinned host memory from its offload to its prefetch.
  EXPECT_EQ(p.predicted_host_peak_bytes, 100);
  EXPECT_TRUE(p.feasible);
}

TEST(OffloadSchedule, AHiddenOffloadAndALatePrefetchStallOnlyThePrefetch) {
  TrainingGraph g = testing::ReluChain(3);
  // Offload: starts at 3 (Relu_2's end), ends at 5; waited for after the loss (at 5): no stall.
  // Prefetch: starts before Relu_1's backward at 11, ends at 13, waited for at once: 2 s.
  Plan p = Offload(g, {{.tensor = T(g, "h1"), .free_after = 4, .prefetch_at = 1}});
  EXPECT_DOUBLE_EQ(p.predicted_stall_seconds, 2.0);
}

TEST(OffloadSchedule, AnEarlierPrefetchHidesItsCopyButOverlapsTheBackward) {
  TrainingGraph g = testing::ReluChain(3);
  // The prefetch starts before Relu_2's backward at 9 and ends at 11, when Relu_1 needs it: no
  // stall. h1 is then back during Relu_2's backward: P 300 + h2 100 + grad h2 100 + h1 100
  // + grad h1 100 + the loss and the seed 8 = 708 B, the peak (Relu_3's backward: 608 B).
  Plan p = Offload(g, {{.tensor = T(g, "h1"), .free_after = 4, .prefetch_at = 2}});
  EXPECT_DOUBLE_EQ(p.predicted_stall_seconds, 0.0);
  EXPECT_EQ(p.predicted_peak_bytes, 708);
}

TEST(OffloadSchedule, WaitingRightAfterTheLastReaderStallsTheWholeCopy) {
  TrainingGraph g = testing::ReluChain(3);
  // The copy starts at 3 and the wait follows Relu_2 at once: 2 s; the prefetch is hidden (above).
  Plan p = Offload(g, {{.tensor = T(g, "h1"), .free_after = 2, .prefetch_at = 2}});
  EXPECT_DOUBLE_EQ(p.predicted_stall_seconds, 2.0);
}

TEST(OffloadSchedule, CopiesOfOneDirectionQueueOnTheirStream) {
  TrainingGraph g = testing::ReluChain(3);
  // h1's copy runs 3..5; h2's (last reader Relu_3, at 4) waits for the stream: 5..7. Both are
  // waited for after the loss (at 5): 2 s for h2. Prefetches start before the loss's backward (5):
  // h1 5..7, h2 7..9; Relu_2 needs h2 at 9, Relu_1 h1 at 11: no stall. Both are on the host
  // from their offloads until h2's prefetch wait: 200 B.
  Plan p = Offload(g, {{.tensor = T(g, "h1"), .free_after = 4, .prefetch_at = 4},
                       {.tensor = T(g, "h2"), .free_after = 4, .prefetch_at = 4}});
  EXPECT_DOUBLE_EQ(p.predicted_stall_seconds, 2.0);
  EXPECT_EQ(p.predicted_host_peak_bytes, 200);
}

TEST(OffloadSchedule, ARecomputeReadingAnOffloadedStorageWaitsForItsPrefetch) {
  TrainingGraph g = testing::ReluChain(3);
  // h2 is recomputed from h1 before Relu_2's backward: h1 must be back before that recompute.
  Plan p = Offload(g, {{.tensor = T(g, "h1"), .free_after = 4, .prefetch_at = 1}}, {"h2"});
  const int ready = StepOf(p.schedule, Phase::kPrefetch, true, "h1 (prefetched)");
  int recompute = -1;
  for (size_t i = 0; i < p.schedule.steps.size() && recompute < 0; ++i) {
    if (p.schedule.steps[i].phase == Phase::kRecompute) recompute = static_cast<int>(i);
  }
  ASSERT_GE(ready, 0);
  ASSERT_GE(recompute, 0);
  EXPECT_LT(ready, recompute);
}

TEST(OffloadSchedule, RefusesAStorageNoBackwardSavesAndOneNamedTwice) {
  TrainingGraph g = testing::ReluChain(3);
  // h0 is saved by nobody: it dies after Relu_1 anyway.
  try {
    Offload(g, {{.tensor = T(g, "h0"), .free_after = 4, .prefetch_at = 1}});
    FAIL() << "h0 offloaded";
  } catch (const MemplanError& e) {
    EXPECT_NE(std::string(e.what()).find("'h0'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Offload(g, {{.tensor = T(g, "h1"), .free_after = 4, .prefetch_at = 1}}, {"h1"}),
               MemplanError);
}

TEST(OffloadSchedule, HostBuffersAreNotDeviceMemoryForTheCachingAllocator) {
  TrainingGraph g = testing::ReluChain(3);
  Plan p = Offload(g, {{.tensor = T(g, "h1"), .free_after = 4, .prefetch_at = 1}});
  // One 512 B block per buffer. Relu_3's backward: x, w, grad w, h2, h3, seed, grad h2, the loss
  // = 8 blocks = 4096 B (the loss step: x, w, grad w, h1, h2, h3, the loss = 7); h1's host copy,
  // alive during Relu_3's backward, would make it 9.
  EXPECT_EQ(SimulateReserved(p.schedule, {}).allocated_peak_bytes, 4096);
}

TEST(OffloadStreams, AWaitWithoutItsStartIsABrokenSchedule) {
  Schedule s;
  const BufferId device = s.AddBuffer({"a", 100, MemoryCategory::kActivation, kNone});
  Buffer host_buffer{"a (host)", 100, MemoryCategory::kActivation, kNone};
  host_buffer.host = true;
  const BufferId host = s.AddBuffer(host_buffer);
  Step alloc;
  alloc.allocs = {device};
  Step wait;
  wait.phase = Phase::kOffload;
  wait.copy_from = device;
  wait.copy_to = host;
  wait.copy_wait = true;
  wait.frees = {device};
  s.steps = {alloc, wait};
  EXPECT_THROW(SimulateStreams(s, {1.0, 0.0}, kSlowLink), MemplanError);
  // One time per step, or the replay cannot say which step takes which.
  EXPECT_THROW(SimulateStreams(s, {1.0}, kSlowLink), MemplanError);
}

TEST(OffloadStreams, AStepWithoutCopiesTakesItsOwnSecondsOnly) {
  TrainingGraph g = testing::ReluChain(3);
  // The plain step: forward 5 x 1 s + backward 5 x 2 s = 15 s, no stall.
  Plan p = Offload(g, {});
  const StreamTimeline t = SimulateStreams(
      p.schedule, ScheduleStepSeconds(std::vector<double>(g.nodes.size(), 1.0), p.schedule),
      kSlowLink);
  EXPECT_DOUBLE_EQ(t.compute_seconds, 15.0);
  EXPECT_DOUBLE_EQ(t.stall_seconds, 0.0);
}

// ---- The `offload` strategy ----
// ReluChain(6): nodes 0 Mul, i Relu_i, 7 loss; plain peak (Relu_6's backward) P 300 + h1..h6
// 600 + the loss and the seed 8 + grad h5 100 = 1008 B. A budget of 908 B needs one 100 B storage
// off the device at Relu_6's backward. Every node's forward takes 1 s: recomputing a storage costs
// 1 s.

PlanOptions OffloadOptions(int64_t budget, LinkRates link, int64_t host_budget = 0) {
  PlanOptions o;
  o.strategy = "offload";
  o.budget_bytes = budget;
  o.link = link;
  o.host_budget_bytes = host_budget;
  return o;
}

CostModel OneSecondNodes() {
  CostModel c;
  c.node_seconds = [](const TrainingGraph&, const Node&) { return 1.0; };
  return c;
}

constexpr LinkRates kFastLink{.device_to_host_bytes_per_second = 1e12,
                              .host_to_device_bytes_per_second = 1e12};

TEST(OffloadStrategy, AFastLinkOffloadsInsteadOfRecomputing) {
  TrainingGraph g = testing::ReluChain(6);
  // 100 B cross a 1 TB/s link in 1e-10 s, hidden behind 1 s nodes: offloading is free, recompute
  // is 1 s. One storage off the device at the peak: 1008 - 100 = 908 B; 100 B on the host.
  Plan p = MakePlan(g, OneSecondNodes(), OffloadOptions(908, kFastLink));
  EXPECT_TRUE(p.feasible);
  EXPECT_EQ(p.offloaded.size(), 1u);
  EXPECT_TRUE(p.recomputed.empty());
  EXPECT_EQ(p.predicted_peak_bytes, 908);
  EXPECT_EQ(p.predicted_host_peak_bytes, 100);
  EXPECT_DOUBLE_EQ(p.predicted_stall_seconds, 0.0);
  EXPECT_DOUBLE_EQ(p.predicted_recompute_seconds, 0.0);
}

TEST(OffloadStrategy, ASlowLinkRecomputesInstead) {
  TrainingGraph g = testing::ReluChain(6);
  // 100 B at 1 B/s: 100 s each way, against 1 s of recompute.
  Plan p = MakePlan(g, OneSecondNodes(),
                    OffloadOptions(908, {.device_to_host_bytes_per_second = 1,
                                         .host_to_device_bytes_per_second = 1}));
  EXPECT_TRUE(p.feasible);
  EXPECT_TRUE(p.offloaded.empty());
  EXPECT_FALSE(p.recomputed.empty());
  EXPECT_LE(p.predicted_peak_bytes, 908);
}

TEST(OffloadStrategy, CopiesQueuedOnTheLinkArePricedBehindEachOther) {
  TrainingGraph g = testing::ReluChain(6);
  // 1 s nodes, a 25 B/s link: 100 B take 4 s each way. Forward steps end at Mul 1, Relu_i i+1,
  // loss 8; h_i's last forward reader is Relu_{i+1} (end i+2). Alone, h1 and h2 are hidden
  // (windows of 5 s and 4 s behind them, 12 s and 10 s of backward before Relu_1's and
  // Relu_2's); the device-to-host stream then holds 8 s of copies, the whole forward, so a third
  // copy adds its 4 s to the step: dearer than 1 s of recompute (priced alone, h3, with a 3 s
  // window, would tie with its recompute). The budget takes three storages off the peak
  // (1008 B): two offloaded at most, the rest recomputed; here the answer is the recompute-only
  // plan (4 s: recomputing h3 needs its chain), which the offloads do not beat.
  Plan p = MakePlan(g, OneSecondNodes(),
                    OffloadOptions(708, {.device_to_host_bytes_per_second = 25,
                                         .host_to_device_bytes_per_second = 25}));
  EXPECT_TRUE(p.feasible);
  EXPECT_LE(p.predicted_peak_bytes, 708);
  EXPECT_LE(p.offloaded.size(), 2u);
  EXPECT_FALSE(p.recomputed.empty());
  // Never slower than the recompute-only plan for the same budget.
  PlanOptions o = OffloadOptions(708, {});
  o.strategy = "selective";
  Plan selective = MakePlan(g, OneSecondNodes(), o);
  ASSERT_TRUE(selective.feasible);
  EXPECT_LE(p.predicted_overhead_seconds(), selective.predicted_overhead_seconds());
  std::printf("offload %zu offloaded, %zu recomputed, %.3g s; selective %.3g s\n",
              p.offloaded.size(), p.recomputed.size(), p.predicted_overhead_seconds(),
              selective.predicted_overhead_seconds());
}

TEST(OffloadStrategy, AHostBudgetTooSmallForAStorageRecomputesInstead) {
  TrainingGraph g = testing::ReluChain(6);
  Plan p = MakePlan(g, OneSecondNodes(), OffloadOptions(908, kFastLink, /*host_budget=*/50));
  EXPECT_TRUE(p.feasible);
  EXPECT_TRUE(p.offloaded.empty());
  EXPECT_EQ(p.predicted_host_peak_bytes, 0);
}

TEST(OffloadJson, APlanWritesItsOffloadAndReadsBackTheSamePeaks) {
  TrainingGraph g = testing::ReluChain(6);
  Plan p = MakePlan(g, OneSecondNodes(), OffloadOptions(908, kFastLink));
  ASSERT_EQ(p.offloaded.size(), 1u);
  nlohmann::json j = PlanToJson(p, g);
  const std::string name = g.tensors[p.offloaded[0].tensor].name;
  EXPECT_EQ(j["offloaded"], nlohmann::json::array({name}));
  EXPECT_EQ(j["predicted_host_peak_bytes"], 100);
  const nlohmann::json& s = j["offload"]["storages"][0];
  // Offload start < its wait < prefetch start < its wait, all steps of the schedule.
  EXPECT_LT(s["offload_step"].get<int>(), s["free_step"].get<int>());
  EXPECT_LT(s["free_step"].get<int>(), s["prefetch_step"].get<int>());
  EXPECT_LT(s["prefetch_step"].get<int>(), s["ready_step"].get<int>());
  Plan back = PlanFromJson(j, g);
  EXPECT_EQ(back.predicted_peak_bytes, 908);
  EXPECT_EQ(back.predicted_host_peak_bytes, 100);
  ASSERT_EQ(back.offloaded.size(), 1u);
  EXPECT_EQ(back.offloaded[0].tensor, p.offloaded[0].tensor);
}

TEST(OffloadJson, AnOffloadPlanThatOffloadsNothingStillSaysSo) {
  TrainingGraph g = testing::ReluChain(6);
  // The slow link: the strategy recomputes; its JSON still names what it offloads (nothing)
  // and its host peak (0 B), and reads back as the same plan.
  Plan p = MakePlan(g, OneSecondNodes(),
                    OffloadOptions(908, {.device_to_host_bytes_per_second = 1,
                                         .host_to_device_bytes_per_second = 1}));
  nlohmann::json j = PlanToJson(p, g);
  EXPECT_EQ(j["offloaded"], nlohmann::json::array());
  EXPECT_EQ(j["predicted_host_peak_bytes"], 0);
  EXPECT_EQ(PlanFromJson(j, g).predicted_peak_bytes, p.predicted_peak_bytes);
}

TEST(OffloadJson, APlanWithoutOffloadWritesNoOffloadFields) {
  TrainingGraph g = testing::ReluChain(6);
  PlanOptions o;
  o.strategy = "selective";
  o.budget_bytes = 908;
  nlohmann::json j = PlanToJson(MakePlan(g, OneSecondNodes(), o), g);
  EXPECT_FALSE(j.contains("offloaded"));
  EXPECT_FALSE(j.contains("predicted_host_peak_bytes"));
  EXPECT_FALSE(j.contains("offload"));
}

// ---- `offload` on corpus models ----
// At 35% of the baseline (batch 16, the default CPU cost model, an H100-class 25 GB/s link): the
// plan is its own replay, fits its budgets when it says so, holds at most its offloaded bytes on
// the host, and is never predicted slower than `selective`'s recompute-only plan when that fits.

class OffloadCorpus : public ::testing::TestWithParam<std::string> {};

TEST_P(OffloadCorpus, FitsAsReplayedAndIsNeverSlowerThanSelective) {
  LoadOptions lo;
  lo.batch = 16;
  TrainingGraph g = LoadTrainingGraph(testing::CorpusModel(GetParam()), lo);
  const int64_t baseline = Simulate(BuildTrainingSchedule(g)).peak_bytes;
  const int64_t budget = baseline * 35 / 100;
  const LinkRates link{.device_to_host_bytes_per_second = 25e9,
                       .host_to_device_bytes_per_second = 25e9};
  PlanOptions o = OffloadOptions(budget, link);
  Plan p = MakePlan(g, {}, o);
  o.strategy = "selective";
  Plan selective = MakePlan(g, {}, o);
  std::printf(
      "%s at 35%%: offload peak %.1f%% (%s), %zu offloaded, %zu recomputed, %.3g s "
      "overhead; selective peak %.1f%% (%s), %.3g s\n",
      GetParam().c_str(), 100.0 * static_cast<double>(p.predicted_peak_bytes) / baseline,
      p.feasible ? "fits" : "does not fit", p.offloaded.size(), p.recomputed.size(),
      p.predicted_overhead_seconds(),
      100.0 * static_cast<double>(selective.predicted_peak_bytes) / baseline,
      selective.feasible ? "fits" : "does not fit", selective.predicted_overhead_seconds());
  Plan replay =
      ReplayOffload(g, p.recomputed, p.offloaded, {.strategy = "offload", .budget_bytes = budget},
                    {.link = link, .node_seconds = PredictNodeSeconds(g, {})});
  EXPECT_EQ(p.predicted_peak_bytes, replay.predicted_peak_bytes);
  EXPECT_EQ(p.predicted_host_peak_bytes, replay.predicted_host_peak_bytes);
  EXPECT_DOUBLE_EQ(p.predicted_stall_seconds, replay.predicted_stall_seconds);
  EXPECT_EQ(p.feasible, p.predicted_peak_bytes <= budget);
  int64_t offloaded_bytes = 0;
  for (const OffloadChoice& c : p.offloaded) offloaded_bytes += g.tensors[c.tensor].bytes;
  EXPECT_LE(p.predicted_host_peak_bytes, offloaded_bytes);
  if (selective.feasible) {
    EXPECT_TRUE(p.feasible);
    EXPECT_LE(p.predicted_overhead_seconds(), selective.predicted_overhead_seconds());
  }
}

INSTANTIATE_TEST_SUITE_P(Models, OffloadCorpus, ::testing::ValuesIn(testing::TestCorpus()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace memplan
