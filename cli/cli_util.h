// The memplan command line: one CLI11 app whose subcommands (commands_*.cc) declare their
// options here, and the values they read after parsing.
#pragma once

#include <CLI/CLI.hpp>
#include <initializer_list>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "memplan/cpu_device.h"
#include "memplan/cuda_device.h"
#include "memplan/training_graph.h"

namespace memplan::cli {

// Exit codes: 0 success, 1 a user error (bad input), 2 no plan fits the budget, 3 an internal
// error (a bug).
constexpr int kExitOk = 0;
constexpr int kExitUserError = 1;
constexpr int kExitInfeasible = 2;
constexpr int kExitInternalError = 3;

// The parsed values of one subcommand, by long option name without the dashes. Options are
// kept as text and read through memplan/parse.h, so that every option accepts the same text
// as the GUI. A repeated option keeps every value; get() reads the last.
struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::vector<std::string>> flags;
  bool has(const std::string& f) const { return flags.count(f) > 0; }
  std::string get(const std::string& f, const std::string& fallback = "") const;
  // The flag's integer in [min, max] (ParseInteger), or `fallback` when it is absent.
  int64_t get_int(const std::string& f, int64_t fallback, int64_t min, int64_t max) const;
  // The flag's number in [min, max] (ParseReal), or `fallback` when it is absent.
  double get_real(const std::string& f, double fallback, double min, double max) const;
  // The flag's size (ParseBytes), or `fallback` when it is absent.
  int64_t get_bytes(const std::string& f, int64_t fallback) const;
};

// Declaring options on a subcommand. `name` is the long name ("batch" for --batch), `value`
// what the help shows for its value ("N", "SIZE").
void AddValue(CLI::App& sub, const std::string& name, const std::string& value,
              const std::string& help);
// An option that may be given several times, each value kept (--dim a=1 --dim b=2).
void AddRepeated(CLI::App& sub, const std::string& name, const std::string& value,
                 const std::string& help);
void AddFlag(CLI::App& sub, const std::string& name, const std::string& help);
// The subcommand's one positional argument, the model.
void AddModel(CLI::App& sub);

// Lets a model read external data from outside its folder (a boolean flag of every command
// that loads a model).
constexpr const char* kAllowOutsideFlag = "allow-external-data-outside-model-dir";

// --batch, --dim, --loss, --optimizer, --allow-external-data-outside-model-dir.
void AddLoadOptions(CLI::App& sub);
// On the CPU the options predict for `cpu` (CpuDeviceFromArgs) where given, else for what
// CpuDeviceFromArgs gives for this machine.
LoadOptions LoadOptionsFromArgs(const Args& a, const std::optional<CpuDevice>& cpu = std::nullopt);

// The memory a process on this machine can use at most: the physical RAM, or the cgroup's
// limit when it is lower (cgroup v2 memory.max, v1 memory.limit_in_bytes, of the root and of
// this process's own group). `source` says which ("physical memory" or the limit's file).
struct HostMemory {
  int64_t bytes = 0;  // 0: unknown
  std::string source;
};
HostMemory HostMemoryLimit();
// The pinned host memory an offload plan may hold unless --host-budget says (memplan plan, and
// the GUI's plan explorer with no host budget given): what the operating system reports
// available now (/proc/meminfo's MemAvailable, within HostMemoryLimit), less 10% and 1 GiB for
// the rest of the process and the system. 0 (no limit) where it cannot be read.
int64_t DefaultHostBudget();
// A JSON file the user named (`what`: "profile", "plan"); a MemplanError names the file when it
// cannot be read or is not JSON.
nlohmann::json ReadJsonInput(const std::string& path, const std::string& what);

// --device cpu|cuda[:K], --device-file DEV.json, --card NAME and --threads N (analyze: predict
// for that device).
void AddDeviceOptions(CLI::App& sub);
// --device-file and --card alone (plan and run declare their own --device and --threads).
void AddDeviceFileOptions(CLI::App& sub);
// More intra-op threads than this only slow a step down (1,000 threads take a minute per step).
constexpr int64_t kMaxThreads = 1024;
// Whether the command predicts for a GPU: --device cuda[:K], or without --device a CUDA device
// file or --card.
bool PredictsForCuda(const Args& a);
// The CUDA device to predict for: none on the CPU (the default); the device file's when given,
// else --card's memory and compute capability, else the documented defaults, with this
// environment's PYTORCH_CUDA_ALLOC_CONF and CUBLAS_WORKSPACE_CONFIG. Throws MemplanError on a
// bad device name, card or file, or a CPU's file with --device cuda.
std::optional<CudaDevice> CudaDeviceFromArgs(const Args& a);
// The CPU to predict for: the device file's (a CPU's, from memplan calibrate) when given, else
// `this_machine` with the workspaces calibrate cached for it; --threads sets its threads (a
// measured file's must agree). Throws MemplanError naming the file.
CpuDevice CpuDeviceFromArgs(const Args& a, CpuDevice this_machine);
// memplan calibrate's CPU measurements, kept by device fingerprint in the cache folder
// (CacheDirectory()/cpu_workspaces.json), as machine rates are: on the machine that measured them,
// analyze, plan and run predict with them without --device-file. Empty: none cached (or no cache
// folder, or a damaged file, which calibrate rewrites).
std::string CpuWorkspaceCachePath();
std::map<std::string, MeasuredWorkspace> CachedCpuWorkspaces(const std::string& fingerprint);
// Merges d's workspaces into the cache under d.fingerprint(). Throws MemplanError naming the file
// when it cannot be written.
void CacheCpuWorkspaces(const CpuDevice& d);
// The "cpu" line of a CPU prediction: the device, and the workspace margins by op (rules
// unverified on its kernels) with how to remove them.
void PrintCpuDevice(const CpuDevice& d, int64_t margin_bytes,
                    const std::map<std::string, int64_t>& margin_by_op);
// The summary lines of a device prediction: allocated, reserved, workspaces, context, total.
void PrintDeviceMemory(const DeviceMemory& m, const CudaDevice& d);

// memplan's cache folder: $XDG_CACHE_HOME/memplan, else $HOME/.cache/memplan; empty when
// neither variable is set.
std::string CacheDirectory();

// The values `sub` was given. An option it does not know, or a missing or second MODEL.onnx,
// is a MemplanError naming it.
Args ArgsOf(const CLI::App& sub);
// Fails before any work when an output file (the values of `options`) cannot be written: its
// folder is missing or read-only, or it names a folder. A long run must not end in "cannot
// write".
void CheckOutputPaths(const Args& a, std::initializer_list<const char*> options);

// A line on stderr every `period_seconds` while it lives ("memplan plan: still planning, 10 s"),
// only when stderr is a terminal: a solve of minutes (milp, a sweep) must not look like a hang,
// and logs and tests must not fill with it.
class ProgressTicker {
 public:
  ProgressTicker(std::string what, double period_seconds = 5);
  ~ProgressTicker();
  ProgressTicker(const ProgressTicker&) = delete;
  ProgressTicker& operator=(const ProgressTicker&) = delete;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace memplan::cli
