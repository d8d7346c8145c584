// The CPU as oneDNN sees it: cpu_device.h.
#include "memplan/cpu_device.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <utility>

#include "memplan/json_read.h"
#include "memplan/parse.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define MEMPLAN_X86 1
#endif

namespace memplan {
namespace {

struct IsaEntry {
  CpuIsa isa;
  const char* name;         // cpu_isa_t's name
  const char* env;          // ONEDNN_MAX_CPU_ISA's spelling
  const char* alias;        // its other spelling (AVX10), or ""
  const char* description;  // ONEDNN_VERBOSE's "isa:" text
};
constexpr std::array<IsaEntry, 12> kIsas = {{
    {CpuIsa::kUnknown, "unknown", "", "", "no x86-64 JIT kernels"},
    {CpuIsa::kSse41, "sse41", "SSE41", "", "Intel SSE4.1"},
    {CpuIsa::kAvx, "avx", "AVX", "", "Intel AVX"},
    {CpuIsa::kAvx2, "avx2", "AVX2", "", "Intel AVX2"},
    {CpuIsa::kAvx2Vnni, "avx2_vnni", "AVX2_VNNI", "", "Intel AVX2 with Intel DL Boost"},
    {CpuIsa::kAvx2Vnni2, "avx2_vnni_2", "AVX2_VNNI_2", "",
     "Intel AVX2 with Intel DL Boost and bfloat16 support"},
    {CpuIsa::kAvx512Core, "avx512_core", "AVX512_CORE", "", "Intel AVX-512"},
    {CpuIsa::kAvx512CoreVnni, "avx512_core_vnni", "AVX512_CORE_VNNI", "",
     "Intel AVX-512 with Intel DL Boost"},
    {CpuIsa::kAvx512CoreBf16, "avx512_core_bf16", "AVX512_CORE_BF16", "",
     "Intel AVX-512 with Intel DL Boost and bfloat16 support"},
    {CpuIsa::kAvx512CoreFp16, "avx512_core_fp16", "AVX512_CORE_FP16", "AVX10_1_512",
     "Intel AVX-512 with float16, Intel DL Boost and bfloat16 support"},
    {CpuIsa::kAvx512CoreAmx, "avx512_core_amx", "AVX512_CORE_AMX", "AVX10_1_512_AMX",
     "Intel AVX-512 with float16, Intel DL Boost and bfloat16 support and Intel AMX with bfloat16 "
     "and 8-bit integer support"},
    {CpuIsa::kAvx512CoreAmxFp16, "avx512_core_amx_fp16", "AVX512_CORE_AMX_FP16",
     "AVX10_1_512_AMX_FP16",
     "Intel AVX-512 with float16, Intel DL Boost and bfloat16 support and Intel AMX with bfloat16, "
     "8-bit integer and float16 support"},
}};

const IsaEntry& EntryOf(CpuIsa isa) {
  for (const IsaEntry& e : kIsas)
    if (e.isa == isa) return e;
  return kIsas[0];
}

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// The best ISA the CPU and the OS support, by the checks of oneDNN's mayiuse() (cpu_isa_traits.hpp,
// xbyak's cpuid bits): AVX2 needs the AVX state saved (XCR0 bits 1-2), AVX-512 the opmask and ZMM
// state (bits 5-7), AMX the tile state (bits 17-18).
CpuIsa BestIsa() {
#ifdef MEMPLAN_X86
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return CpuIsa::kUnknown;
  const bool sse41 = c & (1u << 19), osxsave = c & (1u << 27), avx_bit = c & (1u << 28);
  if (!sse41) return CpuIsa::kUnknown;
  uint64_t xcr0 = 0;
  if (osxsave) {
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (static_cast<uint64_t>(hi) << 32) | lo;
  }
  const bool ymm = (xcr0 & 0x6) == 0x6, zmm = (xcr0 & 0xe6) == 0xe6,
             tiles = (xcr0 & 0x60000) == 0x60000;
  if (!avx_bit || !ymm) return CpuIsa::kSse41;
  unsigned b7 = 0, c7 = 0, d7 = 0, a71 = 0, unused = 0;
  if (!__get_cpuid_count(7, 0, &a, &b7, &c7, &d7)) return CpuIsa::kAvx;
  __get_cpuid_count(7, 1, &a71, &unused, &unused, &unused);
  const bool avx2 = b7 & (1u << 5);
  const bool avx512_core =
      zmm && (b7 & (1u << 16)) && (b7 & (1u << 17)) && (b7 & (1u << 30)) && (b7 & (1u << 31));
  const bool vnni512 = c7 & (1u << 11), bf16 = a71 & (1u << 5), fp16 = d7 & (1u << 23);
  const bool amx = tiles && (d7 & (1u << 22)) && (d7 & (1u << 24)) && (d7 & (1u << 25));
  const bool amx_fp16 = a71 & (1u << 21);
  if (avx512_core) {
    if (!vnni512) return CpuIsa::kAvx512Core;
    if (!bf16) return CpuIsa::kAvx512CoreVnni;
    if (!fp16) return CpuIsa::kAvx512CoreBf16;
    if (!amx) return CpuIsa::kAvx512CoreFp16;
    return amx_fp16 ? CpuIsa::kAvx512CoreAmxFp16 : CpuIsa::kAvx512CoreAmx;
  }
  if (!avx2) return CpuIsa::kAvx;
  const bool avx_vnni = a71 & (1u << 4);
  unsigned d71 = 0;
  __get_cpuid_count(7, 1, &unused, &unused, &unused, &d71);
  const bool vnni_int8 = d71 & (1u << 4), ne_convert = d71 & (1u << 5);
  if (!avx_vnni) return CpuIsa::kAvx2;
  return vnni_int8 && ne_convert ? CpuIsa::kAvx2Vnni2 : CpuIsa::kAvx2Vnni;
#else
  return CpuIsa::kUnknown;
#endif
}

int64_t PhysicalCores() {
  const unsigned n = std::thread::hardware_concurrency();
  std::set<std::pair<std::string, std::string>> cores;
  for (unsigned c = 0; c < n; ++c) {
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
    std::ifstream package(dir + "physical_package_id"), core(dir + "core_id");
    std::string p, k;
    if (!(package >> p) || !(core >> k)) return std::max<int64_t>(1, n);
    cores.insert({p, k});
  }
  return std::max<int64_t>(1, static_cast<int64_t>(cores.size()));
}

std::string MaxIsaVariable() {
  for (const char* name : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"}) {
    if (const char* v = std::getenv(name); v && *v) return v;
  }
  return "";
}

std::string CpuModelName() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    std::string name = line.substr(colon + 1);
    name.erase(0, name.find_first_not_of(' '));
    return name;
  }
  return "";
}

}  // namespace

const char* CpuIsaName(CpuIsa isa) { return EntryOf(isa).name; }
const char* CpuIsaDescription(CpuIsa isa) { return EntryOf(isa).description; }

std::optional<CpuIsa> ParseCpuIsa(const std::string& name, bool* is_default) {
  if (is_default) *is_default = false;
  const std::string u = Upper(name);
  if (u == "DEFAULT" || u == "ALL") {
    if (is_default) *is_default = true;
    return std::nullopt;
  }
  for (const IsaEntry& e : kIsas) {
    if (u == e.env || u == Upper(e.name) || (*e.alias && u == e.alias)) return e.isa;
  }
  return std::nullopt;
}

CpuKernelFamily KernelFamilyOf(CpuIsa isa) {
  if (isa >= CpuIsa::kAvx512Core) return CpuKernelFamily::kAvx512;
  if (isa >= CpuIsa::kAvx2) return CpuKernelFamily::kAvx2;
  return CpuKernelFamily::kUnverified;
}

const char* KernelFamilyName(CpuKernelFamily f) {
  switch (f) {
    case CpuKernelFamily::kAvx512:
      return "avx512";
    case CpuKernelFamily::kAvx2:
      return "avx2";
    case CpuKernelFamily::kUnverified:
      break;
  }
  return "unverified";
}

CpuIsa DetectCpuIsa(const std::string& max_isa) {
  const CpuIsa best = BestIsa();
  if (max_isa.empty()) return best;
  const std::optional<CpuIsa> cap = ParseCpuIsa(max_isa);
  return cap ? std::min(best, *cap) : best;
}

int64_t DefaultIntraOpThreads() {
  int64_t threads = 0;
  for (const char* name : {"OMP_NUM_THREADS", "MKL_NUM_THREADS"}) {
    if (const char* env = std::getenv(name)) {
      const long v = std::strtol(env, nullptr, 10);
      if (v > 0) threads = v;
    }
  }
  if (threads > 0) return threads;
  static const int64_t cores = PhysicalCores();
  return cores;
}

CpuKernels CpuKernelsOfThisMachine() {
  return {DetectCpuIsa(MaxIsaVariable()), DefaultIntraOpThreads()};
}

std::string CpuDevice::fingerprint() const {
  return std::string(CpuIsaName(kernels.isa)) + "/" + std::to_string(kernels.threads) + "t/torch-" +
         (torch_version.empty() ? "?" : torch_version) + "/onednn-" +
         (onednn_version.empty() ? "?" : onednn_version.substr(0, onednn_version.find(' ')));
}

std::string CpuDevice::summary() const {
  std::string s = std::string(CpuIsaName(kernels.isa)) + " (" + CpuIsaDescription(kernels.isa) +
                  "), " + std::to_string(kernels.threads) +
                  (kernels.threads == 1 ? " thread" : " threads");
  if (!torch_version.empty()) s += ", LibTorch " + torch_version;
  if (!onednn_version.empty())
    s += ", oneDNN " + onednn_version.substr(0, onednn_version.find(' '));
  return s;
}

CpuDevice CpuDeviceOfThisMachine() {
  CpuDevice d;
  d.max_cpu_isa = MaxIsaVariable();
  d.kernels = {DetectCpuIsa(d.max_cpu_isa), DefaultIntraOpThreads()};
  d.cpu_name = CpuModelName();
  // The LibTorch and oneDNN this build links (executor/CMakeLists.txt), where it links one.
#ifdef MEMPLAN_LINKED_TORCH
  d.torch_version = MEMPLAN_LINKED_TORCH;
#endif
#ifdef MEMPLAN_LINKED_ONEDNN
  d.onednn_version = MEMPLAN_LINKED_ONEDNN;
#endif
  d.source =
      d.max_cpu_isa.empty()
          ? "this machine (detected)"
          : "this machine (detected, ONEDNN_MAX_CPU_ISA=" + PrintableText(d.max_cpu_isa) + ")";
  return d;
}

nlohmann::json CpuDeviceToJson(const CpuDevice& d) {
  nlohmann::json ws = nlohmann::json::array();
  for (const auto& [signature, w] : d.workspaces) {
    ws.push_back({{"signature", signature},
                  {"forward_bytes", w.forward_bytes},
                  {"backward_bytes", w.backward_bytes}});
  }
  return {{"kind", "cpu_device"},
          {"memplan_version", MEMPLAN_VERSION},
          {"device", d.device},
          {"cpu_name", d.cpu_name},
          {"isa", CpuIsaName(d.kernels.isa)},
          {"max_cpu_isa", d.max_cpu_isa},
          {"threads", d.kernels.threads},
          {"torch_version", d.torch_version},
          {"onednn_version", d.onednn_version},
          {"fingerprint", d.fingerprint()},
          {"workspaces", ws}};
}

CpuDevice CpuDeviceFromJson(const nlohmann::json& j) {
  using namespace json_read;
  if (!j.is_object()) throw MemplanError("a device file is a JSON object");
  const std::string kind = Get(j, "", "kind", String);
  if (kind == "cuda_device") {
    throw MemplanError("this device file describes a CUDA device: use it with --device cuda");
  }
  if (kind != "cpu_device") Bad("kind", "is not \"cpu_device\"");
  CpuDevice d;
  d.device = Get(j, "", "device", String);
  if (d.device != "cpu") Bad("device", "is not cpu");
  d.cpu_name = Get(j, "", "cpu_name", String);
  const std::string isa = Get(j, "", "isa", String);
  const std::optional<CpuIsa> parsed = ParseCpuIsa(isa);
  if (!parsed)
    Bad("isa", "is not one of oneDNN's instruction sets (sse41, avx2, avx512_core, ...)");
  d.kernels.isa = *parsed;
  d.max_cpu_isa = Get(j, "", "max_cpu_isa", String);
  d.kernels.threads = Get(j, "", "threads", Count);
  if (d.kernels.threads < 1) Bad("threads", "is below 1");
  d.torch_version = Get(j, "", "torch_version", String);
  d.onednn_version = Get(j, "", "onednn_version", String);
  if (j.contains("workspaces")) {
    const json& all = j["workspaces"];
    if (!all.is_array()) Bad("workspaces", "is not an array");
    for (size_t i = 0; i < all.size(); ++i) {
      const std::string at = "workspaces[" + std::to_string(i) + "]";
      if (!all[i].is_object()) Bad(at, "is not an object");
      MeasuredWorkspace w;
      w.forward_bytes = Get(all[i], at, "forward_bytes", Count);
      w.backward_bytes = Get(all[i], at, "backward_bytes", Count);
      if (!d.workspaces.emplace(Get(all[i], at, "signature", String), w).second)
        Bad(at + ".signature", "repeats an earlier one");
    }
  }
  d.measured = true;
  d.source = "a device file from memplan calibrate (" + std::to_string(d.workspaces.size()) +
             " workspaces measured)";
  return d;
}

nlohmann::json CpuDeviceSummaryJson(const CpuDevice& d) {
  return {{"device", d.device},
          {"cpu_name", d.cpu_name},
          {"isa", CpuIsaName(d.kernels.isa)},
          {"isa_description", CpuIsaDescription(d.kernels.isa)},
          {"kernel_family", KernelFamilyName(d.kernels.family())},
          {"threads", d.kernels.threads},
          {"torch_version", d.torch_version},
          {"onednn_version", d.onednn_version},
          {"calibrated_workspaces", d.workspaces.size()},
          {"source", d.source},
          {"fingerprint", d.fingerprint()}};
}

}  // namespace memplan
