// CUPTI activity records -> the device side of a Profile. Internal to the profiler, compiled
// only with MEMPLAN_HAVE_CUPTI; it calls no CUPTI function, so tests feed it records built
// from cupti_activity.h's structs on machines without a GPU (as kineto's tests do).
//
// Record versions read (CUDA 13's cupti_activity.h): CUpti_ActivityKernel10 (KERNEL,
// CONCURRENT_KERNEL), CUpti_ActivityMemcpy6 (MEMCPY), CUpti_ActivityMemset4 (MEMSET),
// CUpti_ActivityMemory4 (MEMORY2), CUpti_ActivityMemoryPool3 (MEMORY_POOL),
// CUpti_ActivityExternalCorrelation (EXTERNAL_CORRELATION), CUpti_ActivityAPI (RUNTIME,
// DRIVER). Other kinds are counted and ignored.
//
// Attribution of a record with CUDA correlation id c (kernels, copies, sets, memory):
//   1. the EXTERNAL_CORRELATION record for c (kind CUSTOM0) names the external id the
//      backend pushed for the innermost scope of the launching thread;
//   2. otherwise (work launched from a thread without a pushed id, e.g. the autograd engine
//      between backward functions) the innermost host slice open at the launching API call
//      (the RUNTIME/DRIVER record for c), else at the record's own timestamp;
//   3. otherwise the default scope (setup, no node), counted in `unattributed`.
// Records arrive in any order (CUPTI buffers are per thread and per stream), so Add only
// collects and Finish resolves.
//
// Memory model: the events are the device memory the process holds from the driver:
//   - MEMORY2 records that are not async: cudaMalloc/cudaFree, i.e. the caching allocator's
//     segments (PyTorch's "reserved" memory), +bytes / -bytes;
//   - cudaMallocAsync pools: what a pool holds is its size, reported by MEMORY_POOL records
//     (created, trimmed: `size` read as the pool's size after the operation; destroyed)
//     and by the pool configuration of async MEMORY2 records; an event is the change of a
//     pool's size. A pool first seen without its creation record was created before
//     profiling began: that first size is its baseline, not an allocation.
//   Only device memory (not pinned or managed host memory) of the profiled device counts.
//   bytes_after runs from the step's start_bytes. Records timed before the step start only
//   update what the converter knows of segments and pools (Settle does the same between
//   steps), so that later frees and pool changes are measured against the right sizes.
#pragma once

#include <cupti_activity.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "memplan/profiler.h"

namespace memplan::cupti {

// What Finish needs to know of the step.
struct StepContext {
  uint64_t start_ns = 0;    // cuptiGetTimestamp at BeginStep: device times count from here
  int64_t start_bytes = 0;  // bytes alive when the step began
  uint32_t device_id = 0;   // records of other devices are skipped
  std::unordered_map<uint64_t, ProfileScope> scopes;  // external correlation id -> scope
  std::vector<ProfileSlice> slices;  // the host slices of the step (start order, seconds)
};

// Counts a backend turns into warnings.
struct RecordCounts {
  int64_t kernels = 0;  // kernels, copies and sets of the step on the device, by kind
  int64_t memcpys = 0;
  int64_t memsets = 0;
  int64_t memory = 0;              // MEMORY2 and MEMORY_POOL records that became events
  int64_t by_external_id = 0;      // attributed through an external correlation id
  int64_t by_time = 0;             // attributed through the host slice open at their time
  int64_t unattributed = 0;        // neither: given to the default scope
  int64_t without_timestamps = 0;  // kernels/copies/sets CUPTI could not time (skipped)
  int64_t other_devices = 0;       // skipped
  int64_t ignored = 0;             // records of kinds the converter does not read
};

struct DeviceProfile {
  std::vector<NodeProfile> nodes;  // device_seconds per (phase, segment, node); nothing else set
  std::vector<MemoryEvent> memory_events;  // in time order, bytes_after from start_bytes
  RecordCounts counts;
};

// Puts the device side into the host profile `p` of the same step (slices and host times
// from the CPU backend): backend "cupti", the memory events, device seconds per node, the
// dropped-record count and warnings from the counts; then AggregateProfile.
void MergeDeviceProfile(DeviceProfile device, int64_t dropped_records, Profile& p);

class RecordConverter {
 public:
  // Copies what it needs of one record (the buffer may be reused once Add returns).
  void Add(const CUpti_Activity* record);
  // Resolves the records added since the last Finish or Settle into the step's profile.
  // What it learned of segments and pools carries over to the next step.
  DeviceProfile Finish(const StepContext& step);
  // Drops the records added so far (work between steps), keeping their effect on segment and
  // pool sizes.
  void Settle();

 private:
  struct Work {  // a kernel, memcpy or memset
    uint64_t start = 0;
    uint64_t end = 0;
    uint32_t correlation = 0;
    uint32_t device = 0;
    CUpti_ActivityKind kind = CUPTI_ACTIVITY_KIND_INVALID;
  };
  enum class MemoryOp : uint8_t { kSegmentAlloc, kSegmentFree, kPoolSize, kPoolDestroy };
  struct Memory {
    uint64_t time = 0;
    uint64_t address = 0;  // segment or pool
    int64_t bytes = 0;     // segment bytes, or the pool's size after the operation
    uint32_t correlation = 0;
    uint32_t device = 0;
    uint64_t seq = 0;  // arrival order, to break timestamp ties
    MemoryOp op = MemoryOp::kSegmentAlloc;
    bool pool_created = false;  // kPoolSize from a creation record: the size is all new
  };

  void SortMemory();  // by time, then arrival
  void Clear();       // the records, not what they taught about segments and pools
  // Applies one memory operation to the known segment and pool sizes; returns the change
  // of bytes held.
  int64_t Apply(const Memory& m);

  std::vector<Work> work_;
  std::vector<Memory> memory_;
  std::vector<std::pair<uint32_t, uint64_t>> external_;   // correlation id -> external id
  std::vector<std::pair<uint32_t, uint64_t>> api_start_;  // correlation id -> API call start
  uint64_t seq_ = 0;
  int64_t ignored_ = 0;
  std::unordered_map<uint64_t, int64_t> segments_;  // address -> bytes, live cudaMalloc blocks
  std::unordered_map<uint64_t, int64_t> pools_;     // pool address -> size
};

}  // namespace memplan::cupti
