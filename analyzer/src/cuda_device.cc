// The CUDA device's memory beside a step's tensors (cuda_device.h).
#include "memplan/cuda_device.h"

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "memplan/json_read.h"

namespace memplan {
namespace {

bool IsCudaName(const std::string& d) {
  if (d == "cuda") return true;
  if (d.rfind("cuda:", 0) != 0 || d.size() == 5 || d.size() > 9) return false;
  return std::all_of(d.begin() + 5, d.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// CUBLAS_WORKSPACE_CONFIG: ":SIZE:COUNT" pairs (SIZE in KiB), as LibTorch sums them.
int64_t ParseCublasWorkspaceConfig(const std::string& text) {
  const std::string what = "CUBLAS_WORKSPACE_CONFIG '" + PrintableText(text) + "'";
  if (text.empty() || text[0] != ':') {
    throw MemplanError(what + " is not of the form :SIZE_KIB:COUNT[:SIZE_KIB:COUNT...] (e.g. :4096:8)");
  }
  int64_t total = 0;
  size_t i = 1;
  std::vector<int64_t> numbers;
  while (i <= text.size()) {
    size_t next = text.find(':', i);
    const std::string part = text.substr(i, next == std::string::npos ? std::string::npos : next - i);
    numbers.push_back(ParseInteger(what, part, 0, int64_t{1} << 30));
    if (next == std::string::npos) break;
    i = next + 1;
  }
  if (numbers.size() % 2 != 0) {
    throw MemplanError(what + " has an odd count of numbers: it pairs a size in KiB with a count (:4096:8)");
  }
  for (size_t k = 0; k < numbers.size(); k += 2) total += numbers[k] * 1024 * numbers[k + 1];
  return total;
}

}  // namespace

std::string CudaDevice::allocator_mode() const {
  return allocator().expandable_segments ? "expandable_segments" : "default";
}

int64_t CudaDevice::context_estimate_bytes() const {
  return context_bytes >= 0 ? context_bytes : kDefaultContextBytes;
}

CudaDevice CudaDeviceFromEnvironment(const std::string& device) {
  if (!IsCudaName(device)) {
    throw MemplanError("'" + PrintableText(device) + "' is not a CUDA device: give cuda or cuda:K");
  }
  CudaDevice d;
  d.device = device;
  // Set, even empty, it is what the run's allocator reads (empty: the default mode).
  if (const char* conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF")) d.allocator_conf = conf;
  if (const char* ws = std::getenv("CUBLAS_WORKSPACE_CONFIG"); ws && *ws) d.cublas_workspace_config = ws;
  d.allocator();  // a malformed PYTORCH_CUDA_ALLOC_CONF fails here, naming it
  CublasWorkspaceBytes(d);
  return d;
}

int64_t CublasWorkspaceBytes(const CudaDevice& d) {
  if (!d.cublas_workspace_config.empty()) return ParseCublasWorkspaceConfig(d.cublas_workspace_config);
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
  m.allocated_peak_bytes = Simulate(s, {AllocatorPolicy::kCudaCaching}).peak_bytes;
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
  return {{"kind", "cuda_device"},
          {"memplan_version", MEMPLAN_VERSION},
          {"device", d.device},
          {"name", d.name},
          {"compute_capability", std::to_string(d.compute_major) + "." + std::to_string(d.compute_minor)},
          {"torch_version", d.torch_version},
          {"total_memory_bytes", d.total_memory_bytes},
          {"context_bytes", d.context_bytes},
          {"allocator_conf", d.allocator_conf},
          {"cublas_workspace_config", d.cublas_workspace_config}};
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
  d.compute_minor = static_cast<int>(ParseInteger("compute_capability", cc.substr(dot + 1), 0, 100));
  d.torch_version = Get(j, "", "torch_version", String);
  d.total_memory_bytes = Get(j, "", "total_memory_bytes", Count);
  d.context_bytes = Get(j, "", "context_bytes", Integer);
  if (d.context_bytes < -1) Bad("context_bytes", "is below -1");
  if (j.contains("allocator_conf")) d.allocator_conf = Get(j, "", "allocator_conf", String);
  if (j.contains("cublas_workspace_config")) {
    d.cublas_workspace_config = Get(j, "", "cublas_workspace_config", String);
  }
  d.allocator();
  if (!d.cublas_workspace_config.empty()) CublasWorkspaceBytes(d);
  d.measured = true;
  d.source = "measured on " + (d.name.empty() ? d.device : d.name) +
             (d.torch_version.empty() ? std::string() : " with LibTorch " + d.torch_version);
  return d;
}

nlohmann::json DeviceMemoryToJson(const DeviceMemory& m, const CudaDevice& d) {
  return {{"device", d.device},
          {"device_name", d.name},
          {"device_source", d.source},
          {"allocator_mode", m.allocator_mode},
          {"workspace_bytes", m.workspace_bytes},
          {"context_bytes", m.context_bytes},
          {"context_measured", m.context_measured},
          {"reserved_peak_bytes", m.reserved_peak_bytes},
          {"card_peak_bytes", m.card_peak_bytes()}};
}

}  // namespace memplan
