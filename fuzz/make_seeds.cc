// Writes the seed corpora of the fuzz targets into OUT/<target>/: small ONNX models built in
// memory (one per family of shape rules), plan JSON for fuzz_common.h's model from every
// strategy, analysis / plan / run / profile JSON as memplan writes them, and command lines.
// Run at fuzz time (make fuzz), so that no binary seeds are committed.
//   make_seeds OUT
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "memplan/analyzer.h"
#include "memplan/planner.h"
#include "memplan/profiler.h"
#include "memplan/run_report.h"

namespace {

using memplan::testing::GraphBuilder;
using Ints = std::vector<int64_t>;
namespace fs = std::filesystem;

fs::path out_dir;

void Write(const std::string& target, const std::string& name, const std::string& bytes) {
  fs::create_directories(out_dir / target);
  std::ofstream(out_dir / target / name, std::ios::binary) << bytes;
}

std::vector<std::pair<std::string, GraphBuilder>> Models() {
  std::vector<std::pair<std::string, GraphBuilder>> m;
  m.emplace_back("mlp", memplan::fuzz::PlanModel());
  {
    GraphBuilder b;  // a small CNN: conv, batch norm, pooling, flatten, gemm
    b.Input("x", {-1, 3, 8, 8}).Param("w", {4, 3, 3, 3}).Param("s", {4}).Param("bias", {4});
    b.Param("m", {4}).Param("v", {4}).Param("fc", {16, 5}).Param("fcb", {5});
    b.Node("Conv", {"x", "w"}, {"c"})
        .Attr("strides", Ints{1, 1})
        .Attr("pads", Ints{1, 1, 1, 1})
        .Attr("kernel_shape", Ints{3, 3});
    b.Node("BatchNormalization", {"c", "s", "bias", "m", "v"}, {"n"});
    b.Node("Relu", {"n"}, {"r"});
    b.Node("MaxPool", {"r"}, {"p"}).Attr("kernel_shape", Ints{2, 2}).Attr("strides", Ints{2, 2});
    b.Node("AveragePool", {"p"}, {"a"})
        .Attr("kernel_shape", Ints{2, 2})
        .Attr("strides", Ints{2, 2});
    b.Node("Flatten", {"a"}, {"f"}).Attr("axis", int64_t{1});
    b.Node("Gemm", {"f", "fc", "fcb"}, {"y"}).Output("y");
    m.emplace_back("cnn", b);
  }
  {
    GraphBuilder b;  // shape arithmetic: Shape, Gather, Concat, Reshape with -1
    b.Input("x", {-1, 4, 5, 6}).Param("w", {120, 10}).Ints("zero", {0}).Ints("minus1", {-1});
    b.Node("Shape", {"x"}, {"s"}).Node("Gather", {"s", "zero"}, {"n"}).Attr("axis", int64_t{0});
    b.Node("Concat", {"n", "minus1"}, {"target"}).Attr("axis", int64_t{0});
    b.Node("Reshape", {"x", "target"}, {"flat"})
        .Node("MatMul", {"flat", "w"}, {"logits"})
        .Output("logits");
    m.emplace_back("reshape", b);
  }
  {
    GraphBuilder b;  // GPT-style position ids: Range, Unsqueeze, ConstantOfShape, Where, Expand
    b.Input("x", {-1, 5, 8}).Ints("axes0", {0}).Param("w", {8, 2});
    b.Node("Shape", {"x"}, {"s"}).Attr("start", int64_t{1}).Attr("end", int64_t{2});
    b.Node("Squeeze", {"s", "axes0"}, {"len"});
    b.Node("Constant", {}, {"zero"}).Attr("value_int", int64_t{0});
    b.Node("Constant", {}, {"one"}).Attr("value_int", int64_t{1});
    b.Node("Range", {"zero", "len", "one"}, {"pos"});
    b.Node("Unsqueeze", {"pos", "axes0"}, {"pos2"});
    b.Node("ConstantOfShape", {"s"}, {"zeros"});
    b.Node("Equal", {"pos", "pos"}, {"all"});
    b.Node("Where", {"all", "zeros", "zeros"}, {"wh"});
    b.Node("Shape", {"x"}, {"xs"});
    b.Node("MatMul", {"x", "w"}, {"y"}).Output("y");
    m.emplace_back("positions", b);
  }
  {
    GraphBuilder b;  // attention: MatMul, Transpose, Div, Softmax, LayerNormalization, Dropout
    b.Input("x", {-1, 6, 8}).Param("wq", {8, 8}).Param("wk", {8, 8}).Param("wv", {8, 8});
    b.Param("g", {8}).Param("be", {8}).Param("head", {8, 4});
    b.Node("MatMul", {"x", "wq"}, {"q"})
        .Node("MatMul", {"x", "wk"}, {"k"})
        .Node("MatMul", {"x", "wv"}, {"v"});
    b.Node("Transpose", {"k"}, {"kt"}).Attr("perm", Ints{0, 2, 1});
    b.Node("MatMul", {"q", "kt"}, {"sc"});
    b.Node("Constant", {}, {"scale"}).Attr("value_float", 2.0);
    b.Node("Div", {"sc", "scale"}, {"sd"})
        .Node("Softmax", {"sd"}, {"att"})
        .Attr("axis", int64_t{-1});
    b.Node("Dropout", {"att"}, {"attd"});
    b.Node("MatMul", {"attd", "v"}, {"o"}).Node("Add", {"o", "x"}, {"res"});
    b.Node("LayerNormalization", {"res", "g", "be"}, {"ln"}).Attr("axis", int64_t{-1});
    b.Node("ReduceMean", {"ln"}, {"pool"}).Attr("axes", Ints{1}).Attr("keepdims", int64_t{0});
    b.Node("MatMul", {"pool", "head"}, {"y"}).Output("y");
    m.emplace_back("attention", b);
  }
  {
    GraphBuilder b;  // embedding lookup from int64 ids, Slice, Split-free concat of halves
    b.Input("ids", {-1, 7}, memplan::DType::kInt64).Param("emb", {50, 6}).Param("head", {6, 3});
    b.Ints("st", {0}).Ints("en", {3}).Ints("ax", {2});
    b.Node("Gather", {"emb", "ids"}, {"e"});
    b.Node("Slice", {"e", "st", "en", "ax"}, {"half"});
    b.Node("Concat", {"half", "half"}, {"cat"}).Attr("axis", int64_t{2});
    b.Node("Mul", {"cat", "e"}, {"m"});
    b.Node("MatMul", {"m", "head"}, {"logits"}).Output("logits");
    m.emplace_back("embedding", b);
  }
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace memplan;
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds OUT\n");
    return 1;
  }
  out_dir = argv[1];

  // fuzz_onnx: the models; fuzz_document: their analyses.
  for (const auto& [name, b] : Models()) {
    Write("onnx", name + ".onnx", b.Bytes());
    try {
      LoadOptions o;
      o.batch = 2;
      Analysis a = Analyze(b.Load(o));
      Write("document", "analysis-" + name + ".json", AnalysisToJson(a).dump(1));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "make_seeds: %s does not analyze: %s\n", name.c_str(), e.what());
      return 1;
    }
  }

  // fuzz_plan and fuzz_document: a plan of fuzz_common.h's model from every strategy.
  LoadOptions o;
  o.batch = fuzz::kPlanModelBatch;
  o.loss = LossKind::kSum;
  const TrainingGraph g = fuzz::PlanModel().Load(o);
  const int64_t baseline = Simulate(BuildTrainingSchedule(g)).peak_bytes;
  nlohmann::json some_plan;
  for (const std::string& strategy : StrategyNames()) {
    if (strategy == "milp" && !MilpAvailable()) continue;
    PlanOptions po;
    po.strategy = strategy;
    po.budget_bytes = baseline * 7 / 10;
    if (strategy == "manual") po.checkpoints = {"h1", "h4"};
    nlohmann::json j = PlanToJson(MakePlan(g, {}, po), g);
    Write("plan", strategy + ".json", j.dump(1));
    Write("document", "plan-" + strategy + ".json", j.dump(1));
    if (strategy == "sqrt") some_plan = j;
  }
  {
    const GraphAtBatch at_batch = [](int64_t batch) {
      LoadOptions lo;
      lo.batch = batch;
      lo.loss = LossKind::kSum;
      return fuzz::PlanModel().Load(lo);
    };
    PlanOptions po;
    po.strategy = "optimal";
    po.budget_bytes = baseline / 2;
    Plan p = PlanMicroBatched(at_batch, fuzz::kPlanModelBatch, {}, po, 2);
    Write("plan", "micro-batched.json", PlanToJson(p, at_batch(p.batch)).dump(1));
    SweepResult s = SweepBudgets(g, {}, po, 4);
    nlohmann::json j = some_plan;
    j["sweep"] = SweepToJson(s);
    Write("document", "plan-sweep.json", j.dump(1));
  }

  // fuzz_document: a run as `memplan run --json --trace` writes it (memplan/run_report.h), and
  // a profile.
  RunReport report;
  report.memplan_version = MEMPLAN_VERSION;
  report.device = "cpu";
  report.steps = 2;
  report.measured_peak_bytes = 950;
  report.predicted_peak_bytes = 900;
  report.step_seconds = {3.0, 1.5};
  report.recompute_seconds = {0.5, 0.25};
  report.loss = {2.3, 2.2};
  report.plan = some_plan;
  report.plan.erase("timeline");
  report.model = some_plan["model"].get<std::string>();
  report.batch = some_plan["batch"].get<int64_t>();
  report.micro_batches = 1;
  report.seed = 0;
  report.peak_bytes = std::vector<int64_t>{950, 950};
  report.predicted_timeline = RunTimelineFromJson(some_plan["timeline"]);
  report.measured_trace =
      std::vector<RunTraceEvent>{{"setup", "", "", 100, 120}, {"forward", "", "", 800, 950}};
  const nlohmann::json run = RunReportToJson(report);
  Write("document", "run.json", run.dump(1));
  // The plain step, without a trace.
  report.plan = {{"strategy", "none"},
                 {"sections", nlohmann::json::array()},
                 {"checkpoints", nlohmann::json::array()}};
  report.measured_trace.reset();
  Write("document", "run-plain.json", RunReportToJson(report).dump(1));
  // A profile as `memplan run --profile` writes it (memplan/profiler.h): nested scopes, memory
  // events, a recompute segment.
  Profile profile;
  profile.model = report.model.value_or("m.onnx");
  profile.device = "cpu";
  profile.backend = "cpu";
  profile.step = 1;
  profile.batch = report.batch.value_or(1);
  profile.start_bytes = 100;
  profile.step_seconds = 1.0;
  profile.slices = {{0.0, 0.4, {Phase::kForward, kNone, 0, 0}, 0},
                    {0.1, 0.3, {Phase::kForward, 0, 0, 0}, 1},
                    {0.4, 0.6, {Phase::kRecompute, kNone, 0, 0}, 0},
                    {0.45, 0.55, {Phase::kRecompute, 0, 0, 0}, 1},
                    {0.6, 0.9, {Phase::kBackward, 0, 0, 0}, 0},
                    {0.9, 1.0, {Phase::kOptimizer, kNone, 0, 0}, 0}};
  profile.memory_events = {{0.15, 800, 900, {Phase::kForward, 0, 0, 0}},
                           {0.5, 50, 950, {Phase::kRecompute, 0, 0, 0}},
                           {0.7, -850, 100, {Phase::kBackward, 0, 0, 0}}};
  AggregateProfile(profile);
  Write("document", "profile.json", ProfileToJson(profile).dump(1));

  // fuzz_cli: command lines, NUL-separated.
  const std::vector<std::vector<std::string>> lines = {
      {"analyze", "m.onnx", "--batch", "8", "--dim", "seq=128", "--loss", "mse", "--optimizer",
       "adam", "--json", "a.json"},
      {"analyze", "m.onnx", "--batch=32", "--loss=sum"},
      {"plan", "m.onnx", "--budget", "1.5GiB", "--strategy", "optimal", "--json", "p.json"},
      {"plan", "m.onnx", "--budget", "50%", "--micro-batches", "auto", "--sweep"},
      {"plan", "m.onnx", "--budget", "300 MB", "--strategy", "manual", "--checkpoints", "a,b,,c"},
      {"plan", "m.onnx", "--sweep", "--time-limit", "2.5", "--strategy", "milp", "--micro-batches",
       "4"},
  };
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string bytes;
    for (size_t k = 0; k < lines[i].size(); ++k)
      bytes += (k ? std::string(1, '\0') : "") + lines[i][k];
    Write("cli", "argv-" + std::to_string(i), bytes);
  }
  std::printf("make_seeds: wrote the seed corpora under %s\n", out_dir.c_str());
  return 0;
}
