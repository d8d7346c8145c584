// The micro-benchmark behind the planner's roofline: matmul rate, memory bandwidth and per-op
// overhead of one device, measured with the same LibTorch and allocator the executor uses.
#include "memplan/machine_rates.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <vector>

#include "memplan/executor.h"
#include "meter.h"

#ifdef MEMPLAN_TORCH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace memplan {
namespace {

c10::Device DeviceOf(const std::string& s) {
  if (s == "cpu") return c10::Device(c10::kCPU);
  if (s == "cuda" || s.rfind("cuda:", 0) == 0) {
    if (!ExecutorHasCuda()) throw MemplanError("device " + s + ": this memplan's LibTorch has no CUDA");
    int index = 0;
    if (s.size() > 5) {
      char* end = nullptr;
      const long v = std::strtol(s.c_str() + 5, &end, 10);
      if (*end != '\0' || v < 0) throw MemplanError("device " + s + ": expected cuda:K with K a device index");
      index = static_cast<int>(v);
    }
    if (index >= exec::CudaDeviceCount()) {
      throw MemplanError("device " + s + ": " + std::to_string(exec::CudaDeviceCount()) + " CUDA device(s) are visible");
    }
    return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
  }
  throw MemplanError("device must be cpu, cuda or cuda:K (got '" + s + "')");
}

std::string Describe(const c10::Device& device) {
  std::string s = device.str();
#ifdef MEMPLAN_TORCH_CUDA
  if (device.is_cuda()) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device.index()) == cudaSuccess) s += std::string(" ") + prop.name;
  }
#endif
  s += " (LibTorch " TORCH_VERSION;
  if (device.is_cpu()) s += ", " + std::to_string(at::get_num_threads()) + " threads";
  return s + ")";
}

// Seconds per call of `op`: the fastest of five repetitions of `calls` calls, after a warm-up.
// Other processes only ever slow a repetition down, so the fastest is the machine's rate.
double SecondsPerCall(const c10::Device& device, int calls, const std::function<void()>& op) {
  using Clock = std::chrono::steady_clock;
  op();
  exec::Synchronize(device);
  std::vector<double> times;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) op();
    exec::Synchronize(device);
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / calls);
  }
  return *std::min_element(times.begin(), times.end());
}

}  // namespace

std::string MachineRatesKey(const std::string& device) {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return std::string(host[0] ? host : "unknown-host") + " " + Describe(DeviceOf(device));
}

MachineRates MeasureMachineRates(const std::string& device_name) {
  const c10::Device device = DeviceOf(device_name);
  exec::MemoryMeter::For(device);  // the executor's allocator, as its ops see it
  const auto options = at::TensorOptions().dtype(at::kFloat).device(device);
  MachineRates r;
  r.device = Describe(device);
  r.measured = true;
  try {
    c10::AutoGradMode no_grad(false);
    // 1. Contractions: the best matmul rate over a few sizes.
    for (int64_t n : {256, 512, 1024}) {
      const at::Tensor a = at::rand({n, n}, options), b = at::rand({n, n}, options);
      const int calls = n <= 256 ? 20 : n <= 512 ? 5 : 2;
      const double s = SecondsPerCall(device, calls, [&] { (void)at::matmul(a, b); });
      r.flops_per_second = std::max(r.flops_per_second, 2.0 * static_cast<double>(n * n * n) / s);
    }
    // 2. Bandwidth: a large out-of-place add reads two tensors and writes a third.
    const int64_t numel = int64_t{4} << 20;  // 16 MiB of float32
    const at::Tensor x = at::rand({numel}, options), y = at::rand({numel}, options);
    const double add = SecondsPerCall(device, 4, [&] { (void)at::add(x, y); });
    r.bytes_per_second = 3.0 * static_cast<double>(numel) * 4 / add;
  } catch (const c10::Error& e) {
    throw MemplanError("measuring the rates of " + r.device + ": " + e.what_without_backtrace());
  }
  // 3. Overhead: tiny ops with autograd recording, as recompute runs them.
  try {
    c10::AutoGradMode grad(true);
    const at::Tensor s = at::ones({1}, options).set_requires_grad(true);
    const at::Tensor t = at::ones({1}, options);
    r.op_overhead_seconds = SecondsPerCall(device, 2000, [&] { (void)at::add(s, t); });
  } catch (const c10::Error& e) {
    throw MemplanError("measuring the rates of " + r.device + ": " + e.what_without_backtrace());
  }
  return r;
}

}  // namespace memplan
