// The executor's public entry points that are not the training step (trainer.cc): which ops it
// runs, plan checks, the backend.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/SequenceNumber.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>
#include <sstream>
#include <unordered_map>

#include "kernels.h"
#include "memplan/analyzer.h"
#include "memplan/executor.h"
#include "memplan/onnx_convert.h"
#include "memplan/plan.h"
#include "meter.h"
#include "tensor_io.h"

namespace memplan {

using exec::FindKernel;

std::vector<std::string> ExecutorOpTypes() {
  std::vector<std::string> ops;
  for (const auto& [op, k] : exec::Kernels()) ops.push_back(op);
  return ops;
}

void CheckExecutorSupports(const TrainingGraph& g) {
  std::string missing = DescribeNodesByOp(g, [](const Node& n) { return !FindKernel(n.op_type); });
  if (missing.empty()) return;
  throw MemplanError(g.model_path + ": the executor has no implementation of " + missing +
                     ". `memplan analyze` and `memplan plan` still work; to run it, re-export the model with other ops.");
}

void CheckSegments(const TrainingGraph& g, const std::vector<std::vector<NodeId>>& segments) {
  try {
    (void)CutsFromSegments(g, segments);  // the planner's one validation of a segmentation
  } catch (const MemplanError& e) {
    throw MemplanError(std::string("the plan does not fit this model: ") + e.what() +
                       "; re-plan with `memplan plan` for this model");
  }
}

std::string ExecutorBackendDescription() {
  std::string s = "LibTorch " TORCH_VERSION;
  std::string cuda = exec::CudaBuildVersion();
  if (cuda.empty()) {
    s += ", CPU only";
  } else {
    s += ", CUDA " + cuda + " (" + std::to_string(exec::CudaDeviceCount()) + " device(s) visible)";
  }
  s += ", " + std::to_string(at::get_num_threads()) + " threads";
  return s;
}

bool ExecutorHasCuda() { return !exec::CudaBuildVersion().empty(); }

CudaMemoryInfo QueryCudaMemory(int index) {
  CudaMemoryInfo m;
  std::string error;
  if (!exec::QueryCudaMemory(index, &m.free_bytes, &m.total_bytes, &error)) {
    throw MemplanError("cannot read the memory of cuda:" + std::to_string(index) + ": " + error);
  }
  return m;
}

}  // namespace memplan
