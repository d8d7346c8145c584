// The executor's public entry points that are not the training step (trainer.cc): which ops it
// runs, plan checks, the backend.
#include "memplan/executor.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/SequenceNumber.h>
#include <ATen/Version.h>
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
#include "memplan/onnx_convert.h"
#include "memplan/plan.h"
#include "memplan/spatial_attrs.h"
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
                     ". `memplan analyze` and `memplan plan` still work; to run it, re-export the "
                     "model with other ops.");
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
  // What decides the CPU kernels' memory (cpu_device.h).
  s += "; CPU: " + ExecutorCpuDevice().summary();
  return s;
}

bool ExecutorHasCuda() { return !exec::CudaBuildVersion().empty(); }

namespace {

// The index of `device` (cuda or cuda:K) when this build has CUDA and the device is visible.
int VisibleCudaIndex(const std::string& device) {
  if (!ExecutorHasCuda())
    throw MemplanError("cannot measure " + device + ": this memplan's LibTorch has no CUDA");
  if (exec::CudaDeviceCount() == 0) {
    throw MemplanError("cannot measure " + device +
                       ": no CUDA device is visible (no GPU, no driver, or "
                       "CUDA_VISIBLE_DEVICES hides it); run memplan calibrate on the GPU machine");
  }
  const size_t colon = device.find(':');
  const int index = colon == std::string::npos ? 0 : std::atoi(device.c_str() + colon + 1);
  if (index >= exec::CudaDeviceCount()) {
    throw MemplanError("cannot measure " + device + ": only " +
                       std::to_string(exec::CudaDeviceCount()) + " CUDA device(s) are visible");
  }
  return index;
}

ConvWorkspace MeasureConvWorkspace(const ConvGeometry& geo, const at::Device& on,
                                   exec::MemoryMeter& meter) {
  const at::TensorOptions opts =
      at::TensorOptions().device(on).dtype(exec::ScalarTypeOf(geo.dtype));
  const at::Tensor x = at::randn(geo.x, opts);
  const at::Tensor w = at::randn(geo.w, opts);
  const std::vector<int64_t> out_pad(geo.stride.size(), 0);
  auto forward = [&] {
    return std::vector<at::Tensor>{
        at::convolution(x, w, {}, geo.stride, geo.pad, geo.dilation, false, out_pad, geo.group)};
  };
  const at::Tensor gy = at::randn_like(forward()[0]);
  auto backward = [&](bool data) {
    auto [gx, gw, gb] =
        at::convolution_backward(gy, x, w, std::nullopt, geo.stride, geo.pad, geo.dilation, false,
                                 out_pad, geo.group, {data, !data, false});
    return std::vector<at::Tensor>{gx, gw};
  };
  // What a pass allocates beyond the results it leaves: its workspace (the results come first).
  auto workspace = [&](const std::function<std::vector<at::Tensor>()>& pass) {
    (void)pass();  // cuDNN's plan is chosen and cached on the first call
    exec::Synchronize(on);
    meter.ResetPeak();
    const std::vector<at::Tensor> kept = pass();
    exec::Synchronize(on);
    return meter.peak() - meter.current();
  };
  ConvWorkspace ws;
  ws.forward_bytes = workspace(forward);
  ws.backward_data_bytes = workspace([&] { return backward(true); });
  ws.backward_filter_bytes = workspace([&] { return backward(false); });
  return ws;
}

}  // namespace

std::map<std::string, ConvWorkspace> MeasureConvWorkspaces(const TrainingGraph& g,
                                                           const std::string& device) {
  (void)CudaDeviceFromEnvironment(device);  // names a bad device
  const at::Device on(at::kCUDA, static_cast<c10::DeviceIndex>(VisibleCudaIndex(device)));
  exec::MemoryMeter& meter = exec::MemoryMeter::For(on);
  std::map<std::string, ConvWorkspace> out;
  for (const Node& n : g.nodes) {
    const std::optional<ConvGeometry> geo = CudnnConvGeometry(n, g.tensors);
    if (!geo || out.count(geo->signature())) continue;
    try {
      out[geo->signature()] = MeasureConvWorkspace(*geo, on, meter);
    } catch (const c10::Error& e) {
      throw MemplanError(g.model_path + ": measuring the cuDNN workspaces of node '" +
                         PrintableText(n.name) + "' (" + geo->signature() +
                         "): " + e.what_without_backtrace());
    }
  }
  return out;
}

CudaDevice MeasureCudaDevice(const std::string& device) {
  CudaDevice d = CudaDeviceFromEnvironment(device);  // names a bad device, reads the variables
  const int index = VisibleCudaIndex(device);
  // One matmul creates the context and the cuBLAS handles and workspaces, as a step's first does.
  const at::Device on(at::kCUDA, static_cast<c10::DeviceIndex>(index));
  {
    at::Tensor a = at::ones({256, 256}, at::TensorOptions().device(on));
    at::Tensor c = at::matmul(a, a);
    exec::Synchronize(on);
  }
  std::string error;
  int64_t reserved = 0;
  if (!exec::QueryCudaProperties(index, &d.name, &d.compute_major, &d.compute_minor, &reserved,
                                 &error)) {
    throw MemplanError("cannot read the properties of " + device + ": " + error);
  }
  const CudaMemoryInfo m = QueryCudaMemory(index);
  d.total_memory_bytes = m.total_bytes;
  d.context_bytes = std::max<int64_t>(0, m.total_bytes - m.free_bytes - reserved);
  d.torch_version = TORCH_VERSION;
  d.measured = true;
  d.source = "measured on " + d.name + " with LibTorch " + d.torch_version;
  return d;
}

CpuDevice ExecutorCpuDevice() {
  CpuDevice d = CpuDeviceOfThisMachine();
  d.kernels.threads = at::get_num_threads();
  d.torch_version = TORCH_VERSION;
  // "Intel(R) MKL-DNN v3.12.0 (Git Hash ...)": the version and its hash.
  const std::string v = at::get_mkldnn_version();
  const size_t at_v = v.find(" v");
  d.onednn_version = at_v == std::string::npos ? v : v.substr(at_v + 1);
  return d;
}

void SetIntraOpThreads(int threads) { at::set_num_threads(threads); }

namespace {

// What a CPU convolution holds above its results in each pass (MeasuredWorkspace), its operands
// random tensors of the node's shapes and layout.
MeasuredWorkspace MeasureCpuConv(const Node& n, const std::vector<Tensor>& t, bool channels_last,
                                 exec::MemoryMeter& meter) {
  const Tensor& xt = t[n.inputs[0]];
  const Tensor& wt = t[n.inputs[1]];
  const SpatialAttrs a = ReadSpatialAttrs(n, xt.shape, KernelShapeOf(n, wt.shape));
  const at::TensorOptions opts = at::TensorOptions().dtype(exec::ScalarTypeOf(xt.dtype));
  const at::MemoryFormat format =
      channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  const bool has_bias = n.inputs.size() > 2 && n.inputs[2] != kNone;
  const at::Tensor x = at::randn(xt.shape, opts).contiguous(format);
  const at::Tensor w = at::randn(wt.shape, opts);
  const at::Tensor b = has_bias ? at::randn({wt.shape[0]}, opts) : at::Tensor();
  const std::vector<int64_t> out_pad(a.stride.size(), 0);
  MeasuredWorkspace ws;
  at::Tensor y;
  {
    meter.ResetPeak();
    y = at::convolution(x, w, b, a.stride, a.pad_begin, a.dilation, false, out_pad, a.group);
    ws.forward_bytes = meter.peak() - meter.current();
  }
  if (!n.has_backward) return ws;
  const at::Tensor gy = at::randn_like(y);
  y = at::Tensor();
  const bool gx = xt.has_gradient, gw = wt.has_gradient;
  const bool gb = has_bias && t[n.inputs[2]].has_gradient;
  meter.ResetPeak();
  auto grads = at::convolution_backward(
      gy, x, w,
      has_bias ? std::optional<at::IntArrayRef>(at::IntArrayRef{wt.shape[0]}) : std::nullopt,
      a.stride, a.pad_begin, a.dilation, false, out_pad, a.group, {gx, gw, gb});
  ws.backward_bytes = meter.peak() - meter.current();
  return ws;
}

}  // namespace

std::map<std::string, MeasuredWorkspace> MeasureCpuWorkspaces(const TrainingGraph& g) {
  exec::MemoryMeter& meter = exec::MemoryMeter::For(at::Device(at::kCPU));
  std::map<std::string, MeasuredWorkspace> out;
  for (const Node& n : g.nodes) {
    const std::string sig = WorkspaceSignature(n, g.tensors);
    if (sig.empty() || out.count(sig)) continue;
    const Tensor& x = g.tensors[n.inputs[0]];
    if (x.shape.size() != 4 || !IsFloating(x.dtype)) continue;
    const SpatialAttrs a =
        ReadSpatialAttrs(n, x.shape, KernelShapeOf(n, g.tensors[n.inputs[1]].shape));
    if (!a.symmetric()) continue;  // the executor pads first: a plain rule's case
    try {
      out[sig] = MeasureCpuConv(n, g.tensors, sig.ends_with(" nhwc"), meter);
    } catch (const c10::Error& e) {
      throw MemplanError(g.model_path + ": measuring the CPU workspaces of node '" +
                         PrintableText(n.name) + "' (" + sig + "): " + e.what_without_backtrace());
    }
  }
  return out;
}

CudaMemoryInfo QueryCudaMemory(int index) {
  CudaMemoryInfo m;
  std::string error;
  if (!exec::QueryCudaMemory(index, &m.free_bytes, &m.total_bytes, &error)) {
    throw MemplanError("cannot read the memory of cuda:" + std::to_string(index) + ": " + error);
  }
  return m;
}

}  // namespace memplan
