// The run JSON's one schema (memplan/run_report.h): what `memplan run --json` writes reads back
// equal, and the reader names the field that is missing or wrong. Torch-free and Qt-free.
#include "memplan/run_report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "memplan/training_graph.h"

namespace memplan {
namespace {

using nlohmann::json;

// Only DESIGN.md's required fields: the plain step, no trace.
RunReport ContractReport() {
  RunReport r;
  r.memplan_version = "0.1.0";
  r.device = "cpu (LibTorch 2.5.1, 2 threads)";
  r.steps = 2;
  r.measured_peak_bytes = 950;
  r.predicted_peak_bytes = 900;
  r.step_seconds = {3.0, 1.5};
  r.recompute_seconds = {0.5, 0.25};
  r.loss = {2.3, 2.2};
  r.plan = {{"strategy", "none"}, {"sections", json::array()}, {"checkpoints", json::array()}};
  return r;
}

// A run as the command line fills it: every field set, a plan, a trace.
RunReport FullReport() {
  RunReport r = ContractReport();
  r.plan = {{"kind", "plan"},
            {"strategy", "sqrt"},
            {"budget_bytes", 1000},
            {"checkpoints", {"t1"}},
            {"sections", {{"n1"}, {"n2", "n3"}}},
            {"feasible", true}};
  r.model = "m.onnx";
  r.batch = 8;
  r.micro_batches = 2;
  r.optimizer = "adam";
  r.loss_kind = "cross_entropy";
  r.seed = 5;
  r.random_weights = true;
  r.max_measured_peak_bytes = 1000;
  r.prediction_error = (900.0 - 950.0) / 950.0;
  r.persistent_bytes = 400;
  r.peak_bytes = std::vector<int64_t>{1000, 950};
  r.reserved_peak_bytes = std::vector<int64_t>{1024, 1024};
  r.measured_host_peak_bytes = 300;
  r.predicted_host_peak_bytes = 300;
  r.stall_seconds = std::vector<double>{0.25, 0.0};
  r.predicted_timeline = std::vector<RunTimelinePoint>{
      {"setup", "setup", 100, 100, ""}, {"forward n1 (Relu)", "forward", 900, 800, "n1"}};
  r.measured_trace = std::vector<RunTraceEvent>{{"setup", "", "", 100, 120},
                                                {"backward", "", "ReluBackward0", 800, 950}};
  return r;
}

// The message RunReportFromJson throws for `j`, or "" when it reads.
std::string ErrorOf(const json& j) {
  try {
    RunReportFromJson(j);
  } catch (const MemplanError& e) {
    return e.what();
  }
  return "";
}

TEST(RunReport, RoundTripsThroughJson) {
  const RunReport r = FullReport();
  const json j = RunReportToJson(r);
  EXPECT_EQ(RunReportFromJson(j), r);
  EXPECT_EQ(json::parse(j.dump()).get<RunReport>(), r);  // through text and nlohmann's ADL hooks
}

TEST(RunReport, RoundTripsTheContractAlone) {
  // The optional fields stay unset and are not written.
  const RunReport r = ContractReport();
  const json j = RunReportToJson(r);
  EXPECT_FALSE(j.contains("measured_trace"));
  EXPECT_FALSE(j.contains("batch"));
  EXPECT_EQ(RunReportFromJson(j), r);
}

TEST(RunReport, WritesTheContractsFieldNames) {
  const json j = RunReportToJson(FullReport());
  for (const char* k : {"kind",
                        "memplan_version",
                        "model",
                        "batch",
                        "micro_batches",
                        "optimizer",
                        "loss_kind",
                        "device",
                        "steps",
                        "seed",
                        "random_weights",
                        "measured_peak_bytes",
                        "max_measured_peak_bytes",
                        "predicted_peak_bytes",
                        "prediction_error",
                        "persistent_bytes",
                        "step_seconds",
                        "recompute_seconds",
                        "loss",
                        "peak_bytes",
                        "reserved_peak_bytes",
                        "measured_host_peak_bytes",
                        "predicted_host_peak_bytes",
                        "stall_seconds",
                        "plan",
                        "predicted_timeline",
                        "measured_trace"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  EXPECT_EQ(j.size(), 27u) << j.dump();
  EXPECT_EQ(j["kind"], "run");
  // A timeline point names its node only when it has one (TimelineToJson's schema).
  EXPECT_FALSE(j["predicted_timeline"][0].contains("node"));
  EXPECT_EQ(j["predicted_timeline"][1]["node"], "n1");
  EXPECT_EQ(j["measured_trace"][1], json({{"phase", "backward"},
                                          {"node", ""},
                                          {"op", "ReluBackward0"},
                                          {"bytes_after", 800},
                                          {"peak_during", 950}}));
}

TEST(RunReport, ANonFiniteLossReadsBackAsNaN) {
  RunReport r = FullReport();
  r.loss[1] = std::nan("");
  const json j = json::parse(RunReportToJson(r).dump());
  EXPECT_TRUE(j["loss"][1].is_null());  // how nlohmann writes a NaN
  EXPECT_TRUE(std::isnan(RunReportFromJson(j).loss[1]));
}

TEST(RunReport, AMissingRequiredFieldIsNamed) {
  for (const char* k :
       {"kind", "memplan_version", "device", "steps", "measured_peak_bytes", "predicted_peak_bytes",
        "step_seconds", "recompute_seconds", "loss", "plan"}) {
    json j = RunReportToJson(FullReport());
    j.erase(k);
    EXPECT_EQ(ErrorOf(j), std::string("field '") + k + "' is missing") << k;
  }
  struct Case {
    const char* pointer;
    const char* field;
  } nested[] = {
      {"/plan/strategy", "plan.strategy"},
      {"/plan/sections", "plan.sections"},
      {"/predicted_timeline/1/bytes", "predicted_timeline[1].bytes"},
      {"/predicted_timeline/0/event", "predicted_timeline[0].event"},
      {"/measured_trace/1/peak_during", "measured_trace[1].peak_during"},
      {"/measured_trace/0/op", "measured_trace[0].op"},
  };
  for (const Case& c : nested) {
    json j = RunReportToJson(FullReport());
    const json::json_pointer p(c.pointer);
    j[p.parent_pointer()].erase(p.back());
    EXPECT_EQ(ErrorOf(j), std::string("field '") + c.field + "' is missing") << c.pointer;
  }
}

TEST(RunReport, AMistypedFieldIsNamed) {
  struct Case {
    const char* pointer;
    json value;
    const char* expect;
  } cases[] = {
      {"/kind", "plan", "field 'kind' is not \"run\""},
      {"/device", 3, "field 'device' is not a string"},
      {"/steps", "two", "field 'steps' is not a number"},
      {"/steps", -1, "field 'steps' is negative"},
      {"/measured_peak_bytes", 1e300, "field 'measured_peak_bytes' is out of range"},
      {"/predicted_peak_bytes", json(uint64_t{1} << 63),
       "field 'predicted_peak_bytes' is out of range"},
      {"/step_seconds", 1.5, "field 'step_seconds' is not an array"},
      {"/step_seconds/1", -1.0,
       "field 'step_seconds[1]' is not a finite, non-negative number of seconds"},
      {"/recompute_seconds/0", nullptr, "field 'recompute_seconds[0]' is not a number"},
      {"/loss/0", "high", "field 'loss[0]' is not a number"},
      {"/plan", json::array(), "field 'plan' is not an object"},
      {"/plan/checkpoints/0", 7, "field 'plan.checkpoints[0]' is not a string"},
      {"/plan/sections/1", "n2", "field 'plan.sections[1]' is not an array"},
      {"/micro_batches", 0, "field 'micro_batches' is less than 1"},
      {"/random_weights", 1, "field 'random_weights' is not true or false"},
      {"/seed", -5, "field 'seed' is negative"},
      {"/prediction_error", "5%", "field 'prediction_error' is not a number"},
      {"/peak_bytes/0", "1 GiB", "field 'peak_bytes[0]' is not a number"},
      {"/predicted_timeline/1/node", 4, "field 'predicted_timeline[1].node' is not a string"},
      {"/predicted_timeline/0", 100, "field 'predicted_timeline[0]' is not an object"},
      {"/measured_trace", json::object(), "field 'measured_trace' is not an array"},
      {"/measured_trace/1/bytes_after", -8, "field 'measured_trace[1].bytes_after' is negative"},
  };
  for (const Case& c : cases) {
    json j = RunReportToJson(FullReport());
    j[json::json_pointer(c.pointer)] = c.value;
    EXPECT_EQ(ErrorOf(j), c.expect) << c.pointer;
  }
  EXPECT_EQ(ErrorOf(json::array()), "a run JSON is an object");
}

TEST(RunReport, PerStepArraysHaveOneEntryPerStep) {
  json j = RunReportToJson(FullReport());
  j["loss"].push_back(2.1);
  EXPECT_EQ(ErrorOf(j), "field 'loss' has 3 entries but 'step_seconds' has 2");
  j = RunReportToJson(FullReport());
  j["reserved_peak_bytes"].erase(0);
  EXPECT_EQ(ErrorOf(j), "field 'reserved_peak_bytes' has 1 entries but 'step_seconds' has 2");
}

TEST(RunReport, OldAliasesAreNotRead) {
  // Names no memplan writer has produced (the GUI guessed them before `memplan run` existed).
  json j = RunReportToJson(FullReport());
  j["trace"] = j["measured_trace"];
  j.erase("measured_trace");
  j["timeline"] = j["predicted_timeline"];
  j.erase("predicted_timeline");
  const RunReport r = RunReportFromJson(j);
  EXPECT_FALSE(r.measured_trace.has_value());
  EXPECT_FALSE(r.predicted_timeline.has_value());
}

}  // namespace
}  // namespace memplan
