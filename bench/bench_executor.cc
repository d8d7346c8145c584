// Executor step time: the interpreter's training step on corpus models, plain and with a
// two-segment split (recompute of the first half). Manual time is the median step after the
// first; counters carry the measured peak. Models come from MEMPLAN_MODEL_CACHE (or the
// build's model-cache); a missing model skips its benchmark.
#include <benchmark/benchmark.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "memplan/executor.h"

namespace {

std::string ModelPath(const std::string& name) {
  const char* env = std::getenv("MEMPLAN_MODEL_CACHE");
  return std::string(env && *env ? env : MEMPLAN_MODEL_DIR) + "/" + name + ".onnx";
}

void BM_TrainingStep(benchmark::State& state, const std::string& model, int64_t batch, bool split) {
  std::string path = ModelPath(model);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    state.SkipWithError(("missing " + path + " (export it with samples/export_models.py)").c_str());
    return;
  }
  memplan::TrainingGraph g = memplan::LoadTrainingGraph(path, {/*batch=*/batch});
  memplan::RunOptions o;
  o.random_weights = true;
  o.steps = 3;
  if (split) {
    memplan::NodeId half = static_cast<memplan::NodeId>(g.nodes.size() / 2);
    o.segments.resize(2);
    for (memplan::NodeId i = 0; i < static_cast<memplan::NodeId>(g.nodes.size()); ++i)
      o.segments[i < half ? 0 : 1].push_back(i);
  }
  for (auto _ : state) {
    memplan::RunResult r = memplan::RunTraining(g, o);
    std::vector<double> t;
    for (size_t i = 1; i < r.steps.size(); ++i) t.push_back(r.steps[i].seconds);
    std::sort(t.begin(), t.end());
    state.SetIterationTime(t[t.size() / 2]);
    state.counters["peak_MiB"] = static_cast<double>(r.measured_peak_bytes) / (1 << 20);
    state.counters["recompute_s"] = r.steps.back().recompute_seconds;
  }
}

BENCHMARK_CAPTURE(BM_TrainingStep, gpt_b4, std::string("gpt"), 4, false)
    ->UseManualTime()
    ->Iterations(1);
BENCHMARK_CAPTURE(BM_TrainingStep, gpt_b4_split, std::string("gpt"), 4, true)
    ->UseManualTime()
    ->Iterations(1);
BENCHMARK_CAPTURE(BM_TrainingStep, resnet18_b8, std::string("resnet18"), 8, false)
    ->UseManualTime()
    ->Iterations(1);
BENCHMARK_CAPTURE(BM_TrainingStep, resnet18_b8_split, std::string("resnet18"), 8, true)
    ->UseManualTime()
    ->Iterations(1);
BENCHMARK_CAPTURE(BM_TrainingStep, mobilenet_v2_b8, std::string("mobilenet_v2"), 8, false)
    ->UseManualTime()
    ->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
