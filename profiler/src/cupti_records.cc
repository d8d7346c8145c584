// CUPTI activity records -> device seconds per scope and memory events (see cupti_records.h).
#include "cupti_records.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <tuple>

namespace memplan::cupti {
namespace {

// Records sit in CUPTI's byte buffers; a copy avoids relying on their alignment and on
// reading one struct through a pointer to another.
template <class T>
T Read(const CUpti_Activity* record) {
  T value;
  std::memcpy(&value, record, sizeof value);
  return value;
}

double SecondsSince(uint64_t t, uint64_t start) {
  return (static_cast<double>(t) - static_cast<double>(start)) * 1e-9;
}

// The value for `key` in a vector of pairs sorted by key, or nullptr.
const uint64_t* Find(const std::vector<std::pair<uint32_t, uint64_t>>& sorted, uint32_t key) {
  auto it = std::lower_bound(sorted.begin(), sorted.end(), key,
                             [](const auto& p, uint32_t k) { return p.first < k; });
  return it != sorted.end() && it->first == key ? &it->second : nullptr;
}

// For each time, the index of the innermost slice [begin, end) containing it, or -1. Slices
// are in start order and nest (the backend keeps one stack per step), so a sweep over the
// sorted times with a stack of open slices finds each in one pass.
std::vector<int64_t> InnermostSlices(const std::vector<ProfileSlice>& slices,
                                     const std::vector<double>& times) {
  std::vector<size_t> order(times.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return times[a] < times[b]; });
  std::vector<int64_t> found(times.size(), -1);
  std::vector<size_t> open;
  size_t next = 0;
  for (size_t q : order) {
    const double t = times[q];
    while (next < slices.size() && slices[next].begin <= t) {
      while (!open.empty() && slices[open.back()].end <= slices[next].begin) open.pop_back();
      open.push_back(next++);
    }
    while (!open.empty() && slices[open.back()].end <= t) open.pop_back();
    if (!open.empty()) found[q] = static_cast<int64_t>(open.back());
  }
  return found;
}

}  // namespace

void RecordConverter::Add(const CUpti_Activity* record) {
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto k = Read<CUpti_ActivityKernel10>(record);
      work_.push_back({k.start, k.end, k.correlationId, k.deviceId, record->kind});
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto c = Read<CUpti_ActivityMemcpy6>(record);
      work_.push_back({c.start, c.end, c.correlationId, c.deviceId, record->kind});
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto s = Read<CUpti_ActivityMemset4>(record);
      work_.push_back({s.start, s.end, s.correlationId, s.deviceId, record->kind});
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMORY2: {
      const auto m = Read<CUpti_ActivityMemory4>(record);
      // Pinned and managed host memory is not the device's.
      if (m.memoryKind != CUPTI_ACTIVITY_MEMORY_KIND_DEVICE) break;
      const bool alloc = m.memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION;
      const bool release = m.memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE;
      if (!alloc && !release) break;
      Memory op;
      op.time = m.timestamp;
      op.correlation = m.correlationId;
      op.device = m.deviceId;
      op.seq = seq_++;
      if (!m.isAsync) {
        op.op = alloc ? MemoryOp::kSegmentAlloc : MemoryOp::kSegmentFree;
        op.address = m.address;
        op.bytes = static_cast<int64_t>(m.bytes);
      } else if (m.memoryPoolConfig.memoryPoolType == CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL) {
        // Served from a pool: what changes the memory held is the pool's size.
        op.op = MemoryOp::kPoolSize;
        op.address = m.memoryPoolConfig.address;
        op.bytes = static_cast<int64_t>(m.memoryPoolConfig.pool.size);
      } else {
        break;  // an imported pool belongs to another process
      }
      memory_.push_back(op);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMORY_POOL: {
      const auto p = Read<CUpti_ActivityMemoryPool3>(record);
      if (p.memoryPoolType != CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL) break;
      Memory op;
      op.time = p.timestamp;
      op.correlation = p.correlationId;
      op.device = p.deviceId;
      op.seq = seq_++;
      op.address = p.address;
      op.bytes = static_cast<int64_t>(p.size);
      switch (p.memoryPoolOperationType) {
        case CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_CREATED:
          op.op = MemoryOp::kPoolSize;
          op.pool_created = true;
          break;
        case CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_TRIMMED:
          op.op = MemoryOp::kPoolSize;
          break;
        case CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_DESTROYED:
          op.op = MemoryOp::kPoolDestroy;
          break;
        default:
          return;
      }
      memory_.push_back(op);
      break;
    }
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
      const auto e = Read<CUpti_ActivityExternalCorrelation>(record);
      // Other tools may push ids of other kinds on the same thread.
      if (e.externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0)
        external_.emplace_back(e.correlationId, e.externalId);
      break;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
      const auto a = Read<CUpti_ActivityAPI>(record);
      api_start_.emplace_back(a.correlationId, a.start);
      break;
    }
    default:
      ++ignored_;
      break;
  }
}

int64_t RecordConverter::Apply(const Memory& m) {
  switch (m.op) {
    case MemoryOp::kSegmentAlloc:
      segments_[m.address] = m.bytes;
      return m.bytes;
    case MemoryOp::kSegmentFree: {
      auto it = segments_.find(m.address);
      int64_t bytes = m.bytes;
      if (it != segments_.end()) {
        if (bytes == 0) bytes = it->second;
        segments_.erase(it);
      }
      return -bytes;  // a block from before profiling still gives its bytes back
    }
    case MemoryOp::kPoolSize: {
      auto [it, first] = pools_.try_emplace(m.address, m.bytes);
      if (first) return m.pool_created ? m.bytes : 0;
      const int64_t change = m.bytes - it->second;
      it->second = m.bytes;
      return change;
    }
    case MemoryOp::kPoolDestroy: {
      auto it = pools_.find(m.address);
      if (it == pools_.end()) return 0;  // never counted
      const int64_t change = -it->second;
      pools_.erase(it);
      return change;
    }
  }
  return 0;
}

void RecordConverter::SortMemory() {
  std::stable_sort(memory_.begin(), memory_.end(), [](const Memory& a, const Memory& b) {
    return std::tie(a.time, a.seq) < std::tie(b.time, b.seq);
  });
}

void RecordConverter::Clear() {
  work_.clear();
  memory_.clear();
  external_.clear();
  api_start_.clear();
  ignored_ = 0;
}

void RecordConverter::Settle() {
  SortMemory();
  for (const Memory& m : memory_) Apply(m);
  Clear();
}

DeviceProfile RecordConverter::Finish(const StepContext& step) {
  DeviceProfile out;
  RecordCounts& n = out.counts;
  n.ignored = ignored_;
  auto by_key = [](const auto& a, const auto& b) { return a.first < b.first; };
  std::stable_sort(external_.begin(), external_.end(), by_key);
  std::stable_sort(api_start_.begin(), api_start_.end(), by_key);

  // Whatever needs a scope: its correlation id and the time to fall back on.
  struct Target {
    uint32_t correlation;
    uint64_t own_time;
    ProfileScope* scope;
  };
  std::vector<Target> targets;

  // 1. Memory, in time order: every operation updates the known sizes; those of the step on
  //    the device become events.
  SortMemory();
  std::vector<uint32_t> event_correlation;
  std::vector<uint64_t> event_time;
  int64_t alive = step.start_bytes;
  for (const Memory& m : memory_) {
    const int64_t change = Apply(m);
    if (m.time < step.start_ns) continue;
    if (m.device != step.device_id) {
      ++n.other_devices;
      continue;
    }
    if (change == 0) continue;
    alive += change;
    out.memory_events.push_back({SecondsSince(m.time, step.start_ns), change, alive, {}});
    event_correlation.push_back(m.correlation);
    event_time.push_back(m.time);
  }
  n.memory = static_cast<int64_t>(out.memory_events.size());
  for (size_t i = 0; i < out.memory_events.size(); ++i) {
    targets.push_back({event_correlation[i], event_time[i], &out.memory_events[i].scope});
  }

  // 2. Kernels, copies and sets of the step on the device.
  struct Timed {
    double seconds;
    ProfileScope scope;
  };
  std::vector<Timed> timed;
  std::vector<std::pair<uint32_t, uint64_t>> timed_ids;  // correlation id, start
  for (const Work& w : work_) {
    if (w.device != step.device_id) {
      ++n.other_devices;
      continue;
    }
    if (w.end < w.start || (w.start == 0 && w.end == 0)) {
      ++n.without_timestamps;
      continue;
    }
    if (w.end <= step.start_ns) continue;  // finished before the step began
    const uint64_t start = std::max(w.start, step.start_ns);
    timed.push_back({static_cast<double>(w.end - start) * 1e-9, {}});
    timed_ids.emplace_back(w.correlation, w.start);
    if (w.kind == CUPTI_ACTIVITY_KIND_MEMCPY)
      ++n.memcpys;
    else if (w.kind == CUPTI_ACTIVITY_KIND_MEMSET)
      ++n.memsets;
    else
      ++n.kernels;
  }
  for (size_t i = 0; i < timed.size(); ++i)
    targets.push_back({timed_ids[i].first, timed_ids[i].second, &timed[i].scope});

  // 3. Scopes: the external id, else the host slice open at the launching call.
  std::vector<double> times;
  std::vector<size_t> waiting;
  for (size_t i = 0; i < targets.size(); ++i) {
    const Target& t = targets[i];
    if (const uint64_t* ext = Find(external_, t.correlation)) {
      auto it = step.scopes.find(*ext);
      if (it != step.scopes.end()) {
        *t.scope = it->second;
        ++n.by_external_id;
        continue;
      }
    }
    const uint64_t* api = Find(api_start_, t.correlation);
    times.push_back(SecondsSince(api ? *api : t.own_time, step.start_ns));
    waiting.push_back(i);
  }
  const std::vector<int64_t> slice = InnermostSlices(step.slices, times);
  for (size_t k = 0; k < waiting.size(); ++k) {
    if (slice[k] >= 0) {
      *targets[waiting[k]].scope = step.slices[static_cast<size_t>(slice[k])].scope;
      ++n.by_time;
    } else {
      ++n.unattributed;  // stays the default scope
    }
  }

  // 4. Device seconds per (phase, segment, node), as AggregateProfile keys its totals.
  std::map<std::tuple<int, int32_t, NodeId>, NodeProfile> totals;
  for (const Timed& t : timed) {
    NodeProfile& p = totals[{static_cast<int>(t.scope.phase), t.scope.segment, t.scope.node}];
    p.node = t.scope.node;
    p.phase = t.scope.phase;
    p.segment = t.scope.segment;
    p.device_seconds += t.seconds;
  }
  for (auto& [key, p] : totals) out.nodes.push_back(std::move(p));

  Clear();
  return out;
}

void MergeDeviceProfile(DeviceProfile device, int64_t dropped_records, Profile& p) {
  p.backend = "cupti";
  p.memory_events = std::move(device.memory_events);
  p.nodes.insert(p.nodes.end(), device.nodes.begin(), device.nodes.end());
  p.dropped_records = dropped_records;
  const RecordCounts& n = device.counts;
  if (dropped_records > 0) {
    p.warnings.push_back(
        "CUPTI dropped " + std::to_string(dropped_records) +
        " activity records (no free buffer): device times and memory events are incomplete");
  }
  if (n.without_timestamps > 0) {
    p.warnings.push_back("CUPTI could not time " + std::to_string(n.without_timestamps) +
                         " kernels, copies or sets: their device time is missing");
  }
  if (n.unattributed > 0) {
    p.warnings.push_back(
        std::to_string(n.unattributed) +
        " device records (kernels, copies, memory) fell outside every scope: counted in setup");
  }
  AggregateProfile(p);
}

}  // namespace memplan::cupti
