// The micro-benchmark behind the planner's roofline: matmul rate, memory bandwidth, per-op
// overhead and the rates of each compute class of one device, measured with the same LibTorch
// and allocator the executor uses.
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
    if (!ExecutorHasCuda())
      throw MemplanError("device " + s + ": this memplan's LibTorch has no CUDA");
    int index = 0;
    if (s.size() > 5) {
      char* end = nullptr;
      const long v = std::strtol(s.c_str() + 5, &end, 10);
      if (*end != '\0' || v < 0)
        throw MemplanError("device " + s + ": expected cuda:K with K a device index");
      index = static_cast<int>(v);
    }
    if (index >= exec::CudaDeviceCount()) {
      throw MemplanError("device " + s + ": " + std::to_string(exec::CudaDeviceCount()) +
                         " CUDA device(s) are visible");
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
    if (cudaGetDeviceProperties(&prop, device.index()) == cudaSuccess)
      s += std::string(" ") + prop.name;
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

// Rate of `work` units per second of one call, the fixed per-op cost taken off first (the
// roofline adds it back per node).
double PerSecond(double work, double seconds, double overhead) {
  return work / std::max(seconds - overhead, seconds / 2);
}

// The class rates (planner.h's MachineRates::classes) on mid-size shapes of the CNNs and
// transformers memplan plans for, with autograd recording as forward and recompute run them, and
// through the same ATen ops the executor lowers each class to. Work units are the analyzer's:
// FLOPs as its rules count them (a pooling window's elements, a random op's elements), bytes
// read plus written.
void MeasureClassRates(const c10::Device& device, const at::TensorOptions& options,
                       MachineRates& r) {
  auto& classes = r.classes;
  auto at_class = [&](ComputeClass c) -> MachineRates::ClassRates& {
    return classes[static_cast<size_t>(c)];
  };
  const double overhead = r.op_overhead_seconds;
  try {
    c10::AutoGradMode grad(true);
    auto input = [&](at::IntArrayRef shape) {
      return at::rand(shape, options).set_requires_grad(true);
    };
    auto bytes = [](std::initializer_list<int64_t> numels) {
      double b = 0;
      for (int64_t n : numels) b += 4.0 * static_cast<double>(n);
      return b;
    };
    // matmul: a transformer's projection, [512, 768] x [768, 768].
    {
      const at::Tensor a = input({512, 768}), b = input({768, 768});
      const double s = SecondsPerCall(device, 3, [&] { (void)at::matmul(a, b); });
      at_class(ComputeClass::kMatmul).flops_per_second =
          PerSecond(2.0 * 512 * 768 * 768, s, overhead);
    }
    // conv, compute: a 3x3 convolution of 64 channels on a 56 x 56 map (a ResNet stage);
    // bandwidth: a 1x1 convolution of 32 to 16 channels on a 112 x 112 map (MobileNet's
    // projections), where the layout conversions around the kernel dominate.
    {
      const at::Tensor x = input({4, 64, 56, 56}), w = input({64, 64, 3, 3});
      const double s = SecondsPerCall(device, 2, [&] {
        (void)at::convolution(x, w, {}, {1, 1}, {1, 1}, {1, 1}, false, {0, 0}, 1);
      });
      at_class(ComputeClass::kConv).flops_per_second =
          PerSecond(2.0 * x.numel() * 64 * 9, s, overhead);
      const at::Tensor x1 = input({4, 32, 112, 112}), w1 = input({16, 32, 1, 1});
      const double s1 = SecondsPerCall(device, 3, [&] {
        (void)at::convolution(x1, w1, {}, {1, 1}, {0, 0}, {1, 1}, false, {0, 0}, 1);
      });
      at_class(ComputeClass::kConv).bytes_per_second =
          PerSecond(bytes({x1.numel(), w1.numel(), x1.numel() / 2}), s1, overhead);
    }
    // depthwise: 3x3 over 96 channels of a 56 x 56 map (one calibrated point: its FLOPs and its
    // bytes both).
    {
      const at::Tensor x = input({4, 96, 56, 56}), w = input({96, 1, 3, 3});
      const double s = SecondsPerCall(device, 3, [&] {
        (void)at::convolution(x, w, {}, {1, 1}, {1, 1}, {1, 1}, false, {0, 0}, 96);
      });
      at_class(ComputeClass::kDepthwiseConv).flops_per_second =
          PerSecond(2.0 * x.numel() * 9, s, overhead);
      at_class(ComputeClass::kDepthwiseConv).bytes_per_second =
          PerSecond(bytes({x.numel(), w.numel(), x.numel()}), s, overhead);
    }
    // normalization: batch norm with batch statistics over 64 channels of 8 x 56 x 56.
    {
      const at::Tensor x = input({8, 64, 56, 56}), scale = input({64}), shift = input({64});
      const double s = SecondsPerCall(device, 3, [&] {
        (void)at::native_batch_norm(x, scale, shift, {}, {}, true, 0.0, 1e-5);
      });
      at_class(ComputeClass::kNormalization).bytes_per_second =
          PerSecond(bytes({x.numel(), 128, x.numel()}), s, overhead);
    }
    // pooling: ResNet's stem max-pool, 3x3 stride 2 over 64 channels of 112 x 112, with indices.
    {
      const at::Tensor x = input({4, 64, 112, 112});
      const double s = SecondsPerCall(device, 3, [&] {
        (void)at::max_pool2d_with_indices(x, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false);
      });
      at_class(ComputeClass::kPooling).flops_per_second =
          PerSecond(9.0 * x.numel() / 4, s, overhead);
    }
    // random: a dropout's keep-mask (bernoulli) and the masked scale, 1M elements.
    {
      const at::Tensor x = input({1 << 20});
      const double s = SecondsPerCall(device, 3, [&] {
        at::Tensor mask = at::empty(x.sizes(), x.options().dtype(at::kBool));
        mask.bernoulli_(0.9);
        (void)at::mul(at::mul(x, mask), 1.0 / 0.9);
      });
      at_class(ComputeClass::kRandom).flops_per_second =
          PerSecond(static_cast<double>(x.numel()), s, overhead);
    }
  } catch (const c10::Error& e) {
    throw MemplanError("measuring the class rates of " + r.device + ": " +
                       e.what_without_backtrace());
  }
}

// Page faults on new memory: a copy into a new 64 MiB tensor against the same copy into an
// existing one, through the executor's allocator. It keeps freed host memory (meter.cc), so
// after the first step a new tensor reuses pages and this is normally no cost (rate 0); without
// that, glibc maps blocks of 32 MiB or more anew every time and the op writing one takes a page
// fault per page.
void MeasureFreshMemory(const c10::Device& device, const at::TensorOptions& options,
                        MachineRates& r) {
  constexpr int64_t kThreshold = int64_t{32} << 20;
  try {
    c10::AutoGradMode no_grad(false);
    const int64_t numel = 2 * kThreshold / 4;
    const at::Tensor src = at::rand({numel}, options);
    at::Tensor dst = at::empty({numel}, options);
    const double existing = SecondsPerCall(device, 2, [&] { dst.copy_(src); });
    const double fresh = SecondsPerCall(device, 2, [&] { (void)src.clone(); });
    if (fresh > 1.2 * existing) {  // within noise of the copy itself: no page faults
      r.fresh_bytes_per_second = 4.0 * static_cast<double>(numel) / (fresh - existing);
      r.fresh_threshold_bytes = kThreshold;
    }
  } catch (const c10::Error& e) {
    throw MemplanError("measuring the rates of " + r.device + ": " + e.what_without_backtrace());
  }
}

// CUDA: offload's link, a 64 MiB copy between pinned host memory and the device each way.
void MeasureLink(const c10::Device& device, MachineRates& r) {
  try {
    c10::AutoGradMode no_grad(false);
    const int64_t bytes = int64_t{64} << 20;
    at::Tensor host = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
    at::Tensor dev = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(device));
    const double to_host = SecondsPerCall(device, 3, [&] { host.copy_(dev); });
    const double to_device = SecondsPerCall(device, 3, [&] { dev.copy_(host); });
    r.link.device_to_host_bytes_per_second = static_cast<double>(bytes) / to_host;
    r.link.host_to_device_bytes_per_second = static_cast<double>(bytes) / to_device;
  } catch (const c10::Error& e) {
    throw MemplanError("measuring the host link of " + r.device + ": " +
                       e.what_without_backtrace());
  }
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
  MeasureClassRates(device, options, r);
  if (device.is_cpu()) MeasureFreshMemory(device, options, r);
  if (device.is_cuda()) MeasureLink(device, r);
  return r;
}

}  // namespace memplan
