// The CUDA device's memory beside a step's tensors (cuda_device.h).
#include "memplan/cuda_device.h"

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "memplan/analysis_report.h"
#include "memplan/device_name.h"
#include "memplan/json_read.h"
#include "memplan/spatial_attrs.h"
#include "op_rules.h"

namespace memplan {
namespace {

// cuda or cuda:K, as device_name.h reads device names.
bool IsCudaName(const std::string& d) {
  try {
    return ParseDeviceName(d).cuda;
  } catch (const MemplanError&) {
    return false;
  }
}

// CUBLAS_WORKSPACE_CONFIG: ":SIZE:COUNT" pairs (SIZE in KiB), as LibTorch sums them.
int64_t ParseCublasWorkspaceConfig(const std::string& text) {
  const std::string what = "CUBLAS_WORKSPACE_CONFIG '" + PrintableText(text) + "'";
  if (text.empty() || text[0] != ':') {
    throw MemplanError(what +
                       " is not of the form :SIZE_KIB:COUNT[:SIZE_KIB:COUNT...] (e.g. :4096:8)");
  }
  int64_t total = 0;
  size_t i = 1;
  std::vector<int64_t> numbers;
  while (i <= text.size()) {
    size_t next = text.find(':', i);
    const std::string part =
        text.substr(i, next == std::string::npos ? std::string::npos : next - i);
    numbers.push_back(ParseInteger(what, part, 0, int64_t{1} << 30));
    if (next == std::string::npos) break;
    i = next + 1;
  }
  if (numbers.size() % 2 != 0) {
    throw MemplanError(
        what + " has an odd count of numbers: it pairs a size in KiB with a count (:4096:8)");
  }
  for (size_t k = 0; k < numbers.size(); k += 2) total += numbers[k] * 1024 * numbers[k + 1];
  return total;
}

std::string Dims(const char* name, const std::vector<int64_t>& v) {
  std::string s = std::string(name) + "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

int64_t Blocks(int64_t bytes) { return AccountedBytes(bytes, AllocatorPolicy::kCudaCaching); }

}  // namespace

std::string ConvGeometry::signature() const {
  return std::string(DTypeName(dtype)) + " " + Dims("x", x) + " " + Dims("w", w) + " " +
         Dims("stride", stride) + " " + Dims("pad", pad) + " " + Dims("dilation", dilation) +
         " group " + std::to_string(group);
}

// The executor's convolution (kernels_nn.cc): the attributes as spatial_attrs.h reads them, and
// asymmetric pads become an explicit zero pad before a convolution with none.
std::optional<ConvGeometry> CudnnConvGeometry(const Node& n, const std::vector<Tensor>& t) {
  // ConvTranspose runs in cuDNN too, with the roles of its passes swapped; not modelled yet.
  if (n.op_type != "Conv" || n.inputs.size() < 2 || n.inputs[0] == kNone || n.inputs[1] == kNone)
    return std::nullopt;
  const Tensor& x = t[n.inputs[0]];
  const Tensor& w = t[n.inputs[1]];
  const size_t k = w.shape.size() < 3 ? 0 : w.shape.size() - 2;
  if (k == 0 || x.shape.size() != k + 2) return std::nullopt;
  for (int64_t d : x.shape)
    if (d <= 0) return std::nullopt;
  for (int64_t d : w.shape)
    if (d <= 0) return std::nullopt;
  ConvGeometry g;
  g.x = x.shape;
  g.w = w.shape;
  g.dtype = x.dtype;
  const SpatialAttrs a =
      ReadSpatialAttrs(n, x.shape, std::vector<int64_t>(w.shape.begin() + 2, w.shape.end()));
  g.group = a.group;
  // LibTorch's depthwise test (ConvParams::is_depthwise); cuDNN takes those only in half precision
  // or channels-last (use_cudnn_depthwise).
  const bool depthwise =
      (k == 2 || k == 3) && g.group > 1 && x.shape[1] == g.group && w.shape[0] % x.shape[1] == 0;
  if (depthwise && (x.dtype == DType::kFloat32 || x.dtype == DType::kFloat64)) return std::nullopt;
  g.stride = a.stride;
  g.dilation = a.dilation;
  g.pad.assign(k, 0);
  for (size_t i = 0; i < k; ++i) {
    if (a.symmetric()) {
      g.pad[i] = a.pad_begin[i];
    } else {
      g.x[i + 2] += a.pad_begin[i] + a.pad_end[i];
    }
  }
  return g;
}

ConvWorkspace EstimateConvWorkspace(const Node& n, const std::vector<Tensor>& t) {
  const int64_t sum = t[n.inputs[0]].bytes + t[n.outputs[0]].bytes + t[n.inputs[1]].bytes;
  return {sum, sum, sum};
}

void PrepareGraphForCuda(TrainingGraph& g, const CudaDevice& d) {
  g.library_workspace_bytes = LibraryWorkspaceBytes(g, d);
  for (Node& n : g.nodes) {
    const OpRule* r = FindOpRule(n.op_type);
    if (r && r->saves_on_cuda) ApplySaves(n, g.tensors, *r, r->saves_on_cuda);
  }
  for (Node& n : g.nodes) {
    const std::optional<ConvGeometry> geometry = CudnnConvGeometry(n, g.tensors);
    if (n.op_type != "Conv") continue;
    // Not cuDNN (depthwise float32): LibTorch's own CUDA kernels, no workspace.
    n.forward_workspace_bytes = 0;
    n.backward_workspace_bytes = 0;
    n.forward_workspace_margin_bytes = n.backward_workspace_margin_bytes = 0;  // the CPU's
    if (!geometry) continue;
    const auto measured = d.conv_workspaces.find(geometry->signature());
    const ConvWorkspace ws = measured != d.conv_workspaces.end()
                                 ? measured->second
                                 : EstimateConvWorkspace(n, g.tensors);
    n.forward_workspace_bytes = ws.forward_bytes;
    if (!n.has_backward) continue;
    const bool input_grad = g.tensors[n.inputs[0]].has_gradient;
    const bool weight_grad = g.tensors[n.inputs[1]].has_gradient;
    const int64_t data = input_grad ? Blocks(ws.backward_data_bytes) : 0;
    const int64_t weight = weight_grad ? Blocks(g.tensors[n.inputs[1]].bytes) : 0;
    const int64_t filter = weight_grad ? Blocks(ws.backward_filter_bytes) : 0;
    n.backward_workspace_bytes = std::max<int64_t>({data - weight, filter, 0});
  }
}

std::vector<int64_t> ConvWorkspaceMargins(const TrainingGraph& g, const CudaDevice& d) {
  std::vector<int64_t> margins(g.nodes.size(), 0);
  for (const Node& n : g.nodes) {
    const std::optional<ConvGeometry> geometry = CudnnConvGeometry(n, g.tensors);
    if (!geometry || d.conv_workspaces.count(geometry->signature())) continue;
    margins[n.id] = std::max<int64_t>(16 << 20, g.tensors[n.inputs[0]].bytes / 2);
  }
  return margins;
}

int64_t ConvWorkspaceMarginBytes(const TrainingGraph& g, const CudaDevice& d) {
  const std::vector<int64_t> margins = ConvWorkspaceMargins(g, d);
  return margins.empty() ? 0 : *std::max_element(margins.begin(), margins.end());
}

std::string CudaDevice::allocator_mode() const {
  return allocator().expandable_segments ? "expandable_segments" : "default";
}

int64_t CudaDevice::context_estimate_bytes() const {
  return context_bytes >= 0 ? context_bytes : kDefaultContextBytes;
}

std::string CudaDevice::fingerprint() const {
  return "cuda/" + (name.empty() ? std::string("?") : name) + "/sm" +
         (compute_major > 0 ? std::to_string(compute_major) + std::to_string(compute_minor)
                            : std::string("?")) +
         "/torch-" + (torch_version.empty() ? std::string("?") : torch_version);
}

namespace {

struct NamedCardSpec {
  const char* name;
  const char* marketing;
  int64_t total_memory_bytes;
  int major, minor;
};
// Total memory as CUDA reports it (cudaGetDeviceProperties, nvidia-smi's MiB): the H200's as
// measured (shared/gpu/measured-2026-11-26); the others as nvidia-smi shows those cards
// (H100 SXM 81,559 MiB, A100 40,536 and 81,251 MiB, L4 23,034 MiB, RTX 4090 24,564 MiB).
constexpr NamedCardSpec kNamedCards[] = {
    {"h100-80gb", "NVIDIA H100 80GB HBM3", 81559LL << 20, 9, 0},
    {"h200", "NVIDIA H200", 150109880320LL, 9, 0},
    {"a100-40gb", "NVIDIA A100-SXM4-40GB", 40536LL << 20, 8, 0},
    {"a100-80gb", "NVIDIA A100-SXM4-80GB", 81251LL << 20, 8, 0},
    {"l4", "NVIDIA L4", 23034LL << 20, 8, 9},
    {"rtx4090", "NVIDIA GeForce RTX 4090", 24564LL << 20, 8, 9},
};

}  // namespace

std::vector<std::string> NamedCardNames() {
  std::vector<std::string> names;
  for (const NamedCardSpec& c : kNamedCards) names.push_back(c.name);
  return names;
}

CudaDevice NamedCard(const std::string& name) {
  std::string names;
  for (const NamedCardSpec& c : kNamedCards) {
    if (name == c.name) {
      CudaDevice d;
      d.name = c.marketing;
      d.total_memory_bytes = c.total_memory_bytes;
      d.compute_major = c.major;
      d.compute_minor = c.minor;
      d.source = std::string("the named card ") + c.name +
                 " (its memory and compute capability; the CUDA context estimated)";
      return d;
    }
    names += (names.empty() ? "" : ", ") + std::string(c.name);
  }
  throw MemplanError("unknown card '" + PrintableText(name) + "'; named cards: " + names +
                     " (or measure one with memplan calibrate --device cuda)");
}

CudaDevice CudaDeviceFromEnvironment(const std::string& device) {
  if (!IsCudaName(device)) {
    throw MemplanError("'" + PrintableText(device) + "' is not a CUDA device: give cuda or cuda:K");
  }
  CudaDevice d;
  d.device = device;
  // Set, even empty, it is what the run's allocator reads (empty: the default mode).
  if (const char* conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF")) d.allocator_conf = conf;
  if (const char* ws = std::getenv("CUBLAS_WORKSPACE_CONFIG"); ws && *ws)
    d.cublas_workspace_config = ws;
  d.allocator();  // a malformed PYTORCH_CUDA_ALLOC_CONF fails here, naming it
  CublasWorkspaceBytes(d);
  return d;
}

int64_t CublasWorkspaceBytes(const CudaDevice& d) {
  if (!d.cublas_workspace_config.empty())
    return ParseCublasWorkspaceConfig(d.cublas_workspace_config);
  const bool before_hopper = d.compute_major > 0 && d.compute_major < 9;
  return before_hopper ? 4096 * 1024 * 2 + 16 * 1024 * 8 : int64_t{4096} * 1024 * 8;
}

int64_t LibraryWorkspaceBytes(const TrainingGraph& g, const CudaDevice& d) {
  const bool matmul = std::any_of(g.nodes.begin(), g.nodes.end(), [&](const Node& n) {
    return ComputeClassOf(n, g.tensors) == ComputeClass::kMatmul;
  });
  // One workspace for cuBLAS and one for cuBLASLt, each taken through the caching allocator.
  return matmul ? 2 * CublasWorkspaceBytes(d) : 0;
}

DeviceMemory PredictDeviceMemory(const Schedule& s, const CudaDevice& d) {
  DeviceMemory m;
  const MemoryTimeline t = Simulate(s, {AllocatorPolicy::kCudaCaching});
  m.allocated_peak_bytes = t.peak_bytes;
  for (size_t i = 0; i < s.steps.size(); ++i) {
    const NodeId n = s.steps[i].node;
    if (n == kNone || n >= static_cast<NodeId>(d.conv_margin_bytes.size())) continue;
    const int64_t margin = d.conv_margin_bytes[n];
    if (margin > 0) {
      m.workspace_margin_bytes =
          std::max(m.workspace_margin_bytes, t.bytes_during[i] + margin - t.peak_bytes);
    }
  }
  // One step from a fresh allocator: replaying the step again from the cache it leaves was
  // tried and changed no reserved peak on resnet18, gpt or vit_b_16 (both modes).
  const ReservedTimeline r = SimulateReserved(s, d.allocator());
  m.reserved_peak_bytes = r.reserved_peak_bytes;
  m.reserved_peak_step = r.reserved_peak_step;
  for (const Buffer& b : s.buffers) {
    if (b.category == MemoryCategory::kWorkspace) m.workspace_bytes += b.bytes;
  }
  m.context_bytes = d.context_estimate_bytes();
  m.context_measured = d.context_bytes >= 0;
  m.allocator_mode = d.allocator_mode();
  return m;
}

nlohmann::json CudaDeviceToJson(const CudaDevice& d) {
  nlohmann::json convs = nlohmann::json::array();
  for (const auto& [signature, ws] : d.conv_workspaces) {
    convs.push_back({{"signature", signature},
                     {"forward_bytes", ws.forward_bytes},
                     {"backward_data_bytes", ws.backward_data_bytes},
                     {"backward_filter_bytes", ws.backward_filter_bytes}});
  }
  return {{"kind", "cuda_device"},
          {"memplan_version", MEMPLAN_VERSION},
          {"device", d.device},
          {"name", d.name},
          {"compute_capability",
           std::to_string(d.compute_major) + "." + std::to_string(d.compute_minor)},
          {"torch_version", d.torch_version},
          {"total_memory_bytes", d.total_memory_bytes},
          {"context_bytes", d.context_bytes},
          {"allocator_conf", d.allocator_conf},
          {"cublas_workspace_config", d.cublas_workspace_config},
          {"conv_workspaces", convs}};
}

CudaDevice CudaDeviceFromJson(const nlohmann::json& j) {
  using namespace json_read;
  if (!j.is_object()) throw MemplanError("a device file is a JSON object");
  if (Get(j, "", "kind", String) != "cuda_device") Bad("kind", "is not \"cuda_device\"");
  CudaDevice d;
  d.device = Get(j, "", "device", String);
  if (!IsCudaName(d.device)) Bad("device", "is not cuda or cuda:K");
  d.name = Get(j, "", "name", String);
  const std::string cc = Get(j, "", "compute_capability", String);
  const size_t dot = cc.find('.');
  if (dot == std::string::npos) Bad("compute_capability", "is not MAJOR.MINOR");
  d.compute_major = static_cast<int>(ParseInteger("compute_capability", cc.substr(0, dot), 0, 100));
  d.compute_minor =
      static_cast<int>(ParseInteger("compute_capability", cc.substr(dot + 1), 0, 100));
  d.torch_version = Get(j, "", "torch_version", String);
  d.total_memory_bytes = Get(j, "", "total_memory_bytes", Count);
  d.context_bytes = Get(j, "", "context_bytes", Integer);
  if (d.context_bytes < -1) Bad("context_bytes", "is below -1");
  if (j.contains("allocator_conf")) d.allocator_conf = Get(j, "", "allocator_conf", String);
  if (j.contains("cublas_workspace_config")) {
    d.cublas_workspace_config = Get(j, "", "cublas_workspace_config", String);
  }
  if (j.contains("conv_workspaces")) {
    const json& convs = j["conv_workspaces"];
    if (!convs.is_array()) Bad("conv_workspaces", "is not an array");
    for (size_t i = 0; i < convs.size(); ++i) {
      const std::string at = "conv_workspaces[" + std::to_string(i) + "]";
      if (!convs[i].is_object()) Bad(at, "is not an object");
      ConvWorkspace ws;
      ws.forward_bytes = Get(convs[i], at, "forward_bytes", Count);
      ws.backward_data_bytes = Get(convs[i], at, "backward_data_bytes", Count);
      ws.backward_filter_bytes = Get(convs[i], at, "backward_filter_bytes", Count);
      const std::string signature = Get(convs[i], at, "signature", String);
      if (!d.conv_workspaces.emplace(signature, ws).second)
        Bad(at + ".signature", "repeats an earlier one");
    }
  }
  d.allocator();
  if (!d.cublas_workspace_config.empty()) CublasWorkspaceBytes(d);
  d.measured = true;
  d.source = "measured on " + (d.name.empty() ? d.device : d.name) +
             (d.torch_version.empty() ? std::string() : " with LibTorch " + d.torch_version);
  return d;
}

nlohmann::json DeviceMemoryToJson(const DeviceMemory& m, const CudaDevice& d) {
  nlohmann::json j = nlohmann::json::object();
  WriteDevicePrediction(j, DevicePredictionOf(m, d));  // analysis_report.h's one writer
  return j;
}

}  // namespace memplan
