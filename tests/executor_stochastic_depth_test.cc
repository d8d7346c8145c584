// Stochastic depth in training mode as the dynamo exporter writes torchvision's own
// (samples/export_models.py *_sd: RandomUniformLike, Less, Cast, Div and Mul per block), on
// ConvNeXt (channels-last activations through oneDNN's nhwc convolutions), run for real on the CPU:
// the unplanned step and a selective plan each measure their prediction within 0.001%, and the plan
// measures at or under its budget (issue 26).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "memplan/analyzer.h"
#include "memplan/executor.h"
#include "memplan/planner.h"
#include "testing/corpus.h"
#include "testing/cpu_calibration.h"
#include "testing/executor_steps.h"

namespace memplan {
namespace {

struct Case {
  const char* model;
  int64_t batch;
  int budget_percent;  // of the unplanned peak: a budget selective recompute reaches on the model
  GradientLifetime grads = GradientLifetime::kNone;
  double tolerance = 1e-5;  // relative, predicted against measured
};

// Calibrated first where this CPU's kernels are not the ones the rules were verified on.
LoadOptions Options(const Case& c, int64_t batch) {
  LoadOptions o{/*batch=*/batch};
  o.grads = c.grads;
  return testing::CalibratedOnThisCpu(testing::CorpusModel(c.model), o);
}

using testing::Error;
using testing::RunSteps;

class StochasticDepth : public ::testing::TestWithParam<Case> {};

TEST_P(StochasticDepth, UnplannedStepMeasuresItsPrediction) {
  const Case& c = GetParam();
  TrainingGraph g = LoadTrainingGraph(testing::CorpusModel(c.model), Options(c, c.batch));
  const MemoryTimeline predicted = Simulate(BuildTrainingSchedule(g));
  const RunResult r = RunSteps(g);
  const double err = Error(predicted.peak_bytes, r.measured_peak_bytes);
  std::printf("sd %-24s batch %lld  predicted %10lld  measured %10lld  %+.4f%%\n", c.model,
              static_cast<long long>(c.batch), static_cast<long long>(predicted.peak_bytes),
              static_cast<long long>(r.measured_peak_bytes), 100 * err);
  EXPECT_LE(std::abs(err), c.tolerance) << c.model;
  EXPECT_EQ(r.persistent_bytes, predicted.bytes_after[0])
      << "parameters, gradients, batch and constants";
}

TEST_P(StochasticDepth, SelectivePlanMeasuresItsPredictionWithinItsBudget) {
  const Case& c = GetParam();
  const std::string path = testing::CorpusModel(c.model);
  auto at_batch = [&](int64_t b) { return LoadTrainingGraph(path, Options(c, b)); };
  const int64_t baseline = Simulate(BuildTrainingSchedule(at_batch(c.batch))).peak_bytes;
  PlanOptions po;
  po.strategy = "selective";
  po.budget_bytes = baseline * c.budget_percent / 100;
  const Plan plan = PlanMicroBatched(at_batch, c.batch, CostModel{}, po);
  ASSERT_TRUE(plan.feasible) << c.model << ": no selective plan at " << c.budget_percent << "% of "
                             << baseline;
  ASSERT_FALSE(plan.recomputed.empty()) << "the plan recomputes something";
  const RunResult r = RunSteps(at_batch(plan.batch), &plan);
  std::printf("sd %-24s selective %d%%  budget %10lld  predicted %10lld  measured %10lld\n",
              c.model, c.budget_percent, static_cast<long long>(po.budget_bytes),
              static_cast<long long>(plan.predicted_peak_bytes),
              static_cast<long long>(r.measured_peak_bytes));
  EXPECT_LE(r.measured_peak_bytes, po.budget_bytes);
  EXPECT_LE(std::abs(Error(plan.predicted_peak_bytes, r.measured_peak_bytes)), c.tolerance)
      << c.model;
}

INSTANTIATE_TEST_SUITE_P(Corpus, StochasticDepth,
                         // ConvNeXt-tiny at 64 px is parameter-bound (its stage-4 depthwise
                         // backward alone holds 36.8 MiB): selective reaches 92% at batch 4.
                         // swin_t_sd at 224 px, batch 2: the shifted-window mask's ScatterND
                         // nodes keep their wrapped index columns, and the relative position
                         // biases' gradients are the reduced ones Add hands back (-8 B).
                         ::testing::Values(Case{"convnext_tiny_sd_dynamo", 4, 95},
                                           Case{"swin_t_sd_dynamo", 2, 75}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::string(i.param.model) + "_b" +
                                  std::to_string(i.param.batch) + "_" +
                                  std::to_string(i.param.budget_percent);
                         });

}  // namespace
}  // namespace memplan
