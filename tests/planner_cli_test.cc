// `memplan plan` as a user runs it: exit codes (0 fits, 1 bad input, 2 nothing fits), the
// summary, the JSON, and no file on errors.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "memplan/analyzer.h"
#include "memplan/profiler.h"
#include "testing/cli_runner.h"
#include "testing/graph_builder.h"

namespace memplan {
namespace {

using testing::CliResult;
using testing::FileExists;
using testing::ReadFile;

class PlannerCli : public testing::CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    model_ = dir_ + "/chain.onnx";
    // x [N, 256] -> Mul(w) -> 12 Relus; the default cross-entropy loss reads the last Relu's
    // [N, 256] output as 256 class logits.
    testing::GraphBuilder b;
    b.Input("x", {-1, 256}).Param("w", {256}).Node("Mul", {"x", "w"}, {"h0"});
    for (int i = 1; i <= 12; ++i)
      b.Node("Relu", {"h" + std::to_string(i - 1)}, {"h" + std::to_string(i)});
    b.Output("h12");
    b.Save(model_);
  }
  CliResult Run(const std::string& args) { return CliTest::Run("plan " + args); }

  std::string model_;
};

TEST_F(PlannerCli, PlanFitsWritesJsonAndPrintsTheSummary) {
  std::string json = dir_ + "/plan.json";
  CliResult r = Run(model_ + " --batch 8 --budget 70% --strategy optimal --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* s : {"baseline", "plan peak", "budget", "overhead", "recompute", "checkpoints",
                        "sections", "solve time"}) {
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  }
  nlohmann::json j = nlohmann::json::parse(ReadFile(json));
  EXPECT_EQ(j["kind"], "plan");
  EXPECT_EQ(j["strategy"], "optimal");
  EXPECT_EQ(j["batch"], 8);
  EXPECT_TRUE(j["feasible"].get<bool>());
  EXPECT_LE(j["predicted_peak_bytes"].get<int64_t>(), j["budget_bytes"].get<int64_t>());
  EXPECT_GT(j["sections"].size(), 1u);
  EXPECT_GT(j["predicted_recompute_seconds"].get<double>(), 0);
  EXPECT_TRUE(j["time_model"]["costs"].is_null());
}

TEST_F(PlannerCli, NothingFitsExitsTwoAndNamesTheSmallestBudget) {
  std::string json = dir_ + "/plan.json";
  CliResult r = Run(model_ + " --batch 8 --budget 1KiB --json " + json);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("the smallest budget any strategy fits is"), std::string::npos) << r.err;
  nlohmann::json j = nlohmann::json::parse(ReadFile(json));  // complete, and says so
  EXPECT_FALSE(j["feasible"].get<bool>());
  EXPECT_GT(j["smallest_budget_bytes"].get<int64_t>(), 1024);
  // The smallest budget is a promise: at it the plan fits, one byte below it does not.
  const int64_t least = j["smallest_budget_bytes"].get<int64_t>();
  EXPECT_NE(r.err.find("--budget " + FormatBytes(least)), std::string::npos) << r.err;
  r = Run(model_ + " --batch 8 --budget " + std::to_string(least) + "B --json " + json);
  EXPECT_EQ(r.code, 0) << r.err;
  r = Run(model_ + " --batch 8 --budget " + std::to_string(least - 1) + "B");
  EXPECT_EQ(r.code, 2) << r.out;
}

// --strategy none and a budget the plain step misses: the answer is `none` (exit 2), what none
// reaches at best, and the strategy that does fit; never another strategy's plan.
TEST_F(PlannerCli, ANamedStrategyIsHonouredAndTheOneThatFitsIsNamed) {
  std::string json = dir_ + "/none.json";
  CliResult r =
      Run(model_ + " --batch 8 --budget 70% --strategy none --micro-batches 1 --json " + json);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.out.find("strategy     none\n"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("no none plan fits"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("none fits"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("fits this budget"), std::string::npos)
      << r.err;  // optimal does: 70% fits above
  nlohmann::json j = nlohmann::json::parse(ReadFile(json));
  EXPECT_EQ(j["strategy"], "none");
  EXPECT_EQ(j["smallest_budget_strategy"], "none");
  // Manual checkpoints are kept even where they do not fit.
  r = Run(model_ + " --batch 8 --budget 70% --checkpoints h11 --micro-batches 1 --json " + json);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.out.find("strategy     manual\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("checkpoints  1   sections 2"), std::string::npos) << r.out;
  EXPECT_EQ(nlohmann::json::parse(ReadFile(json))["checkpoints"],
            nlohmann::json::parse(R"(["h11"])"));
}

// `auto` says why it chose: a line per strategy tried, and the same in the JSON.
TEST_F(PlannerCli, AutoListsItsCandidates) {
  std::string json = dir_ + "/auto.json";
  CliResult r = Run(model_ + " --batch 8 --budget 70% --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("auto tried"), std::string::npos) << r.out;
  nlohmann::json j = nlohmann::json::parse(ReadFile(json));
  ASSERT_TRUE(j["candidates"].is_array());
  std::set<std::string> tried;
  bool chosen_fits = false;
  for (const nlohmann::json& c : j["candidates"]) {
    tried.insert(c["strategy"].get<std::string>());
    if (c["strategy"] == j["strategy"] && c["feasible"].get<bool>()) chosen_fits = true;
    EXPECT_NE(r.out.find(c["strategy"].get<std::string>() + " "), std::string::npos);
  }
  for (const char* s : {"none", "optimal", "sections", "sqrt", "bottleneck", "speed", "selective"})
    EXPECT_TRUE(tried.count(s)) << s;
  EXPECT_TRUE(chosen_fits);
}

// On micro-batches auto's candidates are priced as its plan is: with the other micro-batches'
// inputs resident and per step, so that they compare with the budget printed above them.
TEST_F(PlannerCli, AutosCandidatesOnMicroBatchesCompareWithTheBudget) {
  std::string json = dir_ + "/auto-micro.json";
  // The smallest budget of auto on 4 micro-batches (a promise: its plan fits it).
  CliResult r = Run(model_ + " --batch 8 --budget 1KiB --micro-batches 4 --json " + json);
  ASSERT_EQ(r.code, 2) << r.err;
  const int64_t least = nlohmann::json::parse(ReadFile(json))["smallest_budget_bytes"];
  r = Run(model_ + " --batch 8 --budget " + std::to_string(least) + "B --micro-batches 4 --json " +
          json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("auto tried   (on micro-batches of 2, the other micro-batches' inputs "
                       "resident)"),
            std::string::npos)
      << r.out;
  nlohmann::json j = nlohmann::json::parse(ReadFile(json));
  ASSERT_EQ(j["micro_batches"], 4);
  ASSERT_TRUE(j["candidates"].is_array()) << j.dump();
  int chosen = 0;
  for (const nlohmann::json& c : j["candidates"]) {
    SCOPED_TRACE(c.dump());
    const int64_t need =
        c["predicted_peak_bytes"].get<int64_t>() + c["margin_bytes"].get<int64_t>();
    EXPECT_EQ(c["feasible"].get<bool>(), need <= least);
    if (c["strategy"] != j["strategy"]) continue;
    ++chosen;
    EXPECT_EQ(c["predicted_peak_bytes"], j["predicted_peak_bytes"]);
    EXPECT_EQ(c["predicted_recompute_seconds"], j["predicted_recompute_seconds"]);
  }
  EXPECT_EQ(chosen, 1);
}

// The sweep's smallest budget is the plan's: both answer the same options.
TEST_F(PlannerCli, TheSweepAndTheExitMessageGiveOneSmallestBudget) {
  std::string json = dir_ + "/sweep.json";
  CliResult r = Run(model_ + " --batch 8 --budget 1KiB --sweep --json " + json);
  EXPECT_EQ(r.code, 2) << r.err;
  nlohmann::json j = nlohmann::json::parse(ReadFile(json));
  EXPECT_EQ(j["sweep"]["min_budget_bytes"], j["smallest_budget_bytes"]);
  EXPECT_NE(r.out.find("smallest feasible budget: " +
                       FormatBytes(j["smallest_budget_bytes"].get<int64_t>())),
            std::string::npos)
      << r.out;
}

// Micro-batches of a model without batch norm carry no batch-norm note.
TEST_F(PlannerCli, TheBatchNormNoteIsForModelsWithBatchNorm) {
  CliResult r = Run(model_ + " --batch 8 --budget 1GiB --micro-batches 4");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("micro-batches of 2 with gradient accumulation"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("batch-norm"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("s predicted per step for running 4 micro-batches"), std::string::npos)
      << r.out;
}

// A model with training-mode batch norm: micro-batches get the note, and a warning below 8
// samples per micro-batch.
TEST_F(PlannerCli, BatchNormOnMicroBatchesOfFewerThanEightSamplesIsAWarning) {
  const std::string bn = dir_ + "/bn.onnx";
  testing::GraphBuilder b;
  b.Input("x", {-1, 4, 4, 4});
  for (const char* p : {"scale", "bias", "mean", "var"}) b.Param(p, {4});
  b.Ints("shape", {-1, 64});
  b.Node("BatchNormalization", {"x", "scale", "bias", "mean", "var"}, {"bn", "rm", "rv"})
      .Attr("training_mode", int64_t{1});
  b.Node("Relu", {"bn"}, {"r"}).Node("Reshape", {"r", "shape"}, {"logits"}).Output("logits");
  b.Save(bn);
  CliResult r = Run(bn + " --batch 16 --budget 1GiB --micro-batches 2");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("micro-batches of 8 with gradient accumulation (batch-norm statistics are "
                       "per micro-batch)"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("WARNING"), std::string::npos) << r.out;
  r = Run(bn + " --batch 16 --budget 1GiB --micro-batches 4");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("WARNING: 4 samples per micro-batch is below 8"), std::string::npos)
      << r.out;
}

// Planning for a CUDA device: the budget bounds the reserved memory (the chain's tensors, all
// under 1 MiB, take one 2 MiB page of the small pool with expandable segments: reserved 2 MiB),
// the JSON says so, and a device file measured elsewhere gives the context.
TEST_F(PlannerCli, OnACudaDeviceTheBudgetBoundsReservedMemory) {
  std::string json = dir_ + "/cuda.json";
  CliResult r = Run(model_ + " --batch 8 --budget 4MiB --device cuda --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("reserved     2.00 MiB peak"), std::string::npos) << r.out;
  nlohmann::json j = nlohmann::json::parse(ReadFile(json));
  EXPECT_EQ(j["budget_of"], "reserved");
  EXPECT_EQ(j["allocator_mode"], "expandable_segments");
  EXPECT_EQ(j["predicted_reserved_peak_bytes"], 2 << 20);
  EXPECT_EQ(j["workspace_bytes"], 0);  // no matmul: no cuBLAS handle
  EXPECT_FALSE(j["context_measured"].get<bool>());
  // 1 MiB fits the allocated peak but not the 2 MiB page: exit 2 in reserved terms, fits in
  // allocated ones.
  r = Run(model_ + " --batch 8 --budget 1MiB --device cuda --micro-batches 1");
  EXPECT_EQ(r.code, 2) << r.out;
  r = Run(model_ +
          " --batch 8 --budget 1MiB --device cuda --budget-of allocated --micro-batches 1");
  EXPECT_EQ(r.code, 0) << r.err;
  // A device file measured elsewhere.
  std::ofstream(dir_ + "/h200.json")
      << R"({"kind": "cuda_device", "device": "cuda", "name": "NVIDIA H200",
      "compute_capability": "9.0", "torch_version": "2.11.0+cu130", "total_memory_bytes": 150000000000,
      "context_bytes": 860000000, "allocator_conf": "expandable_segments:True", "cublas_workspace_config": ""})";
  r = Run(model_ + " --batch 8 --budget 4MiB --device cuda --device-file " + dir_ +
          "/h200.json --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  j = nlohmann::json::parse(ReadFile(json));
  EXPECT_EQ(j["context_bytes"], 860000000);
  EXPECT_TRUE(j["context_measured"].get<bool>());
  EXPECT_EQ(j["device_name"], "NVIDIA H200");
  // A broken device file names itself; --budget-of without a CUDA device is an error.
  std::ofstream(dir_ + "/bad-device.json") << R"({"kind": "cuda_device"})";
  r = Run(model_ + " --batch 8 --budget 4MiB --device cuda --device-file " + dir_ +
          "/bad-device.json");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("bad-device.json"), std::string::npos) << r.err;
  r = Run(model_ + " --batch 8 --budget 4MiB --budget-of allocated");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--budget-of"), std::string::npos) << r.err;
}

// --dim binds the batch dim by its name: the summary and the plan say that batch.
TEST_F(PlannerCli, ABatchBoundByNameIsTheBatch) {
  std::string json = dir_ + "/dim.json";
  CliResult r = Run(model_ + " --dim N=4 --budget 1GiB --micro-batches 2 --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find(", batch 4,"), std::string::npos) << r.out;
  nlohmann::json j = nlohmann::json::parse(ReadFile(json));
  EXPECT_EQ(j["batch"], 4);
  EXPECT_EQ(j["micro_batch"], 2);
}

TEST_F(PlannerCli, ManualCheckpoints) {
  CliResult r = Run(model_ + " --budget 1GiB --checkpoints h4,h8");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("manual"), std::string::npos);
  EXPECT_NE(r.out.find("checkpoints  2   sections 3"), std::string::npos) << r.out;
}

TEST_F(PlannerCli, BadInputIsExitOneWithoutAFile) {
  std::string json = dir_ + "/plan.json";
  struct Case {
    std::string args, expect;
  };
  for (const Case& c : std::vector<Case>{
           {model_ + " --budget 1GiB --checkpoints h4,nope", "nope"},
           {model_ + " --budget lots", "lots"},
           {model_ + " --budget 50", "has no unit"},
           {model_ + " --budget 1GiB --strategy fastest", "fastest"},
           {model_, "--budget"},
           {dir_ + "/missing.onnx --budget 1GiB", "missing.onnx"},
           {model_ + " --budget 1GiB --strategy speed --checkpoints h4", "--checkpoints"},
       }) {
    CliResult r = Run(c.args + " --json " + json);
    EXPECT_EQ(r.code, 1) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_FALSE(FileExists(json)) << c.args;
  }
}

// A profile of the chain model measured at `batch`: `forward_ms` per call for each of its nodes
// in the forward phase (one call), and `recompute_ms` per call in recompute (two calls; 0: none).
std::string WriteChainProfile(const std::string& path, int64_t batch, double forward_ms,
                              double recompute_ms,
                              const std::vector<std::pair<std::string, std::string>>& nodes) {
  Profile p;
  p.model = "chain.onnx";
  p.device = "cpu";
  p.backend = "cpu";
  p.batch = batch;
  NodeId id = 0;
  for (const auto& [name, op] : nodes) {
    NodeProfile n;
    n.node = id++;
    n.name = name;
    n.op = op;
    n.phase = Phase::kForward;
    n.calls = 1;
    n.seconds = forward_ms * 1e-3;
    p.nodes.push_back(n);
    if (recompute_ms > 0) {
      n.phase = Phase::kRecompute;
      n.calls = 2;
      n.seconds = 2 * recompute_ms * 1e-3;
      p.nodes.push_back(n);
    }
  }
  std::ofstream(path) << ProfileToJson(p).dump();
  return path;
}

std::vector<std::pair<std::string, std::string>> ChainNodes() {
  std::vector<std::pair<std::string, std::string>> nodes = {{"Mul_0", "Mul"}};
  for (int i = 1; i <= 12; ++i) nodes.push_back({"Relu_" + std::to_string(i), "Relu"});
  return nodes;
}

// Nodes before the last section: what the plan recomputes.
size_t RecomputedNodes(const nlohmann::json& plan) {
  size_t n = 0;
  for (size_t k = 0; k + 1 < plan["sections"].size(); ++k) n += plan["sections"][k].size();
  return n;
}

TEST_F(PlannerCli, CostsCalibrateThePredictedRecomputeSeconds) {
  // Forward 5 ms a call, recompute 2 ms a call: recompute runs as recompute does, so 2 ms.
  const std::string profile =
      WriteChainProfile(dir_ + "/chain.profile.json", /*batch=*/8, 5, 2, ChainNodes());
  const std::string json = dir_ + "/plan.json";
  CliResult r = Run(model_ + " --batch 8 --budget 70% --strategy optimal --costs " + profile +
                    " --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("calibrated by " + profile), std::string::npos) << r.out;
  nlohmann::json j = nlohmann::json::parse(ReadFile(json));
  ASSERT_GT(RecomputedNodes(j), 0u);
  EXPECT_NEAR(j["predicted_recompute_seconds"].get<double>(),
              2e-3 * static_cast<double>(RecomputedNodes(j)), 1e-12);
  EXPECT_EQ(j["time_model"]["costs"], profile);
}

TEST_F(PlannerCli, CostsMeasuredAtAnotherBatchScaleLinearly) {
  // 1 ms a call at batch 4 is 2 ms at batch 8, but for the per-op overhead o (the machine's,
  // from the plan's rates), which does not grow with the rows: o + (1 ms - o) x 2 = 2 ms - o.
  const std::string profile =
      WriteChainProfile(dir_ + "/chain4.profile.json", /*batch=*/4, 1, 0, ChainNodes());
  const std::string json = dir_ + "/plan.json";
  CliResult r = Run(model_ + " --batch 8 --budget 70% --strategy optimal --costs " + profile +
                    " --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("scaled linearly to batch 8"), std::string::npos) << r.out;
  nlohmann::json j = nlohmann::json::parse(ReadFile(json));
  const double o = j["time_model"]["rates"]["op_overhead_seconds"].get<double>();
  ASSERT_LT(o, 1e-3);
  EXPECT_NEAR(j["predicted_recompute_seconds"].get<double>(),
              (2e-3 - o) * static_cast<double>(RecomputedNodes(j)), 1e-12);
}

// A profile carries its model's structure fingerprint; one of another model is refused even
// when every node name it has is also this model's.
TEST_F(PlannerCli, CostsWithAnotherModelsFingerprintAreRefused) {
  const std::string path = WriteChainProfile(dir_ + "/chain.profile.json", 8, 1, 0, ChainNodes());
  nlohmann::json p = nlohmann::json::parse(ReadFile(path));
  p["structure_fingerprint"] = "0123456789abcdef";
  std::ofstream(path) << p.dump();
  CliResult r = Run(model_ + " --batch 8 --budget 70% --costs " + path);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.err.find("profile of another model"), std::string::npos) << r.err;
}

TEST_F(PlannerCli, CostsOfAnotherModelAreAnErrorNamingTheFile) {
  const std::string other = WriteChainProfile(dir_ + "/resnet.profile.json", 8, 1, 0,
                                              {{"Conv_0", "Conv"}, {"Relu_1", "Relu"}});
  ExpectUserError("plan " + model_ + " --batch 8 --budget 70% --costs " + other,
                  "resnet.profile.json");
  CliResult r = Run(model_ + " --batch 8 --budget 70% --costs " + other);
  EXPECT_NE(r.err.find("another model"), std::string::npos) << r.err;
  // Not a profile, or no file at all.
  std::ofstream(dir_ + "/plan-not-profile.json") << R"({"kind": "plan"})";
  ExpectUserError(
      "plan " + model_ + " --batch 8 --budget 70% --costs " + dir_ + "/plan-not-profile.json",
      "plan-not-profile.json");
  ExpectUserError("plan " + model_ + " --batch 8 --budget 70% --costs " + dir_ + "/none.json",
                  "none.json");
}

TEST_F(PlannerCli, MachineRatesAreMeasuredOnceAndCached) {
  // A cache of this test's own, so that its rates can be edited.
  struct Env {
    explicit Env(const std::string& dir) { ::setenv("XDG_CACHE_HOME", dir.c_str(), 1); }
    ~Env() { ::unsetenv("XDG_CACHE_HOME"); }
  } env(dir_);
  const std::string json = dir_ + "/plan.json";
  CliResult r = Run(model_ + " --batch 8 --budget 70% --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(ReadFile(json));
  const std::string cache = dir_ + "/memplan/machine_rates.json";
  if (!j["time_model"]["rates"]["measured"].get<bool>()) {  // a build without LibTorch
    EXPECT_NE(r.out.find("default rates"), std::string::npos) << r.out;
    EXPECT_FALSE(FileExists(cache));
    return;
  }
  EXPECT_NE(r.out.find("measured now, cached in " + cache), std::string::npos) << r.out;
  nlohmann::json c = nlohmann::json::parse(ReadFile(cache));
  EXPECT_EQ(c["kind"], "machine_rates");
  ASSERT_EQ(c["rates"].size(), 1u);
  // The second run reads the cache: edited rates show in its summary.
  c["rates"].begin().value()["flops_per_second"] = 1234e6;
  std::ofstream(cache) << c.dump();
  r = Run(model_ + " --batch 8 --budget 70%");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("1.23e+09 FLOP/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("measured, cached in " + cache), std::string::npos) << r.out;
  // Each compute class's rate is measured too; an entry written before that (no "classes") is
  // measured again and replaced, never an error.
  EXPECT_TRUE(c["rates"].begin().value()["classes"].contains("conv"));
  c["rates"].begin().value().erase("classes");
  std::ofstream(cache) << c.dump();
  r = Run(model_ + " --batch 8 --budget 70%");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("measured now, cached in " + cache), std::string::npos) << r.out;
  c = nlohmann::json::parse(ReadFile(cache));
  EXPECT_TRUE(c["rates"].begin().value()["classes"].contains("depthwise_conv")) << c.dump();
  // A cache of format 1 measured fresh memory before the executor kept freed host memory: its
  // page-fault rate no longer holds, so it is measured again.
  c.erase("format");
  c["rates"].begin().value()["flops_per_second"] = 1234e6;
  std::ofstream(cache) << c.dump();
  r = Run(model_ + " --batch 8 --budget 70%");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("measured now, cached in " + cache), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("1.23e+09 FLOP/s"), std::string::npos) << r.out;
}

TEST_F(PlannerCli, SweepPrintsAParetoTableAndPutsItInTheJson) {
  std::string json = dir_ + "/plan.json";
  CliResult r = Run(model_ + " --batch 8 --sweep --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("budget sweep"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("smallest feasible budget"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("recompute s"), std::string::npos) << r.out;
  nlohmann::json j = nlohmann::json::parse(ReadFile(json));
  ASSERT_TRUE(j.contains("sweep"));
  EXPECT_TRUE(j["sweep"]["points"][0].contains("predicted_recompute_seconds"));
  const nlohmann::json& points = j["sweep"]["points"];
  ASSERT_GE(points.size(), 2u);
  EXPECT_EQ(points.front()["budget_bytes"], j["sweep"]["baseline_peak_bytes"]);
  // The sweep ends at the smallest budget, the one the plan reports.
  EXPECT_LE(points.back()["peak_bytes"], j["sweep"]["min_budget_bytes"]);
  EXPECT_EQ(j["sweep"]["min_budget_bytes"], j["smallest_budget_bytes"]);
  EXPECT_TRUE(j["feasible"].get<bool>());  // without --budget: the plan at the smallest budget
}

TEST_F(PlannerCli, MicroBatchesSplitTheBatch) {
  std::string json = dir_ + "/micro.json";
  CliResult r = Run(model_ + " --batch 8 --budget 1GiB --micro-batches 4 --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("micro-batch  4 x 2"), std::string::npos) << r.out;
  nlohmann::json j = nlohmann::json::parse(ReadFile(json));
  EXPECT_EQ(j["batch"], 8);
  EXPECT_EQ(j["micro_batches"], 4);
  EXPECT_EQ(j["micro_batch"], 2);
  // A count that does not divide the batch is a user error, with no file.
  std::string bad = dir_ + "/bad.json";
  r = Run(model_ + " --batch 8 --budget 1GiB --micro-batches 3 --json " + bad);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("does not divide"), std::string::npos) << r.err;
  EXPECT_FALSE(FileExists(bad));
}

TEST_F(PlannerCli, DevicesSplitTheBatchAndShardTheOptimizerState) {
  // w is 256 float32 = 1 KiB, one bucket (256 elements, a multiple of 2: no padding). Adam's
  // state is 2 KiB; sharded over 2 ranks each holds 1 KiB of it.
  std::string json = dir_ + "/dp.json";
  CliResult r =
      Run(model_ +
          " --batch 8 --optimizer adam --budget 1GiB --devices 2 --shard optimizer --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("2 ranks x batch 4, shard optimizer"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("parameters 1.00 KiB, gradients 1.00 KiB, optimizer state 1.00 KiB"),
            std::string::npos)
      << r.out;
  nlohmann::json j = nlohmann::json::parse(ReadFile(json));
  EXPECT_EQ(j["batch"], 8);
  EXPECT_EQ(j["layout"]["devices"], 2);
  EXPECT_EQ(j["layout"]["shard"], "optimizer");
  EXPECT_EQ(j["layout"]["buckets"], nlohmann::json::parse(R"([["w"]])"));
  // Unsharded, each rank holds the whole 2 KiB state.
  r = Run(model_ + " --batch 8 --optimizer adam --budget 1GiB --devices 2 --shard none");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("optimizer state 2.00 KiB"), std::string::npos) << r.out;
  // Shard parameters (ZeRO-3): each rank keeps half of the parameters, of the gradients and of
  // the state; the layout is in the JSON.
  r = Run(model_ +
          " --batch 8 --optimizer adam --budget 1GiB --devices 2 --shard parameters --json " +
          json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("parameters 512 B, gradients 512 B, optimizer state 1.00 KiB"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(nlohmann::json::parse(ReadFile(json))["layout"]["shard"], "parameters");
}

TEST_F(PlannerCli, DevicesThatDoNotDivideTheBatchAreAnErrorWithoutAFile) {
  std::string bad = dir_ + "/bad.json";
  CliResult r = Run(model_ + " --batch 8 --budget 1GiB --devices 3 --json " + bad);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("8"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("3"), std::string::npos) << r.err;
  EXPECT_FALSE(FileExists(bad));
  // Sharding needs more than one device.
  r = Run(model_ + " --batch 8 --budget 1GiB --shard optimizer --json " + bad);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--devices"), std::string::npos) << r.err;
  EXPECT_FALSE(FileExists(bad));
  // Shard parameters recomputes nothing inside the backward yet: a selective plan is refused.
  r = Run(model_ +
          " --batch 8 --budget 1GiB --devices 2 --shard parameters --strategy selective --json " +
          bad);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("selective"), std::string::npos) << r.err;
  EXPECT_FALSE(FileExists(bad));
}

// On CUDA a convolution's cuDNN workspaces are estimated unless a device file measured them, and
// the estimate's margin is kept under the budget: x[2,4,8,8] -> Mul -> Conv w[8,4,3,3] -> MatMul.
// The conv's input is 2048 B, so the margin is max(16 MiB, 1024 B) = 16 MiB. The allocated peak is
// the MatMul's 64 MiB of cuBLAS workspaces and a few KiB: a 70 MiB budget on allocated memory fits
// it, but not with the margin; with the conv measured (device file) it fits.
TEST_F(PlannerCli, UnmeasuredCudnnWorkspacesKeepAMargin) {
  const std::string conv = dir_ + "/conv.onnx";
  testing::GraphBuilder b;
  b.Input("x", {-1, 4, 8, 8}).Param("s", {4, 1, 1}).Param("w", {8, 4, 3, 3}).Param("fc", {512, 10});
  b.Ints("shape", {-1, 512}).Node("Mul", {"x", "s"}, {"h"});
  b.Node("Conv", {"h", "w"}, {"c"}).Attr("pads", std::vector<int64_t>{1, 1, 1, 1});
  b.Node("Reshape", {"c", "shape"}, {"flat"}).Node("MatMul", {"flat", "fc"}, {"y"}).Output("y");
  b.Save(conv);
  const std::string json = dir_ + "/conv-plan.json";
  CliResult r = Run(conv + " --batch 2 --budget 1GiB --device cuda --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(ReadFile(json))["margin_bytes"], 16 << 20);
  EXPECT_NE(r.out.find("cuDNN"), std::string::npos) << r.out;
  r = Run(conv + " --batch 2 --budget 70MiB --budget-of allocated --device cuda --micro-batches 1");
  EXPECT_EQ(r.code, 2) << r.out;
  std::ofstream(dir_ + "/measured.json") << R"({"kind": "cuda_device", "device": "cuda",
      "name": "NVIDIA H200", "compute_capability": "9.0", "torch_version": "2.11.0+cu130",
      "total_memory_bytes": 0,
      "context_bytes": -1, "conv_workspaces": [{"signature":
      "float32 x[2,4,8,8] w[8,4,3,3] stride[1,1] pad[1,1] dilation[1,1] group 1",
      "forward_bytes": 7296, "backward_data_bytes": 7296, "backward_filter_bytes": 7296}]})";
  r = Run(conv + " --batch 2 --budget 70MiB --budget-of allocated --device cuda --micro-batches 1" +
          " --device-file " + dir_ + "/measured.json --json " + json);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(nlohmann::json::parse(ReadFile(json))["margin_bytes"], 0);
  r = CliTest::Run("analyze " + conv + " --batch 2 --device cuda --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(ReadFile(json))["workspace_margin_bytes"], 16 << 20);
}

TEST_F(PlannerCli, OffloadWritesItsTensorsAndTheHostPeak) {
  // 8 KiB activations cross a 25 GB/s link in 0.3 us, hidden behind ops of 10 us and more:
  // offloading is free where recompute is not, so the plan offloads and recomputes nothing.
  std::string json = dir_ + "/offload.json";
  CliResult r = Run(model_ +
                    " --batch 8 --budget 70% --strategy offload --link-rate 25GB/s --host-budget "
                    "1GiB --micro-batches 1 --json " +
                    json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("offloaded"), std::string::npos) << r.out;
  nlohmann::json j = nlohmann::json::parse(ReadFile(json));
  EXPECT_EQ(j["strategy"], "offload");
  EXPECT_FALSE(j["offloaded"].empty());
  EXPECT_TRUE(j["recomputed"].empty());
  EXPECT_GT(j["predicted_host_peak_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(j["offload"]["host_budget_bytes"], int64_t{1} << 30);
  EXPECT_EQ(j["offload"]["device_to_host_bytes_per_second"], 25e9);
}

TEST_F(PlannerCli, OffloadPlansOneDevice) {
  std::string json = dir_ + "/offload.json";
  CliResult r =
      Run(model_ + " --batch 8 --budget 70% --strategy offload --devices 2 --json " + json);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("offload plans one device"), std::string::npos) << r.err;
  EXPECT_FALSE(FileExists(json));
}

// A card named without the card: its memory bounds the plan; the CUDA context is an estimate.
TEST_F(PlannerCli, ANamedCardBoundsThePlanByItsMemory) {
  std::string json = dir_ + "/l4.json";
  CliResult r = Run(model_ + " --batch 8 --budget 4MiB --device cuda --card l4 --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("NVIDIA L4"), std::string::npos) << r.out;
  nlohmann::json j = nlohmann::json::parse(ReadFile(json));
  EXPECT_EQ(j["device_name"], "NVIDIA L4");
  EXPECT_FALSE(j["context_measured"].get<bool>());
  EXPECT_NE(j["device_fingerprint"].get<std::string>().find("NVIDIA L4"), std::string::npos);
  // A budget above the card's memory is the card's memory less its context.
  r = Run(model_ + " --batch 8 --budget 1TiB --device cuda --card l4 --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  j = nlohmann::json::parse(ReadFile(json));
  EXPECT_EQ(j["budget_bytes"].get<int64_t>(), (23034LL << 20) - 884000000);
  // An unknown card lists the named ones; a card is for --device cuda.
  r = Run(model_ + " --batch 8 --budget 4MiB --device cuda --card a6000");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("h100-80gb"), std::string::npos) << r.err;
  r = Run(model_ + " --batch 8 --budget 4MiB --device cpu --card l4");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--device cuda"), std::string::npos) << r.err;
}

// A CPU's device file plans for that CPU (its kernels and threads), not this one; its fingerprint
// goes into the plan for memplan run to check.
TEST_F(PlannerCli, ACpuDeviceFilePlansForThatCpu) {
  std::ofstream(dir_ + "/avx2.json")
      << R"({"kind": "cpu_device", "device": "cpu", "cpu_name": "a laptop", "isa": "avx2",
      "max_cpu_isa": "", "threads": 8, "torch_version": "2.14.1", "onednn_version": "v3.12.0",
      "workspaces": []})";
  std::string json = dir_ + "/plan.json";
  CliResult r =
      Run(model_ + " --batch 8 --budget 70% --device-file " + dir_ + "/avx2.json --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("cpu          avx2 (Intel AVX2), 8 threads"), std::string::npos) << r.out;
  nlohmann::json j = nlohmann::json::parse(ReadFile(json));
  EXPECT_EQ(j["device_fingerprint"], "avx2/8t/torch-2.14.1/onednn-v3.12.0");
  EXPECT_EQ(j["cpu_device"]["kernel_family"], "avx2");
  EXPECT_EQ(j["cpu_device"]["threads"], 8);
  // With --device cuda a CPU's file is the wrong one; a file measured with 8 threads does not
  // predict for 4.
  r = Run(model_ + " --batch 8 --budget 70% --device cuda --device-file " + dir_ + "/avx2.json");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("describes a CPU"), std::string::npos) << r.err;
  r = Run(model_ + " --batch 8 --budget 70% --threads 4 --device-file " + dir_ + "/avx2.json");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("measured with 8 threads"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace memplan
