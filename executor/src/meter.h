// Memory meters: a counting wrapper around LibTorch's CPU allocator (exact bytes alive and
// the peak), and the CUDA caching allocator's statistics.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <string>

namespace memplan {
class ProfilerBackend;
}

namespace memplan::exec {

class MemoryMeter {
 public:
  // The meter of a device; the CPU one installs the counting allocator on first use (it is
  // never uninstalled: tensors it allocated hold it).
  static MemoryMeter& For(const c10::Device& device);

  virtual ~MemoryMeter() = default;
  virtual int64_t current() const = 0;        // bytes allocated and alive
  virtual int64_t peak() const = 0;           // highest `current` since the last ResetPeak
  virtual int64_t reserved_peak() const = 0;  // CUDA: reserved by the caching allocator
  virtual void ResetPeak() = 0;
  // An allocation that would take `current` above `limit` (> 0) throws out of memory.
  virtual void SetLimit(int64_t limit) = 0;
  virtual int64_t limit() const = 0;
  // The CPU meter reports every allocation and free to `observer` (nullptr: none) while it is
  // set; other meters ignore it (their profilers see memory themselves).
  virtual void SetObserver(ProfilerBackend* observer) {}
  // CUDA: returns the caching allocator's unused blocks to the driver, so that a profiled
  // step's allocations reach cudaMalloc, where CUPTI sees them. No-op elsewhere.
  virtual void ReleaseCachedBlocks() {}
};

// Pinned host memory for offload (plan.h): a second counting allocator, apart from the device's,
// so that what a plan moves to the host leaves the device meter and shows on this one. On CPU it
// wraps LibTorch's default CPU allocator (which the device meter's counting allocator also wraps,
// but without counting there); on CUDA, LibTorch's pinned-memory allocator.
class HostMemory {
 public:
  static HostMemory& For(const c10::Device& device);
  virtual ~HostMemory() = default;
  virtual at::Tensor Bytes(int64_t n) = 0;  // an uninitialised uint8 tensor of n bytes
  virtual int64_t current() const = 0;
  virtual int64_t peak() const = 0;
  virtual void ResetPeak() = 0;
};

// Whether a LibTorch error message is an out-of-memory failure.
bool IsOutOfMemory(const std::string& what);
// The CUDA runtime version this memplan was compiled against ("13.0"); empty in a CPU-only build.
std::string CudaBuildVersion();
// The device's name and compute capability (cudaGetDeviceProperties) and the caching
// allocator's reserved bytes now; false with the reason in `error`.
bool QueryCudaProperties(int index, std::string* name, int* major, int* minor,
                         int64_t* reserved_bytes, std::string* error);
// cudaMemGetInfo on device `index`; false with the reason in `error`.
bool QueryCudaMemory(int index, int64_t* free_bytes, int64_t* total_bytes, std::string* error);
int CudaDeviceCount();  // devices visible now; 0 without CUDA, a driver or a GPU
void Synchronize(const c10::Device& device);  // waits for the device's queued work

}  // namespace memplan::exec
