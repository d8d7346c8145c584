// The dashboard's Qt-free document layer: schedule replays, JSON loading, bad files.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <tuple>

#include "document.h"
#include "gui_test_profile.h"
#include "gui_test_selective.h"
#include "memplan/planner.h"
#include "testing/corpus.h"

namespace memplan::gui {
namespace {

std::string TempPath(const std::string& name) { return ::testing::TempDir() + "gui_doc_" + name; }

std::string WriteFile(const std::string& name, const std::string& text) {
  std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

int64_t Sum(const CategoryBytes& c) { return std::accumulate(c.begin(), c.end(), int64_t{0}); }

// A toy schedule: parameter p (100 B), activations a (40 B) and b (60 B), gradient g (20 B).
//   step 0 setup:    alloc p
//   step 1 forward:  alloc a
//   step 2 forward:  alloc b, then free a
//   step 3 backward: alloc g, then free b, g
Schedule ToySchedule() {
  Schedule s;
  BufferId p = s.AddBuffer({"p", 100, MemoryCategory::kParameter, kNone});
  BufferId a = s.AddBuffer({"a", 40, MemoryCategory::kActivation, kNone});
  BufferId b = s.AddBuffer({"b", 60, MemoryCategory::kActivation, kNone});
  BufferId g = s.AddBuffer({"g", 20, MemoryCategory::kActivationGradient, kNone});
  s.steps.push_back({Phase::kSetup, kNone, {p}, {}});
  s.steps.push_back({Phase::kForward, kNone, {a}, {}});
  s.steps.push_back({Phase::kForward, kNone, {b}, {a}});
  s.steps.push_back({Phase::kBackward, kNone, {g}, {b, g}});
  return s;
}

TEST(GuiDocument, ReplayByCategoryOnToySchedule) {
  std::vector<CategoryBytes> r = ReplayByCategory(ToySchedule());
  ASSERT_EQ(r.size(), 4u);
  const int param = static_cast<int>(MemoryCategory::kParameter),
            act = static_cast<int>(MemoryCategory::kActivation),
            grad = static_cast<int>(MemoryCategory::kActivationGradient);
  EXPECT_EQ(r[0][param], 100);
  EXPECT_EQ(r[1][act], 40);
  EXPECT_EQ(r[2][act], 100);  // a and b together during step 2: 40 + 60
  EXPECT_EQ(r[3][act], 60);   // a freed after step 2; b alive during step 3
  EXPECT_EQ(r[3][grad], 20);
  EXPECT_EQ(Sum(r[2]), 200);  // 100 parameter + 100 activations: the peak
}

TEST(GuiDocument, ReplayByCategoryUsesTheSimulatorsAccounting) {
  // The CUDA caching allocator's 512-byte blocks: every buffer of the toy schedule takes one.
  std::vector<CategoryBytes> r = ReplayByCategory(ToySchedule(), AllocatorPolicy::kCudaCaching);
  const int param = static_cast<int>(MemoryCategory::kParameter),
            act = static_cast<int>(MemoryCategory::kActivation);
  EXPECT_EQ(r[2][param], 512);
  EXPECT_EQ(r[2][act], 1024);  // a and b: 2 blocks
  EXPECT_EQ(Sum(r[2]),
            Simulate(ToySchedule(), {AllocatorPolicy::kCudaCaching}).peak_bytes);  // 3 x 512
}

TEST(GuiDocument, AliveAtListsLargestFirst) {
  std::vector<AliveBuffer> alive = AliveAt(ToySchedule(), 2);
  ASSERT_EQ(alive.size(), 3u);  // p, a, b
  EXPECT_EQ(alive[0].name, "p");
  EXPECT_EQ(alive[1].name, "b");
  EXPECT_EQ(alive[2].name, "a");
}

TEST(GuiDocument, LifetimesOfToySchedule) {
  std::vector<LifetimeSpan> spans = Lifetimes(ToySchedule(), {}, {}, {});
  ASSERT_EQ(spans.size(), 3u);  // p is persistent and left out
  EXPECT_EQ(spans[0].name, "a");
  EXPECT_EQ(spans[0].begin, 1);
  EXPECT_EQ(spans[0].end, 2);
  EXPECT_EQ(spans[1].name, "b");
  EXPECT_EQ(spans[1].end, 3);
  EXPECT_EQ(spans[2].name, "g");
  LifetimeOptions persistent;
  persistent.include_persistent = true;
  persistent.max_buffers = 1;  // only the largest: p
  spans = Lifetimes(ToySchedule(), {}, {}, persistent);
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].name, "p");
  EXPECT_EQ(spans[0].end, 3);
  LifetimeOptions range;
  range.first_step = 3;
  spans = Lifetimes(ToySchedule(), {}, {}, range);
  ASSERT_EQ(spans.size(), 2u);  // b and g reach step 3; a does not
}

// The selective fixture's storages (gui_test_selective.h has the schedule worked out by hand).
TEST(GuiDocument, SelectiveStoragesAreKeptOrRecomputedWithTheirSpans) {
  const TrainingGraph g = fixtures::SelectiveGraph();
  const Plan p = fixtures::SelectivePlan(g);
  ASSERT_EQ(p.schedule.steps.size(), 18u);  // setup, 6 forward, 7 backward, 4 recompute, optimizer
  const std::vector<StorageDecision> storages = SelectiveStorages(g, p.schedule, p.recomputed);
  // Saved activations a, b, d and the dropped h0 (saved by nobody), in TensorId order; c is
  // neither saved nor dropped.
  ASSERT_EQ(storages.size(), 4u);
  auto find = [&](const std::string& name) -> const StorageDecision& {
    for (const StorageDecision& d : storages)
      if (d.name == name) return d;
    ADD_FAILURE() << "no storage " << name;
    return storages.front();
  };
  using Spans = std::vector<std::pair<int32_t, int32_t>>;
  const StorageDecision& h0 = find("h0");
  EXPECT_TRUE(h0.recomputed);
  EXPECT_FALSE(h0.saved);
  EXPECT_EQ(h0.bytes, 100);
  EXPECT_EQ(h0.forward_begin, 1);
  EXPECT_EQ(h0.forward_end, 3);
  EXPECT_EQ(h0.recompute_spans, (Spans{{10, 11}, {13, 14}}));
  EXPECT_EQ(h0.recompute_count(), 2);
  const StorageDecision& a = find("a");
  EXPECT_TRUE(a.recomputed && a.saved);
  EXPECT_EQ(a.forward_begin, 2);
  EXPECT_EQ(a.forward_end, 4);
  EXPECT_EQ(a.recompute_spans, (Spans{{14, 15}}));
  const StorageDecision& b = find("b");
  EXPECT_TRUE(b.recomputed && b.saved);
  EXPECT_EQ(b.forward_begin, 3);
  EXPECT_EQ(b.forward_end, 4);
  EXPECT_EQ(b.recompute_spans, (Spans{{11, 12}}));
  const StorageDecision& d = find("d");
  EXPECT_FALSE(d.recomputed);
  EXPECT_TRUE(d.saved);
  EXPECT_EQ(d.forward_begin, 5);
  EXPECT_EQ(d.forward_end, 8);
  EXPECT_TRUE(d.recompute_spans.empty());
  const SelectiveCounts c = CountSelective(storages);
  EXPECT_EQ(c.saved, 3);  // a, b, d
  EXPECT_EQ(c.saved_bytes, 300);
  EXPECT_EQ(c.kept, 1);  // d
  EXPECT_EQ(c.kept_bytes, 100);
  EXPECT_EQ(c.recomputed_saved, 2);  // a, b
  EXPECT_EQ(c.recomputed_saved_bytes, 200);
  EXPECT_EQ(c.recomputed_unsaved, 1);  // h0
  EXPECT_EQ(c.recomputed_unsaved_bytes, 100);
  EXPECT_EQ(c.recomputed(), 3);
  EXPECT_EQ(c.recomputes, 4);  // h0 twice, a and b once
}

TEST(GuiDocument, LifetimesDrawADroppedStorageInOneRow) {
  const TrainingGraph g = fixtures::SelectiveGraph();
  const Plan p = fixtures::SelectivePlan(g);
  LifetimeMarks marks;
  marks.recomputed = p.recomputed;
  marks.kept = {g.FindTensor("d")};
  std::vector<LifetimeSpan> spans = Lifetimes(p.schedule, marks);
  // One row per dropped storage, its forward span first: h0 1-3, 10-11, 13-14; a 2-4, 14-15;
  // b 3-4, 11-12. The kept d: 5-8, as before.
  std::map<std::string, std::vector<std::tuple<int32_t, int32_t, bool>>> rows;  // row name -> spans
  std::map<std::string, int> recomputes;
  for (const LifetimeSpan& s : spans) {
    const std::string row = p.schedule.buffers[s.row].name;
    if (s.dropped) {
      rows[row].emplace_back(s.begin, s.end, s.recomputed);
      recomputes[row] = s.recompute_count;
      EXPECT_FALSE(s.kept) << s.name;
      EXPECT_EQ(s.name, s.recomputed ? row + " (recomputed)" : row);
    }
    if (s.name == "d") {
      EXPECT_TRUE(s.kept);
      EXPECT_FALSE(s.dropped);
      EXPECT_EQ(s.begin, 5);
      EXPECT_EQ(s.end, 8);
    }
  }
  using R = std::vector<std::tuple<int32_t, int32_t, bool>>;
  EXPECT_EQ(rows["h0"], (R{{1, 3, false}, {10, 11, true}, {13, 14, true}}));
  EXPECT_EQ(rows["a"], (R{{2, 4, false}, {14, 15, true}}));
  EXPECT_EQ(rows["b"], (R{{3, 4, false}, {11, 12, true}}));
  EXPECT_EQ(rows.size(), 3u);
  EXPECT_EQ(recomputes["h0"], 2);
  EXPECT_EQ(recomputes["a"], 1);
  // A row is chosen whole: the largest 2 rows (all 100 B: the first by buffer id) keep every
  // span of theirs.
  LifetimeOptions two;
  two.max_buffers = 2;
  spans = Lifetimes(p.schedule, marks, two);
  std::set<BufferId> chosen;
  for (const LifetimeSpan& s : spans) chosen.insert(s.row);
  EXPECT_EQ(chosen.size(), 2u);
  EXPECT_EQ(spans.size(), 5u);  // h0's 3 spans and a's 2
  // A range that sees only the backward still shows the row, from its recomputed spans.
  LifetimeOptions late;
  late.first_step = 13;
  late.last_step = 14;
  spans = Lifetimes(p.schedule, marks, late);
  bool h0_forward = false;
  for (const LifetimeSpan& s : spans) h0_forward |= s.name == "h0" && !s.recomputed;
  EXPECT_TRUE(h0_forward);
  // Without the marks (a segmented plan's view), the recomputed buffers are rows of their own.
  spans = Lifetimes(p.schedule, {}, {}, {});
  for (const LifetimeSpan& s : spans) {
    EXPECT_FALSE(s.dropped);
    EXPECT_EQ(s.row, s.buffer);
  }
}

// A sweep as `memplan plan --sweep` writes it (SweepToJson), with one selective point.
nlohmann::json SelectiveSweepJson() {
  SweepResult s;
  s.baseline_peak_bytes = 1200;
  s.min_budget_bytes = 900;
  s.min_budget_strategy = "selective";
  SweepPoint p;
  p.budget_bytes = 1000;
  p.strategy = "selective";
  p.peak_bytes = 900;
  p.recompute_flops = 2e6;
  p.recompute_seconds = 0.25;
  p.overhead = 0.5;
  s.points = {p};
  return SweepToJson(s);
}

TEST(GuiDocument, SelectivePlanJsonNamesItsRecomputedTensors) {
  nlohmann::json j = {{"kind", "plan"},
                      {"strategy", "selective"},
                      {"predicted_peak_bytes", 900},
                      {"predicted_recompute_seconds", 0.25},
                      {"recomputed", {"h0", "a", "b"}},
                      {"sweep", SelectiveSweepJson()}};
  Item item = ItemFromJson(j, "selective.json");
  EXPECT_EQ(item.recomputed, (std::vector<std::string>{"h0", "a", "b"}));
  EXPECT_DOUBLE_EQ(item.predicted_recompute_seconds, 0.25);
  ASSERT_EQ(item.sweep.size(), 1u);
  EXPECT_EQ(item.sweep[0].strategy, "selective");
  EXPECT_EQ(item.sweep[0].budget_bytes, 1000);
  EXPECT_EQ(item.sweep[0].peak_bytes, 900);
  EXPECT_DOUBLE_EQ(item.sweep[0].recompute_flops, 2e6);
  EXPECT_DOUBLE_EQ(item.sweep[0].overhead, 0.5);
  EXPECT_DOUBLE_EQ(item.sweep[0].recompute_seconds, 0.25);
  EXPECT_EQ(item.sweep[0].series, "");  // a file's sweep
  // The strategy comparison has no file form (the explorer fills it when it plans).
  EXPECT_TRUE(item.strategies.empty());
  // A plan written before the field: nothing recomputed, the seconds unknown.
  Item old = ItemFromJson({{"kind", "plan"}, {"strategy", "sqrt"}}, "old.json");
  EXPECT_TRUE(old.recomputed.empty());
  EXPECT_LT(old.predicted_recompute_seconds, 0);
}

TEST(GuiDocument, PlanWithABrokenSweepNamesTheFileAndField) {
  nlohmann::json sweep = SelectiveSweepJson();
  sweep["points"][0].erase("peak_bytes");
  try {
    ItemFromJson({{"kind", "plan"}, {"strategy", "selective"}, {"sweep", sweep}}, "edited.json");
    FAIL() << "expected an error";
  } catch (const MemplanError& e) {
    EXPECT_STREQ(e.what(),
                 "edited.json: the plan's sweep: field 'points[0].peak_bytes' is missing");
  }
  // A bare array of points (a form no writer produces) is refused, not read.
  EXPECT_THROW(ItemFromJson({{"kind", "plan"}, {"strategy", "sqrt"}, {"sweep", sweep["points"]}},
                            "bare.json"),
               MemplanError);
}

TEST(GuiDocument, DataParallelPlanJsonGivesItsLayout) {
  nlohmann::json j = {{"kind", "plan"},
                      {"strategy", "none"},
                      {"predicted_peak_bytes", 4000},
                      {"layout",
                       {{"devices", 4},
                        {"shard", "optimizer"},
                        {"bucket_bytes", 1024},
                        {"buckets", {{"w1", "b1"}, {"w2"}}},
                        {"comm_seconds", 0.125}}}};
  Item item = ItemFromJson(j, "dp.json");
  EXPECT_EQ(item.devices, 4);
  EXPECT_EQ(item.shard, "optimizer");
  EXPECT_EQ(item.bucket_count, 2);
  EXPECT_DOUBLE_EQ(item.predicted_comm_seconds, 0.125);
  // One device: no layout in the file, nothing per rank.
  Item one = ItemFromJson({{"kind", "plan"}, {"strategy", "none"}}, "one.json");
  EXPECT_EQ(one.devices, -1);
  // A layout the planner's reader refuses is refused here too, naming the field.
  j["layout"]["shard"] = "everything";
  EXPECT_THROW(ItemFromJson(j, "bad.json"), MemplanError);
}

TEST(GuiDocument, APlansDimsAreItsSettings) {
  // A plan of a sequence model bound with --dim seq=128: the window loads the model with it.
  Item item =
      ItemFromJson({{"kind", "plan"}, {"strategy", "none"}, {"dims", {{"seq", 128}}}}, "seq.json");
  EXPECT_EQ(item.dims, (std::map<std::string, int64_t>{{"seq", 128}}));
  EXPECT_THROW(ItemFromJson({{"kind", "plan"}, {"dims", {{"seq", -1}}}}, "bad.json"), MemplanError);
}

TEST(GuiDocument, ModelReplayMatchesSimulatorEveryStep) {
  Item item = LoadItem(testing::CorpusModel("resnet18"), {/*batch=*/4});
  ASSERT_TRUE(item.analysis && item.timeline && item.schedule);
  const MemoryTimeline& t = item.analysis->timeline;
  ASSERT_EQ(item.timeline->size(), t.bytes_during.size());
  for (size_t i = 0; i < t.bytes_during.size(); ++i) {
    ASSERT_EQ(Sum(item.timeline->by_category[i]), t.bytes_during[i]) << "step " << i;
  }
  EXPECT_EQ(item.timeline->peak_bytes, t.peak_bytes);
  EXPECT_EQ(item.baseline_peak_bytes, t.peak_bytes);
  EXPECT_EQ(item.timeline->by_category[t.peak_step], t.breakdown_at_peak);
  std::vector<AliveBuffer> alive = AliveAt(*item.schedule, t.peak_step);
  int64_t sum = 0;
  for (size_t i = 0; i < alive.size(); ++i) {
    sum += alive[i].bytes;
    if (i) EXPECT_GE(alive[i - 1].bytes, alive[i].bytes);
  }
  EXPECT_EQ(sum, t.peak_bytes);
  EXPECT_EQ(alive.size(), t.alive_at_peak.size());
}

TEST(GuiDocument, AnalysisJsonRoundTrip) {
  Item model = LoadItem(testing::CorpusModel("resnet18"), {/*batch=*/2});
  std::string path = WriteFile("r18.json", AnalysisToJson(*model.analysis).dump());
  Item json = LoadItem(path);
  EXPECT_EQ(json.kind, SourceKind::kAnalysis);
  EXPECT_EQ(json.baseline_peak_bytes, model.baseline_peak_bytes);
  EXPECT_EQ(json.batch, 2);
  EXPECT_EQ(json.param_bytes, model.param_bytes);
  EXPECT_TRUE(json.has_breakdown);
  EXPECT_EQ(json.breakdown, model.breakdown);
  ASSERT_TRUE(json.timeline);
  EXPECT_FALSE(json.timeline->has_categories());
  EXPECT_EQ(json.timeline->bytes, model.timeline->bytes);
  EXPECT_EQ(json.timeline->events, model.timeline->events);
  EXPECT_EQ(json.timeline->peak_bytes, model.baseline_peak_bytes);
  EXPECT_EQ(json.bottlenecks, model.bottlenecks);
}

// Analysis and plan files are read by their writers' readers (AnalysisReportFromJson,
// PlanReportFromJson): one name per field, no second guess.
TEST(GuiDocument, ResultFilesAreReadByTheirOneSchema) {
  // A timeline step has its bytes during the step; "bytes_after" alone is not read in its place.
  nlohmann::json analysis = {
      {"kind", "analysis"},
      {"timeline", {{{"event", "setup"}, {"phase", "setup"}, {"bytes_after", 100}}}}};
  try {
    ItemFromJson(analysis, "after.json");
    FAIL() << "read";
  } catch (const MemplanError& e) {
    EXPECT_STREQ(e.what(), "after.json: field 'timeline[0].bytes' is missing");
  }
  // A plan's sections are "sections"; "segments" is no field of a plan file.
  Item plan = ItemFromJson({{"kind", "plan"}, {"strategy", "sqrt"}, {"segments", {{"n1"}, {"n2"}}}},
                           "segments.json");
  EXPECT_EQ(plan.num_sections, -1);
  Item sections = ItemFromJson(
      {{"kind", "plan"}, {"strategy", "sqrt"}, {"sections", {{"n1"}, {"n2"}}}}, "sections.json");
  EXPECT_EQ(sections.num_sections, 2);
}

TEST(GuiDocument, PlanAndRunJsonPerContract) {
  nlohmann::json plan = {
      {"kind", "plan"},
      {"memplan_version", "0.1.0"},
      {"model", "m.onnx"},
      {"batch", 8},
      {"strategy", "sqrt"},
      {"budget_bytes", 1000},
      {"predicted_peak_bytes", 900},
      {"baseline_peak_bytes", 1500},
      {"recompute_flops", 50.0},
      {"forward_flops", 200.0},
      {"overhead", 0.25},
      {"checkpoints", {"t1", "t2"}},
      {"sections", {{"n1", "n2"}, {"n3"}}},
      {"feasible", true},
      {"solve_seconds", 0.01},
      {"timeline",
       {{{"event", "setup"}, {"phase", "setup"}, {"bytes", 100}, {"bytes_after", 100}},
        {{"event", "forward n1"},
         {"phase", "forward"},
         {"bytes", 900},
         {"bytes_after", 800},
         {"node", "n1"}},
        {{"event", "recompute n1"},
         {"phase", "recompute"},
         {"bytes", 500},
         {"bytes_after", 400}}}}};
  Item p = ItemFromJson(plan, "plan.json");
  EXPECT_EQ(p.kind, SourceKind::kPlan);
  EXPECT_EQ(p.strategy, "sqrt");
  EXPECT_EQ(p.plan_peak_bytes, 900);
  EXPECT_EQ(p.baseline_peak_bytes, 1500);
  EXPECT_DOUBLE_EQ(p.overhead, 0.25);  // the planner's 50 / 200, read, not derived
  EXPECT_EQ(p.feasible, 1);
  EXPECT_EQ(p.checkpoints.size(), 2u);
  EXPECT_EQ(p.num_sections, 2);
  ASSERT_TRUE(p.timeline);
  EXPECT_EQ(p.timeline->peak_bytes, 900);
  EXPECT_EQ(p.timeline->peak_step, 1);
  EXPECT_EQ(p.timeline->phases[2], Phase::kRecompute);

  // The fields DESIGN.md's contract requires of a run (memplan/run_report.h reads them).
  nlohmann::json run = {
      {"kind", "run"},
      {"memplan_version", "0.1.0"},
      {"device", "cpu"},
      {"steps", 3},
      {"measured_peak_bytes", 950},
      {"predicted_peak_bytes", 900},
      {"step_seconds", {2.0, 1.6, 1.5}},
      {"recompute_seconds", {0.3, 0.2, 0.2}},
      {"loss", {2.3, 2.2, 2.1}},
      {"plan", plan},
      {"measured_trace",
       {{{"phase", "setup"}, {"node", ""}, {"op", ""}, {"bytes_after", 100}, {"peak_during", 120}},
        {{"phase", "forward"},
         {"node", "n1"},
         {"op", ""},
         {"bytes_after", 800},
         {"peak_during", 950}}}}};
  Item r = ItemFromJson(run, "run.json");
  EXPECT_EQ(r.kind, SourceKind::kRun);
  EXPECT_EQ(r.measured_peak_bytes, 950);
  EXPECT_EQ(r.losses.size(), 3u);
  EXPECT_EQ(r.strategy, "sqrt");
  ASSERT_TRUE(r.measured);
  EXPECT_EQ(r.measured->peak_bytes, 950);
  ASSERT_TRUE(r.timeline);  // the plan's predicted timeline
  EXPECT_EQ(r.timeline->peak_bytes, 900);

  // The last step is the steady state; the run's own predicted timeline with the plain step.
  run["step_seconds"] = {3.0, 1.5};
  run["recompute_seconds"] = {0.5, 0.25};
  run["loss"] = {2.3, 2.2};
  run["predicted_timeline"] = plan["timeline"];
  run["plan"] = {{"strategy", "none"},
                 {"sections", nlohmann::json::array()},
                 {"checkpoints", nlohmann::json::array()}};
  r = ItemFromJson(run, "run.json");
  EXPECT_DOUBLE_EQ(r.step_seconds, 1.5);
  EXPECT_DOUBLE_EQ(r.recompute_seconds, 0.25);
  ASSERT_TRUE(r.timeline && r.measured);
  EXPECT_EQ(r.timeline->peak_bytes, 900);
  EXPECT_EQ(r.measured->peak_bytes, 950);
  EXPECT_EQ(r.plan_peak_bytes, 900);  // from predicted_peak_bytes
  EXPECT_TRUE(r.ranks.empty());       // one device

  // A data-parallel run: every rank's figures, the last step's seconds.
  run["devices"] = 2;
  run["shard"] = "optimizer";
  run["ranks"] = {{{"rank", 0},
                   {"measured_peak_bytes", 700},
                   {"predicted_peak_bytes", 690},
                   {"step_seconds", {2.0, 1.0}},
                   {"comm_seconds", {0.5, 0.25}}},
                  {{"rank", 1},
                   {"measured_peak_bytes", 710},
                   {"predicted_peak_bytes", 690},
                   {"step_seconds", {2.0, 1.25}},
                   {"comm_seconds", {0.5, 0.125}}}};
  r = ItemFromJson(run, "run.json");
  ASSERT_EQ(r.ranks.size(), 2u);
  EXPECT_EQ(r.ranks[1].rank, 1);
  EXPECT_EQ(r.ranks[1].measured_peak_bytes, 710);
  EXPECT_EQ(r.ranks[1].predicted_peak_bytes, 690);
  EXPECT_DOUBLE_EQ(r.ranks[1].step_seconds, 1.25);
  EXPECT_DOUBLE_EQ(r.ranks[1].comm_seconds, 0.125);
}

TEST(GuiDocument, BadFilesThrowNamingTheFile) {
  struct Case {
    std::string name, text, expect;
  } cases[] = {
      {"empty.onnx", "", "empty"},
      {"garbage.onnx", "this is not a model", "garbage.onnx"},
      {"bad.json", "{\"kind\": \"analysis\", ", "not valid JSON"},
      {"nokind.json", "{\"peak_bytes\": 1}", "kind"},
      {"otherkind.json", "{\"kind\": \"weather\"}", "unknown kind"},
      {"array.json", "[1, 2]", "JSON object"},
      {"badtimeline.json", "{\"kind\": \"analysis\", \"timeline\": [{\"bytes\": \"many\"}]}",
       "bytes"},
      {"badpeak.json", "{\"kind\": \"analysis\", \"peak_bytes\": \"big\"}", "peak_bytes"},
      {"badrun.json", "{\"kind\": \"run\"}", "memplan_version"},
      {"badprofile.json", "{\"kind\": \"profile\"}", "field 'model' is missing"},
  };
  for (const Case& c : cases) {
    std::string path = WriteFile(c.name, c.text);
    try {
      LoadItem(path);
      ADD_FAILURE() << c.name << " loaded";
    } catch (const MemplanError& e) {
      std::string what = e.what();
      EXPECT_NE(what.find(path), std::string::npos) << what;
      EXPECT_NE(what.find(c.expect), std::string::npos) << c.name << ": " << what;
    }
  }
  EXPECT_THROW(LoadItem(TempPath("does-not-exist.onnx")), MemplanError);
}

TEST(GuiDocument, ProfileOpensThroughTheProfilersReader) {
  const Analysis a = Analyze(fixtures::ToyGraph());
  const Profile written = fixtures::ProfileOfSchedule(a);
  const std::string path = WriteFile("toy_profile.json", ProfileToJson(written).dump());
  Item item = LoadItem(path);
  EXPECT_EQ(item.kind, SourceKind::kProfile);
  EXPECT_EQ(item.title, "gui_doc_toy_profile.json");
  ASSERT_TRUE(item.profile);
  EXPECT_EQ(item.profile->nodes.size(), written.nodes.size());
  EXPECT_EQ(item.profile->slices.size(), written.slices.size());
  EXPECT_EQ(item.profile->memory_events.size(), written.memory_events.size());
  // Every scope's memory is the prediction, so the profile's peak is the analysis's.
  EXPECT_EQ(item.measured_peak_bytes, written.peak_bytes);
  EXPECT_EQ(item.measured_peak_bytes, a.timeline.peak_bytes);
  EXPECT_DOUBLE_EQ(item.step_seconds, written.step_seconds);
  EXPECT_EQ(item.recompute_seconds, 0);  // a plain step
  EXPECT_EQ(item.batch, 2);
  EXPECT_EQ(item.device, "cpu");
  // A profile has no predicted timeline of its own: it overlays one.
  EXPECT_FALSE(item.timeline);
  EXPECT_FALSE(item.measured);
  Profile warned = written;
  warned.warnings = {"CUPTI is unavailable"};
  item = ItemFromJson(ProfileToJson(warned), "w.json");
  EXPECT_EQ(item.notes, warned.warnings);  // shown on the time page
}

TEST(GuiDocument, MalformedProfilesNameTheFileAndField) {
  const nlohmann::json good =
      ProfileToJson(fixtures::ProfileOfSchedule(Analyze(fixtures::ToyGraph())));
  struct Case {
    std::string name, field, expect;
    nlohmann::json value;
  } cases[] = {
      {"p_row.json", "memory_events", "memory_events[0]", {{1, 2}}},
      {"p_phase.json",
       "nodes",
       "nodes[0].phase",
       {{{"node", 0},
         {"name", "n"},
         {"op", "Relu"},
         {"phase", "sideways"},
         {"segment", 0},
         {"calls", 1},
         {"seconds", 0.1},
         {"device_seconds", 0},
         {"predicted_seconds", 0},
         {"allocated_bytes", 0},
         {"freed_bytes", 0}}}},
      {"p_seconds.json", "step_seconds", "step_seconds", -1.0},
      {"p_slices.json", "slices", "slices", "many"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = good;
    j[c.field] = c.value;
    const std::string path = WriteFile(c.name, j.dump());
    try {
      LoadItem(path);
      ADD_FAILURE() << c.name << " loaded";
    } catch (const MemplanError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(path), std::string::npos) << what;
      EXPECT_NE(what.find(c.expect), std::string::npos) << c.name << ": " << what;
    }
  }
  // Cut short: not valid JSON.
  const std::string text = good.dump();
  const std::string path = WriteFile("p_cut.json", text.substr(0, text.size() / 2));
  EXPECT_THROW(LoadItem(path), MemplanError);
}

// The index of the step of `node` in `phase` (the first one).
size_t StepOf(const Analysis& a, Phase phase, const std::string& node) {
  for (size_t i = 0; i < a.schedule.steps.size(); ++i) {
    const Step& s = a.schedule.steps[i];
    if (s.phase == phase && s.node != kNone && a.graph.nodes[s.node].name == node) return i;
  }
  ADD_FAILURE() << "no " << PhaseName(phase) << " step of " << node;
  return 0;
}

TEST(GuiDocument, MeasuredMemoryLiesOnThePredictedSteps) {
  Item model = ItemFromAnalysis(Analyze(fixtures::ToyGraph()), "toy.onnx");
  const Analysis& a = *model.analysis;
  const std::vector<int64_t>& predicted = model.timeline->bytes;
  // Memory exactly as predicted: the overlay is the prediction, step for step.
  const Profile exact = fixtures::ProfileOfSchedule(a);
  MeasuredOverlay m = MeasuredOnSteps(*model.timeline, exact, "measured");
  ASSERT_TRUE(m.timeline);
  EXPECT_EQ(m.steps, predicted.size());
  EXPECT_EQ(m.matched_steps, predicted.size());
  EXPECT_EQ(m.timeline->bytes, predicted);
  EXPECT_EQ(m.timeline->peak_bytes, exact.peak_bytes);
  EXPECT_EQ(m.timeline->label, "measured");
  // A 64 B workspace inside the Relu's forward: that step reads 64 B more, no other.
  const Profile workspace = fixtures::ProfileOfSchedule(a, /*workspace_bytes=*/64);
  m = MeasuredOnSteps(*model.timeline, workspace, "measured");
  const size_t relu = StepOf(a, Phase::kForward, "Relu_1");
  ASSERT_EQ(m.timeline->size(), predicted.size());
  for (size_t i = 0; i < predicted.size(); ++i) {
    EXPECT_EQ(m.timeline->bytes[i], predicted[i] + (i == relu ? 64 : 0))
        << "step " << i << ": " << model.timeline->events[i];
  }
  // The analysis JSON names the steps' nodes the same way: the same overlay.
  Item json = ItemFromJson(AnalysisToJson(a), "toy.json");
  MeasuredOverlay from_json = MeasuredOnSteps(*json.timeline, workspace, "measured");
  EXPECT_EQ(from_json.matched_steps, predicted.size());
  EXPECT_EQ(from_json.timeline->bytes, m.timeline->bytes);
}

TEST(GuiDocument, MeasuredOverlayOfAnotherModelMatchesLittle) {
  Item model = ItemFromAnalysis(Analyze(fixtures::ToyGraph()), "toy.onnx");
  Profile other = fixtures::ProfileOfSchedule(*model.analysis);
  for (NodeProfile& n : other.nodes) n.name = "other_" + n.name;
  MeasuredOverlay m = MeasuredOnSteps(*model.timeline, other, "measured");
  // Only the setup and optimizer steps, which name no node, find their scope.
  EXPECT_EQ(m.matched_steps, 2u);
  ASSERT_TRUE(m.timeline);
  const size_t relu = StepOf(*model.analysis, Phase::kForward, "Relu_1");
  EXPECT_EQ(m.timeline->bytes[relu], m.timeline->bytes[relu - 1]);  // the value before, repeated
  EXPECT_NE(m.timeline->events[relu].find("not in the profile"), std::string::npos)
      << m.timeline->events[relu];
  other.nodes.clear();
  other.slices.clear();
  EXPECT_FALSE(MeasuredOnSteps(*model.timeline, other, "measured").timeline);  // nothing matched
}

TEST(GuiDocument, MeasuredOverlayTakesTheKthStepOfAScopeAsMicroBatchK) {
  // A predicted timeline of two micro-batches of one node, and their measured slices:
  //   setup   [0, 1]: +100 B at 0.5             -> 100 B alive
  //   MatMul_0 micro-batch 0 [1, 2]: +50, -50    -> 150 B at most
  //   MatMul_0 micro-batch 1 [2, 3]: +80, -80    -> 180 B at most
  TimelineData t;
  const std::pair<Phase, std::string> steps[] = {
      {Phase::kSetup, ""}, {Phase::kForward, "MatMul_0"}, {Phase::kForward, "MatMul_0"}};
  for (const auto& [phase, node] : steps) {
    t.bytes.push_back(0);
    t.phases.push_back(phase);
    t.events.push_back(PhaseName(phase));
    t.nodes.push_back(node);
  }
  Profile p;
  p.micro_batches = 2;
  NodeProfile n;
  n.node = 0;
  n.name = "MatMul_0";
  p.nodes = {n};
  p.slices = {{0, 1, {Phase::kSetup, kNone, 0, 0}, 0},
              {1, 2, {Phase::kForward, 0, 0, 0}, 0},
              {2, 3, {Phase::kForward, 0, 0, 1}, 0}};
  p.memory_events = {{0.5, 100, 100, {Phase::kSetup, kNone, 0, 0}},
                     {1.5, 50, 150, {Phase::kForward, 0, 0, 0}},
                     {1.9, -50, 100, {Phase::kForward, 0, 0, 0}},
                     {2.5, 80, 180, {Phase::kForward, 0, 0, 1}},
                     {2.9, -80, 100, {Phase::kForward, 0, 0, 1}}};
  MeasuredOverlay m = MeasuredOnSteps(t, p, "measured");
  EXPECT_EQ(m.matched_steps, 3u);
  EXPECT_EQ(m.timeline->bytes, (std::vector<int64_t>{100, 150, 180}));
  EXPECT_EQ(m.timeline->peak_step, 2);
  // The CPU backend puts an event with no scope open in the default (setup) scope: outside every
  // setup slice, it is not the setup's.
  p.memory_events.insert(p.memory_events.begin() + 3,
                         {1.95, 200, 300, {Phase::kSetup, kNone, 0, 0}});
  p.memory_events.insert(p.memory_events.begin() + 4,
                         {1.96, -200, 100, {Phase::kSetup, kNone, 0, 0}});
  EXPECT_EQ(MeasuredOnSteps(t, p, "measured").timeline->bytes,
            (std::vector<int64_t>{100, 150, 180}));
  // CUPTI stamps events with device time: they count by their scope alone.
  p.backend = "cupti";
  EXPECT_EQ(MeasuredOnSteps(t, p, "measured").timeline->bytes,
            (std::vector<int64_t>{300, 150, 180}));
}

TEST(GuiDocument, AModelAbove2GiBIsRefusedBeforeItIsRead) {
  // Sparse, 3 GiB (3221225472 bytes): read, it would take seconds and 3 GiB of memory.
  const std::string path = TempPath("huge.onnx");
  std::remove(path.c_str());
  {
    std::ofstream f(path, std::ios::binary);
    f.seekp((int64_t{3} << 30) - 1);
    f.put('\0');
  }
  try {
    LoadItem(path);
    ADD_FAILURE() << "a 3 GiB model loaded";
  } catch (const MemplanError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find(path + " is 3.00 GiB (3221225472 bytes)"), std::string::npos) << what;
    EXPECT_NE(what.find("save_as_external_data=True"), std::string::npos) << what;
  }
  std::remove(path.c_str());
}

TEST(GuiDocument, DownsampleKeepsPeakAndOrder) {
  std::vector<int64_t> v(60000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>((i * 7919) % 10007);
  v[31337] = 1'000'000;
  std::vector<size_t> idx = DownsampleIndices(v, 3000);
  EXPECT_LE(idx.size(), 3100u);
  EXPECT_EQ(idx.front(), 0u);
  EXPECT_EQ(idx.back(), v.size() - 1);
  EXPECT_TRUE(std::is_sorted(idx.begin(), idx.end()));
  EXPECT_NE(std::find(idx.begin(), idx.end(), 31337u), idx.end());
  EXPECT_EQ(DownsampleIndices({5, 6, 7}, 3000).size(), 3u);
}

}  // namespace
}  // namespace memplan::gui
