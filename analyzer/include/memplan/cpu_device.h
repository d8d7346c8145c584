// The CPU a prediction is for, as LibTorch's kernels see it (DESIGN.md: "A prediction is for a
// device"). oneDNN picks its convolution kernels, blocked layouts and work buffers by the
// instruction set it uses: the CPU's best (cpuid), capped by ONEDNN_MAX_CPU_ISA. Its kernels split
// their work over LibTorch's intra-op threads. So the ISA and the threads decide what a
// convolution holds beyond its results, and LibTorch's and oneDNN's versions decide the rest.
//
// The workspace rules (analyzer/src/op_workspaces.cc) were ported from oneDNN 3.12's AVX-512 and
// AVX2 kernels and measured on both (CpuKernelFamily). Other instruction sets (SSE4.1, AVX
// without AVX2, other architectures) run other kernels: their convolutions get the AVX-512 rules
// plus a margin (ConvWorkspaceMargin, op_workspaces.cc) unless `memplan calibrate` measured them on
// that machine.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

namespace memplan {

// oneDNN's cpu_isa_t values that choose different kernels, in increasing order.
enum class CpuIsa : int {
  kUnknown = 0,  // not x86-64, or no SSE4.1: oneDNN's reference kernels
  kSse41,
  kAvx,
  kAvx2,
  kAvx2Vnni,
  kAvx2Vnni2,
  kAvx512Core,
  kAvx512CoreVnni,
  kAvx512CoreBf16,
  kAvx512CoreFp16,  // avx10_1_512
  kAvx512CoreAmx,   // avx10_1_512_amx
  kAvx512CoreAmxFp16,
};

// The kernels whose memory the rules model. oneDNN's fp32 convolutions are the same kernels
// (jit_avx512_common_*, 16-channel blocks) from avx512_core up, AMX included (AMX kernels take
// bf16 and int8 only), and the same (jit_avx2_*, 8-channel blocks) from avx2 to avx2_vnni_2.
enum class CpuKernelFamily { kAvx512, kAvx2, kUnverified };

// oneDNN's names: "sse41", "avx2", "avx512_core_amx", ...; "unknown".
const char* CpuIsaName(CpuIsa isa);
// What ONEDNN_VERBOSE prints for the ISA ("Intel AVX2", "Intel AVX-512 with ...").
const char* CpuIsaDescription(CpuIsa isa);
// A name as CpuIsaName writes it or as ONEDNN_MAX_CPU_ISA takes it (any case; AVX10_1_512 and
// AVX10_1_512_AMX, DEFAULT and ALL: no cap, nullopt with *is_default). nullopt: not an ISA name.
std::optional<CpuIsa> ParseCpuIsa(const std::string& name, bool* is_default = nullptr);
CpuKernelFamily KernelFamilyOf(CpuIsa isa);
const char* KernelFamilyName(CpuKernelFamily f);  // "avx512", "avx2", "unverified"

// What the analyzer's CPU rules read: the ISA oneDNN uses and LibTorch's intra-op threads.
struct CpuKernels {
  CpuIsa isa = CpuIsa::kAvx512Core;
  int64_t threads = 1;
  CpuKernelFamily family() const { return KernelFamilyOf(isa); }
  bool operator==(const CpuKernels& o) const = default;
};

// The best ISA this CPU has as oneDNN 3.12 detects it (cpuid, the OS's saved register state),
// capped at `max_isa` (ONEDNN_MAX_CPU_ISA's value; "" or DEFAULT: no cap). An unknown cap is
// ignored, as oneDNN ignores it.
CpuIsa DetectCpuIsa(const std::string& max_isa);
// LibTorch's intra-op threads at their default (intraop_default_num_threads): OMP_NUM_THREADS,
// overridden by MKL_NUM_THREADS, where set; else one per physical core (cpuinfo's cores, not
// hyperthreads), hardware threads where the topology cannot be read.
int64_t DefaultIntraOpThreads();
// This machine's kernels: DetectCpuIsa(ONEDNN_MAX_CPU_ISA, else DNNL_MAX_CPU_ISA) and
// DefaultIntraOpThreads(). The loader's default (LoadOptions::cpu_kernels).
CpuKernels CpuKernelsOfThisMachine();

// A library workspace measured by `memplan calibrate`: the peak an op holds above its results,
// in its forward and in its backward (as ConvForwardWorkspace / ConvWorkspace define them).
struct MeasuredWorkspace {
  int64_t forward_bytes = 0;
  int64_t backward_bytes = 0;
  bool operator==(const MeasuredWorkspace& o) const = default;
};

struct CpuDevice {
  std::string device = "cpu";
  std::string cpu_name;  // /proc/cpuinfo's model name ("" where unknown)
  CpuKernels kernels;
  std::string max_cpu_isa;     // ONEDNN_MAX_CPU_ISA as set where it was detected ("": unset)
  std::string torch_version;   // the LibTorch measured or linked ("": not known to the analyzer)
  std::string onednn_version;  // "v3.12.0 (Git Hash ...)"; "" likewise
  // Measured per op signature (WorkspaceSignature); such ops keep no margin.
  std::map<std::string, MeasuredWorkspace> workspaces;
  bool measured = false;  // from a device file written by memplan calibrate
  std::string source = "this machine (detected)";

  // What the kernels depend on, as one key: the ISA, threads, LibTorch and oneDNN (cache keys,
  // and the check that a plan runs on the device it was made for).
  std::string fingerprint() const;
  // "avx512_core_amx (Intel AVX-512 ...), 2 threads, LibTorch 2.14.1, oneDNN v3.12.0"
  std::string summary() const;
};

// This machine as the analyzer sees it (no LibTorch: its versions stay empty for the executor to
// fill in).
CpuDevice CpuDeviceOfThisMachine();

// The device file ("kind": "cpu_device"). Throws MemplanError naming a missing or mistyped field.
nlohmann::json CpuDeviceToJson(const CpuDevice& d);
CpuDevice CpuDeviceFromJson(const nlohmann::json& j);
// The fields every CPU prediction carries (analysis, plan, run): "cpu_device": {isa, threads,
// torch_version, onednn_version, kernel_family, source, fingerprint}.
nlohmann::json CpuDeviceSummaryJson(const CpuDevice& d);

}  // namespace memplan
