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
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "memplan/analyzer.h"
#include "memplan/caching_allocator.h"

namespace memplan {

// The cuDNN workspaces of one convolution signature, as LibTorch takes them from the caching
// allocator (bytes as cuDNN asks for them; the allocator rounds them to 512-byte blocks).
struct ConvWorkspace {
  int64_t forward_bytes = 0;
  int64_t backward_data_bytes = 0;    // computing the input's gradient
  int64_t backward_filter_bytes = 0;  // computing the weight's gradient
  bool operator==(const ConvWorkspace& o) const = default;
};

struct CudaDevice {
  std::string device = "cuda";  // as the user named it: cuda or cuda:K
  std::string name;             // "NVIDIA H200" from a device file; "" when not measured
  int compute_major = 0;        // compute capability; 0: unknown (the Hopper default is assumed)
  int compute_minor = 0;
  std::string torch_version;       // the LibTorch the device file was measured with
  int64_t total_memory_bytes = 0;  // the card's memory; 0: unknown
  // Held outside the caching allocator (context, kernels, handles); -1: unknown, then
  // kDefaultContextBytes is reported as an estimate.
  int64_t context_bytes = -1;
  // PYTORCH_CUDA_ALLOC_CONF as the run will see it. memplan run sets expandable segments unless
  // the user set the variable, so that is the default here too.
  std::string allocator_conf = "expandable_segments:True";
  // CUBLAS_WORKSPACE_CONFIG as the run will see it ("": LibTorch's default).
  std::string cublas_workspace_config;
  // cuDNN convolution workspaces measured on this device (memplan calibrate MODEL.onnx), by
  // ConvGeometry::signature(); convolutions not in it get EstimateConvWorkspace.
  std::map<std::string, ConvWorkspace> conv_workspaces;
  // Per NodeId of the graph being planned: what its estimated cuDNN workspaces may fall short by
  // (ConvWorkspaceMargins; empty: nothing estimated). Not part of the device file.
  std::vector<int64_t> conv_margin_bytes;
  bool measured = false;  // from a device file
  std::string source = "documented defaults (no --device-file)";

  CachingAllocatorConfig allocator() const { return ParseCachingAllocatorConfig(allocator_conf); }
  // "expandable_segments" or "default".
  std::string allocator_mode() const;
  int64_t context_estimate_bytes() const;
  // What cuDNN's choices depend on, as one key: the card, its compute capability, LibTorch
  // ("cuda/NVIDIA H200/sm90/torch-2.11.0"; "?" for what is not known).
  std::string fingerprint() const;
};

// The context, kernels and handles measured on the H200 (the larger of 860-884 MB).
constexpr int64_t kDefaultContextBytes = 884000000;

// Common cards, so that a plan can be made for one without it (`--card NAME`): their memory
// (cudaGetDeviceProperties' totalGlobalMem as NVIDIA specifies the card) and compute capability;
// their context stays an estimate (kDefaultContextBytes) until calibrated. Names: h100-80gb,
// h200, a100-40gb, a100-80gb, l4, rtx4090.
std::vector<std::string> NamedCardNames();
// Throws MemplanError listing the names for an unknown one.
CudaDevice NamedCard(const std::string& name);

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

// cuDNN convolution workspaces (LibTorch 2.11 to 2.14, aten/src/ATen/native/cudnn/Conv_v8.cpp,
// ConvShared.cpp). A CUDA convolution runs in cuDNN unless it is depthwise in float32 or float64
// (LibTorch's own depthwise kernels, no workspace). With cudnn.benchmark off, LibTorch's default,
// it asks cuDNN's heuristics (mode instant) for engine configs and runs the first one whose plan
// builds and whose workspace (plan.getWorkspaceSize(), taken as is from the caching allocator)
// allocates; an allocation that fails moves on to the next config, so under memory pressure a
// smaller workspace may be chosen. The plan is cached per signature; the workspace is freed when
// the call returns. Forward: the output, then the workspace. Backward: the input's gradient and
// its workspace, then the weight's gradient and its own workspace.
// The size depends on cuDNN's choice and can only be measured on the device (calibrate). Measured
// on an H200 (LibTorch 2.11.0+cu130, resnet18 at batch 64: 31 workspaces of 11 signatures,
// shared/gpu/measured-2026-11-26/allocator-snapshots), most engines transpose the input, output
// and weight (NCHW to NHWC): forward and backward data took x + y + w bytes within 147 B on 12
// of 21 (x input, y output, w weight), less on 7 (strided 1x1 convs: x + y, or no workspace; a
// strided 3x3 forward: 2 y + w) and 8 MiB more on 2 (the 256-channel 3x3 forwards); backward
// filter took x + y + w plus split-K partial weights (up to 14 w) or more: at most 18.9 MB above
// x + y + w (the 7x7 stem: 0.49 x), 8.7 MB on every other signature.
// The estimate is x + y + w for each pass; the margin an estimated conv may need beyond it is
// max(16 MiB, x / 2): an envelope of those measurements, not a bound cuDNN documents.
struct ConvGeometry {
  std::vector<int64_t> x;  // the input as cuDNN sees it (padded when the ONNX pads are asymmetric)
  std::vector<int64_t> w;
  std::vector<int64_t> stride, pad, dilation;  // per spatial dim; pad on both sides
  int64_t group = 1;
  DType dtype = DType::kFloat32;
  // "float32 x[64,3,224,224] w[64,3,7,7] stride[2,2] pad[3,3] dilation[1,1] group 1"
  std::string signature() const;
};
// The convolution node n as the executor hands it to cuDNN (its geometry: auto_pad, asymmetric
// pads as an explicit pad); nullopt when n is no Conv, its shapes are unknown, or LibTorch runs
// it without cuDNN (depthwise float32/float64).
std::optional<ConvGeometry> CudnnConvGeometry(const Node& n, const std::vector<Tensor>& t);
// x + y + w for each pass (above).
ConvWorkspace EstimateConvWorkspace(const Node& n, const std::vector<Tensor>& t);
// Every Conv node's workspaces on `d` (measured where d has its signature, else estimated) as its
// forward and backward workspace, replacing the CPU's; and the cuBLAS workspaces
// (library_workspace_bytes). The backward step holds the input's and the weight's gradients and
// the workspace together, so its workspace is max(data - weight gradient, filter) bytes (in
// 512-byte blocks): the true peak of the two calls. Ops whose CUDA kernel saves other tensors
// than the CPU's get the CUDA saves (Dropout: native_dropout's bool mask).
void PrepareGraphForCuda(TrainingGraph& g, const CudaDevice& d);
// Per NodeId: max(16 MiB, x / 2) for g's cuDNN convolutions that d has not measured, else 0.
std::vector<int64_t> ConvWorkspaceMargins(const TrainingGraph& g, const CudaDevice& d);
// The largest of them.
int64_t ConvWorkspaceMarginBytes(const TrainingGraph& g, const CudaDevice& d);

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
  // How far the allocated peak could rise if every estimated conv workspace (d.conv_margin_bytes)
  // took its margin: max(0, the largest bytes during a step of such a conv + its margin - the
  // peak). The workspaces are transients of their own steps, so the worst case is one of them.
  int64_t workspace_margin_bytes = 0;
  std::string allocator_mode;
  // What nvidia-smi would show for the process at the peak.
  int64_t card_peak_bytes() const { return reserved_peak_bytes + context_bytes; }
};
DeviceMemory PredictDeviceMemory(const Schedule& s, const CudaDevice& d);

// The device file ("kind": "cuda_device"). Every field CudaDeviceToJson writes but
// "allocator_conf", "cublas_workspace_config" and "conv_workspaces" is required; throws
// MemplanError naming a missing or mistyped one.
nlohmann::json CudaDeviceToJson(const CudaDevice& d);
CudaDevice CudaDeviceFromJson(const nlohmann::json& j);
// The JSON fields of a prediction (analysis and plan): device, allocator_mode, workspace_bytes,
// context_bytes, reserved_peak_bytes, card_peak_bytes, device_source, workspace_margin_bytes.
nlohmann::json DeviceMemoryToJson(const DeviceMemory& m, const CudaDevice& d);

}  // namespace memplan
