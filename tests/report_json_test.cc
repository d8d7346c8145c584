// The analysis and plan files' one writer and one reader each (analysis_report.h,
// plan_report.h), the load options a plan gives, the machine-rates cache, the device names and
// a profile's node times.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "memplan/analysis_report.h"
#include "memplan/analyzer.h"
#include "memplan/device_name.h"
#include "memplan/plan.h"
#include "memplan/plan_report.h"
#include "memplan/planner.h"
#include "memplan/profile_costs.h"
#include "memplan/rates_cache.h"
#include "testing/graph_builder.h"

namespace memplan {
namespace {

using nlohmann::json;
using testing::GraphBuilder;

// x[N,32] -> Gemm -> Relu -> Gemm -> y[N,10] at batch 2.
TrainingGraph Mlp(GradientLifetime grads = GradientLifetime::kNone) {
  LoadOptions o;
  o.batch = 2;
  o.grads = grads;
  return testing::TwoLayerMlp().Load(o);
}

// Write, read, write again: the same text.
void ExpectAnalysisRoundTrip(const json& written) {
  const json again = AnalysisReportToJson(AnalysisReportFromJson(written));
  EXPECT_EQ(again.dump(1), written.dump(1));
}
void ExpectPlanRoundTrip(const json& written) {
  const json again = PlanReportToJson(PlanReportFromJson(written));
  EXPECT_EQ(again.dump(1), written.dump(1));
}

TEST(AnalysisReport, AnAnalysisWrittenAndReadIsWrittenTheSame) {
  const Analysis a = Analyze(Mlp());
  const json j = AnalysisToJson(a);
  ExpectAnalysisRoundTrip(j);
  const AnalysisReport r = AnalysisReportFromJson(j);
  // DESIGN.md's contract fields, as the model has them.
  EXPECT_EQ(r.batch, 2);
  EXPECT_EQ(r.num_nodes, static_cast<int64_t>(a.graph.nodes.size()));
  // 2762 trained float32 elements (w1 2048, b1 64, w2 640, b2 10) x 4 B.
  EXPECT_EQ(r.param_bytes, 2762 * 4);
  EXPECT_EQ(r.peak_bytes, a.timeline.peak_bytes);
  ASSERT_TRUE(r.timeline);
  ASSERT_EQ(r.timeline->size(), a.schedule.steps.size());
  EXPECT_EQ(r.timeline->front().phase, "setup");
  EXPECT_TRUE(r.timeline->front().node.empty());  // not written for a step without a node
  EXPECT_FALSE(j["timeline"][0].contains("node"));
}

TEST(AnalysisReport, ACudaPredictionIsWrittenAndReadBack) {
  AnalysisReport r = AnalysisReportOf(Analyze(Mlp()));
  DevicePrediction d;
  d.device = "cuda:1";
  d.device_name = "NVIDIA H200";
  d.device_source = "dev.json";
  d.allocator_mode = "expandable_segments";
  d.workspace_bytes = 64 << 20;
  d.context_bytes = 500 << 20;
  d.context_measured = true;
  d.reserved_peak_bytes = 100 << 20;
  d.workspace_margin_bytes = 0;
  d.card_peak_bytes = (100 << 20) + (500 << 20);
  r.device = d;
  r.allocated_peak_bytes = 90 << 20;
  const json j = AnalysisReportToJson(r);
  EXPECT_EQ(j["device"], "cuda:1");
  EXPECT_EQ(j["reserved_peak_bytes"], 100 << 20);
  ExpectAnalysisRoundTrip(j);
  EXPECT_EQ(AnalysisReportFromJson(j).device, d);
  // A CPU device names no prediction.
  json cpu = j;
  cpu["device"] = "cpu";
  EXPECT_FALSE(AnalysisReportFromJson(cpu).device);
}

TEST(AnalysisReport, AFileOfAnOlderVersionOpensWithWhatItHas) {
  const AnalysisReport r = AnalysisReportFromJson({{"kind", "analysis"}, {"peak_bytes", 100}});
  EXPECT_EQ(r.peak_bytes, 100);
  EXPECT_FALSE(r.timeline);
  EXPECT_FALSE(r.batch);
  ExpectAnalysisRoundTrip({{"kind", "analysis"}, {"peak_bytes", 100}});
}

TEST(AnalysisReport, AFieldOfTheWrongTypeIsNamed) {
  struct Case {
    json j;
    std::string expect;
  } cases[] = {
      {{{"kind", "plan"}}, "field 'kind' is \"plan\", not \"analysis\""},
      {{{"kind", "analysis"}, {"peak_bytes", "big"}}, "peak_bytes"},
      {{{"kind", "analysis"}, {"timeline", {{{"bytes", "many"}}}}}, "timeline[0].bytes"},
      {{{"kind", "analysis"}, {"timeline", {{{"event", "e"}, {"phase", "setup"}, {"bytes", 1}}}}},
       "field 'timeline[0].bytes_after' is missing"},
      {{{"kind", "analysis"}, {"bottlenecks", {{{"name", "t"}}}}},
       "field 'bottlenecks[0]' is not a string"},
      {{{"kind", "analysis"}, {"breakdown", {{"activation", -1}}}},
       "field 'breakdown.activation' is negative"},
  };
  for (const Case& c : cases) {
    try {
      AnalysisReportFromJson(c.j);
      ADD_FAILURE() << c.j.dump() << " was read";
    } catch (const MemplanError& e) {
      EXPECT_NE(std::string(e.what()).find(c.expect), std::string::npos) << e.what();
    }
  }
}

TEST(PlanReport, APlanWrittenAndReadIsWrittenTheSame) {
  const TrainingGraph g = Mlp();
  PlanOptions o;
  o.strategy = "sqrt";
  const Plan p = MakePlan(g, CostModel{}, o);
  const json j = PlanToJson(p, g);
  ExpectPlanRoundTrip(j);
  const PlanReport r = PlanReportFromJson(j);
  EXPECT_EQ(r.strategy, "sqrt");
  EXPECT_EQ(r.batch, 2);
  EXPECT_EQ(r.micro_batches, 1);
  ASSERT_TRUE(r.sections);
  int64_t nodes = 0;
  for (const auto& s : *r.sections) nodes += static_cast<int64_t>(s.size());
  EXPECT_EQ(nodes, static_cast<int64_t>(g.nodes.size()));  // every node in one section
}

TEST(PlanReport, TheBoundDimsOtherThanTheBatchAreWritten) {
  TrainingGraph g = Mlp();
  ASSERT_FALSE(g.batch_dim.empty());
  // The MLP has one symbolic dim, its batch: a plan of it names no dims.
  EXPECT_FALSE(PlanReportOf(MakePlan(g, CostModel{}, PlanOptions{}), g).dims);
  g.dims["seq"] = 128;  // as a sequence model bound with --dim seq=128
  const json j = PlanToJson(MakePlan(g, CostModel{}, PlanOptions{}), g);
  EXPECT_EQ(j.at("dims"), (json{{"seq", 128}}));
  ExpectPlanRoundTrip(j);
}

TEST(PlanReport, AutoDataParallelAndTheCommandLinesFieldsRoundTrip) {
  const TrainingGraph g = Mlp(GradientLifetime::kKept);  // data-parallel ranks keep them
  PlanOptions o;
  o.strategy = "auto";
  o.budget_bytes = Analyze(g).timeline.peak_bytes * 9 / 10;  // auto tries every strategy
  Plan p = MakePlan(g, CostModel{}, o);
  ParallelLayout l;
  l.devices = 2;
  l.bucket_bytes = 4096;
  ApplyDataParallel(p, g, l);
  PlanReport r = PlanReportOf(p, g);
  ASSERT_TRUE(r.candidates);
  EXPECT_FALSE(r.candidates->empty());
  ASSERT_TRUE(r.layout);
  // What `memplan plan` adds: the time model (no --costs: null), a sweep, the smallest budget.
  r.time_model =
      PlanTimeModel{MachineRatesToJson(DefaultMachineRates("cpu")), "default rates", std::nullopt};
  SweepResult s;
  s.baseline_peak_bytes = 2000;
  s.min_budget_bytes = 1000;
  s.min_budget_strategy = "sqrt";
  SweepPoint point;
  point.budget_bytes = 1500;
  point.strategy = "sqrt";
  point.peak_bytes = 1400;
  point.recompute_flops = 2e6;
  point.recompute_seconds = 0.25;
  point.overhead = 0.5;
  s.points = {point};
  r.sweep = s;
  r.smallest_budget_bytes = 1000;
  r.smallest_budget_strategy = "sqrt";
  r.smallest_budget_micro_batches = 1;
  const json j = PlanReportToJson(r);
  EXPECT_TRUE(j["time_model"]["costs"].is_null());
  EXPECT_EQ(j["layout"]["devices"], 2);
  ExpectPlanRoundTrip(j);
  // The layout is checked by the planner's reader.
  json bad = j;
  bad["layout"]["shard"] = "everything";
  EXPECT_THROW(PlanReportFromJson(bad), MemplanError);
}

TEST(PlanReport, ARunsPlanWithoutKindIsReadWhenAsked) {
  const json none = {
      {"strategy", "none"}, {"sections", json::array()}, {"checkpoints", json::array()}};
  EXPECT_THROW(PlanReportFromJson(none), MemplanError);
  const PlanReport r = PlanReportFromJson(none, /*require_kind=*/false);
  EXPECT_EQ(r.strategy, "none");
  ASSERT_TRUE(r.sections);
  EXPECT_TRUE(r.sections->empty());
}

TEST(PlanReport, ABrokenSweepIsNamed) {
  try {
    PlanReportFromJson({{"kind", "plan"}, {"sweep", {{"points", json::array()}}}});
    FAIL() << "read";
  } catch (const MemplanError& e) {
    EXPECT_NE(std::string(e.what()).find("the plan's sweep: "), std::string::npos) << e.what();
  }
}

TEST(LoadOptionsForPlan, ThePlansSettingsUnlessTheUserNamedThem) {
  // 2 devices x 2 micro-batches of 3: the graph is loaded at 3.
  const json plan = {{"kind", "plan"},
                     {"batch", 12},
                     {"micro_batches", 2},
                     {"micro_batch", 3},
                     {"optimizer", "adam"},
                     {"grads", "kept"},
                     {"loss", "mse"},
                     {"dims", {{"seq", 128}, {"height", 64}}},
                     {"layout", {{"devices", 2}, {"shard", "none"}, {"bucket_bytes", 1024}}}};
  LoadOptions user;
  user.batch = 24;
  user.optimizer = Optimizer::kMomentum;
  user.dims = {{"seq", 256}};  // the user's binding of a name wins, the plan's others are added
  const LoadOptions o = LoadOptionsForPlan(plan, user);
  EXPECT_EQ(o.batch, 3);
  EXPECT_EQ(o.optimizer, Optimizer::kAdam);
  EXPECT_EQ(o.grads, GradientLifetime::kKept);
  EXPECT_EQ(o.loss, LossKind::kMse);
  EXPECT_EQ(o.dims, (std::map<std::string, int64_t>{{"height", 64}, {"seq", 256}}));
  // The user's batch (24 = 2 devices x 2 micro-batches x 6) and optimizer win.
  const LoadOptions mine =
      LoadOptionsForPlan(plan, user, {/*batch=*/true, /*optimizer=*/true, false, false});
  EXPECT_EQ(mine.batch, 6);
  EXPECT_EQ(mine.optimizer, Optimizer::kMomentum);
  // 2 x 2 does not divide 10.
  user.batch = 10;
  EXPECT_THROW(LoadOptionsForPlan(plan, user, {/*batch=*/true, false, false, false}), MemplanError);
  // A model whose output is the loss keeps the user's loss.
  json own = plan;
  own["loss"] = "model_output";
  EXPECT_EQ(LoadOptionsForPlan(own, LoadOptions{}).loss, LoadOptions{}.loss);
}

TEST(RatesCache, AnEntryIsReadBackAndAnOlderFormatIsMeasuredAgain) {
  MachineRates r = DefaultMachineRates("cpu");
  r.classes[0].flops_per_second = 1e9;  // an entry of the current format has classes
  r.fresh_bytes_per_second = 2e9;
  r.fresh_threshold_bytes = 32 << 20;
  const json cache = CacheWithRates(json::object(), "host/cpu", r);
  EXPECT_EQ(cache["kind"], "machine_rates");
  EXPECT_EQ(cache["format"], kRatesCacheFormat);
  ASSERT_TRUE(RatesFromCache(cache, "host/cpu"));
  EXPECT_EQ(MachineRatesToJson(*RatesFromCache(cache, "host/cpu")), MachineRatesToJson(r));
  EXPECT_FALSE(RatesFromCache(cache, "host/cuda:0"));
  json old = cache;
  old["format"] = 1;
  EXPECT_FALSE(RatesFromCache(old, "host/cpu"));
  // A cache of format 1 starts anew: its entries are not kept.
  old["rates"]["other"] = MachineRatesToJson(r);
  EXPECT_FALSE(CacheWithRates(old, "host/cpu", r)["rates"].contains("other"));
}

TEST(RatesCache, RatesAreMeasuredOnceThenReadFromTheFile) {
  const std::string dir = ::testing::TempDir() + "/memplan_rates_cache";
  std::filesystem::remove_all(dir);
  const std::string path = dir + "/machine_rates.json";
  int measured = 0;
  auto measure = [&] {
    ++measured;
    MachineRates r = DefaultMachineRates("cpu");
    r.classes[0].flops_per_second = 1e9;
    r.fresh_bytes_per_second = 2e9;
    return r;
  };
  std::string source;
  CachedMachineRates(path, "k", measure, &source);
  EXPECT_EQ(source, "measured now, cached in " + path);
  CachedMachineRates(path, "k", measure, &source);
  EXPECT_EQ(source, "measured, cached in " + path);
  EXPECT_EQ(measured, 1);
  // A damaged file is measured again and rewritten.
  std::ofstream(path) << "{not json";
  CachedMachineRates(path, "k", measure, &source);
  EXPECT_EQ(measured, 2);
  CachedMachineRates(path, "k", measure, &source);
  EXPECT_EQ(measured, 2);
  // No path: no cache.
  CachedMachineRates("", "k", measure, &source);
  EXPECT_EQ(source, "measured now");
  std::filesystem::remove_all(dir);
}

TEST(DeviceName, CpuCudaAndCudaK) {
  EXPECT_FALSE(ParseDeviceName("cpu").cuda);
  EXPECT_TRUE(ParseDeviceName("cuda").cuda);
  EXPECT_EQ(ParseDeviceName("cuda").index, -1);
  EXPECT_EQ(ParseDeviceName("cuda:3").index, 3);
  for (const char* bad :
       {"gpu", "cuda:", "cuda:-1", "cuda:+1", "cuda:1x", "CPU", "cuda:99999999999"}) {
    try {
      ParseDeviceName(bad);
      ADD_FAILURE() << bad << " was read";
    } catch (const MemplanError& e) {
      EXPECT_EQ(std::string(e.what()),
                std::string("--device must be cpu, cuda or cuda:K (got '") + bad + "')");
    }
  }
}

TEST(ProfileCosts, TheRecomputeScopesOfANodeWinOverItsForward) {
  Profile p;
  p.batch = 8;
  p.micro_batches = 2;  // calls ran at 4
  auto node = [](NodeId id, const char* name, Phase phase, int64_t calls, double seconds) {
    NodeProfile n;
    n.node = id;
    n.name = name;
    n.op = "Relu";
    n.phase = phase;
    n.calls = calls;
    n.seconds = seconds;
    return n;
  };
  p.nodes = {node(0, "a", Phase::kForward, 2, 0.5), node(1, "b", Phase::kForward, 2, 1.0),
             node(1, "b", Phase::kRecompute, 4, 1.0), node(1, "b", Phase::kBackward, 2, 9.0)};
  const MeasuredTimes m = MeasuredTimesOf(p, "p.json");
  EXPECT_EQ(m.source, "p.json");
  EXPECT_EQ(m.batch, 4);
  ASSERT_EQ(m.nodes.size(), 2u);
  EXPECT_EQ(m.nodes[0].name, "a");
  EXPECT_DOUBLE_EQ(m.nodes[0].seconds, 0.25);  // 0.5 s / 2 forward calls
  EXPECT_EQ(m.nodes[1].name, "b");
  EXPECT_DOUBLE_EQ(m.nodes[1].seconds, 0.25);  // 1.0 s / 4 recompute calls
  p.nodes[0].name = "";
  EXPECT_THROW(MeasuredTimesOf(p, "p.json"), MemplanError);
}

}  // namespace
}  // namespace memplan
