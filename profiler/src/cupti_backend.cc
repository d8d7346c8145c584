// The CUPTI backend: host slices come from the CPU backend (wrapped, not re-implemented);
// device time and memory come from CUPTI's activity API, attributed to scopes through an
// external correlation id pushed per scope (see cupti_records.h for the attribution rules and
// the memory model). It needs no GPU to build or to refuse cleanly: without a driver,
// libcupti answers CUPTI_ERROR_UNKNOWN to every call, so the backend asks the driver first.
// CUPTI traces only from BeginStep to EndStep: the steps that are not profiled run at full
// speed and leave no records to keep. Construction enables every kind once to refuse early.
#include "memplan/profiler.h"

#if MEMPLAN_HAVE_CUPTI

#include <cupti.h>
#include <dlfcn.h>

#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <thread>
#include <unordered_map>
#include <utility>

#include "cupti_errors.h"
#include "cupti_records.h"

namespace memplan {

namespace cupti {

std::string ResultName(CUptiResult result) {
  const char* s = nullptr;
  if (cuptiGetResultString(result, &s) == CUPTI_SUCCESS && s) return s;
  return "CUPTI error " + std::to_string(static_cast<int>(result));
}

std::string FailureMessage(const std::string& call, CUptiResult result,
                           const std::string& other_tool) {
  const std::string what =
      "CUPTI cannot profile: " + call + " returned " + ResultName(result) + "; ";
  switch (result) {
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
      return what + "another profiler is attached to this process" +
             (other_tool.empty() ? "" : " ('" + other_tool + "')") +
             " (Nsight Systems, Nsight Compute, the PyTorch profiler, cuda-gdb or "
             "compute-sanitizer; CUPTI allows "
             "one): run memplan without it, or drop --profile and use that profiler's report";
    case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES:
      return what +
             "this user may not profile the GPU: run as root, or ask the administrator to allow "
             "profiling "
             "(nvidia driver option NVreg_RestrictProfilingToAdminUsers=0)";
    case CUPTI_ERROR_NOT_INITIALIZED:
    case CUPTI_ERROR_INVALID_DEVICE:
    case CUPTI_ERROR_UNKNOWN:
      return what +
             "no usable CUDA driver or device: check nvidia-smi and CUDA_VISIBLE_DEVICES, and that "
             "the "
             "driver supports the CUDA toolkit memplan was built with";
    case CUPTI_ERROR_NOT_COMPATIBLE:
    case CUPTI_ERROR_NOT_SUPPORTED:
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_SLI_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED:
      return what +
             "CUPTI does not trace this device or driver setup: profile without --profile's device "
             "times, or on another GPU";
    default:
      return what + "profile without --profile, or report this with the output of nvidia-smi";
  }
}

}  // namespace cupti

namespace {

// Why the CUDA driver cannot serve device `device`, or "" when it can. Loaded at run time so
// that memplan starts on machines without a driver.
std::string DriverProblem(int device) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* err = dlerror();
    return std::string("no CUDA driver on this machine (libcuda.so.1 does not load: ") +
           (err ? err : "not found") +
           "); profile on a machine with an NVIDIA GPU and driver, or with --device cpu";
  }
  // The driver stays loaded: CUPTI and LibTorch use it.
  using InitFn = CUresult (*)(unsigned int);
  using CountFn = CUresult (*)(int*);
  using VersionFn = CUresult (*)(int*);
  using ErrorFn = CUresult (*)(CUresult, const char**);
  auto init = reinterpret_cast<InitFn>(dlsym(lib, "cuInit"));
  auto count = reinterpret_cast<CountFn>(dlsym(lib, "cuDeviceGetCount"));
  auto version = reinterpret_cast<VersionFn>(dlsym(lib, "cuDriverGetVersion"));
  auto error_string = reinterpret_cast<ErrorFn>(dlsym(lib, "cuGetErrorString"));
  if (!init || !count || !version)
    return "the CUDA driver library (libcuda.so.1) lacks cuInit; reinstall the NVIDIA driver";
  auto text = [&](CUresult r) {
    const char* s = nullptr;
    if (error_string && error_string(r, &s) == CUDA_SUCCESS && s) return std::string(s);
    return "CUDA driver error " + std::to_string(static_cast<int>(r));
  };
  if (CUresult r = init(0); r != CUDA_SUCCESS) {
    if (r == CUDA_ERROR_NO_DEVICE) {
      return "the CUDA driver sees no device (cuInit: " + text(r) +
             "); check nvidia-smi and CUDA_VISIBLE_DEVICES";
    }
    return "the CUDA driver does not start (cuInit: " + text(r) + "); check nvidia-smi";
  }
  int v = 0;
  if (version(&v) == CUDA_SUCCESS && v / 1000 < CUDA_VERSION / 1000) {
    return "the NVIDIA driver supports CUDA " + std::to_string(v / 1000) + "." +
           std::to_string(v % 1000 / 10) + ", older than the CUDA " +
           std::to_string(CUDA_VERSION / 1000) +
           " toolkit whose CUPTI memplan was built with; update the driver";
  }
  int n = 0;
  if (CUresult r = count(&n); r != CUDA_SUCCESS)
    return "the CUDA driver cannot count devices (" + text(r) + ")";
  if (n == 0) return "no CUDA device is visible; check nvidia-smi and CUDA_VISIBLE_DEVICES";
  if (device < 0 || device >= n) {
    return "CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(n) +
           " visible: cuda:0" + (n > 1 ? "..cuda:" + std::to_string(n - 1) : "") + ")";
  }
  return "";
}

// CUPTI hands buffers to and from its own threads through C callbacks that carry no user
// data, so buffers live in this one process-wide registry, the profiler's only global state.
// CUPTI allows one subscriber per process, so one backend at a time owns it (Claim). The
// registry is never destroyed: CUPTI may still flush buffers while the process exits.
class BufferRegistry {
 public:
  static constexpr size_t kBytes = size_t{8} << 20;  // CUPTI's own default size
  static constexpr size_t kKeep = 4;                 // spare buffers kept for reuse

  struct Completed {
    uint8_t* data;
    size_t valid;
  };

  static BufferRegistry& Get() {
    static BufferRegistry* registry = new BufferRegistry;
    return *registry;
  }

  bool Claim() {
    std::lock_guard<std::mutex> lock(mu_);
    if (owned_) return false;
    owned_ = true;
    return true;
  }
  void Unclaim() {
    std::lock_guard<std::mutex> lock(mu_);
    owned_ = false;
    accepting_ = false;
    for (const Completed& c : completed_) Free(c.data);
    completed_.clear();
  }
  void Accept() {
    std::lock_guard<std::mutex> lock(mu_);
    accepting_ = true;
  }

  // Called by CUPTI; may not throw. A null buffer makes CUPTI drop records (and count them).
  uint8_t* Request() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!spare_.empty()) {
      uint8_t* b = spare_.back();
      spare_.pop_back();
      return b;
    }
    return static_cast<uint8_t*>(::operator new (kBytes, std::align_val_t{8}, std::nothrow));
  }
  void Complete(uint8_t* data, size_t valid) {
    std::lock_guard<std::mutex> lock(mu_);
    if (accepting_)
      completed_.push_back({data, valid});
    else
      Recycle(data);
  }

  std::vector<Completed> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(completed_, {});
  }
  void Release(uint8_t* data) {
    std::lock_guard<std::mutex> lock(mu_);
    Recycle(data);
  }

 private:
  static void Free(uint8_t* data) { ::operator delete (data, std::align_val_t{8}); }
  void Recycle(uint8_t* data) {
    if (!data) return;
    if (spare_.size() < kKeep)
      spare_.push_back(data);
    else
      Free(data);
  }

  std::mutex mu_;
  bool owned_ = false;
  bool accepting_ = false;
  std::vector<Completed> completed_;
  std::vector<uint8_t*> spare_;
};

void CUPTIAPI OnBufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = BufferRegistry::Get().Request();
  *size = *buffer ? BufferRegistry::kBytes : 0;
  *max_records = 0;
}

void CUPTIAPI OnBufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  BufferRegistry::Get().Complete(buffer, valid);
}

// The subscription only claims CUPTI; no callback domain is enabled.
void CUPTIAPI OnCallback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

// Kernels, copies and sets carry device time; memory and pools the memory events; external
// correlation records carry the scope ids, and RUNTIME and DRIVER records are what CUPTI
// attaches them to (kernels that libraries launch through the driver API included) and the
// host time of each launch for work launched outside any pushed id.
constexpr CUpti_ActivityKind kRequiredKinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
    CUPTI_ACTIVITY_KIND_MEMCPY,
    CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_MEMORY2,
    CUPTI_ACTIVITY_KIND_RUNTIME,
    CUPTI_ACTIVITY_KIND_DRIVER,
    CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
};

class CuptiProfiler final : public ProfilerBackend {
 public:
  explicit CuptiProfiler(int device) : device_(device) {
    if (!BufferRegistry::Get().Claim()) {
      throw MemplanError(
          "CUPTI cannot profile: another memplan CUPTI profiler is active in this process (CUPTI "
          "allows one); end it first");
    }
    try {
      Start();
    } catch (...) {
      Teardown();
      throw;
    }
  }

  ~CuptiProfiler() override {
    std::lock_guard<std::mutex> lock(mu_);
    CloseOpen();
    Teardown();
  }

  std::string name() const override { return "cupti"; }

  void BeginStep(int64_t start_bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    PayOwedPops();
    // Anything left from before only updates the known segment and pool sizes.
    Drain(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    converter_.Settle();
    dropped_ = 0;
    step_warnings_.clear();
    Trace(true);
    CloseOpen();  // a step begun without ending the last
    scopes_.clear();
    start_bytes_ = start_bytes;
    host_->BeginStep(start_bytes);
    // Right after the host clock's start: device times count from (about) the same instant.
    if (cuptiGetTimestamp(&start_ns_) != CUPTI_SUCCESS) start_ns_ = 0;
    active_ = true;
  }

  void Enter(const ProfileScope& scope) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!active_) return;
    PayOwedPops();
    host_->Enter(scope);
    const uint64_t id = next_id_++;
    scopes_.emplace(id, scope);
    const bool pushed = cuptiActivityPushExternalCorrelationId(
                            CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id) == CUPTI_SUCCESS;
    open_.push_back({scope, std::this_thread::get_id(), pushed});
  }

  void Exit() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!active_ || open_.empty()) return;
    PayOwedPops();
    host_->Exit();
    const Open o = open_.back();
    open_.pop_back();
    Pop(o);
    // Phase ends: hand CUPTI's completed buffers over before they fill up (records are
    // dropped when no buffer is free). Not forced: kernels still running keep their buffer.
    if (o.scope.node == kNone) Drain(0);
  }

  // CUPTI sees the device's memory itself.
  void OnMemory(int64_t, int64_t) override {}

  Profile EndStep() override {
    std::lock_guard<std::mutex> lock(mu_);
    Profile p = host_->EndStep();
    CloseOpen();
    active_ = false;
    Trace(false);
    // Forced: callers synchronize the device before EndStep (the executor does), so no record
    // is still waiting for its end time.
    Drain(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    cupti::StepContext step;
    step.start_ns = start_ns_;
    step.start_bytes = start_bytes_;
    step.device_id = static_cast<uint32_t>(device_);
    step.scopes = std::move(scopes_);
    step.slices = p.slices;
    scopes_.clear();
    for (const std::string& w : standing_warnings_) p.warnings.push_back(w);
    for (const std::string& w : step_warnings_) p.warnings.push_back(w);
    cupti::MergeDeviceProfile(converter_.Finish(step), dropped_, p);
    return p;
  }

 private:
  struct Open {
    ProfileScope scope;
    std::thread::id thread;
    bool pushed;
  };

  void Start() {
    if (device_ < 0)
      throw MemplanError("CUPTI cannot profile: CUDA device index " + std::to_string(device_) +
                         " is negative");
    if (std::string problem = DriverProblem(device_); !problem.empty()) {
      throw MemplanError("CUPTI cannot profile cuda:" + std::to_string(device_) + ": " + problem);
    }
    CUptiResult r;
    std::string other_tool;
#ifdef CUpti_SubscriberParams_STRUCT_SIZE
    // The newer call names the subscriber already attached.
    char other[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 1] = {};
    CUpti_SubscriberParams params{};
    params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
    params.subscriberName = "memplan";
    params.oldSubscriberName = other;
    params.oldSubscriberSize = sizeof other - 1;
    r = cuptiSubscribe_v2(&subscriber_, OnCallback, nullptr, &params);
    other_tool = other;
#else
    r = cuptiSubscribe(&subscriber_, OnCallback, nullptr);
#endif
    if (r != CUPTI_SUCCESS) {
      subscriber_ = nullptr;
      throw MemplanError(cupti::FailureMessage("cuptiSubscribe", r, other_tool));
    }
    if ((r = cuptiActivityRegisterCallbacks(OnBufferRequested, OnBufferCompleted)) !=
        CUPTI_SUCCESS) {
      throw MemplanError(cupti::FailureMessage("cuptiActivityRegisterCallbacks", r));
    }
    BufferRegistry::Get().Accept();
    tracing_ = true;
    for (CUpti_ActivityKind kind : kRequiredKinds) {
      if ((r = cuptiActivityEnable(kind)) != CUPTI_SUCCESS) {
        throw MemplanError(
            cupti::FailureMessage("cuptiActivityEnable(kind " + std::to_string(kind) + ")", r));
      }
      kinds_.push_back(kind);
    }
    // Pools only matter under cudaMallocAsync (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync).
    if ((r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMORY_POOL)) == CUPTI_SUCCESS) {
      kinds_.push_back(CUPTI_ACTIVITY_KIND_MEMORY_POOL);
    } else {
      standing_warnings_.push_back(
          "CUPTI does not trace memory pools here (" + cupti::ResultName(r) +
          "): growth of cudaMallocAsync pools is missing from the memory events");
    }
    Trace(false);
    Drain(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    converter_.Settle();
  }

  // Turns the validated kinds on or off.
  void Trace(bool on) {
    if (on == tracing_) return;
    for (CUpti_ActivityKind kind : kinds_) {
      const CUptiResult r = on ? cuptiActivityEnable(kind) : cuptiActivityDisable(kind);
      if (r != CUPTI_SUCCESS) {
        step_warnings_.push_back(std::string(on ? "cuptiActivityEnable" : "cuptiActivityDisable") +
                                 "(kind " + std::to_string(kind) + ") returned " +
                                 cupti::ResultName(r) + ": device records may be missing");
      }
    }
    tracing_ = on;
  }

  // Undoes whatever Start did, in reverse.
  void Teardown() {
    if (tracing_) {
      for (auto it = kinds_.rbegin(); it != kinds_.rend(); ++it) cuptiActivityDisable(*it);
      tracing_ = false;
    }
    if (!kinds_.empty())
      cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);  // returns CUPTI's buffers
    kinds_.clear();
    if (subscriber_) cuptiUnsubscribe(subscriber_);
    subscriber_ = nullptr;
    BufferRegistry::Get().Unclaim();
  }

  // Feeds every completed buffer through the converter (mu_ held).
  void Drain(uint32_t flag) {
    if (CUptiResult r = cuptiActivityFlushAll(flag); r != CUPTI_SUCCESS && step_warnings_.empty()) {
      step_warnings_.push_back("cuptiActivityFlushAll returned " + cupti::ResultName(r) +
                               ": device records may be missing");
    }
    BufferRegistry& registry = BufferRegistry::Get();
    for (const BufferRegistry::Completed& b : registry.Take()) {
      CUpti_Activity* record = nullptr;
      // Stops at the end (CUPTI_ERROR_MAX_LIMIT_REACHED) or at an incomplete record.
      while (b.valid > 0 && cuptiActivityGetNextRecord(b.data, b.valid, &record) == CUPTI_SUCCESS) {
        converter_.Add(record);
      }
      registry.Release(b.data);
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) == CUPTI_SUCCESS)
      dropped_ += static_cast<int64_t>(dropped);
  }

  // CUPTI keeps one id stack per thread: a scope exited on another thread than the one that
  // entered it is popped when that thread next calls in. Until then the thread's work
  // carries a stale id, which the step's scope table does not know, so it is attributed by
  // time instead.
  void Pop(const Open& o) {
    if (!o.pushed) return;
    if (o.thread == std::this_thread::get_id()) {
      cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, nullptr);
    } else {
      ++owed_pops_[o.thread];
    }
  }
  void CloseOpen() {
    while (!open_.empty()) {
      Pop(open_.back());
      open_.pop_back();
    }
  }
  void PayOwedPops() {
    auto it = owed_pops_.find(std::this_thread::get_id());
    if (it == owed_pops_.end()) return;
    for (int i = 0; i < it->second; ++i)
      cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, nullptr);
    owed_pops_.erase(it);
  }

  std::mutex mu_;
  const int device_;
  std::unique_ptr<ProfilerBackend> host_ = MakeCpuProfiler();
  CUpti_SubscriberHandle subscriber_ = nullptr;
  std::vector<CUpti_ActivityKind> kinds_;       // the kinds CUPTI accepted at construction
  bool tracing_ = false;                        // whether they are enabled now
  std::vector<std::string> standing_warnings_;  // for every step (what CUPTI cannot trace here)
  std::vector<std::string> step_warnings_;
  bool active_ = false;
  uint64_t start_ns_ = 0;
  int64_t start_bytes_ = 0;
  uint64_t next_id_ =
      1;  // external ids are never reused, so late records of a past step match no scope
  std::unordered_map<uint64_t, ProfileScope> scopes_;
  std::vector<Open> open_;  // entered and not yet exited, outermost first
  std::map<std::thread::id, int> owed_pops_;
  cupti::RecordConverter converter_;
  int64_t dropped_ = 0;
};

}  // namespace

bool ProfilerHasCupti() { return true; }

std::unique_ptr<ProfilerBackend> MakeCuptiProfiler(int device_index) {
  return std::make_unique<CuptiProfiler>(device_index);
}

}  // namespace memplan

#else  // !MEMPLAN_HAVE_CUPTI

namespace memplan {

bool ProfilerHasCupti() { return false; }

std::unique_ptr<ProfilerBackend> MakeCuptiProfiler(int) {
  throw MemplanError(
      "this memplan was built without CUPTI (no CUDA toolkit CUPTI at build time, or "
      "MEMPLAN_WITH_CUPTI=OFF): no "
      "device times or memory events; rebuild with the CUDA toolkit's CUPTI, or profile host times "
      "on the CPU");
}

}  // namespace memplan

#endif
