#include "meter.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <malloc.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "memplan/profiler.h"

#ifdef MEMPLAN_TORCH_CUDA
#include <ATen/cuda/PinnedMemoryAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

namespace memplan::exec {
namespace {

constexpr const char* kOomMarker = "memplan: out of memory";

// Wraps the CPU allocator: every allocation's size is counted until it is freed. The
// DataPtr's context is its data pointer, as LibTorch's raw_allocate (used by oneDNN) needs;
// a side table remembers each allocation's size and the wrapped deleter.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) { instance_ = this; }

  // LibTorch >= 2.3 (all the executor supports, torch_compat.h): allocate is non-const and
  // allocators copy data themselves.
  c10::DataPtr allocate(size_t n) override { return Allocate(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  c10::DataPtr Allocate(size_t n) const {
    int64_t bytes = static_cast<int64_t>(n);
    int64_t now = current_.fetch_add(bytes) + bytes;
    int64_t lim = limit_.load();
    if (lim > 0 && now > lim) {
      current_.fetch_sub(bytes);
      TORCH_CHECK(false, kOomMarker, ": allocating ", bytes, " bytes with ", now - bytes,
                  " bytes alive exceeds the memory limit of ", lim, " bytes");
    }
    int64_t p = peak_.load();
    while (now > p && !peak_.compare_exchange_weak(p, now)) {
    }
    c10::DataPtr inner = base_->allocate(n);
    c10::Device device = inner.device();
    void* data = inner.get();
    Entry e{bytes, inner.get_deleter(), nullptr};
    e.context = inner.release_context();
    if (!data) {  // zero-byte allocations
      if (e.deleter && e.context) e.deleter(e.context);
      current_.fetch_sub(bytes);
      return c10::DataPtr(nullptr, nullptr, nullptr, device);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_[data] = e;
    }
    if (ProfilerBackend* o = observer_.load()) o->OnMemory(bytes, now);
    return c10::DataPtr(data, data, &Delete, device);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &Delete; }

  int64_t current() const { return current_.load(); }
  int64_t peak() const { return peak_.load(); }
  void ResetPeak() { peak_.store(current_.load()); }
  void SetLimit(int64_t l) { limit_.store(l); }
  int64_t limit() const { return limit_.load(); }
  void SetObserver(ProfilerBackend* o) { observer_.store(o); }

 private:
  struct Entry {
    int64_t bytes;
    c10::DeleterFnPtr deleter;
    void* context;
  };
  static void Delete(void* data) {
    CountingAllocator* self = instance_;
    Entry e;
    {
      std::lock_guard<std::mutex> lock(self->mu_);
      auto it = self->live_.find(data);
      if (it == self->live_.end()) return;
      e = it->second;
      self->live_.erase(it);
    }
    const int64_t now = self->current_.fetch_sub(e.bytes) - e.bytes;
    if (ProfilerBackend* o = self->observer_.load()) o->OnMemory(-e.bytes, now);
    if (e.deleter) e.deleter(e.context);
  }

  static inline CountingAllocator* instance_ = nullptr;
  c10::Allocator* base_;
  mutable std::mutex mu_;
  mutable std::unordered_map<void*, Entry> live_;
  mutable std::atomic<int64_t> current_{0};
  mutable std::atomic<int64_t> peak_{0};
  std::atomic<int64_t> limit_{0};
  std::atomic<ProfilerBackend*> observer_{nullptr};
};

class CpuMeter final : public MemoryMeter {
 public:
  CpuMeter() : alloc_(c10::GetAllocator(c10::DeviceType::CPU)) {
    c10::SetAllocator(c10::DeviceType::CPU, &alloc_, /*priority=*/200);
    // Freed host memory stays in the process, as CUDA's caching allocator keeps device memory.
    // glibc would map each block of 32 MiB or more anew and unmap it on free, so the op writing
    // it pays a page fault per page, in one phase and not in another: measured on mobilenet_v2,
    // a recompute took 1.6x the same nodes' forward, 1.2x with memory kept.
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, -1);
  }
  int64_t current() const override { return alloc_.current(); }
  int64_t peak() const override { return alloc_.peak(); }
  int64_t reserved_peak() const override { return alloc_.peak(); }
  void ResetPeak() override { alloc_.ResetPeak(); }
  void SetLimit(int64_t l) override { alloc_.SetLimit(l); }
  int64_t limit() const override { return alloc_.limit(); }
  void SetObserver(ProfilerBackend* o) override { alloc_.SetObserver(o); }

 private:
  CountingAllocator alloc_;
};

// Counts what a wrapped allocator hands out. Each allocation's context remembers the wrapped
// DataPtr, so instances need no shared table (unlike CountingAllocator, whose context must be
// the data pointer for oneDNN's raw_allocate: host buffers only ever back byte tensors).
class HostCountingAllocator final : public c10::Allocator, public HostMemory {
 public:
  HostCountingAllocator(c10::Allocator* base, c10::DispatchKey key) : base_(base), key_(key) {}

  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr inner = base_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    const int64_t bytes = static_cast<int64_t>(n);
    const int64_t now = current_.fetch_add(bytes) + bytes;
    int64_t p = peak_.load();
    while (now > p && !peak_.compare_exchange_weak(p, now)) {
    }
    auto* ctx = new Context{std::move(inner), this, bytes};
    return c10::DataPtr(data, ctx, &Delete, device);
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  at::Tensor Bytes(int64_t n) override {
    return at::detail::empty_generic({n}, this, c10::DispatchKeySet(key_), at::kByte, std::nullopt);
  }
  int64_t current() const override { return current_.load(); }
  int64_t peak() const override { return peak_.load(); }
  void ResetPeak() override { peak_.store(current_.load()); }

 private:
  struct Context {
    c10::DataPtr inner;
    HostCountingAllocator* self;
    int64_t bytes;
  };
  static void Delete(void* p) {
    auto* ctx = static_cast<Context*>(p);
    ctx->self->current_.fetch_sub(ctx->bytes);
    delete ctx;  // frees the wrapped allocation
  }

  c10::Allocator* base_;
  c10::DispatchKey key_;
  std::atomic<int64_t> current_{0};
  std::atomic<int64_t> peak_{0};
};

#ifdef MEMPLAN_TORCH_CUDA
class CudaMeter final : public MemoryMeter {
  // The stats type moved between LibTorch versions; deduce it.
  using Stats = decltype(c10::cuda::CUDACachingAllocator::getDeviceStats(0));
  Stats Stat() const { return c10::cuda::CUDACachingAllocator::getDeviceStats(index_); }

 public:
  explicit CudaMeter(int index) : index_(index) {}
  // Index 0 is the aggregate over pool types (StatType::AGGREGATE in every LibTorch version).
  int64_t current() const override { return Stat().allocated_bytes[0].current; }
  int64_t peak() const override { return Stat().allocated_bytes[0].peak; }
  int64_t reserved_peak() const override { return Stat().reserved_bytes[0].peak; }
  void ResetPeak() override { c10::cuda::CUDACachingAllocator::resetPeakStats(index_); }
  void SetLimit(int64_t l) override { limit_ = l; }
  int64_t limit() const override { return limit_; }
  void ReleaseCachedBlocks() override { c10::cuda::CUDACachingAllocator::emptyCache(); }

 private:
  int index_;
  int64_t limit_ = 0;
};
#endif

}  // namespace

MemoryMeter& MemoryMeter::For(const c10::Device& device) {
  if (device.is_cpu()) {
    static CpuMeter* cpu = new CpuMeter();  // never destroyed: live tensors point into it
    return *cpu;
  }
#ifdef MEMPLAN_TORCH_CUDA
  static std::mutex mu;
  static std::unique_ptr<CudaMeter> meters[64];
  std::lock_guard<std::mutex> lock(mu);
  int i = device.has_index() ? device.index() : 0;
  if (!meters[i]) meters[i] = std::make_unique<CudaMeter>(i);
  return *meters[i];
#else
  TORCH_CHECK(false, "this LibTorch has no CUDA support");
#endif
}

HostMemory& HostMemory::For(const c10::Device& device) {
  if (device.is_cpu()) {
    // Never destroyed: host buffers may outlive the run (a failed step's graph).
    static HostCountingAllocator* cpu =
        new HostCountingAllocator(c10::GetDefaultCPUAllocator(), c10::DispatchKey::CPU);
    return *cpu;
  }
#ifdef MEMPLAN_TORCH_CUDA
  static HostCountingAllocator* pinned =
      new HostCountingAllocator(at::cuda::getPinnedMemoryAllocator(), c10::DispatchKey::CPU);
  return *pinned;
#else
  TORCH_CHECK(false, "this LibTorch has no CUDA support");
#endif
}

std::string CudaBuildVersion() {
#ifdef MEMPLAN_TORCH_CUDA
  return std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10);
#else
  return "";
#endif
}

int CudaDeviceCount() {
#ifdef MEMPLAN_TORCH_CUDA
  return static_cast<int>(c10::cuda::device_count());
#else
  return 0;
#endif
}

bool QueryCudaProperties(int index, std::string* name, int* major, int* minor,
                         int64_t* reserved_bytes, std::string* error) {
#ifdef MEMPLAN_TORCH_CUDA
  cudaDeviceProp prop;
  const cudaError_t e = cudaGetDeviceProperties(&prop, index);
  if (e != cudaSuccess) {
    *error = cudaGetErrorString(e);
    cudaGetLastError();
    return false;
  }
  *name = prop.name;
  *major = prop.major;
  *minor = prop.minor;
  *reserved_bytes =
      c10::cuda::CUDACachingAllocator::getDeviceStats(index).reserved_bytes[0].current;
  return true;
#else
  *error = "this LibTorch has no CUDA support";
  return false;
#endif
}

bool QueryCudaMemory(int index, int64_t* free_bytes, int64_t* total_bytes, std::string* error) {
#ifdef MEMPLAN_TORCH_CUDA
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = index;
  size_t free = 0, total = 0;
  cudaError_t e = cudaSetDevice(index);
  if (e == cudaSuccess) e = cudaMemGetInfo(&free, &total);
  cudaSetDevice(previous);
  if (e != cudaSuccess) {
    *error = cudaGetErrorString(e);
    cudaGetLastError();  // clears the sticky error of a failed query
    return false;
  }
  *free_bytes = static_cast<int64_t>(free);
  *total_bytes = static_cast<int64_t>(total);
  return true;
#else
  *error = "this LibTorch has no CUDA support";
  return false;
#endif
}

void Synchronize(const c10::Device& device) {
#ifdef MEMPLAN_TORCH_CUDA
  if (device.is_cuda()) c10::cuda::device_synchronize();
#endif
}

bool IsOutOfMemory(const std::string& what) {
  return what.find(kOomMarker) != std::string::npos ||
         what.find("out of memory") != std::string::npos ||
         what.find("DefaultCPUAllocator: can't allocate memory") != std::string::npos;
}

}  // namespace memplan::exec
