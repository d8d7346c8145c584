// The exactness suites on whatever CPU runs them. Where the workspace rules were verified on this
// CPU's kernels (oneDNN's AVX-512 ones: cpu_device.h) the suites know the expected values and
// load as given. Elsewhere (AVX2, or a cap such as ONEDNN_MAX_CPU_ISA=SSE41) they calibrate
// first, as a user would with memplan calibrate: each convolution signature of the graph is
// measured once (MeasureCpuWorkspaces) and the prediction takes the measurement.
// MEMPLAN_TEST_CALIBRATE=1 calibrates on AVX-512 too; =0 never (the rules alone, as a user without
// a device file gets them).
#pragma once

#include <cstdlib>
#include <map>
#include <string>

#include "memplan/cpu_device.h"
#include "memplan/executor.h"
#include "memplan/training_graph.h"

namespace memplan::testing {

inline bool CalibratesOnThisCpu() {
  const char* forced = std::getenv("MEMPLAN_TEST_CALIBRATE");
  if (forced && std::string(forced) == "1") return true;
  if (forced && std::string(forced) == "0") return false;
  return CpuKernelsOfThisMachine().family() != CpuKernelFamily::kAvx512;
}

// `o` with this CPU's measured workspaces of the model's ops at o's batch (once per signature in
// the process), where CalibratesOnThisCpu.
inline LoadOptions CalibratedOnThisCpu(const std::string& model, LoadOptions o) {
  if (!CalibratesOnThisCpu()) return o;
  static std::map<std::string, MeasuredWorkspace> measured;
  const TrainingGraph g = LoadTrainingGraph(model, o);
  bool all_known = true;
  for (const Node& n : g.nodes) {
    const std::string sig = WorkspaceSignature(n, g.tensors);
    all_known = all_known && (sig.empty() || measured.count(sig));
  }
  if (!all_known) {
    for (const auto& [sig, ws] : MeasureCpuWorkspaces(g)) measured.emplace(sig, ws);
  }
  o.cpu_workspaces.insert(measured.begin(), measured.end());
  return o;
}

// The same for a graph built in the test (GraphBuilder): `load` loads it with given options.
template <typename Load>
TrainingGraph CalibratedOnThisCpu(const Load& load, LoadOptions o) {
  TrainingGraph g = load(o);
  if (!CalibratesOnThisCpu()) return g;
  o.cpu_workspaces = MeasureCpuWorkspaces(g);
  return load(o);
}

}  // namespace memplan::testing
