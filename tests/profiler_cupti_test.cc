// The CUPTI backend without a GPU: activity records built from cupti_activity.h's structs (the
// layouts CUDA 13's CUPTI writes) go through the converter in shuffled orders and must give
// the hand-computed device seconds, memory events and peak; the backend itself must refuse
// with a clear MemplanError where it cannot start (no driver here), never crash.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "memplan/profiler.h"

#if MEMPLAN_HAVE_CUPTI
#include "cupti_errors.h"
#include "cupti_records.h"
#endif

namespace memplan {
namespace {

std::string ErrorOf(int device) {
  try {
    auto p = MakeCuptiProfiler(device);
    // A machine with a GPU: an empty step must work too.
    p->BeginStep(0);
    p->Enter({Phase::kForward});
    p->Exit();
    Profile profile = p->EndStep();
    EXPECT_EQ(profile.backend, "cupti");
    return "";
  } catch (const MemplanError& e) {
    return e.what();
  }
}

bool HasDriver() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  return lib != nullptr;  // left loaded, as the backend leaves it
}

TEST(CuptiBackend, RefusesWithoutADriverInsteadOfCrashing) {
  if (!ProfilerHasCupti()) GTEST_SKIP() << "built without CUPTI";
  const std::string error = ErrorOf(0);
  if (HasDriver()) {
    // With a driver the backend starts, or says why not in CUPTI's words.
    if (!error.empty()) {
      EXPECT_NE(error.find("CUPTI cannot profile"), std::string::npos) << error;
    }
    return;
  }
  EXPECT_NE(error.find("CUPTI cannot profile cuda:0"), std::string::npos) << error;
  EXPECT_NE(error.find("no CUDA driver"), std::string::npos) << error;
  EXPECT_NE(error.find("--device cpu"), std::string::npos) << error;
  // Refusing leaves nothing claimed: the next attempt gives the same answer, not "another
  // profiler is active".
  EXPECT_EQ(ErrorOf(0), error);
}

TEST(CuptiBackend, RefusesADeviceThatCannotExist) {
  if (!ProfilerHasCupti()) GTEST_SKIP() << "built without CUPTI";
  EXPECT_NE(ErrorOf(-1).find("negative"), std::string::npos) << ErrorOf(-1);
  const std::string error = ErrorOf(4096);
  EXPECT_FALSE(error.empty());
  EXPECT_NE(error.find(HasDriver() ? "does not exist" : "no CUDA driver"), std::string::npos)
      << error;
}

TEST(CuptiBackend, WithoutCuptiSaysSo) {
  if (ProfilerHasCupti()) GTEST_SKIP() << "this build has CUPTI";
  const std::string error = ErrorOf(0);
  EXPECT_NE(error.find("built without CUPTI"), std::string::npos) << error;
}

#if MEMPLAN_HAVE_CUPTI

using cupti::RecordConverter;

constexpr uint64_t kStart = 1'000'000'000;  // the step's CUPTI timestamp (ns)
uint64_t At(uint64_t micros) { return kStart + micros * 1000; }

// Activity records as CUPTI lays them out, each in its own 8-byte aligned storage.
class Records {
 public:
  template <class T>
  void Add(const T& record) {
    std::vector<uint64_t> storage((sizeof record + 7) / 8);
    std::memcpy(storage.data(), &record, sizeof record);
    blobs_.push_back(std::move(storage));
  }
  // Feeds all records to `c` in an order fixed by `seed` (0: as added).
  void FeedTo(RecordConverter& c, unsigned seed) const {
    std::vector<const std::vector<uint64_t>*> order;
    for (const auto& b : blobs_) order.push_back(&b);
    if (seed != 0) std::shuffle(order.begin(), order.end(), std::mt19937(seed));
    for (const auto* b : order) c.Add(reinterpret_cast<const CUpti_Activity*>(b->data()));
  }

 private:
  std::vector<std::vector<uint64_t>> blobs_;
};

template <class T>
T Zeroed() {
  T r;
  std::memset(&r, 0, sizeof r);
  return r;
}

CUpti_ActivityKernel10 Kernel(uint32_t correlation, uint64_t start, uint64_t end,
                              uint32_t device = 0) {
  auto k = Zeroed<CUpti_ActivityKernel10>();
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.correlationId = correlation;
  k.start = start;
  k.end = end;
  k.deviceId = device;
  return k;
}

CUpti_ActivityMemcpy6 Memcpy(uint32_t correlation, uint64_t start, uint64_t end) {
  auto c = Zeroed<CUpti_ActivityMemcpy6>();
  c.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  c.correlationId = correlation;
  c.start = start;
  c.end = end;
  c.bytes = 4096;
  return c;
}

CUpti_ActivityMemset4 Memset(uint32_t correlation, uint64_t start, uint64_t end) {
  auto s = Zeroed<CUpti_ActivityMemset4>();
  s.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  s.correlationId = correlation;
  s.start = start;
  s.end = end;
  return s;
}

CUpti_ActivityExternalCorrelation External(
    uint32_t correlation, uint64_t external,
    CUpti_ExternalCorrelationKind kind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) {
  auto e = Zeroed<CUpti_ActivityExternalCorrelation>();
  e.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
  e.externalKind = kind;
  e.externalId = external;
  e.correlationId = correlation;
  return e;
}

CUpti_ActivityAPI Runtime(uint32_t correlation, uint64_t start) {
  auto a = Zeroed<CUpti_ActivityAPI>();
  a.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  a.correlationId = correlation;
  a.start = start;
  a.end = start + 1000;
  return a;
}

// cudaMalloc (bytes > 0) or cudaFree (bytes <= 0; 0: CUPTI did not say how much).
CUpti_ActivityMemory4 Segment(uint32_t correlation, uint64_t time, uint64_t address, int64_t bytes,
                              CUpti_ActivityMemoryKind kind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE) {
  auto m = Zeroed<CUpti_ActivityMemory4>();
  m.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
  m.memoryOperationType = bytes > 0 ? CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION
                                    : CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE;
  m.memoryKind = kind;
  m.correlationId = correlation;
  m.address = address;
  m.bytes = static_cast<uint64_t>(bytes > 0 ? bytes : -bytes);
  m.timestamp = time;
  return m;
}

// cudaMallocAsync from pool `pool`, which holds `pool_size` bytes afterwards.
CUpti_ActivityMemory4 AsyncAlloc(
    uint32_t correlation, uint64_t time, uint64_t pool, uint64_t pool_size,
    CUpti_ActivityMemoryPoolType type = CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL) {
  auto m = Zeroed<CUpti_ActivityMemory4>();
  m.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
  m.memoryOperationType = CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION;
  m.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  m.correlationId = correlation;
  m.address = pool + 64;
  m.bytes = 256;
  m.timestamp = time;
  m.isAsync = 1;
  m.memoryPoolConfig.memoryPoolType = type;
  m.memoryPoolConfig.address = pool;
  m.memoryPoolConfig.pool.size = pool_size;
  return m;
}

CUpti_ActivityMemoryPool3 Pool(CUpti_ActivityMemoryPoolOperationType op, uint32_t correlation,
                               uint64_t time, uint64_t pool, uint64_t size) {
  auto p = Zeroed<CUpti_ActivityMemoryPool3>();
  p.kind = CUPTI_ACTIVITY_KIND_MEMORY_POOL;
  p.memoryPoolOperationType = op;
  p.memoryPoolType = CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL;
  p.correlationId = correlation;
  p.address = pool;
  p.size = size;
  p.timestamp = time;
  return p;
}

ProfileScope Fwd(NodeId node = kNone) { return {Phase::kForward, node, 0, 0}; }
ProfileScope Bwd(NodeId node = kNone) { return {Phase::kBackward, node, 0, 0}; }

// Two phases with node 3 in each. External ids the backend pushed: 1 forward, 2 forward
// node 3, 3 backward, 4 backward node 3. Host slices (seconds from the step start):
//   forward  [0, 10 ms)  > node 3 [1 ms, 4 ms)
//   backward [10, 30 ms) > node 3 [12 ms, 20 ms)
cupti::StepContext TwoPhaseStep() {
  cupti::StepContext step;
  step.start_ns = kStart;
  step.start_bytes = 1000;
  step.device_id = 0;
  step.scopes = {{1, Fwd()}, {2, Fwd(3)}, {3, Bwd()}, {4, Bwd(3)}};
  step.slices = {{0.000, 0.010, Fwd(), 0},
                 {0.001, 0.004, Fwd(3), 1},
                 {0.010, 0.030, Bwd(), 0},
                 {0.012, 0.020, Bwd(3), 1}};
  return step;
}

Records TwoPhaseRecords() {
  Records r;
  // Device work (correlation ids 10..19):
  r.Add(Kernel(10, At(1500), At(3500)));  // 2 ms, ext 2: forward node 3
  r.Add(External(10, 2));
  r.Add(Memcpy(11, At(4200), At(4700)));  // 0.5 ms, ext 1: forward phase
  r.Add(External(11, 1));
  r.Add(Memset(12, At(12500), At(12750)));  // 0.25 ms, ext 4: backward node 3
  r.Add(External(12, 4));
  r.Add(Kernel(13, At(13000), At(17000)));  // 4 ms, ext 4: backward node 3
  r.Add(External(13, 4));
  // Launched at 20.5 ms with no id of ours (another tool's kind is ignored): the slice open
  // then is the backward phase (its node ended at 20 ms).
  r.Add(Kernel(14, At(21000), At(22000)));  // 1 ms
  r.Add(Runtime(14, At(20500)));
  r.Add(External(14, 4, CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1));
  r.Add(Kernel(15, At(2000), At(9000), /*device=*/1));  // another device: skipped
  r.Add(Kernel(16, 0, 0));                              // no timestamps: skipped, counted
  // No id, no API record, and after every slice: the default scope (setup).
  r.Add(Memset(17, At(35000), At(35100)));  // 0.1 ms
  // An id of an earlier step (not in the table): its launch at 0.5 ms is in the forward phase.
  r.Add(Kernel(18, At(5000), At(6000)));  // 1 ms
  r.Add(External(18, 77));
  r.Add(Runtime(18, At(500)));

  // Memory (correlation ids 20..29), alive from start_bytes = 1000:
  r.Add(Segment(29, kStart - 1000, 0xD000, 512));  // before the step: known, not an event
  r.Add(Segment(20, At(2000), 0xA000, 2048));      // 2 ms   +2048 -> 3048, ext 2 forward node 3
  r.Add(External(20, 2));
  r.Add(Segment(21, At(11000), 0xB000, 4096));  // 11 ms  +4096 -> 7144, ext 3 backward
  r.Add(External(21, 3));
  r.Add(
      Segment(22, At(13000), 0xC000, 8192));  // 13 ms  +8192 -> 15336 (peak), ext 4 backward node 3
  r.Add(External(22, 4));
  r.Add(Segment(23, At(18000), 0xB000, -4096));  // 18 ms  -4096 -> 11240, ext 4 backward node 3
  r.Add(External(23, 4));
  r.Add(Segment(24, At(25000), 0xC000,
                0));  // 25 ms  -8192 (size from its cudaMalloc) -> 3048, by time: backward
  r.Add(Segment(25, At(26000), 0xD000,
                0));  // 26 ms  -512 (allocated before the step) -> 2536, ext 3 backward
  r.Add(External(25, 3));
  r.Add(Segment(26, At(3000), 0xE000, 1 << 20,
                CUPTI_ACTIVITY_MEMORY_KIND_PINNED));  // host memory: not counted
  return r;
}

TEST(CuptiRecords, AttributesDeviceTimeAndMemoryToScopesInAnyOrder) {
  const Records records = TwoPhaseRecords();
  for (unsigned seed : {0u, 1u, 2u, 3u, 42u}) {
    SCOPED_TRACE("shuffle seed " + std::to_string(seed));
    RecordConverter c;
    records.FeedTo(c, seed);
    cupti::StepContext step = TwoPhaseStep();
    cupti::DeviceProfile d = c.Finish(step);

    const cupti::RecordCounts& n = d.counts;
    EXPECT_EQ(n.kernels, 4);  // 10, 13, 14, 18
    EXPECT_EQ(n.memcpys, 1);
    EXPECT_EQ(n.memsets, 2);
    EXPECT_EQ(n.memory, 6);
    EXPECT_EQ(n.other_devices, 1);
    EXPECT_EQ(n.without_timestamps, 1);
    EXPECT_EQ(n.by_external_id, 4 + 5);  // work 10..13; memory 20..23, 25
    EXPECT_EQ(n.by_time, 3);             // work 14, 18; memory 24
    EXPECT_EQ(n.unattributed, 1);        // work 17

    // Memory events in time order; bytes_after runs from start_bytes.
    const std::vector<MemoryEvent>& e = d.memory_events;
    ASSERT_EQ(e.size(), 6u);
    const double times[] = {0.002, 0.011, 0.013, 0.018, 0.025, 0.026};
    const int64_t bytes[] = {2048, 4096, 8192, -4096, -8192, -512};
    const int64_t after[] = {3048, 7144, 15336, 11240, 3048, 2536};
    const ProfileScope scopes[] = {Fwd(3), Bwd(), Bwd(3), Bwd(3), Bwd(), Bwd()};
    for (size_t i = 0; i < e.size(); ++i) {
      SCOPED_TRACE("event " + std::to_string(i));
      EXPECT_NEAR(e[i].time, times[i], 1e-12);
      EXPECT_EQ(e[i].bytes, bytes[i]);
      EXPECT_EQ(e[i].bytes_after, after[i]);
      EXPECT_TRUE(e[i].scope == scopes[i]);
    }

    Profile p;
    p.start_bytes = step.start_bytes;
    p.slices = step.slices;
    cupti::MergeDeviceProfile(std::move(d), /*dropped_records=*/0, p);
    EXPECT_EQ(p.backend, "cupti");
    auto node = [&](Phase phase, NodeId id) -> const NodeProfile& {
      auto it = std::find_if(p.nodes.begin(), p.nodes.end(), [&](const NodeProfile& np) {
        return np.phase == phase && np.node == id;
      });
      EXPECT_NE(it, p.nodes.end());
      return *it;
    };
    // Device seconds per scope:
    //   forward node 3: kernel 10 = 2 ms;  forward: memcpy 11 + kernel 18 = 0.5 + 1 = 1.5 ms
    //   backward node 3: memset 12 + kernel 13 = 0.25 + 4 = 4.25 ms;  backward: kernel 14 = 1 ms
    //   setup (unattributed): memset 17 = 0.1 ms
    EXPECT_NEAR(node(Phase::kForward, 3).device_seconds, 0.002, 1e-12);
    EXPECT_NEAR(node(Phase::kForward, kNone).device_seconds, 0.0015, 1e-12);
    EXPECT_NEAR(node(Phase::kBackward, 3).device_seconds, 0.00425, 1e-12);
    EXPECT_NEAR(node(Phase::kBackward, kNone).device_seconds, 0.001, 1e-12);
    EXPECT_NEAR(node(Phase::kSetup, kNone).device_seconds, 0.0001, 1e-12);
    auto device_seconds_of = [&](Phase phase) {
      double total = 0;
      for (const NodeProfile& np : p.nodes) total += np.phase == phase ? np.device_seconds : 0;
      return total;
    };
    EXPECT_NEAR(device_seconds_of(Phase::kForward), 0.0035, 1e-12);    // 2 + 1.5 ms
    EXPECT_NEAR(device_seconds_of(Phase::kBackward), 0.00525, 1e-12);  // 4.25 + 1 ms
    // Host times survive the merge: forward node 3's slice is 3 ms, the forward phase's
    // exclusive time 10 - 3 = 7 ms.
    EXPECT_NEAR(node(Phase::kForward, 3).seconds, 0.003, 1e-12);
    EXPECT_NEAR(node(Phase::kForward, kNone).seconds, 0.007, 1e-12);
    // Memory per node: forward node 3 allocated 2048; backward allocated 4096 and freed
    // 8192 + 512; backward node 3 allocated 8192 and freed 4096.
    EXPECT_EQ(node(Phase::kForward, 3).allocated_bytes, 2048);
    EXPECT_EQ(node(Phase::kBackward, kNone).allocated_bytes, 4096);
    EXPECT_EQ(node(Phase::kBackward, kNone).freed_bytes, 8704);
    EXPECT_EQ(node(Phase::kBackward, 3).allocated_bytes, 8192);
    EXPECT_EQ(node(Phase::kBackward, 3).freed_bytes, 4096);
    // The peak: 1000 + 2048 + 4096 + 8192 = 15336 at 13 ms, in backward node 3.
    EXPECT_EQ(p.peak_bytes, 15336);
    EXPECT_NEAR(p.peak_time, 0.013, 1e-12);
    EXPECT_TRUE(p.peak_scope == Bwd(3));
    // The record of the unattributed memset is reported.
    ASSERT_EQ(p.warnings.size(), 2u);
    EXPECT_NE(p.warnings[0].find("could not time 1 "), std::string::npos) << p.warnings[0];
    EXPECT_NE(p.warnings[1].find("1 device records"), std::string::npos) << p.warnings[1];
  }
}

TEST(CuptiRecords, MemoryPoolsCountWhatThePoolHolds) {
  // cudaMallocAsync: a pool's size is the memory held; allocations served from it change
  // nothing unless the pool grows.
  Records r;
  const uint64_t P = 0x7000'0000, Q = 0x9000'0000, R = 0xB000'0000;
  r.Add(Pool(CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_CREATED, 1, At(1000), P,
             4096));                        // +4096 -> 4096
  r.Add(AsyncAlloc(2, At(2000), P, 8192));  // grows: +4096 -> 8192
  r.Add(AsyncAlloc(3, At(3000), P, 8192));  // served: no event
  r.Add(Pool(CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_TRIMMED, 4, At(4000), P,
             2048));  // -6144 -> 2048
  // Q existed before profiling: its first size is a baseline, then it grows by 50000.
  r.Add(AsyncAlloc(5, At(5000), Q, 100000));
  r.Add(AsyncAlloc(6, At(6000), Q, 150000));  // +50000 -> 52048 (peak)
  r.Add(Pool(CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_DESTROYED, 7, At(7000), P,
             0));  // -2048 -> 50000
  r.Add(AsyncAlloc(8, At(8000), R, 1 << 30,
                   CUPTI_ACTIVITY_MEMORY_POOL_TYPE_IMPORTED));  // another process's
  for (uint32_t c = 1; c <= 8; ++c) r.Add(External(c, 1));

  for (unsigned seed : {0u, 5u, 9u}) {
    SCOPED_TRACE("shuffle seed " + std::to_string(seed));
    RecordConverter c;
    r.FeedTo(c, seed);
    cupti::StepContext step;
    step.start_ns = kStart;
    step.scopes = {{1, Fwd()}};
    Profile p;
    cupti::MergeDeviceProfile(c.Finish(step), 0, p);
    std::vector<std::pair<int64_t, int64_t>> got;
    for (const MemoryEvent& e : p.memory_events) got.emplace_back(e.bytes, e.bytes_after);
    const std::vector<std::pair<int64_t, int64_t>> want = {
        {4096, 4096}, {4096, 8192}, {-6144, 2048}, {50000, 52048}, {-2048, 50000}};
    EXPECT_EQ(got, want);
    EXPECT_EQ(p.peak_bytes, 52048);
    EXPECT_NEAR(p.peak_time, 0.006, 1e-12);
    EXPECT_TRUE(p.peak_scope == Fwd());
  }
}

TEST(CuptiRecords, WorkBetweenStepsOnlyUpdatesWhatIsKnown) {
  RecordConverter c;
  Records before;  // the previous step's tail, drained at BeginStep
  before.Add(Segment(1, kStart - 5000, 0xA000, 1 << 20));  // a 1 MiB segment stays cached
  before.Add(Kernel(2, kStart - 4000, kStart - 3000));
  before.FeedTo(c, 0);
  c.Settle();

  Records during;
  during.Add(Segment(3, At(100), 0xA000, 0));  // its free: the size comes from before
  during.Add(External(3, 1));
  during.FeedTo(c, 0);
  cupti::StepContext step;
  step.start_ns = kStart;
  step.start_bytes = 2 << 20;
  step.scopes = {{1, Fwd()}};
  cupti::DeviceProfile d = c.Finish(step);
  EXPECT_EQ(d.counts.kernels, 0);  // the earlier kernel was dropped
  ASSERT_EQ(d.memory_events.size(), 1u);
  EXPECT_EQ(d.memory_events[0].bytes, -(1 << 20));
  EXPECT_EQ(d.memory_events[0].bytes_after, 1 << 20);  // 2 MiB - 1 MiB
}

TEST(CuptiRecords, KernelsStraddlingTheStepStartCountOnlyTheirPartInside) {
  RecordConverter c;
  Records r;
  r.Add(Kernel(1, kStart - 2'000'000, At(3000)));  // 2 ms before, 3 ms inside
  r.Add(External(1, 1));
  r.FeedTo(c, 0);
  cupti::StepContext step;
  step.start_ns = kStart;
  step.scopes = {{1, Fwd()}};
  cupti::DeviceProfile d = c.Finish(step);
  ASSERT_EQ(d.nodes.size(), 1u);
  EXPECT_NEAR(d.nodes[0].device_seconds, 0.003, 1e-12);
}

TEST(CuptiErrors, SayWhatHappenedAndWhatToDo) {
  const std::string other = cupti::FailureMessage(
      "cuptiSubscribe", CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, "CUPTI for Nsight Systems");
  EXPECT_NE(other.find("CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"), std::string::npos)
      << other;
  EXPECT_NE(other.find("another profiler is attached"), std::string::npos) << other;
  EXPECT_NE(other.find("'CUPTI for Nsight Systems'"), std::string::npos) << other;
  EXPECT_NE(other.find("PyTorch profiler"), std::string::npos) << other;
  const std::string privileges =
      cupti::FailureMessage("cuptiActivityEnable", CUPTI_ERROR_INSUFFICIENT_PRIVILEGES);
  EXPECT_NE(privileges.find("CUPTI_ERROR_INSUFFICIENT_PRIVILEGES"), std::string::npos)
      << privileges;
  EXPECT_NE(privileges.find("NVreg_RestrictProfilingToAdminUsers"), std::string::npos)
      << privileges;
  const std::string unknown = cupti::FailureMessage("cuptiSubscribe", CUPTI_ERROR_UNKNOWN);
  EXPECT_NE(unknown.find("nvidia-smi"), std::string::npos) << unknown;
}

#endif  // MEMPLAN_HAVE_CUPTI

}  // namespace
}  // namespace memplan
