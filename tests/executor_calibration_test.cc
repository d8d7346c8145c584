// memplan calibrate on the CPU (MeasureCpuWorkspaces): each convolution signature measured once,
// alone, through the executor's meter; a prediction with the measurements matches the step the
// executor runs, on whichever kernels oneDNN runs here (ONEDNN_MAX_CPU_ISA included).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "memplan/analyzer.h"
#include "memplan/executor.h"
#include "testing/graph_builder.h"

namespace memplan {
namespace {

using testing::SqueezeExcitationTail;

TEST(ExecutorCpuCalibration, OneMeasurementPerSignatureWithTheNodesGradients) {
  LoadOptions o;
  o.batch = 4;
  const TrainingGraph g = SqueezeExcitationTail().Load(o);
  const auto ws = MeasureCpuWorkspaces(g);
  ASSERT_EQ(ws.size(), 2u);  // two distinct convolutions
  for (const Node& n : g.nodes) {
    if (n.op_type != "Conv") continue;
    const auto it = ws.find(WorkspaceSignature(n, g.tensors));
    ASSERT_NE(it, ws.end()) << n.name;
    // oneDNN reorders the weight into its blocked layout in every pass: more than nothing.
    EXPECT_GT(it->second.forward_bytes, 0) << n.name;
    EXPECT_GT(it->second.backward_bytes, 0) << n.name;
  }
  // On the kernels the rules were verified on (AVX-512, 2 threads), the measurement is the rule's
  // hand-computed figure (analyzer_memory_test.cc: 1,160,320 B forward, 802,816 B backward).
  const CpuDevice here = ExecutorCpuDevice();
  if (here.kernels.family() == CpuKernelFamily::kAvx512 && here.kernels.threads == 2) {
    const auto one = ws.find(WorkspaceSignature(g.node(1), g.tensors));
    EXPECT_EQ(one->second.forward_bytes, 1160320);
    EXPECT_EQ(one->second.backward_bytes, 802816);
  }
}

TEST(ExecutorCpuCalibration, ACalibratedPredictionMeasuresTheStep) {
  LoadOptions o;
  o.batch = 4;
  o.grads = GradientLifetime::kKept;
  const TrainingGraph uncalibrated = SqueezeExcitationTail().Load(o);
  o.cpu_workspaces = MeasureCpuWorkspaces(uncalibrated);
  const TrainingGraph g = SqueezeExcitationTail().Load(o);
  const int64_t predicted = Simulate(BuildTrainingSchedule(g)).peak_bytes;
  RunOptions run;
  run.model_bytes = SqueezeExcitationTail().Bytes();
  run.random_weights = true;
  run.steps = 2;  // the second step is the steady state
  const RunResult r = RunTraining(g, run);
  std::printf("calibrated on %s: predicted %lld measured %lld\n",
              ExecutorCpuDevice().summary().c_str(), static_cast<long long>(predicted),
              static_cast<long long>(r.measured_peak_bytes));
  EXPECT_EQ(predicted, r.measured_peak_bytes);
}

}  // namespace
}  // namespace memplan
