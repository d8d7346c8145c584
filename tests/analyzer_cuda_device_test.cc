// The CUDA device's memory beside a step's tensors (memplan/cuda_device.h): the cuBLAS and
// cuBLASLt workspaces by LibTorch's rule, and the reserved peak through the allocator model,
// with hand-computed numbers.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "memplan/cuda_device.h"
#include "testing/graph_builder.h"

namespace memplan {
namespace {

constexpr int64_t KiB = 1024;
constexpr int64_t MiB = 1024 * KiB;

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const MemplanError& e) {
    return e.what();
  }
  return "";
}

// x[N,100] -> MatMul w[100,100] -> y -> cross-entropy: one matmul, so cuBLAS runs.
TrainingGraph MatmulGraph() {
  testing::GraphBuilder b;
  b.Input("x", {-1, 100}).Param("w", {100, 100}).Node("MatMul", {"x", "w"}, {"y"});
  return b.Output("y").Load({});
}

// x[N,100] -> Relu: no matmul, no cuBLAS handle.
TrainingGraph ReluGraph() {
  testing::GraphBuilder b;
  b.Input("x", {-1, 100}).Param("w", {100}).Node("Mul", {"x", "w"}, {"h"}).Node("Relu", {"h"}, {"y"});
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
    EXPECT_NE(ErrorOf([&] { CublasWorkspaceBytes(d); }).find("CUBLAS_WORKSPACE_CONFIG"), std::string::npos) << bad;
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

}  // namespace
}  // namespace memplan
