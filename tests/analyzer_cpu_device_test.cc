// The CPU a prediction is for (memplan/cpu_device.h): oneDNN's instruction sets and the kernel
// families the rules were verified on, the margins kept where they were not, calibration's
// measured workspaces in their place, and the device file. Expected bytes computed by hand.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "memplan/analyzer.h"
#include "memplan/cpu_device.h"
#include "memplan/cuda_device.h"
#include "testing/graph_builder.h"

namespace memplan {
namespace {

using testing::ErrorOf;

TEST(CpuIsa, ParsesOneDnnsNamesAndItsEnvironmentSpelling) {
  EXPECT_EQ(ParseCpuIsa("avx2"), CpuIsa::kAvx2);
  EXPECT_EQ(ParseCpuIsa("AVX2"), CpuIsa::kAvx2);
  EXPECT_EQ(ParseCpuIsa("SSE41"), CpuIsa::kSse41);
  EXPECT_EQ(ParseCpuIsa("avx512_core_amx"), CpuIsa::kAvx512CoreAmx);
  // oneDNN 3.x's AVX10 spellings of the same ISAs.
  EXPECT_EQ(ParseCpuIsa("AVX10_1_512"), CpuIsa::kAvx512CoreFp16);
  EXPECT_EQ(ParseCpuIsa("AVX10_1_512_AMX"), CpuIsa::kAvx512CoreAmx);
  bool is_default = false;
  EXPECT_EQ(ParseCpuIsa("DEFAULT", &is_default), std::nullopt);
  EXPECT_TRUE(is_default);
  EXPECT_EQ(ParseCpuIsa("neon", &is_default), std::nullopt);
  EXPECT_FALSE(is_default);
}

TEST(CpuIsa, KernelFamiliesAreTheOnesTheRulesWereVerifiedOn) {
  // fp32 convolutions: jit_avx512_common_* from avx512_core up (AMX takes bf16 and int8 only),
  // jit_avx2_* from avx2 to avx2_vnni_2; below, other kernels.
  EXPECT_EQ(KernelFamilyOf(CpuIsa::kAvx512Core), CpuKernelFamily::kAvx512);
  EXPECT_EQ(KernelFamilyOf(CpuIsa::kAvx512CoreAmxFp16), CpuKernelFamily::kAvx512);
  EXPECT_EQ(KernelFamilyOf(CpuIsa::kAvx2), CpuKernelFamily::kAvx2);
  EXPECT_EQ(KernelFamilyOf(CpuIsa::kAvx2Vnni2), CpuKernelFamily::kAvx2);
  EXPECT_EQ(KernelFamilyOf(CpuIsa::kAvx), CpuKernelFamily::kUnverified);
  EXPECT_EQ(KernelFamilyOf(CpuIsa::kSse41), CpuKernelFamily::kUnverified);
  EXPECT_EQ(KernelFamilyOf(CpuIsa::kUnknown), CpuKernelFamily::kUnverified);
}

TEST(CpuIsa, ACapLowersTheDetectedIsaAndNeverRaisesIt) {
  const CpuIsa best = DetectCpuIsa("");
  EXPECT_EQ(DetectCpuIsa("SSE41"), std::min(best, CpuIsa::kSse41));
  EXPECT_EQ(DetectCpuIsa("AVX512_CORE_AMX_FP16"), best);
  EXPECT_EQ(DetectCpuIsa("not-an-isa"), best);  // ignored, as oneDNN ignores it
}

// x[4,C,H,H] (no gradient) -> Conv w[O,C,1,1] -> ReduceMean -> logits [4,O] -> CE.
TrainingGraph OneByOneConv(const CpuKernels& k, std::map<std::string, MeasuredWorkspace> ws = {},
                           int64_t C = 64, int64_t O = 64, int64_t H = 8) {
  testing::GraphBuilder b;
  b.Input("x", {-1, C, H, H}).Param("w", {O, C, 1, 1});
  b.Node("Conv", {"x", "w"}, {"y"})
      .Node("ReduceMean", {"y"}, {"logits"})
      .Attr("axes", std::vector<int64_t>{2, 3})
      .Attr("keepdims", int64_t{0});
  LoadOptions o;
  o.batch = 4;
  o.cpu_kernels = k;
  o.cpu_workspaces = std::move(ws);
  return b.Output("logits").Load(o);
}

TEST(CpuWorkspaceMargin, NoneOnTheKernelsTheRulesWereVerifiedOn) {
  for (CpuIsa isa : {CpuIsa::kAvx512Core, CpuIsa::kAvx2}) {
    const TrainingGraph g = OneByOneConv({isa, 2});
    EXPECT_EQ(g.node(0).forward_workspace_margin_bytes, 0) << CpuIsaName(isa);
    EXPECT_EQ(g.node(0).backward_workspace_margin_bytes, 0) << CpuIsaName(isa);
    EXPECT_TRUE(WorkspaceMarginsByOp(g).empty()) << CpuIsaName(isa);
  }
}

// AVX2's 1x1 backward weights (nChw8c): 64 channels in and out are 8 x 8 blocks, one job, so
// every thread reduces it in a slot of its own: threads x OCp x ICp x 4 B + 128 + two 4 KiB
// barriers. X = Y = 4*64*8*8*4 = 65,536 B, W = 16,384 B.
TEST(CpuWorkspaceRules, Avx2OneByOneReducesOneJobInASlotPerThread) {
  // The input has no gradient: peak = yB + x copy + wB + scratch; less grad w.
  //   2 threads: 65,536 + 65,536 + 16,384 + (2 x 16,384 + 8,320 = 41,088) - 16,384 = 172,160.
  EXPECT_EQ(OneByOneConv({CpuIsa::kAvx2, 2}).node(0).backward_workspace_bytes, 172160);
  //   4 threads: the scratch is 4 x 16,384 + 8,320 = 73,856: 204,928.
  EXPECT_EQ(OneByOneConv({CpuIsa::kAvx2, 4}).node(0).backward_workspace_bytes, 204928);
}

TEST(CpuWorkspaceRules, Avx2OneByOneJobsSplitOverTheThreadsNeedNoReduction) {
  // 256 -> 64 channels: 8 output blocks, 32 input blocks shrunk to 8 per job, 4 jobs; two groups
  // of one thread (2 jobs each) cost less than one group of two: no reducer. X = 262,144 B,
  // Y = 65,536 B, W = 65,536 B: 65,536 + 262,144 + 65,536 + 0 - 65,536 = 327,680.
  EXPECT_EQ(OneByOneConv({CpuIsa::kAvx2, 2}, {}, 256, 64).node(0).backward_workspace_bytes, 327680);
}

// resnet18's last downsample: h = x * s [4,256,14,14] (with a gradient) -> 1x1 conv to 512 at
// stride 2. X = 802,816 B, Y = 401,408 B, W = 524,288 B (256 and 512 channels: no padding).
// Both kernel families first reduce the strided input for the weights' pass, per thread, only for
// the input-channel blocks one job covers (rtus). Expected values measured by memplan calibrate
// too (LibTorch 2.14.1, 2 threads): 1,254,528 B and 1,229,440 B.
TrainingGraph Downsample(const CpuKernels& k) {
  testing::GraphBuilder b;
  b.Input("x", {-1, 256, 14, 14}).Param("s", {1, 256, 1, 1}).Param("w", {512, 256, 1, 1});
  b.Node("Mul", {"x", "s"}, {"h"})
      .Node("Conv", {"h", "w"}, {"y"})
      .Attr("strides", std::vector<int64_t>{2, 2})
      .Node("ReduceMean", {"y"}, {"logits"})
      .Attr("axes", std::vector<int64_t>{2, 3})
      .Attr("keepdims", int64_t{0});
  LoadOptions o;
  o.batch = 4;
  o.cpu_kernels = k;
  return b.Output("logits").Load(o);
}

TEST(CpuWorkspaceRules, StridedOneByOneReducesItsInputPerThreadForOneJobsBlocks) {
  // Weights' pass: grad x + yB + x copy + wB + rtus = 802,816 + 401,408 + 802,816 + 524,288 +
  // rtus, less grad x and grad w (1,327,104). One minibatch thread on AVX-512, one job per
  // thread on AVX2: no weight reducer.
  //   AVX-512: 2 threads x 8 blocks (best_divider(16, 5, 16)) x 49 pixels x 16 x 4 B + 128 =
  //            50,304 -> 1,254,528.
  EXPECT_EQ(Downsample({CpuIsa::kAvx512Core, 2}).node(1).backward_workspace_bytes, 1254528);
  //   AVX2: 2 threads x 8 blocks (32 shrunk to 8) x 49 x 8 x 4 B + 128 = 25,216 -> 1,229,440.
  EXPECT_EQ(Downsample({CpuIsa::kAvx2, 2}).node(1).backward_workspace_bytes, 1229440);
}

// shufflenet_v2's stem: x[8,3,224,224] (no gradient) -> 3x3 conv to 24 at stride 2, pad 1.
TEST(CpuWorkspaceRules, Avx2FlatStemReducesTheWeightsInAGroupOfTwoThreads) {
  testing::GraphBuilder b;
  b.Input("x", {-1, 3, 224, 224}).Param("w", {24, 3, 3, 3});
  b.Node("Conv", {"x", "w"}, {"y"})
      .Attr("strides", std::vector<int64_t>{2, 2})
      .Attr("pads", std::vector<int64_t>{1, 1, 1, 1})
      .Node("ReduceMean", {"y"}, {"logits"})
      .Attr("axes", std::vector<int64_t>{2, 3})
      .Attr("keepdims", int64_t{0});
  LoadOptions o;
  o.batch = 8;
  o.cpu_kernels = CpuKernels{CpuIsa::kAvx2, 2};
  const TrainingGraph g = b.Output("logits").Load(o);
  // jit_avx2 backward weights on the flat input: jobs of 3x3 x 3 x 8 = 216 floats, 3 of them
  // (24 / 8), reduced over 8 images. Two groups of one thread cost 216 x 2 x 8 = 3,456; one group
  // of two 216 x 3 x (4 + 1) = 3,240: the latter. Its second thread's 3 jobs, page-aligned, and
  // the barriers: 2,592 + 4,096 + 4,096 + 4,096 = 14,880.
  // yB = 8*24*112*112*4 = 9,633,792; W = wB = 2,592: 9,633,792 + 2,592 + 14,880 - 2,592.
  EXPECT_EQ(g.node(0).backward_workspace_bytes, 9648672);
}

TEST(CpuWorkspaceMargin, Avx2OneByOneOnOnePixelKeepsAWeightPerThreadAndTheBarrier) {
  // A 1x1 map runs the inner-product kernel, not modelled: 2 threads x W 16,384 + 8,320.
  const TrainingGraph g = OneByOneConv({CpuIsa::kAvx2, 2}, {}, 64, 64, 1);
  const Node& conv = g.node(0);
  EXPECT_EQ(conv.forward_workspace_margin_bytes, 0);
  EXPECT_EQ(conv.backward_workspace_margin_bytes, 2 * 16384 + 8320);
  // The margin is counted in the workspace (what planners see) and recorded apart.
  EXPECT_GE(conv.backward_workspace_bytes, conv.backward_workspace_margin_bytes);
  EXPECT_EQ(WorkspaceMarginsByOp(g).at("Conv"), 41088);
}

TEST(CpuWorkspaceMargin, UnverifiedKernelsKeepTheMeasuredEnvelope) {
  // threads x (6 W + 3 (X + Y)) = 2 x (98,304 + 393,216) = 983,040.
  const TrainingGraph g = OneByOneConv({CpuIsa::kSse41, 2});
  EXPECT_EQ(g.node(0).backward_workspace_margin_bytes, 983040);
  EXPECT_EQ(g.node(0).forward_workspace_margin_bytes, 0);
}

TEST(CpuWorkspaceMargin, AnalysisReportsThePeakWithoutItAndTheMarginApart) {
  // The step's peak is the convolution's backward (x, w, grad y, grad w and the workspace, above
  // the forward's x, w, y and its workspace), so the whole margin lies on top of it.
  const Analysis avx512 = Analyze(OneByOneConv({CpuIsa::kAvx512Core, 2}));
  const Analysis sse41 = Analyze(OneByOneConv({CpuIsa::kSse41, 2}));
  EXPECT_EQ(avx512.margin_bytes, 0);
  EXPECT_EQ(sse41.margin_bytes, 983040);
  EXPECT_EQ(sse41.margin_by_op.at("Conv"), 983040);
  EXPECT_EQ(Simulate(sse41.schedule).peak_bytes, sse41.timeline.peak_bytes + 983040);
}

TEST(CpuCalibration, AMeasuredWorkspaceReplacesTheRuleAndItsMargin) {
  const TrainingGraph rules = OneByOneConv({CpuIsa::kSse41, 2});
  const std::string sig = WorkspaceSignature(rules.node(0), rules.tensors);
  // What calibration keys by: the op, dtype, shapes, attributes, gradients and layout.
  EXPECT_NE(sig.find("Conv float32 x[4,64,8,8] w[64,64,1,1]"), std::string::npos) << sig;
  EXPECT_NE(sig.find("grads[w]"), std::string::npos) << sig;
  EXPECT_NE(sig.find("nchw"), std::string::npos) << sig;
  const TrainingGraph measured = OneByOneConv({CpuIsa::kSse41, 2}, {{sig, {1000, 2000}}});
  EXPECT_EQ(measured.node(0).forward_workspace_bytes, 1000);
  EXPECT_EQ(measured.node(0).backward_workspace_bytes, 2000);
  EXPECT_EQ(measured.node(0).backward_workspace_margin_bytes, 0);
  // Another signature's measurement leaves the rule and its margin.
  const TrainingGraph other = OneByOneConv({CpuIsa::kSse41, 2}, {{"Conv other", {1, 2}}});
  EXPECT_EQ(other.node(0).backward_workspace_margin_bytes, 983040);
}

TEST(CpuDeviceFile, RoundTripsAndNamesWhatIsWrong) {
  CpuDevice d;
  d.cpu_name = "AMD EPYC";
  d.kernels = {CpuIsa::kAvx2, 2};
  d.max_cpu_isa = "AVX2";
  d.torch_version = "2.14.1";
  d.onednn_version = "v3.12.0 (Git Hash abc)";
  d.workspaces["Conv a"] = {1, 2};
  const CpuDevice back = CpuDeviceFromJson(CpuDeviceToJson(d));
  EXPECT_EQ(back.kernels, d.kernels);
  EXPECT_EQ(back.workspaces, d.workspaces);
  EXPECT_EQ(back.fingerprint(), "avx2/2t/torch-2.14.1/onednn-v3.12.0");
  EXPECT_TRUE(back.measured);

  nlohmann::json j = CpuDeviceToJson(d);
  j["isa"] = "pentium";
  EXPECT_NE(ErrorOf([&] { CpuDeviceFromJson(j); }).find("isa"), std::string::npos);
  j = CpuDeviceToJson(d);
  j["threads"] = 0;
  EXPECT_NE(ErrorOf([&] { CpuDeviceFromJson(j); }).find("threads"), std::string::npos);
  // A GPU's file says where it goes.
  EXPECT_NE(
      ErrorOf([&] { CpuDeviceFromJson(CudaDeviceToJson(CudaDevice{})); }).find("--device cuda"),
      std::string::npos);
}

TEST(CpuDevice, TheFingerprintChangesWithWhatDecidesTheKernels) {
  CpuDevice a;
  a.kernels = {CpuIsa::kAvx512Core, 2};
  CpuDevice b = a;
  b.kernels.threads = 4;
  CpuDevice c = a;
  c.kernels.isa = CpuIsa::kAvx2;
  EXPECT_NE(a.fingerprint(), b.fingerprint());
  EXPECT_NE(a.fingerprint(), c.fingerprint());
  CpuDevice same = a;
  same.cpu_name = "another name";  // the name decides nothing
  EXPECT_EQ(a.fingerprint(), same.fingerprint());
}

TEST(NamedCards, GiveMemoryAndComputeCapabilityAndAnEstimatedContext) {
  const CudaDevice h100 = NamedCard("h100-80gb");
  EXPECT_EQ(h100.total_memory_bytes, 81559LL * 1024 * 1024);
  EXPECT_EQ(h100.compute_major, 9);
  EXPECT_EQ(h100.context_bytes, -1);  // an estimate until calibrated
  EXPECT_EQ(NamedCard("l4").compute_minor, 9);
  const std::string error = ErrorOf([] { NamedCard("a6000"); });
  EXPECT_NE(error.find("a6000"), std::string::npos);
  EXPECT_NE(error.find("h100-80gb"), std::string::npos);
}

}  // namespace
}  // namespace memplan
