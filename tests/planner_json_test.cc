// Plans as JSON: what DESIGN.md promises, a lossless round trip, and clear rejections of
// plans made for another model or batch (the executor calls PlanFromJson).
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "memplan/plan_report.h"
#include "memplan/planner.h"
#include "planner_toy_graphs.h"
#include "testing/graph_builder.h"

namespace memplan {
namespace {

using testing::GraphBuilder;

GraphBuilder ChainBuilder(int k, int width = 25) {
  GraphBuilder b;
  b.Input("x", {-1, width}).Param("w", {width}).Node("Mul", {"x", "w"}, {"h0"});
  for (int i = 1; i <= k; ++i)
    b.Node("Relu", {"h" + std::to_string(i - 1)}, {"h" + std::to_string(i)});
  b.Output("h" + std::to_string(k));
  return b;
}

TrainingGraph Load(const GraphBuilder& b, int64_t batch = 1) {
  LoadOptions o;
  o.grads = GradientLifetime::kKept;  // the hand-computed steps keep gradients
  o.batch = batch;
  o.loss = LossKind::kSum;
  return b.Load(o);
}

std::string ErrorOf(const nlohmann::json& j, const TrainingGraph& g) {
  try {
    PlanFromJson(j, g);
  } catch (const MemplanError& e) {
    return e.what();
  }
  return "";
}

Plan MakeOptimal(const TrainingGraph& g) {
  PlanOptions o;
  o.strategy = "optimal";
  o.budget_bytes = PlanNone(g, {}, o).predicted_peak_bytes * 9 / 10;
  return MakePlan(g, {}, o);
}

TEST(PlannerJson, CarriesTheDesignFields) {
  TrainingGraph g = Load(ChainBuilder(8));
  Plan p = MakeOptimal(g);
  ASSERT_TRUE(p.feasible);
  nlohmann::json j = PlanToJson(p, g);
  EXPECT_EQ(j["kind"], "plan");
  for (const char* key :
       {"memplan_version", "model", "batch", "fingerprint", "strategy", "budget_bytes",
        "predicted_peak_bytes", "baseline_peak_bytes", "recompute_flops", "forward_flops",
        "checkpoints", "sections", "feasible", "solve_seconds", "timeline"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["strategy"], "optimal");
  EXPECT_EQ(j["sections"].size(), p.segments.size());
  size_t nodes = 0;
  for (const auto& s : j["sections"]) nodes += s.size();
  EXPECT_EQ(nodes, g.nodes.size());
  EXPECT_EQ(j["timeline"].size(), p.schedule.steps.size());
}

TEST(PlannerJson, RoundTripReproducesThePlan) {
  TrainingGraph g = Load(ChainBuilder(8));
  Plan p = MakeOptimal(g);
  nlohmann::json j = nlohmann::json::parse(PlanToJson(p, g).dump());
  Plan q = PlanFromJson(j, g);
  EXPECT_EQ(q.strategy, p.strategy);
  EXPECT_EQ(q.segments, p.segments);
  EXPECT_EQ(q.checkpoints, p.checkpoints);
  EXPECT_EQ(q.predicted_peak_bytes, p.predicted_peak_bytes);
  EXPECT_EQ(q.budget_bytes, p.budget_bytes);
  EXPECT_EQ(q.baseline_peak_bytes, p.baseline_peak_bytes);
  EXPECT_DOUBLE_EQ(q.recompute_flops, p.recompute_flops);
  EXPECT_EQ(q.feasible, p.feasible);
  EXPECT_EQ(q.model_fingerprint, ModelFingerprint(g));
  EXPECT_EQ(PlanToJson(q, g)["sections"], j["sections"]);
}

// Node i takes (i + 1) ms: a cut after node 3 recomputes 1 + 2 + 3 + 4 = 10 ms.
CostModel MillisecondsById() {
  CostModel cost;
  cost.node_seconds = [](const TrainingGraph&, const Node& n) {
    return 1e-3 * static_cast<double>(n.id + 1);
  };
  return cost;
}

TEST(PlannerJson, PredictedRecomputeSecondsRoundTrip) {
  TrainingGraph g = Load(ChainBuilder(8));
  PlanOptions o;
  o.strategy = "manual";
  o.checkpoints = {"h3"};  // produced by node 3 (Relu_3)
  Plan p = MakePlan(g, MillisecondsById(), o);
  ASSERT_DOUBLE_EQ(p.predicted_recompute_seconds, 10e-3);
  nlohmann::json j = nlohmann::json::parse(PlanToJson(p, g).dump());
  EXPECT_DOUBLE_EQ(j["predicted_recompute_seconds"].get<double>(), 10e-3);
  EXPECT_DOUBLE_EQ(PlanFromJson(j, g).predicted_recompute_seconds, 10e-3);
  // Plans written before the field existed read back with 0.
  j.erase("predicted_recompute_seconds");
  EXPECT_DOUBLE_EQ(PlanFromJson(j, g).predicted_recompute_seconds, 0);
  for (const nlohmann::json& bad : {nlohmann::json(-1.0), nlohmann::json("fast")}) {
    j["predicted_recompute_seconds"] = bad;
    EXPECT_NE(ErrorOf(j, g).find("predicted_recompute_seconds"), std::string::npos)
        << ErrorOf(j, g);
  }
}

TEST(PlannerJson, PredictedRecomputeSecondsOfMicroBatchesRoundTrip) {
  // Planned as 2 micro-batches of 2: the file holds the whole step's seconds, 2 x 10 ms.
  GraphBuilder b = ChainBuilder(8);
  PlanOptions o;
  o.strategy = "manual";
  o.checkpoints = {"h3"};
  Plan p = PlanMicroBatched([&](int64_t batch) { return Load(b, batch); }, /*batch=*/4,
                            MillisecondsById(), o,
                            /*micro_batches=*/2);
  ASSERT_EQ(p.micro_batches, 2);
  ASSERT_DOUBLE_EQ(p.predicted_recompute_seconds, 20e-3);
  TrainingGraph micro = Load(b, 2);
  nlohmann::json j = nlohmann::json::parse(PlanToJson(p, micro).dump());
  EXPECT_DOUBLE_EQ(PlanFromJson(j, micro).predicted_recompute_seconds, 20e-3);
}

TEST(PlannerJson, TheBaselinePlanHasOneSection) {
  TrainingGraph g = Load(ChainBuilder(3));
  Plan p = PlanNone(g, {}, PlanOptions{});
  nlohmann::json j = PlanToJson(p, g);
  ASSERT_EQ(j["sections"].size(), 1u);
  EXPECT_TRUE(j["checkpoints"].empty());
  EXPECT_TRUE(PlanFromJson(j, g).segments.empty());
}

TEST(PlannerJson, RejectsAPlanForAnotherBatch) {
  GraphBuilder b = ChainBuilder(6);
  TrainingGraph g1 = Load(b, 1), g4 = Load(b, 4);
  nlohmann::json j = PlanToJson(MakeOptimal(g1), g1);
  std::string e = ErrorOf(j, g4);
  EXPECT_NE(e.find("batch 1"), std::string::npos) << e;
  EXPECT_NE(e.find("batch 4"), std::string::npos) << e;
}

TEST(PlannerJson, RejectsAPlanForAnotherModel) {
  TrainingGraph a = Load(ChainBuilder(6));
  TrainingGraph wider = Load(ChainBuilder(6, 30));  // same names and ops, other shapes
  TrainingGraph longer = Load(ChainBuilder(7));
  nlohmann::json j = PlanToJson(MakeOptimal(a), a);
  EXPECT_NE(ErrorOf(j, wider).find("another model"), std::string::npos) << ErrorOf(j, wider);
  EXPECT_NE(ErrorOf(j, longer).find("another model"), std::string::npos) << ErrorOf(j, longer);
}

TEST(PlannerJson, NamesTheNodeThatDoesNotMatch) {
  TrainingGraph g = Load(ChainBuilder(6));
  nlohmann::json j = PlanToJson(MakeOptimal(g), g);
  j["sections"][0][0] = "no_such_node";
  std::string e = ErrorOf(j, g);
  EXPECT_NE(e.find("no_such_node"), std::string::npos) << e;
  j = PlanToJson(MakeOptimal(g), g);
  j["checkpoints"].push_back("h9");
  e = ErrorOf(j, g);
  EXPECT_NE(e.find("h9"), std::string::npos) << e;
}

TEST(PlannerJson, RejectsWhatIsNotAPlan) {
  TrainingGraph g = Load(ChainBuilder(3));
  EXPECT_NE(ErrorOf(nlohmann::json::object(), g), "");
  EXPECT_NE(ErrorOf({{"kind", "analysis"}}, g), "");
  nlohmann::json j = PlanToJson(PlanNone(g, {}, PlanOptions{}), g);
  j.erase("fingerprint");
  EXPECT_NE(ErrorOf(j, g).find("fingerprint"), std::string::npos);
  j = PlanToJson(PlanNone(g, {}, PlanOptions{}), g);
  j["batch"] = "one";
  EXPECT_NE(ErrorOf(j, g).find("\"batch\" must be a whole number"), std::string::npos)
      << ErrorOf(j, g);
}

TEST(PlannerJson, KindThatIsNotAStringIsNotAPlan) {
  TrainingGraph g = Load(ChainBuilder(3));
  for (const nlohmann::json& kind :
       {nlohmann::json(1), nlohmann::json(nullptr), nlohmann::json::array({"plan"})}) {
    nlohmann::json j = PlanToJson(PlanNone(g, {}, PlanOptions{}), g);
    j["kind"] = kind;
    EXPECT_FALSE(IsPlanJson(j)) << kind;
    EXPECT_NE(ErrorOf(j, g).find("not a memplan plan"), std::string::npos) << ErrorOf(j, g);
  }
}

TEST(PlannerJson, UnknownStrategyIsRejected) {
  TrainingGraph g = Load(ChainBuilder(3));
  nlohmann::json j = PlanToJson(PlanNone(g, {}, PlanOptions{}), g);
  j["strategy"] = "bogus";
  EXPECT_NE(ErrorOf(j, g).find("the plan's strategy 'bogus' is not one memplan makes"),
            std::string::npos)
      << ErrorOf(j, g);
}

TEST(PlannerJson, FractionalBatchIsRejected) {
  TrainingGraph g = Load(ChainBuilder(3));
  nlohmann::json j = PlanToJson(PlanNone(g, {}, PlanOptions{}), g);
  j["batch"] = 1.5;
  EXPECT_NE(
      ErrorOf(j, g).find("the plan's \"batch\" must be a whole number of at least 1, not 1.5"),
      std::string::npos)
      << ErrorOf(j, g);
}

TEST(PlannerJson, BudgetBeyondInt64IsRejectedNamingTheField) {
  // 5.4e23 bytes as a float: converting it to int64_t would overflow (found by fuzz_plan).
  TrainingGraph g = Load(ChainBuilder(3));
  nlohmann::json j = PlanToJson(PlanNone(g, {}, PlanOptions{}), g);
  j["budget_bytes"] = 5.41844674407370955e23;
  EXPECT_NE(ErrorOf(j, g).find("the plan's \"budget_bytes\" must be a whole number of bytes"),
            std::string::npos)
      << ErrorOf(j, g);
  j["budget_bytes"] = 1000;
  j["baseline_peak_bytes"] = "big";
  EXPECT_NE(ErrorOf(j, g).find("\"baseline_peak_bytes\" must be a whole number of bytes"),
            std::string::npos)
      << ErrorOf(j, g);
}

TEST(PlannerJson, MicroBatchCountWhoseProductWrapsIsRejected) {
  nlohmann::json j = {{"kind", "plan"}, {"batch", 0}, {"micro_batches", int64_t{1} << 62}};
  EXPECT_THROW(PlanGraphBatch(j), MemplanError);
  // 2^62 micro-batches of 4 wrap to batch 0 in int64.
  j = {{"kind", "plan"}, {"batch", 4}, {"micro_batches", int64_t{1} << 62}, {"micro_batch", 4}};
  try {
    PlanGraphBatch(j);
    ADD_FAILURE() << "accepted";
  } catch (const MemplanError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "the plan's batch 4 is not its 4611686018427387904 micro-batches of 4"),
              std::string::npos)
        << e.what();
  }
}

TEST(PlannerJson, EditedMicroBatchFieldsAreNamedNotAnotherModel) {
  // Planned at batch 4 in one piece, then edited by hand into 2 micro-batches of 2.
  GraphBuilder b = ChainBuilder(6);
  TrainingGraph g4 = Load(b, 4), g2 = Load(b, 2);
  nlohmann::json j = PlanToJson(PlanNone(g4, {}, PlanOptions{}), g4);
  j["micro_batches"] = 2;
  j["micro_batch"] = 2;
  ASSERT_EQ(PlanGraphBatch(j), 2);
  std::string e = ErrorOf(j, g2);
  EXPECT_EQ(e.find("another model"), std::string::npos) << e;
  EXPECT_NE(e.find("\"batch\", \"micro_batches\" and \"micro_batch\" (4, 2, 2) were edited"),
            std::string::npos)
      << e;
  // The model's path is named once.
  EXPECT_EQ(e.find("'test.onnx'"), e.rfind("'test.onnx'")) << e;
}

// The sweep a plan file carries (`memplan plan --sweep`), read back by the GUI.
SweepResult HandMadeSweep() {
  SweepResult s;
  s.baseline_peak_bytes = 1000;
  s.min_budget_bytes = 400;
  s.min_budget_strategy = "optimal";
  s.points = {
      {/*budget_bytes=*/1000, "none", /*peak_bytes=*/1000, /*recompute_flops=*/0,
       /*recompute_seconds=*/0, /*overhead=*/0, /*num_checkpoints=*/0, /*num_sections=*/1,
       /*solve_seconds=*/0.001},
      {/*budget_bytes=*/500, "sqrt", /*peak_bytes=*/480, /*recompute_flops=*/2.5e6,
       /*recompute_seconds=*/0.125, /*overhead=*/0.25, /*num_checkpoints=*/3, /*num_sections=*/4,
       /*solve_seconds=*/0.5}};
  return s;
}

std::string SweepErrorOf(const nlohmann::json& j) {
  try {
    SweepFromJson(j);
  } catch (const MemplanError& e) {
    return e.what();
  }
  return "";
}

TEST(SweepJson, RoundTripKeepsEveryField) {
  const SweepResult in = HandMadeSweep();
  // Through the text, as a file holds it.
  const SweepResult out = SweepFromJson(nlohmann::json::parse(SweepToJson(in).dump()));
  EXPECT_EQ(out.baseline_peak_bytes, 1000);
  EXPECT_EQ(out.min_budget_bytes, 400);
  EXPECT_EQ(out.min_budget_strategy, "optimal");
  ASSERT_EQ(out.points.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const SweepPoint &a = in.points[i], &b = out.points[i];
    EXPECT_EQ(b.budget_bytes, a.budget_bytes) << i;
    EXPECT_EQ(b.strategy, a.strategy) << i;
    EXPECT_EQ(b.peak_bytes, a.peak_bytes) << i;
    EXPECT_EQ(b.recompute_flops, a.recompute_flops) << i;
    EXPECT_EQ(b.recompute_seconds, a.recompute_seconds) << i;
    EXPECT_EQ(b.overhead, a.overhead) << i;
    EXPECT_EQ(b.num_checkpoints, a.num_checkpoints) << i;
    EXPECT_EQ(b.num_sections, a.num_sections) << i;
    EXPECT_EQ(b.solve_seconds, a.solve_seconds) << i;
  }
  EXPECT_EQ(out.points[1].num_checkpoints, 3);
  EXPECT_EQ(out.points[1].recompute_seconds, 0.125);
}

TEST(SweepJson, MissingOrMistypedFieldIsNamed) {
  nlohmann::json j = SweepToJson(HandMadeSweep());
  nlohmann::json missing = j;
  missing["points"][1].erase("peak_bytes");
  EXPECT_EQ(SweepErrorOf(missing), "field 'points[1].peak_bytes' is missing");
  nlohmann::json text = j;
  text["points"][0]["checkpoints"] = "3";
  EXPECT_NE(SweepErrorOf(text).find("'points[0].checkpoints'"), std::string::npos)
      << SweepErrorOf(text);
  nlohmann::json fraction = j;
  fraction["min_budget_bytes"] = 400.5;
  EXPECT_EQ(SweepErrorOf(fraction), "field 'min_budget_bytes' is not a whole number");
  nlohmann::json negative = j;
  negative["points"][0]["solve_seconds"] = -1;
  EXPECT_NE(SweepErrorOf(negative).find("'points[0].solve_seconds'"), std::string::npos);
  nlohmann::json no_points = j;
  no_points.erase("points");
  EXPECT_EQ(SweepErrorOf(no_points), "field 'points' is missing");
  // A bare array of points (read by an early GUI) is not a sweep.
  EXPECT_EQ(SweepErrorOf(j["points"]), "field 'sweep' is not an object");
}

// ---- Offload plans: the host bytes per step and the copies' times, for the dashboard ----
// ReluChain(3) (planner_offload_test.cc) with h1 and h2 offloaded after the loss's forward and
// prefetched before its backward; every node's forward 1 s, a 50 B/s link: each 100 B copy
// takes 2 s.
Plan TwoOffloads(const TrainingGraph& g) {
  return ReplayOffload(
      g, {},
      {{.tensor = g.FindTensor("h1"), .free_after = 4, .prefetch_at = 4},
       {.tensor = g.FindTensor("h2"), .free_after = 4, .prefetch_at = 4}},
      {.strategy = "offload"},
      {.link = {.device_to_host_bytes_per_second = 50, .host_to_device_bytes_per_second = 50},
       .node_seconds = std::vector<double>(g.nodes.size(), 1.0)});
}

TEST(PlannerJson, OffloadTimelineCarriesTheHostBytesOfEveryStep) {
  const TrainingGraph g = testing::ReluChain(3);
  const Plan p = TwoOffloads(g);
  const nlohmann::json j = PlanToJson(p, g);
  // During step i a storage is on the host from its offload's start step to its prefetch's
  // wait step (which frees it after its work), inclusive: 100 B each.
  const nlohmann::json& storages = j["offload"]["storages"];
  ASSERT_EQ(storages.size(), 2u);
  ASSERT_EQ(j["timeline"].size(), p.schedule.steps.size());
  int64_t max_host = 0;
  for (size_t i = 0; i < j["timeline"].size(); ++i) {
    int64_t expected = 0;
    for (const nlohmann::json& s : storages) {
      if (s["offload_step"].get<size_t>() <= i && i <= s["ready_step"].get<size_t>())
        expected += 100;
    }
    EXPECT_EQ(j["timeline"][i]["host_bytes"], expected) << i;
    max_host = std::max(max_host, j["timeline"][i]["host_bytes"].get<int64_t>());
  }
  EXPECT_EQ(max_host, 200);
  EXPECT_EQ(j["predicted_host_peak_bytes"], 200);
  // Read back: the report keeps them, and the replay of the file has the same host bytes.
  const PlanReport r = PlanReportFromJson(j);
  ASSERT_TRUE(r.timeline);
  EXPECT_EQ(*r.timeline, PlanReportOf(p, g).timeline.value());
  EXPECT_EQ(PlanToJson(PlanFromJson(j, g), g)["timeline"], j["timeline"]);
  EXPECT_EQ(PlanFromJson(j, g).timeline.host_bytes_during, p.timeline.host_bytes_during);
  // A plan without host buffers writes no host bytes.
  const nlohmann::json plain = PlanToJson(MakeOptimal(g), g);
  for (const nlohmann::json& point : plain["timeline"]) EXPECT_FALSE(point.contains("host_bytes"));
}

TEST(PlannerJson, StreamReplayListsEachCopyWithItsStepsAndTimes) {
  const TrainingGraph g = testing::ReluChain(3);
  const Plan p = TwoOffloads(g);
  const nlohmann::json storages = PlanToJson(p, g)["offload"]["storages"];
  const StreamTimeline t = SimulateStreams(
      p.schedule, ScheduleStepSeconds(std::vector<double>(g.nodes.size(), 1.0), p.schedule),
      p.link);
  EXPECT_DOUBLE_EQ(t.stall_seconds, p.predicted_stall_seconds);
  // h1's offload starts after Relu_2 (at 3 s) and takes 2 s; h2's (after Relu_3, at 4 s) queues
  // behind it: 5..7 s. Each storage is copied once each way; the steps are the JSON's.
  ASSERT_EQ(t.copies.size(), 4u);
  std::map<std::pair<std::string, bool>, StreamTimeline::Copy> by;
  for (const StreamTimeline::Copy& c : t.copies) {
    const BufferId host = c.to_host ? c.to : c.from;
    by[{g.tensors[p.schedule.buffers[host].tensor].name, c.to_host}] = c;
    EXPECT_DOUBLE_EQ(c.end - c.begin, 2.0);
  }
  auto copy = [&](const std::string& n, bool to_host) { return by[{n, to_host}]; };
  EXPECT_DOUBLE_EQ(copy("h1", true).begin, 3.0);
  EXPECT_DOUBLE_EQ(copy("h2", true).begin, 5.0);
  for (const nlohmann::json& s : storages) {
    const std::string name = s["tensor"];
    EXPECT_EQ(copy(name, true).start_step, s["offload_step"].get<size_t>());
    EXPECT_EQ(copy(name, true).wait_step, s["free_step"].get<int64_t>());
    EXPECT_EQ(copy(name, false).start_step, s["prefetch_step"].get<size_t>());
    EXPECT_EQ(copy(name, false).wait_step, s["ready_step"].get<int64_t>());
  }
  // One direction's copies never overlap.
  EXPECT_GE(copy("h2", false).begin, copy("h1", false).end);
}

}  // namespace
}  // namespace memplan
