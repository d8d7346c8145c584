// What a CUDA device holds beside a step's tensors, and the step's memory as the device sees it
// (DESIGN.md, "The memory model"; measured on an H200 with LibTorch 2.11, shared/gpu/README.md):
// - the CUDA libraries' workspaces, taken through the caching allocator: cuBLAS and cuBLASLt
//   each keep one workspace per (handle, stream) from the first matmul on (LibTorch's
//   CUDABlasHandlePool); its size follows CUBLAS_WORKSPACE_CONFIG (":SIZE_KIB:COUNT" pairs,
//   summed), by default 4096 KiB x 8 = 32 MiB on compute capability 9.0 and later and
//   4096 KiB x 2 + 16 KiB x 8 on earlier GPUs. With CUBLAS_WORKSPACE_CONFIG=:0:0 the measured
//   gap between predicted and allocated fell from 67,254,155 B to 145,291 B on gpt b32: the two
//   workspaces (2 x 32 MiB) were the difference;
// - the caching allocator's segments (caching_allocator.h): the reserved memory, which is
//   what runs out;
// - the CUDA context, loaded kernels and library handles, outside the allocator (860-884 MB on
//   the H200: device total - free - reserved after a step).
// A device file (`memplan calibrate`, written on the GPU) gives the measured figures; without
// one memplan uses the documented defaults above and says so.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "memplan/analyzer.h"
#include "memplan/caching_allocator.h"

namespace memplan {

struct CudaDevice {
  std::string device = "cuda";  // as the user named it: cuda or cuda:K
  std::string name;             // "NVIDIA H200" from a device file; "" when not measured
  int compute_major = 0;        // compute capability; 0: unknown (the Hopper default is assumed)
  int compute_minor = 0;
  std::string torch_version;    // the LibTorch the device file was measured with
  int64_t total_memory_bytes = 0;  // the card's memory; 0: unknown
  // Held outside the caching allocator (context, kernels, handles); -1: unknown, then
  // kDefaultContextBytes is reported as an estimate.
  int64_t context_bytes = -1;
  // PYTORCH_CUDA_ALLOC_CONF as the run will see it. memplan run sets expandable segments unless
  // the user set the variable, so that is the default here too.
  std::string allocator_conf = "expandable_segments:True";
  // CUBLAS_WORKSPACE_CONFIG as the run will see it ("": LibTorch's default).
  std::string cublas_workspace_config;
  bool measured = false;  // from a device file
  std::string source = "documented defaults (no --device-file)";

  CachingAllocatorConfig allocator() const { return ParseCachingAllocatorConfig(allocator_conf); }
  // "expandable_segments" or "default".
  std::string allocator_mode() const;
  int64_t context_estimate_bytes() const;
};

// The context, kernels and handles measured on the H200 (the larger of 860-884 MB).
constexpr int64_t kDefaultContextBytes = 884000000;

// The device for `device` ("cuda", "cuda:K") with the environment's PYTORCH_CUDA_ALLOC_CONF and
// CUBLAS_WORKSPACE_CONFIG when set (the run reads the same variables). Throws MemplanError on a
// name that is not a CUDA device or a malformed variable.
CudaDevice CudaDeviceFromEnvironment(const std::string& device);

// One cuBLAS (or cuBLASLt) workspace: CUBLAS_WORKSPACE_CONFIG's sum, else LibTorch's default for
// the compute capability (unknown: 9.0's, the larger). Throws MemplanError naming a malformed
// config.
int64_t CublasWorkspaceBytes(const CudaDevice& d);
// What a step of `g` keeps in library workspaces on `d`: cuBLAS's and cuBLASLt's when some node
// is a matmul (ComputeClass kMatmul), else nothing.
int64_t LibraryWorkspaceBytes(const TrainingGraph& g, const CudaDevice& d);

// The step's memory on the device: the schedule (built with g.library_workspace_bytes set)
// replayed with 512-byte blocks for the allocated peak and through the caching allocator model
// for the reserved one.
struct DeviceMemory {
  int64_t allocated_peak_bytes = 0;
  int64_t reserved_peak_bytes = 0;
  int32_t reserved_peak_step = 0;
  int64_t workspace_bytes = 0;
  int64_t context_bytes = 0;  // measured, or the estimate
  bool context_measured = false;
  std::string allocator_mode;
  // What nvidia-smi would show for the process at the peak.
  int64_t card_peak_bytes() const { return reserved_peak_bytes + context_bytes; }
};
DeviceMemory PredictDeviceMemory(const Schedule& s, const CudaDevice& d);

// The device file ("kind": "cuda_device"). Every field CudaDeviceToJson writes but
// "allocator_conf" and "cublas_workspace_config" is required; throws MemplanError naming a
// missing or mistyped one.
nlohmann::json CudaDeviceToJson(const CudaDevice& d);
CudaDevice CudaDeviceFromJson(const nlohmann::json& j);
// The JSON fields of a prediction (analysis and plan): device, allocator_mode, workspace_bytes,
// context_bytes, reserved_peak_bytes, card_peak_bytes, device_source.
nlohmann::json DeviceMemoryToJson(const DeviceMemory& m, const CudaDevice& d);

}  // namespace memplan
