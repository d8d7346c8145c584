// `memplan run` end to end: the run JSON contract, plans from `memplan plan`, and bad input
// (a plan for another model or batch, unknown checkpoints, out of memory, missing weights):
// exit 1, a message naming what is wrong, and no JSON file.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "memplan/profiler.h"
#include "testing/corpus.h"
#include "testing/graph_builder.h"

namespace memplan {
namespace {

struct Result {
  int code = -1;
  std::string out;  // stdout and stderr
};

// `env`: variable assignments put before the command (e.g. "CUDA_VISIBLE_DEVICES=").
Result Cli(const std::string& args, const std::string& env = "") {
  std::string cmd =
      env + (env.empty() ? "" : " ") + std::string(MEMPLAN_CLI) + " " + args + " 2>&1";
  Result r;
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) r.out.append(buf, n);
  int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

bool Exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

nlohmann::json ReadJson(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

std::string Tmp(const std::string& name) {
  std::string p = ::testing::TempDir() + "/memplan_run_" + name;
  std::remove(p.c_str());
  return p;
}

TEST(RunCli, WritesTheRunJson) {
  std::string model = testing::CorpusModel("gpt");
  std::string out = Tmp("gpt.json");
  Result r = Cli("run " + model + " --batch 1 --steps 2 --seed 5 --random-weights --json " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("step 2/2"), std::string::npos) << r.out;
  nlohmann::json j = ReadJson(out);
  EXPECT_EQ(j["kind"], "run");
  for (const char* k :
       {"memplan_version", "device", "steps", "measured_peak_bytes", "predicted_peak_bytes",
        "step_seconds", "recompute_seconds", "loss", "plan"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  EXPECT_EQ(j["steps"], 2);
  EXPECT_EQ(j["loss"].size(), 2u);
  EXPECT_EQ(j["step_seconds"].size(), 2u);
  EXPECT_GT(j["measured_peak_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(j["plan"]["strategy"], "none");
}

TEST(RunCli, RunsAPlanFromMemplanPlan) {
  std::string model = testing::CorpusModel("gpt");
  std::string plan = Tmp("gpt_plan.json"), out = Tmp("gpt_planned.json");
  Result p = Cli("plan " + model + " --batch 2 --strategy sqrt --budget 10GiB --json " + plan);
  ASSERT_EQ(p.code, 0) << p.out;
  Result r = Cli("run " + model + " --plan " + plan + " --steps 1 --random-weights --json " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  nlohmann::json j = ReadJson(out);
  EXPECT_EQ(j["batch"], 2) << "the plan's batch is used";
  EXPECT_EQ(j["plan"]["strategy"], "sqrt");
  EXPECT_GT(j["plan"]["sections"].size(), 1u);
  EXPECT_GT(j["recompute_seconds"][0].get<double>(), 0.0);
}

// An offload plan runs (issue 24): the run JSON has the host peak the plan promised, measured,
// and a stall per step; --link-time none makes the emulated copies instantaneous.
TEST(RunCli, RunsAnOffloadPlan) {
  std::string model = testing::CorpusModel("gpt");
  std::string plan = Tmp("gpt_offload_plan.json"), out = Tmp("gpt_offloaded.json");
  Result p = Cli("plan " + model +
                 " --batch 2 --strategy offload --budget 85% --host-budget 1GiB --json " + plan);
  ASSERT_EQ(p.code, 0) << p.out;
  const nlohmann::json pj = ReadJson(plan);
  ASSERT_FALSE(pj["offloaded"].empty()) << pj.dump();
  Result r = Cli("run " + model + " --plan " + plan +
                 " --steps 2 --random-weights --link-time none --json " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("tensors offloaded"), std::string::npos) << r.out;
  nlohmann::json j = ReadJson(out);
  EXPECT_EQ(j["plan"]["strategy"], "offload");
  EXPECT_EQ(j["measured_host_peak_bytes"], pj["predicted_host_peak_bytes"]);
  EXPECT_EQ(j["predicted_host_peak_bytes"], pj["predicted_host_peak_bytes"]);
  EXPECT_EQ(j["predicted_peak_bytes"], pj["predicted_peak_bytes"]);
  EXPECT_EQ(j["stall_seconds"], nlohmann::json({0.0, 0.0}));
  EXPECT_LE(j["measured_peak_bytes"].get<int64_t>(), pj["budget_bytes"].get<int64_t>());
  EXPECT_NE(Cli("run " + model + " --plan " + plan + " --link-time slow --random-weights")
                .out.find("--link-time expects modelled or none"),
            std::string::npos);
}

TEST(RunCli, WritesAProfileAndAPerfettoTrace) {
  std::string model = testing::CorpusModel("gpt");
  std::string plan = Tmp("gpt_prof_plan.json"), out = Tmp("gpt_prof_run.json");
  std::string profile = Tmp("gpt_profile.json"), trace = Tmp("gpt_trace.json");
  Result p = Cli("plan " + model + " --batch 2 --strategy sqrt --budget 10GiB --json " + plan);
  ASSERT_EQ(p.code, 0) << p.out;
  Result r = Cli("run " + model + " --plan " + plan + " --steps 2 --random-weights --json " + out +
                 " --profile " + profile + " --trace-events " + trace);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("slowest ops"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("recompute per segment"), std::string::npos) << r.out;
  const Profile prof = ProfileFromJson(ReadJson(profile));
  const nlohmann::json run = ReadJson(out);
  EXPECT_EQ(prof.step, 1) << "the last step is profiled";
  EXPECT_EQ(prof.peak_bytes, run["measured_peak_bytes"].get<int64_t>())
      << "the same step, the same allocator";
  EXPECT_GT(prof.RecomputeSeconds(), 0);
  const nlohmann::json t = ReadJson(trace);
  EXPECT_TRUE(t["traceEvents"].is_array());
  EXPECT_GT(t["traceEvents"].size(), prof.slices.size());
}

TEST(RunCli, AnUnwritableOutputFailsBeforeTraining) {
  std::string model = testing::CorpusModel("gpt");
  std::string profile = Tmp("never_profile.json");
  Result r = Cli("run " + model + " --batch 1 --random-weights --profile " + profile +
                 " --trace-events /nonexistent-folder/trace.json");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("/nonexistent-folder"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("step 1/"), std::string::npos) << "no step ran: " << r.out;
  EXPECT_FALSE(Exists(profile));
}

TEST(RunCli, RunsAMicroBatchedPlan) {
  std::string model = testing::CorpusModel("gpt");
  std::string plan = Tmp("gpt_micro_plan.json"), out = Tmp("gpt_micro.json");
  Result p = Cli("plan " + model + " --batch 4 --micro-batches 2 --budget 10GiB --json " + plan);
  ASSERT_EQ(p.code, 0) << p.out;
  Result r = Cli("run " + model + " --plan " + plan + " --steps 1 --random-weights --json " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  nlohmann::json j = ReadJson(out);
  EXPECT_EQ(j["batch"], 4);
  EXPECT_EQ(j["micro_batches"], 2);
  // gpt's peak is exact on the CPU up to nll_loss's 4-byte total weight.
  EXPECT_NEAR(j["measured_peak_bytes"].get<double>(), j["predicted_peak_bytes"].get<double>(), 64);
  r = Cli("run " + model + " --plan " + plan + " --batch 3 --steps 1 --random-weights");
  EXPECT_EQ(r.code, 1) << r.out;
}

TEST(RunCli, RejectsAPlanForAnotherModelOrBatch) {
  std::string gpt = testing::CorpusModel("gpt"), resnet = testing::CorpusModel("resnet18");
  std::string plan = Tmp("other_plan.json"), out = Tmp("other.json");
  ASSERT_EQ(Cli("plan " + gpt + " --batch 2 --strategy sqrt --budget 10GiB --json " + plan).code,
            0);
  Result r = Cli("run " + resnet + " --plan " + plan + " --steps 1 --random-weights --json " + out);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("another model"), std::string::npos) << r.out;
  EXPECT_FALSE(Exists(out));
  r = Cli("run " + gpt + " --plan " + plan + " --batch 4 --steps 1 --random-weights --json " + out);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("batch"), std::string::npos) << r.out;
  EXPECT_FALSE(Exists(out));
}

// A plan of FSDP2's runtime predicts fully_shard's buffers, which memplan's executor does not
// allocate: running it is refused, naming the way to a plan memplan runs.
TEST(RunCli, RefusesAPlanOfFsdp2sRuntime) {
  std::string gpt = testing::CorpusModel("gpt");
  std::string plan = Tmp("fsdp2_plan.json"), out = Tmp("fsdp2.json");
  Result p = Cli("plan " + gpt + " --batch 4 --strategy none --budget 10GiB --devices 2 --shard " +
                 "parameters --runtime fsdp2 --json " + plan);
  ASSERT_EQ(p.code, 0) << p.out;
  Result r = Cli("run " + gpt + " --plan " + plan + " --steps 1 --random-weights --json " + out);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("fsdp2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("without --runtime"), std::string::npos) << r.out;
  EXPECT_FALSE(Exists(out));
}

// A run says what its plan promised: the budget and whether the measurement held it, the
// recompute time predicted beside the measured one; and it warns before training when the
// plan said it does not fit, or when an option changes the memory that was planned.
TEST(RunCli, SaysWhatThePlanPromised) {
  std::string gpt = testing::CorpusModel("gpt");
  std::string plan = Tmp("promise_plan.json");
  ASSERT_EQ(Cli("plan " + gpt + " --batch 2 --strategy sqrt --budget 10GiB --json " + plan).code,
            0);
  Result r = Cli("run " + gpt + " --plan " + plan + " --steps 1 --random-weights");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("budget       10.00 GiB (the plan's): held"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("predicted by the plan"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("warning"), std::string::npos) << r.out;
  // The plan was made for sgd; adam adds two state tensors per parameter.
  r = Cli("run " + gpt + " --plan " + plan + " --optimizer adam --steps 1 --random-weights");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("warning: --optimizer adam (the plan's: sgd) changes the step's memory"),
            std::string::npos)
      << r.out;
  // A plan that says it does not fit.
  nlohmann::json j = ReadJson(plan);
  j["feasible"] = false;
  std::ofstream(plan) << j.dump();
  r = Cli("run " + gpt + " --plan " + plan + " --steps 1 --random-weights");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("does not fit its budget"), std::string::npos) << r.out;
}

// The batch a run asks for is named as the batch, not as the micro-batch it loads.
TEST(RunCli, ABatchMismatchNamesTheRunsBatch) {
  std::string gpt = testing::CorpusModel("gpt");
  std::string plan = Tmp("mismatch_plan.json");
  ASSERT_EQ(Cli("plan " + gpt + " --batch 8 --micro-batches 4 --budget 10GiB --json " + plan).code,
            0);
  Result r = Cli("run " + gpt + " --plan " + plan + " --batch 4 --steps 1 --random-weights");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("this run's batch is 4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--batch 8"), std::string::npos) << r.out;
}

// Calibrating needs the GPU it measures: without one, a clear error and no device file.
TEST(RunCli, CalibrateWithoutAVisibleDeviceIsAClearError) {
  std::string out = Tmp("device.json");
  Result r = Cli("calibrate --device cuda --json " + out, "CUDA_VISIBLE_DEVICES=");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("cuda"), std::string::npos) << r.out;
  EXPECT_FALSE(Exists(out));
  r = Cli("calibrate --device gpu0");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("gpu0"), std::string::npos) << r.out;
  // With a model (its cuDNN conv workspaces): the same error and no file; a bad model names itself
  // first; two models are one too many.
  const std::string resnet = testing::CorpusModel("resnet18");
  r = Cli("calibrate --device cuda --json " + out + " " + resnet + " --batch 2",
          "CUDA_VISIBLE_DEVICES=");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("cannot measure cuda"), std::string::npos) << r.out;
  EXPECT_FALSE(Exists(out));
  r = Cli("calibrate --device cuda --json " + out + " " + Tmp("missing.onnx"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("missing.onnx"), std::string::npos) << r.out;
  EXPECT_FALSE(Exists(out));
  r = Cli("calibrate --device cuda " + resnet + " " + resnet);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("at most one"), std::string::npos) << r.out;
}

TEST(RunCli, RejectsUnknownCheckpoints) {
  std::string gpt = testing::CorpusModel("gpt");
  std::string plan = Tmp("ckpt_plan.json"), bad = Tmp("ckpt_bad.json"), out = Tmp("ckpt.json");
  ASSERT_EQ(Cli("plan " + gpt + " --batch 2 --strategy sqrt --budget 10GiB --json " + plan).code,
            0);
  nlohmann::json j = ReadJson(plan);
  j["checkpoints"].push_back("no_such_tensor");
  std::ofstream(bad) << j.dump();
  Result r = Cli("run " + gpt + " --plan " + bad + " --steps 1 --random-weights --json " + out);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("no_such_tensor"), std::string::npos) << r.out;
  EXPECT_FALSE(Exists(out));
}

TEST(RunCli, OutOfMemoryIsAClearErrorWithoutJson) {
  std::string gpt = testing::CorpusModel("gpt");
  std::string out = Tmp("oom.json");
  // More than the weights (28.18 MiB), less than one step needs (74.03 MiB).
  Result r = Cli("run " + gpt +
                 " --batch 2 --steps 1 --random-weights --memory-limit 50MiB --json " + out);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("out of memory"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--budget"), std::string::npos) << r.out;
  EXPECT_FALSE(Exists(out));
}

// A TensorProto file of int64 token ids.
void WriteIds(const std::string& path, std::vector<int64_t> dims, int64_t value) {
  onnx::TensorProto t;
  t.set_data_type(onnx::TensorProto::INT64);
  int64_t n = 1;
  for (int64_t d : dims) {
    t.add_dims(d);
    n *= d;
  }
  for (int64_t i = 0; i < n; ++i) t.add_int64_data((value + i) % 100);
  std::ofstream(path, std::ios::binary) << t.SerializeAsString();
}

TEST(RunCli, TrainsOnTheUsersTensors) {
  std::string gpt = testing::CorpusModel("gpt");
  std::string ids = Tmp("ids.pb"), bad = Tmp("bad_ids.pb"), out = Tmp("ids.json");
  WriteIds(ids, {1, 128}, 7);
  WriteIds(bad, {1, 64}, 7);
  Result r = Cli("run " + gpt + " --batch 1 --steps 1 --random-weights --input input_ids=" + ids +
                 " --json " + out);
  EXPECT_EQ(r.code, 0) << r.out;
  r = Cli("run " + gpt + " --batch 1 --steps 1 --random-weights --input input_ids=" + bad);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("input_ids"), std::string::npos) << r.out;
}

// An --input .pb whose data lives in an external file: like a model's initializers, it may
// only read files inside its own folder, and its offset and length must be numbers (issue 13).
void WriteExternalIds(const std::string& path, const std::string& location,
                      const std::string& offset) {
  onnx::TensorProto t;
  t.set_name("input_ids");
  t.set_data_type(onnx::TensorProto::INT64);
  t.add_dims(1);
  t.add_dims(128);
  t.set_data_location(onnx::TensorProto::EXTERNAL);
  auto* kv = t.add_external_data();
  kv->set_key("location");
  kv->set_value(location);
  kv = t.add_external_data();
  kv->set_key("offset");
  kv->set_value(offset);
  std::ofstream(path, std::ios::binary) << t.SerializeAsString();
}

TEST(RunCli, InputFilesReadNothingOutsideTheirFolder) {
  const std::string gpt = testing::CorpusModel("gpt");
  const std::string escape = Tmp("escape_ids.pb"), bad_offset = Tmp("offset_ids.pb"),
                    out = Tmp("escape.json");
  WriteExternalIds(escape, "../../../usr/bin/python3", "0");
  Result r =
      Cli("run " + gpt + " --batch 1 --steps 1 --random-weights --input input_ids=" + escape +
          " --json " + out);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("outside the model's folder"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("../../../usr/bin/python3"), std::string::npos) << r.out;
  EXPECT_FALSE(std::ifstream(out).good()) << "no output file on a refused input";
  WriteExternalIds(bad_offset, "ids.bin", "abc");
  r = Cli("run " + gpt + " --batch 1 --steps 1 --random-weights --input input_ids=" + bad_offset);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("offset"), std::string::npos) << r.out;
}

TEST(RunCli, BadArgumentsAreUserErrors) {
  std::string gpt = testing::CorpusModel("gpt");
  EXPECT_EQ(Cli("run " + gpt + " --steps 0 --random-weights").code, 1);
  EXPECT_EQ(Cli("run " + gpt + " --device tpu --random-weights").code, 1);
  EXPECT_EQ(Cli("run " + gpt + " --plan /nonexistent/plan.json --random-weights").code, 1);
  EXPECT_EQ(Cli("run " + gpt + " --input nosuch=/tmp/x.pb --random-weights --steps 1").code, 1);
  EXPECT_EQ(Cli("run /nonexistent/model.onnx").code, 1);
}

// The executor links the torch wheel's LibTorch; `--version` must say which, as the
// wheel's own Python reports it (an independent reading of the same installation).
TEST(RunCli, VersionNamesTheLibTorchAndItsCuda) {
  std::string cmd = std::string(MEMPLAN_PYTHON) +
                    " -c \"import torch; print(torch.__version__.split('+')[0], torch.version.cuda "
                    "or 'none')\" 2>/dev/null";
  std::string expected;
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[256];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) expected.append(buf, n);
  ASSERT_EQ(::pclose(p), 0) << cmd;
  std::istringstream in(expected);
  std::string torch_version, cuda_version;
  in >> torch_version >> cuda_version;
  Result r = Cli("--version");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("LibTorch " + torch_version), std::string::npos) << r.out;
  if (cuda_version != "none")
    EXPECT_NE(r.out.find("CUDA " + cuda_version), std::string::npos) << r.out;
}

// With no GPU visible (CUDA_VISIBLE_DEVICES empty hides any there is), a CUDA build says that
// no device is visible, not that it lacks CUDA, and writes nothing.
TEST(RunCli, CudaWithoutAVisibleDeviceIsAClearError) {
  if (Cli("--version").out.find("CUDA") == std::string::npos) GTEST_SKIP() << "a CPU-only LibTorch";
  std::string gpt = testing::CorpusModel("gpt");
  std::string out = Tmp("cuda.json");
  Result r = Cli("run " + gpt + " --device cuda --random-weights --steps 1 --json " + out);
  Result hidden = Cli("run " + gpt + " --device cuda:0 --random-weights --steps 1 --json " + out,
                      "CUDA_VISIBLE_DEVICES=");
  EXPECT_EQ(hidden.code, 1) << hidden.out;
  EXPECT_NE(hidden.out.find("no CUDA device is visible"), std::string::npos) << hidden.out;
  EXPECT_EQ(hidden.out.find("without CUDA"), std::string::npos) << hidden.out;
  EXPECT_FALSE(Exists(out));
  if (r.code != 0) {  // this machine has no GPU: the plain call says the same
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find("no CUDA device is visible"), std::string::npos) << r.out;
  }
}

// x[N,8] -> MatMul -> [N,4], saved under the test temp dir.
std::string TinyModel(const std::string& name) {
  std::string model = Tmp(name);
  testing::GraphBuilder b;
  b.Input("x", {-1, 8}).Param("w", {8, 4});
  b.Node("MatMul", {"x", "w"}, {"y"}).Output("y");
  b.Save(model);
  return model;
}

// Options are parsed strictly, with ranges, before any training starts.
TEST(RunCli, OutOfRangeOptionsAreRejected) {
  std::string model = TinyModel("tiny.onnx");
  const std::pair<const char*, const char*> cases[] = {
      {"--threads -1", "--threads '-1' is out of range: give a whole number from 1 to 1024"},
      {"--threads 2147483648", "--threads '2147483648' is out of range"},
      {"--threads 100000", "--threads '100000' is out of range"},
      {"--lr 1e308", "--lr '1e308' is out of range"},
      {"--lr inf", "--lr expects a number"},
      {"--memory-limit ..5", "--memory-limit: cannot read size '..5'"},
      {"--steps 0", "--steps '0' is out of range"},
  };
  for (const auto& [args, expect] : cases) {
    std::string out = Tmp("bad_option.json");
    Result r = Cli("run " + model + " --random-weights " + args + " --json " + out);
    EXPECT_EQ(r.code, 1) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(expect), std::string::npos) << args << "\n" << r.out;
    EXPECT_FALSE(Exists(out)) << args;
  }
}

// A batch whose step cannot fit in this machine's memory is refused before anything is
// allocated (not killed by the kernel part-way). Batch 2^45 of the tiny model, at the loss's
// backward: x [2^45, 8] float, 2^50 B = 1024 TiB; the target [2^45] int64, 256 TiB; the
// loss's saved log-probabilities [2^45, 4] float, 512 TiB; y's gradient, 512 TiB; the loss
// backward's workspace (y's size), 512 TiB; w, its gradient and the loss's, 260 B: 2816 TiB,
// more than any machine has.
TEST(RunCli, ABatchBeyondTheMachinesMemoryIsRefusedUpFront) {
  std::string model = TinyModel("tiny_huge_batch.onnx");
  std::string out = Tmp("huge_batch.json");
  auto start = std::chrono::steady_clock::now();
  Result r =
      Cli("run " + model + " --batch 35184372088832 --steps 1 --random-weights --json " + out);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find(model + ": the predicted peak of a training step at batch 35184372088832 is "
                               "2816.00 TiB, more than the"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("this machine can use"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("memplan plan " + model + " --batch 35184372088832 --budget"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("or use a smaller --batch"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("step 1/1"), std::string::npos) << r.out;  // no step started
  EXPECT_FALSE(Exists(out));
  EXPECT_LT(seconds, 30);
}

// Ranks on one host share its memory: a rank checks LOCAL_WORLD_SIZE times its own peak. Rank 0
// of 2^20 ranks, all on this host (LOCAL_WORLD_SIZE), at 2^16 rows each: x alone is 2 MiB per
// rank, 2 TiB for the host, more than any machine has, though one rank's step fits. It is
// refused before the rendezvous (no rank 1 is listening) and names the ranks per host.
TEST(RunCli, RanksThatTogetherExceedTheHostAreRefusedUpFront) {
  std::string model = TinyModel("tiny_local_ranks.onnx");
  std::string out = Tmp("local_ranks.json");
  const std::string env =
      "RANK=0 LOCAL_RANK=0 WORLD_SIZE=1048576 LOCAL_WORLD_SIZE=1048576 MASTER_ADDR=127.0.0.1 "
      "MASTER_PORT=9";
  Result r = Cli(
      "run " + model + " --batch 68719476736 --steps 1 --random-weights --timeout 5 --json " + out,
      env);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("1048576 ranks on this host each predict a peak of"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("Start fewer ranks per host"), std::string::npos) << r.out;
  EXPECT_FALSE(Exists(out));
}

// With --memory-limit the user's limit applies instead: the run starts, and the allocation
// beyond the limit fails as out of memory (the 1024 TiB input is refused, never allocated).
TEST(RunCli, WithAMemoryLimitTheLimitDecides) {
  std::string model = TinyModel("tiny_limit.onnx");
  std::string out = Tmp("limit.json");
  Result r =
      Cli("run " + model +
          " --batch 35184372088832 --steps 1 --random-weights --memory-limit 1MiB --json " + out);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.out.find("this machine can use"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("out of memory in the setup"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("exceeds the memory limit of 1048576 bytes"), std::string::npos) << r.out;
  EXPECT_FALSE(Exists(out));
  // A batch that fits runs under a limit above its peak.
  r = Cli("run " + model + " --batch 4 --steps 1 --random-weights --memory-limit 1MiB --json " +
          out);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Exists(out));
}

TEST(RunCli, PlanWhoseKindIsNotAStringIsNotAPlan) {
  std::string model = TinyModel("tiny_kind.onnx");
  for (const char* kind : {"1", "null", "[\"plan\"]"}) {
    std::string plan = Tmp("kind.json");
    std::ofstream(plan) << "{\"kind\": " << kind << "}";
    Result r = Cli("run " + model + " --random-weights --plan " + plan);
    EXPECT_EQ(r.code, 1) << kind << "\n" << r.out;
    EXPECT_NE(r.out.find("is not a memplan plan"), std::string::npos) << r.out;
  }
}

// memplan calibrate without --device measures this CPU: its kernels, and each convolution
// signature of the model; analyze and plan with the file take the measurements (no margin), and
// run checks that the file is this machine's.
TEST(RunCli, CalibratesThisCpuForItsDeviceFile) {
  const std::string resnet = testing::CorpusModel("resnet18");
  const std::string dev = Tmp("cpu.json"), analysis = Tmp("analysis.json");
  // calibrate's cache in a folder of the test's own (an empty one, then the one it fills).
  const std::string empty = Tmp("empty-cache"), cache = Tmp("cache");
  std::filesystem::remove_all(cache);
  const std::string in_cache = "XDG_CACHE_HOME=" + cache;
  Result r = Cli("calibrate " + resnet + " --batch 2 --json " + dev, in_cache);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("signatures exact"), std::string::npos) << r.out;
  const nlohmann::json file = ReadJson(dev);
  EXPECT_EQ(file["kind"], "cpu_device");
  EXPECT_GE(file["workspaces"].size(), 10u);  // resnet18's distinct convolutions
  r = Cli("analyze " + resnet + " --batch 2 --json " + analysis, "XDG_CACHE_HOME=" + empty);
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json here = ReadJson(analysis)["cpu_device"];
  EXPECT_EQ(here["fingerprint"], file["fingerprint"]);
  EXPECT_EQ(here["calibrated_workspaces"], 0);
  // The measurements are kept by the device's fingerprint: this machine predicts with them.
  EXPECT_TRUE(Exists(cache + "/memplan/cpu_workspaces.json"));
  r = Cli("analyze " + resnet + " --batch 2 --json " + analysis, in_cache);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(ReadJson(analysis)["cpu_device"]["calibrated_workspaces"], file["workspaces"].size());
  // Other threads are another device: not calibrated.
  r = Cli("analyze " + resnet + " --batch 2 --threads 7 --json " + analysis, in_cache);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(ReadJson(analysis)["cpu_device"]["calibrated_workspaces"], 0);
  r = Cli("analyze " + resnet + " --batch 2 --device-file " + dev + " --json " + analysis);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("memplan calibrate"), std::string::npos) << r.out;
  EXPECT_EQ(ReadJson(analysis)["cpu_device"]["calibrated_workspaces"], file["workspaces"].size());
  // Another machine's file is refused by run, which measures this one.
  nlohmann::json other = file;
  other["isa"] = file["isa"] == "avx2" ? "sse41" : "avx2";
  const std::string other_file = Tmp("other.json"), json = Tmp("run.json");
  std::ofstream(other_file) << other.dump();
  r = Cli("run " + resnet + " --batch 2 --steps 1 --random-weights --device-file " + other_file +
          " --json " + json);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("calibrate this machine"), std::string::npos) << r.out;
  EXPECT_FALSE(Exists(json));
}

TEST(RunCli, WarnsWhenAPlanMadeForAnotherDeviceRuns) {
  const std::string gpt = testing::CorpusModel("gpt");
  const std::string plan = Tmp("plan.json");
  Result r = Cli("plan " + gpt + " --batch 2 --budget 90% --strategy sqrt --json " + plan);
  ASSERT_EQ(r.code, 0) << r.out;
  nlohmann::json p = ReadJson(plan);
  const std::string here = p["device_fingerprint"];
  r = Cli("run " + gpt + " --plan " + plan + " --steps 1 --random-weights");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("was made for"), std::string::npos) << r.out;  // made here
  p["device_fingerprint"] = "avx2/64t/torch-2.14.1/onednn-v3.12.0";
  p["device_summary"] = "avx2 (Intel AVX2), 64 threads";
  std::ofstream(plan) << p.dump();
  r = Cli("run " + gpt + " --plan " + plan + " --steps 1 --random-weights");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("was made for avx2 (Intel AVX2), 64 threads"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(here), std::string::npos) << r.out;  // and names this machine
}

}  // namespace
}  // namespace memplan
