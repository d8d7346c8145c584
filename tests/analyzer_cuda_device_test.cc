// The CUDA device's memory beside a step's tensors (memplan/cuda_device.h): the cuBLAS and
// cuBLASLt workspaces by LibTorch's rule, and the reserved peak through the allocator model,
// with hand-computed numbers.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "memplan/cuda_device.h"
#include "testing/corpus.h"
#include "testing/graph_builder.h"

namespace memplan {
namespace {

using testing::ErrorOf;

constexpr int64_t KiB = 1024;
constexpr int64_t MiB = 1024 * KiB;

// x[N,100] -> MatMul w[100,100] -> y -> cross-entropy: one matmul, so cuBLAS runs.
TrainingGraph MatmulGraph() {
  testing::GraphBuilder b;
  b.Input("x", {-1, 100}).Param("w", {100, 100}).Node("MatMul", {"x", "w"}, {"y"});
  return b.Output("y").Load({});
}

// x[N,100] -> Relu: no matmul, no cuBLAS handle.
TrainingGraph ReluGraph() {
  testing::GraphBuilder b;
  b.Input("x", {-1, 100})
      .Param("w", {100})
      .Node("Mul", {"x", "w"}, {"h"})
      .Node("Relu", {"h"}, {"y"});
  return b.Output("y").Load({});
}

TEST(CudaDevice, CublasWorkspaceFollowsLibTorchsRule) {
  CudaDevice d;
  // Unknown GPU: compute capability 9.0's default, 4096 KiB x 8.
  EXPECT_EQ(CublasWorkspaceBytes(d), 32 * MiB);
  d.compute_major = 8;  // before Hopper: 4096 KiB x 2 + 16 KiB x 8
  EXPECT_EQ(CublasWorkspaceBytes(d), 8 * MiB + 128 * KiB);
  d.cublas_workspace_config = ":4096:2:16:8";
  EXPECT_EQ(CublasWorkspaceBytes(d), 8 * MiB + 128 * KiB);
  d.cublas_workspace_config = ":0:0";  // what made the measured gap vanish on gpt b32
  EXPECT_EQ(CublasWorkspaceBytes(d), 0);
  for (const char* bad : {"4096:8", ":4096", ":a:8", ":4096:8:"}) {
    d.cublas_workspace_config = bad;
    EXPECT_NE(ErrorOf([&] { CublasWorkspaceBytes(d); }).find("CUBLAS_WORKSPACE_CONFIG"),
              std::string::npos)
        << bad;
  }
}

TEST(CudaDevice, OnlyGraphsWithAMatmulKeepCublasWorkspaces) {
  CudaDevice d;
  EXPECT_EQ(LibraryWorkspaceBytes(MatmulGraph(), d), 2 * 32 * MiB);  // cuBLAS and cuBLASLt
  EXPECT_EQ(LibraryWorkspaceBytes(ReluGraph(), d), 0);
}

// The workspaces are a setup buffer of every schedule, so the allocated peak grows by them.
TEST(CudaDevice, TheScheduleCarriesTheWorkspaces) {
  TrainingGraph g = MatmulGraph();
  const int64_t plain = Simulate(BuildTrainingSchedule(g)).peak_bytes;
  g.library_workspace_bytes = 64 * MiB;
  const Schedule s = BuildTrainingSchedule(g);
  EXPECT_EQ(Simulate(s).peak_bytes, plain + 64 * MiB);
}

// Reserved memory of the matmul step, tensors all under 1 MiB (the small pool) and one 64 MiB
// workspace buffer (the large pool):
//   expandable segments: the small pool maps one 2 MiB page; the large pool maps 20 MiB pages,
//     4 for 64 MiB: 80 MiB + 2 MiB = 82 MiB;
//   default: a 2 MiB small segment and a 64 MiB large one (>= 10 MiB: rounded to 2 MiB) = 66 MiB.
TEST(CudaDevice, ReservedPeakInBothAllocatorModes) {
  TrainingGraph g = MatmulGraph();
  CudaDevice d;
  g.library_workspace_bytes = LibraryWorkspaceBytes(g, d);
  const Schedule s = BuildTrainingSchedule(g);
  DeviceMemory m = PredictDeviceMemory(s, d);
  EXPECT_EQ(m.allocator_mode, "expandable_segments");
  EXPECT_EQ(m.workspace_bytes, 64 * MiB);
  EXPECT_EQ(m.reserved_peak_bytes, 82 * MiB);
  EXPECT_EQ(m.context_bytes, kDefaultContextBytes);
  EXPECT_FALSE(m.context_measured);
  EXPECT_EQ(m.card_peak_bytes(), 82 * MiB + kDefaultContextBytes);
  d.allocator_conf = "";
  m = PredictDeviceMemory(s, d);
  EXPECT_EQ(m.allocator_mode, "default");
  EXPECT_EQ(m.reserved_peak_bytes, 66 * MiB);
}

TEST(CudaDevice, DeviceFileRoundTripsAndNamesBadFields) {
  CudaDevice d;
  d.name = "NVIDIA H200";
  d.compute_major = 9;
  d.torch_version = "2.11.0+cu130";
  d.total_memory_bytes = 150 * 1024 * MiB;
  d.context_bytes = 860 * 1000 * 1000;
  d.cublas_workspace_config = ":4096:8";
  const CudaDevice back = CudaDeviceFromJson(CudaDeviceToJson(d));
  EXPECT_EQ(back.name, d.name);
  EXPECT_EQ(back.compute_major, 9);
  EXPECT_EQ(back.context_bytes, d.context_bytes);
  EXPECT_EQ(back.cublas_workspace_config, ":4096:8");
  EXPECT_TRUE(back.measured);
  nlohmann::json j = CudaDeviceToJson(d);
  j.erase("context_bytes");
  EXPECT_NE(ErrorOf([&] { CudaDeviceFromJson(j); }).find("context_bytes"), std::string::npos);
  j = CudaDeviceToJson(d);
  j["kind"] = "plan";
  EXPECT_NE(ErrorOf([&] { CudaDeviceFromJson(j); }).find("kind"), std::string::npos);
  EXPECT_NE(ErrorOf([] { CudaDeviceFromEnvironment("gpu0"); }).find("gpu0"), std::string::npos);
}

// x[2,4,8,8] -> Mul s[4,1,1] (so x's gradient flows into the conv) -> Conv w[8,4,3,3] pad 1 ->
// c[2,8,8,8]
// -> Reshape [2,512] -> MatMul fc[512,10]. Bytes: h (the conv's input) 2*4*8*8*4 = 2048, w
// 8*4*3*3*4 = 1152, c 2*8*8*8*4 = 4096.
TrainingGraph ConvGraph(std::vector<int64_t> pads = {1, 1, 1, 1}, int64_t group = 1,
                        int64_t batch = 2) {
  testing::GraphBuilder b;
  b.Input("x", {-1, 4, 8, 8})
      .Param("s", {4, 1, 1})
      .Param("w", {8, 4 / group, 3, 3})
      .Param("fc", {512, 10});
  b.Ints("shape", {-1, 512});
  b.Node("Mul", {"x", "s"}, {"h"});
  b.Node("Conv", {"h", "w"}, {"c"}).Attr("pads", pads).Attr("group", group);
  b.Node("Reshape", {"c", "shape"}, {"flat"}).Node("MatMul", {"flat", "fc"}, {"y"});
  return b.Output("y").Load({.batch = batch});
}

const Node& ConvNode(const TrainingGraph& g) {
  for (const Node& n : g.nodes) {
    if (n.op_type == "Conv") return n;
  }
  throw MemplanError("no Conv");
}

int64_t BufferBytes(const Schedule& s, const std::string& name) {
  for (const Buffer& b : s.buffers) {
    if (b.name == name) return b.bytes;
  }
  return -1;
}

TEST(CudaDevice, ConvSignatureIsTheExecutorsGeometry) {
  TrainingGraph g = ConvGraph();
  std::optional<ConvGeometry> geo = CudnnConvGeometry(ConvNode(g), g.tensors);
  ASSERT_TRUE(geo);
  EXPECT_EQ(geo->signature(),
            "float32 x[2,4,8,8] w[8,4,3,3] stride[1,1] pad[1,1] dilation[1,1] group 1");
  // Asymmetric pads: the executor pads explicitly (8 + 0 + 2 = 10 rows and columns), then pads
  // nothing.
  g = ConvGraph({0, 0, 2, 2});
  geo = CudnnConvGeometry(ConvNode(g), g.tensors);
  ASSERT_TRUE(geo);
  EXPECT_EQ(geo->signature(),
            "float32 x[2,4,10,10] w[8,4,3,3] stride[1,1] pad[0,0] dilation[1,1] group 1");
  // Depthwise in float32 (4 groups of one input channel): LibTorch's own kernel, not cuDNN.
  g = ConvGraph({1, 1, 1, 1}, /*group=*/4);
  EXPECT_FALSE(CudnnConvGeometry(ConvNode(g), g.tensors));
}

// torch.nn.Dropout on CUDA runs the fused native_dropout, which saves a bool mask (1 B per
// element) where the CPU's at::dropout saves a float noise (4 B): [8,10] is 80 B, not 320 B.
TEST(CudaDevice, ADropoutSavesNativeDropoutsBoolMask) {
  testing::GraphBuilder b;
  b.Input("x", {-1, 100}).Param("w", {100, 10});
  b.Node("MatMul", {"x", "w"}, {"h"});
  b.Node("Constant", {}, {"ratio"}).Attr("value_float", 0.5);
  b.Node("Constant", {}, {"train"}).Attr("value_int", int64_t{1});
  b.Node("Dropout", {"h", "ratio", "train"}, {"d", "unread mask"});
  b.Output("d");
  TrainingGraph g = b.Load({/*batch=*/8});
  auto dropout = [](const TrainingGraph& g) -> const Node& {
    return g.node(g.tensor(g.FindTensor("d")).producer);
  };
  ASSERT_EQ(dropout(g).saved_extras.size(), 1u);
  EXPECT_EQ(dropout(g).saved_extras[0].bytes, 320);
  PrepareGraphForCuda(g, CudaDevice{});
  ASSERT_EQ(dropout(g).saved_extras.size(), 1u);
  EXPECT_EQ(dropout(g).saved_extras[0].bytes, 80);
  EXPECT_EQ(dropout(g).saved_extras[0].dtype, DType::kBool);
}

// Without a device file: x + y + w = 2048 + 4096 + 1152 = 7296 B per pass. The backward step holds
// the input's gradient, the weight's (1152 B: 1536 in blocks) and the workspace together:
// max(7680 - 1536, 7680) = 7680 B in 512-byte blocks. The CPU keeps oneDNN's rules.
TEST(CudaDevice, ConvWorkspacesAreTransientsOfTheConvStepsOnCudaOnly) {
  const TrainingGraph cpu = ConvGraph();
  TrainingGraph g = ConvGraph();
  CudaDevice d;
  PrepareGraphForCuda(g, d);
  EXPECT_EQ(ConvNode(g).forward_workspace_bytes, 7296);
  EXPECT_EQ(ConvNode(g).backward_workspace_bytes, 7680);
  EXPECT_EQ(g.library_workspace_bytes, 64 * MiB);  // the MatMul's cuBLAS and cuBLASLt
  const Schedule s = BuildTrainingSchedule(g);
  const std::string conv = ConvNode(g).name;
  EXPECT_EQ(BufferBytes(s, conv + ":forward workspace"), 7296);
  EXPECT_EQ(BufferBytes(s, conv + ":backward workspace"), 7680);
  // The forward step holds the output and the workspace: 4096 + 7296 B above the step before it.
  const MemoryTimeline t = Simulate(s);
  for (size_t i = 1; i < s.steps.size(); ++i) {
    if (s.steps[i].node == ConvNode(g).id && s.steps[i].phase == Phase::kForward) {
      EXPECT_EQ(t.bytes_during[i] - t.bytes_after[i - 1], 4096 + 7296);
    }
  }
  // CPU unchanged: only PrepareGraphForCuda moves the workspaces, and the CPU rules' differ.
  EXPECT_NE(ConvNode(cpu).forward_workspace_bytes, 7296);
  EXPECT_NE(ConvNode(cpu).backward_workspace_bytes, 7680);
  EXPECT_EQ(cpu.library_workspace_bytes, 0);
  EXPECT_EQ(Simulate(BuildTrainingSchedule(cpu)).peak_bytes,
            Simulate(BuildTrainingSchedule(ConvGraph())).peak_bytes);
}

// Measured workspaces replace the estimate. Backward: the data pass's 20000 B (20480 in blocks)
// came before the weight's gradient (1536), the filter pass's 3000 B (3072) after it:
// max(20480 - 1536, 3072) = 18944 B beside both gradients is the true peak of the two calls.
TEST(CudaDevice, MeasuredConvWorkspacesAreUsedAndNeedNoMargin) {
  TrainingGraph g = ConvGraph();
  CudaDevice d;
  EXPECT_EQ(ConvWorkspaceMarginBytes(g, d), 16 * MiB);  // max(16 MiB, 2048 / 2)
  const std::string sig = CudnnConvGeometry(ConvNode(g), g.tensors)->signature();
  d.conv_workspaces[sig] = {/*forward_bytes=*/1000, /*backward_data_bytes=*/20000,
                            /*backward_filter_bytes=*/3000};
  PrepareGraphForCuda(g, d);
  EXPECT_EQ(ConvNode(g).forward_workspace_bytes, 1000);
  EXPECT_EQ(ConvNode(g).backward_workspace_bytes, 18944);
  EXPECT_EQ(ConvWorkspaceMarginBytes(g, d), 0);
  // A batch of 65536: the conv's input is 65536 * 1024 B = 64 MiB, its margin half of it; the
  // measured signature (batch 2) no longer matches.
  TrainingGraph big = ConvGraph({1, 1, 1, 1}, 1, /*batch=*/65536);
  EXPECT_EQ(ConvWorkspaceMarginBytes(big, d), 32 * MiB);
  // A depthwise float32 conv has no cuDNN workspace, and no margin.
  TrainingGraph depthwise = ConvGraph({1, 1, 1, 1}, /*group=*/4);
  PrepareGraphForCuda(depthwise, CudaDevice{});
  EXPECT_EQ(ConvNode(depthwise).forward_workspace_bytes, 0);
  EXPECT_EQ(ConvNode(depthwise).backward_workspace_bytes, 0);
  EXPECT_EQ(ConvWorkspaceMarginBytes(depthwise, CudaDevice{}), 0);
}

TEST(CudaDevice, DeviceFileCarriesConvWorkspaces) {
  CudaDevice d;
  d.conv_workspaces["float32 x[2,4,8,8] w[8,4,3,3] stride[1,1] pad[1,1] dilation[1,1] group 1"] = {
      1, 2, 3};
  d.conv_workspaces["float32 x[1,3,9,9] w[2,3,1,1] stride[2,2] pad[0,0] dilation[1,1] group 1"] = {
      0, 0, 7};
  const CudaDevice back = CudaDeviceFromJson(CudaDeviceToJson(d));
  EXPECT_EQ(back.conv_workspaces, d.conv_workspaces);
  nlohmann::json j = CudaDeviceToJson(d);
  j["conv_workspaces"][1].erase("backward_filter_bytes");
  EXPECT_NE(
      ErrorOf([&] { CudaDeviceFromJson(j); }).find("conv_workspaces[1].backward_filter_bytes"),
      std::string::npos);
  j = CudaDeviceToJson(d);
  j["conv_workspaces"][0]["forward_bytes"] = -5;
  EXPECT_NE(ErrorOf([&] { CudaDeviceFromJson(j); }).find("conv_workspaces[0].forward_bytes"),
            std::string::npos);
  j = CudaDeviceToJson(d);
  j["conv_workspaces"][1]["signature"] = j["conv_workspaces"][0]["signature"];
  EXPECT_NE(ErrorOf([&] { CudaDeviceFromJson(j); }).find("repeats"), std::string::npos);
  j = CudaDeviceToJson(d);
  j.erase("conv_workspaces");  // a device file written before conv workspaces were measured
  EXPECT_TRUE(CudaDeviceFromJson(j).conv_workspaces.empty());
}

// The margin a prediction keeps is what the estimated conv could add above the peak: its step's
// bytes plus its margin (16 MiB: the input is 2 KiB), less the peak. The peak is the conv's
// backward step (the gradients and workspace beside everything the forward kept), so the margin
// is all 16 MiB; measured, there is none.
TEST(CudaDevice, TheMarginIsWhatAnEstimatedConvCouldAddAboveThePeak) {
  TrainingGraph g = ConvGraph();
  CudaDevice d;
  PrepareGraphForCuda(g, d);
  d.conv_margin_bytes = ConvWorkspaceMargins(g, d);
  for (const Node& n : g.nodes) {
    EXPECT_EQ(d.conv_margin_bytes[n.id], n.op_type == "Conv" ? 16 * MiB : 0) << n.name;
  }
  const Schedule s = BuildTrainingSchedule(g);
  const MemoryTimeline t = Simulate(s, {AllocatorPolicy::kCudaCaching});
  EXPECT_EQ(s.steps[t.peak_step].node, ConvNode(g).id);
  EXPECT_EQ(s.steps[t.peak_step].phase, Phase::kBackward);
  EXPECT_EQ(PredictDeviceMemory(s, d).workspace_margin_bytes, 16 * MiB);
  const std::string sig = CudnnConvGeometry(ConvNode(g), g.tensors)->signature();
  d.conv_workspaces[sig] = {7296, 7296, 7296};
  d.conv_margin_bytes = ConvWorkspaceMargins(g, d);
  EXPECT_EQ(PredictDeviceMemory(s, d).workspace_margin_bytes, 0);
}

// resnet18 at batch 64 on the H200 (LibTorch 2.11.0+cu130). The device file holds the 11 conv
// signatures' workspaces read off a recorded eager step (tests/data/cuda-devices/, from
// shared/gpu/measured-2026-11-26/allocator-snapshots/resnet18-b64-default.json). Independently,
// `memplan run --trace` on that GPU recorded the allocated bytes after every node and the peak
// during it (h200-resnet18-b64-run-trace.json). What each Conv step allocates above the step
// before it (forward: output and workspace; backward: both gradients and the larger pass) must
// be what the run measured there, in 512-byte blocks: 20 forward and 20 backward steps. On 6 of
// them the run's step held up to 1 MiB more that is no workspace (the eager trace of the same
// convs shows none; the first residual block's convs and two backward steps): never less.
TEST(CudaDevice, MeasuredConvWorkspacesMatchAMemplanRunOnTheH200) {
  const std::string dir = std::string(MEMPLAN_SOURCE_DIR) + "/tests/data/cuda-devices/";
  std::ifstream in(dir + "h200-resnet18-b64.json");
  std::ifstream run_in(dir + "h200-resnet18-b64-run-trace.json");
  ASSERT_TRUE(in && run_in);
  const CudaDevice d = CudaDeviceFromJson(nlohmann::json::parse(in));
  const nlohmann::json run = nlohmann::json::parse(run_in);
  TrainingGraph g = LoadTrainingGraph(testing::CorpusModel("resnet18"), {.batch = 64});
  PrepareGraphForCuda(g, d);
  EXPECT_EQ(ConvWorkspaceMarginBytes(g, d), 0);  // every signature measured
  // Measured: the first record of each (phase, node) after the one before it.
  std::map<std::pair<std::string, std::string>, int64_t> measured;
  const nlohmann::json& trace = run["measured_trace"];
  for (size_t i = 1; i < trace.size(); ++i) {
    const auto key =
        std::make_pair(trace[i]["phase"].get<std::string>(), trace[i]["node"].get<std::string>());
    if (!measured.count(key)) {
      measured[key] =
          trace[i]["peak_during"].get<int64_t>() - trace[i - 1]["bytes_after"].get<int64_t>();
    }
  }
  const Schedule s = BuildTrainingSchedule(g);
  const MemoryTimeline t = Simulate(s, {AllocatorPolicy::kCudaCaching});
  int checked = 0, exact = 0;
  for (size_t i = 1; i < s.steps.size(); ++i) {
    if (s.steps[i].node == kNone || g.nodes[s.steps[i].node].op_type != "Conv") continue;
    const auto key =
        std::make_pair(std::string(PhaseName(s.steps[i].phase)), g.nodes[s.steps[i].node].name);
    ASSERT_TRUE(measured.count(key)) << key.first << " " << key.second;
    const int64_t under = measured[key] - (t.bytes_during[i] - t.bytes_after[i - 1]);
    EXPECT_GE(under, 0) << key.first << " " << key.second;
    EXPECT_LE(under, 1 * MiB) << key.first << " " << key.second;
    exact += under == 0;
    ++checked;
  }
  EXPECT_EQ(checked, 40);
  EXPECT_GE(exact, 34);
}

}  // namespace
}  // namespace memplan
