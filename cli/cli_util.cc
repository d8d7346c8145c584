#include "cli_util.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "memplan/analyzer.h"
#include "memplan/parse.h"

namespace memplan::cli {

std::string Args::get(const std::string& f, const std::string& fallback) const {
  auto it = flags.find(f);
  return it == flags.end() || it->second.empty() ? fallback : it->second.back();
}

int64_t Args::get_int(const std::string& f, int64_t fallback, int64_t min, int64_t max) const {
  return has(f) ? ParseInteger("--" + f, get(f), min, max) : fallback;
}

double Args::get_real(const std::string& f, double fallback, double min, double max) const {
  return has(f) ? ParseReal("--" + f, get(f), min, max) : fallback;
}

int64_t Args::get_bytes(const std::string& f, int64_t fallback) const {
  if (!has(f)) return fallback;
  try {
    return ParseBytes(get(f));
  } catch (const MemplanError& e) {
    throw MemplanError("--" + f + ": " + e.what());
  }
}

namespace {

// A cgroup limit file's number of bytes; 0 when absent, "max" or not a plain number.
int64_t ReadLimitFile(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!in || !std::getline(in, text) || text.empty() || text.size() > 19) return 0;
  int64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return 0;
    v = v * 10 + (c - '0');
  }
  return v;
}

}  // namespace

HostMemory HostMemoryLimit() {
  HostMemory m;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0 && pages <= INT64_MAX / page) {
    m.bytes = static_cast<int64_t>(pages) * page;
    m.source = "physical memory";
  }
  std::vector<std::string> files = {"/sys/fs/cgroup/memory.max",
                                    "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
  // This process's own group: "0::/path" (v2) or "N:memory:/path" (v1) in /proc/self/cgroup.
  std::ifstream groups("/proc/self/cgroup");
  for (std::string line; std::getline(groups, line);) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (path.empty() || path == "/" || path.find("..") != std::string::npos) continue;
    if (controllers.empty()) files.push_back("/sys/fs/cgroup" + path + "/memory.max");
    if (controllers == "memory")
      files.push_back("/sys/fs/cgroup/memory" + path + "/memory.limit_in_bytes");
  }
  for (const std::string& f : files) {
    const int64_t limit = ReadLimitFile(f);
    if (limit > 0 && (m.bytes == 0 || limit < m.bytes)) {
      m.bytes = limit;
      m.source = "the cgroup limit in " + f;
    }
  }
  return m;
}

int64_t DefaultHostBudget() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  long long kib = -1;
  while (std::fgets(line, sizeof line, f)) {
    if (std::sscanf(line, "MemAvailable: %lld kB", &kib) == 1) break;
  }
  std::fclose(f);
  if (kib <= 0) return 0;
  // A cgroup limit below what the machine has free bounds the process too.
  const int64_t limit = HostMemoryLimit().bytes;
  int64_t available = static_cast<int64_t>(kib) * 1024;
  if (limit > 0) available = std::min(available, limit);
  return std::max<int64_t>(1, available - available / 10 - (int64_t{1} << 30));
}

void AddValue(CLI::App& sub, const std::string& name, const std::string& value,
              const std::string& help) {
  sub.add_option("--" + name)
      ->description(help)
      ->type_name(value)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

void AddRepeated(CLI::App& sub, const std::string& name, const std::string& value,
                 const std::string& help) {
  sub.add_option("--" + name)
      ->description(help + " (repeatable)")
      ->type_name(value)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

void AddFlag(CLI::App& sub, const std::string& name, const std::string& help) {
  sub.add_flag("--" + name)->description(help);
}

constexpr const char* kModel = "MODEL";

void AddModel(CLI::App& sub) {
  sub.add_option(kModel)->description("the ONNX model")->type_name("MODEL.onnx");
}

void AddLoadOptions(CLI::App& sub) {
  AddValue(sub, "batch", "N",
           "the batch size (binds the first symbolic dimension of every input; default 1)");
  AddRepeated(sub, "dim", "NAME=VALUE", "binds a named symbolic dimension");
  AddValue(sub, "loss", "cross_entropy|mse|sum",
           "the loss appended to the model (default cross_entropy)");
  AddValue(sub, "optimizer", "sgd|momentum|adam",
           "the optimizer whose state is kept (default sgd)");
  AddValue(
      sub, "grads", "none|kept",
      "parameter gradients between steps: none, as optimizer.zero_grad() leaves them (PyTorch's "
      "default), or kept (zero_grad(set_to_none=False)); default none");
  AddFlag(sub, kAllowOutsideFlag, "read external data from outside the model's folder");
}

LoadOptions LoadOptionsFromArgs(const Args& a, const std::optional<CpuDevice>& cpu) {
  LoadOptions o;
  o.batch = a.get_int("batch", 1, 1, INT64_MAX);
  if (a.has("dim")) {
    for (const std::string& kv : a.flags.at("dim")) {
      auto [name, value] = ParseDimBinding("--dim", kv);
      o.dims[name] = value;
    }
  }
  o.allow_external_data_outside_model_dir = a.has(kAllowOutsideFlag);
  if (a.has("loss")) o.loss = ParseLossKind(a.get("loss"));
  if (a.has("optimizer")) o.optimizer = ParseOptimizer(a.get("optimizer"));
  if (a.has("grads")) o.grads = ParseGradientLifetime(a.get("grads"));
  // The CPU's kernels decide its workspaces; a CUDA prediction replaces them (PrepareGraphForCuda).
  if (cpu)
    SetCpuDevice(o, *cpu);
  else if (!PredictsForCuda(a))
    SetCpuDevice(o, CpuDeviceFromArgs(a, CpuDeviceOfThisMachine()));
  return o;
}

nlohmann::json ReadJsonInput(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw MemplanError("cannot open " + what + " '" + PrintableText(path) + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    throw MemplanError(what + " '" + PrintableText(path) + "' is not valid JSON: " + e.what());
  }
}

std::string CacheDirectory() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return std::string(xdg) + "/memplan";
  const char* home = std::getenv("HOME");
  if (home && *home) return std::string(home) + "/.cache/memplan";
  return "";
}

Args ArgsOf(const CLI::App& sub) {
  const std::string help = " (see memplan " + sub.get_name() + " --help)";
  for (const std::string& extra : sub.remaining()) {
    if (extra.size() > 1 && extra[0] == '-') {
      throw MemplanError("unknown option " + PrintableText(extra.substr(0, extra.find('='))) +
                         help);
    }
  }
  Args a;
  for (const CLI::Option* o : sub.get_options()) {
    if (o == sub.get_help_ptr() || o->count() == 0) continue;
    if (!o->nonpositional())
      a.positional = o->results();
    else
      a.flags[o->get_lnames().front()] = o->results();
  }
  for (const std::string& extra : sub.remaining()) a.positional.push_back(extra);
  if (sub.get_option_no_throw(kModel) && a.positional.size() != 1) {
    std::string got;
    for (const std::string& p : a.positional)
      got += (got.empty() ? "" : ", ") + ("'" + PrintableText(p) + "'");
    throw MemplanError("expects one MODEL.onnx, got " + (got.empty() ? "none" : got) + help);
  }
  return a;
}

void CheckOutputPaths(const Args& a, std::initializer_list<const char*> options) {
  for (const char* option : options) {
    if (!a.has(option)) continue;
    const std::filesystem::path path(a.get(option));
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
      throw MemplanError("--" + std::string(option) + " " + path.string() +
                         " is a folder; name a file to write");
    }
    const std::filesystem::path folder =
        path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
    if (!std::filesystem::is_directory(folder, ec) || ::access(folder.c_str(), W_OK) != 0) {
      throw MemplanError("--" + std::string(option) + " " + path.string() + ": the folder '" +
                         folder.string() + "' does not exist or is not writable");
    }
  }
}

void AddDeviceOptions(CLI::App& sub) {
  AddValue(sub, "device", "cpu|cuda[:K]",
           "the device to predict for (default cpu: this machine's CPU, or the device file's); "
           "cuda adds the CUDA libraries' workspaces and the caching allocator's reserved memory");
  AddDeviceFileOptions(sub);
  AddValue(sub, "threads", "N",
           "on the CPU: predict for N intra-op threads (default LibTorch's: one per physical "
           "core, or OMP_NUM_THREADS)");
}

void AddDeviceFileOptions(CLI::App& sub) {
  AddValue(sub, "device-file", "DEV.json",
           "a device measured by memplan calibrate (a CPU's or a GPU's): predict for it, its "
           "measured workspaces in place of the rules and margins");
  std::string cards;
  for (const std::string& c : NamedCardNames()) cards += (cards.empty() ? "" : "|") + c;
  AddValue(sub, "card", cards,
           "with --device cuda: plan for this card without it (its memory and compute "
           "capability; the CUDA context an estimate)");
}

namespace {

// The device file named by --device-file, read once per command.
const nlohmann::json* DeviceFileJson(const Args& a) {
  if (!a.has("device-file")) return nullptr;
  static std::map<std::string, nlohmann::json> read;
  const std::string path = a.get("device-file");
  auto it = read.find(path);
  if (it == read.end()) it = read.emplace(path, ReadJsonInput(path, "device file")).first;
  return &it->second;
}

// A device-file error with the file named once.
[[noreturn]] void DeviceFileError(const Args& a, const MemplanError& e) {
  const std::string path = a.get("device-file"), what = e.what();
  throw MemplanError(what.find(path) != std::string::npos
                         ? "--device-file: " + what
                         : "--device-file '" + PrintableText(path) + "': " + what);
}

bool DeviceFileIsCuda(const Args& a) {
  const nlohmann::json* j = DeviceFileJson(a);
  return j && j->is_object() && j->value("kind", "") == "cuda_device";
}

}  // namespace

bool PredictsForCuda(const Args& a) {
  if (a.has("device")) return a.get("device") != "cpu";
  return DeviceFileIsCuda(a) || a.has("card");
}

std::optional<CudaDevice> CudaDeviceFromArgs(const Args& a) {
  if (!PredictsForCuda(a)) {
    if (a.has("card")) throw MemplanError("--card names a GPU: use it with --device cuda");
    return std::nullopt;
  }
  const std::string device = a.get("device", "cuda");
  CudaDevice d = CudaDeviceFromEnvironment(device);  // names a bad --device
  if (a.has("card") && a.has("device-file")) {
    throw MemplanError("--card and --device-file both describe the card: give one");
  }
  if (a.has("card")) {
    const CudaDevice card = NamedCard(a.get("card"));
    d.name = card.name;
    d.total_memory_bytes = card.total_memory_bytes;
    d.compute_major = card.compute_major;
    d.compute_minor = card.compute_minor;
    d.source = card.source;
  }
  if (a.has("device-file")) {
    if (!DeviceFileIsCuda(a)) {
      throw MemplanError("--device-file '" + PrintableText(a.get("device-file")) +
                         "' describes a CPU (\"kind\": \"cpu_device\"), not --device " +
                         PrintableText(device) + ": drop --device to predict for that CPU");
    }
    try {
      d = CudaDeviceFromJson(*DeviceFileJson(a));
    } catch (const MemplanError& e) {
      DeviceFileError(a, e);
    }
    d.device = device;
  }
  return d;
}

CpuDevice CpuDeviceFromArgs(const Args& a, CpuDevice this_machine) {
  CpuDevice d = std::move(this_machine);
  if (a.has("device-file") && !PredictsForCuda(a)) {
    try {
      d = CpuDeviceFromJson(*DeviceFileJson(a));
    } catch (const MemplanError& e) {
      DeviceFileError(a, e);
    }
  }
  const bool from_file = a.has("device-file") && !PredictsForCuda(a);
  if (a.has("threads")) {
    const int64_t threads = a.get_int("threads", 1, 1, kMaxThreads);
    // Measured workspaces hold for the threads they were measured with.
    if (d.measured && threads != d.kernels.threads) {
      throw MemplanError("--threads " + std::to_string(threads) + ": the device file '" +
                         PrintableText(a.get("device-file")) + "' was measured with " +
                         std::to_string(d.kernels.threads) +
                         " threads; calibrate again with --threads " + std::to_string(threads));
    }
    d.kernels.threads = threads;
  }
  if (!from_file) {
    d.workspaces = CachedCpuWorkspaces(d.fingerprint());
    if (!d.workspaces.empty()) {
      d.source += "; " + std::to_string(d.workspaces.size()) +
                  " workspaces from memplan calibrate (" + CpuWorkspaceCachePath() + ")";
    }
  }
  return d;
}

std::string CpuWorkspaceCachePath() {
  const std::string dir = CacheDirectory();
  return dir.empty() ? "" : dir + "/cpu_workspaces.json";
}

namespace {

// {"kind": "cpu_workspace_cache", "devices": [device file, ...]}, one per fingerprint.
nlohmann::json ReadCpuWorkspaceCache() {
  const std::string path = CpuWorkspaceCachePath();
  std::ifstream in(path);
  if (path.empty() || !in) return nlohmann::json();
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    if (j.is_object() && j.value("kind", "") == "cpu_workspace_cache" && j.contains("devices") &&
        j["devices"].is_array())
      return j;
  } catch (const nlohmann::json::exception&) {
  }
  return nlohmann::json();  // damaged: as if empty, and rewritten by the next calibrate
}

}  // namespace

std::map<std::string, MeasuredWorkspace> CachedCpuWorkspaces(const std::string& fingerprint) {
  const nlohmann::json cache = ReadCpuWorkspaceCache();
  if (cache.is_null()) return {};
  for (const nlohmann::json& entry : cache["devices"]) {
    try {
      const CpuDevice d = CpuDeviceFromJson(entry);
      if (d.fingerprint() == fingerprint) return d.workspaces;
    } catch (const MemplanError&) {  // a damaged entry: skipped
    }
  }
  return {};
}

void CacheCpuWorkspaces(const CpuDevice& d) {
  const std::string path = CpuWorkspaceCachePath();
  if (path.empty()) return;
  nlohmann::json cache = ReadCpuWorkspaceCache();
  if (cache.is_null())
    cache = {{"kind", "cpu_workspace_cache"}, {"devices", nlohmann::json::array()}};
  CpuDevice merged = d;
  nlohmann::json devices = nlohmann::json::array();
  for (const nlohmann::json& entry : cache["devices"]) {
    try {
      const CpuDevice old = CpuDeviceFromJson(entry);
      if (old.fingerprint() == d.fingerprint()) {
        merged.workspaces.insert(old.workspaces.begin(), old.workspaces.end());  // d's win
        continue;
      }
    } catch (const MemplanError&) {
      continue;  // a damaged entry is dropped
    }
    devices.push_back(entry);
  }
  devices.push_back(CpuDeviceToJson(merged));
  cache["devices"] = std::move(devices);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  WriteJsonFile(path, cache);
}

void PrintCpuDevice(const CpuDevice& d, int64_t margin_bytes,
                    const std::map<std::string, int64_t>& margin_by_op) {
  std::printf("cpu          %s; %s\n", d.summary().c_str(), d.source.c_str());
  if (margin_bytes <= 0) return;
  std::string by_op;
  for (const auto& [op, bytes] : margin_by_op)
    by_op += (by_op.empty() ? "" : ", ") + op + " " + FormatBytes(bytes);
  std::printf(
      "margin       %s of workspaces kept free: their rules are not verified on %s kernels (%s); "
      "memplan calibrate MODEL.onnx --json DEV.json measures them, then --device-file DEV.json\n",
      FormatBytes(margin_bytes).c_str(), CpuIsaName(d.kernels.isa), by_op.c_str());
}

void PrintDeviceMemory(const DeviceMemory& m, const CudaDevice& d) {
  std::printf("device       %s%s, caching allocator %s; %s\n", d.device.c_str(),
              d.name.empty() ? "" : (" (" + d.name + ")").c_str(), m.allocator_mode.c_str(),
              d.source.c_str());
  std::printf("allocated    %s peak, with %s of cuBLAS/cuBLASLt workspaces (512-byte blocks)\n",
              FormatBytes(m.allocated_peak_bytes).c_str(), FormatBytes(m.workspace_bytes).c_str());
  std::printf("reserved     %s peak (the caching allocator's segments: what runs out)\n",
              FormatBytes(m.reserved_peak_bytes).c_str());
  std::printf("card         %s at the peak with %s of CUDA context and handles (%s)\n",
              FormatBytes(m.card_peak_bytes()).c_str(), FormatBytes(m.context_bytes).c_str(),
              m.context_measured ? "measured" : "estimate: the H200's, LibTorch 2.11");
  if (m.workspace_margin_bytes > 0) {
    std::printf(
        "margin       %s for cuDNN convolution workspaces estimated, not measured "
        "(memplan calibrate --device cuda MODEL.onnx measures them)\n",
        FormatBytes(m.workspace_margin_bytes).c_str());
  }
}

struct ProgressTicker::State {
  std::mutex mutex;
  std::condition_variable stop;
  bool done = false;
  std::thread thread;
};

ProgressTicker::ProgressTicker(std::string what, double period_seconds) {
  if (!isatty(STDERR_FILENO)) return;
  state_ = std::make_unique<State>();
  State* st = state_.get();
  st->thread = std::thread([st, what = std::move(what), period_seconds] {
    const auto start = std::chrono::steady_clock::now();
    const auto period = std::chrono::duration<double>(period_seconds);
    std::unique_lock<std::mutex> lock(st->mutex);
    for (int tick = 1;
         !st->stop.wait_for(lock, period * tick - (std::chrono::steady_clock::now() - start),
                            [st] { return st->done; });
         ++tick) {
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::fprintf(stderr, "%s, %.0f s\n", what.c_str(), elapsed);
      std::fflush(stderr);
    }
  });
}

ProgressTicker::~ProgressTicker() {
  if (!state_) return;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->done = true;
  }
  state_->stop.notify_all();
  state_->thread.join();
}

}  // namespace memplan::cli
