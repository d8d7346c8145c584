#include <algorithm>
#include <cstdint>

#include "memplan/analyzer.h"

namespace memplan {

int64_t AccountedBytes(int64_t bytes, AllocatorPolicy policy) {
  switch (policy) {
    case AllocatorPolicy::kExact:
      return bytes;
    case AllocatorPolicy::kCudaCaching:
      // The caching allocator hands out blocks in multiples of 512 bytes (at least one).
      return bytes == 0 ? 512 : (bytes + 511) / 512 * 512;
  }
  return bytes;
}

MemoryTimeline Simulate(const Schedule& s, const SimulatorOptions& options) {
  MemoryTimeline t;
  std::vector<char> alive(s.buffers.size(), 0);
  std::vector<int64_t> size(s.buffers.size());
  for (size_t b = 0; b < s.buffers.size(); ++b) {
    if (s.buffers[b].bytes < 0 || s.buffers[b].bytes > INT64_MAX - 512) {
      throw MemplanError("schedule buffer '" + s.buffers[b].name + "' has an invalid size of " +
                         std::to_string(s.buffers[b].bytes) + " bytes");
    }
    size[b] = AccountedBytes(s.buffers[b].bytes, options.policy);
  }
  int64_t current = 0;
  t.bytes_during.reserve(s.steps.size());
  t.bytes_after.reserve(s.steps.size());
  auto check = [&](BufferId b, size_t step) {
    if (b < 0 || b >= static_cast<BufferId>(s.buffers.size())) {
      throw MemplanError("schedule step " + std::to_string(step) + " names buffer " +
                         std::to_string(b) + " that does not exist");
    }
  };
  for (size_t i = 0; i < s.steps.size(); ++i) {
    const Step& step = s.steps[i];
    for (BufferId b : step.allocs) {
      check(b, i);
      if (alive[b]) {
        throw MemplanError("schedule step " + std::to_string(i) + " allocates '" +
                           s.buffers[b].name + "' which is already alive");
      }
      alive[b] = 1;
      if (__builtin_add_overflow(current, size[b], &current)) {
        throw MemplanError("schedule step " + std::to_string(i) +
                           ": the bytes alive exceed 2^63 when '" + s.buffers[b].name + "' (" +
                           std::to_string(s.buffers[b].bytes) +
                           " B) is allocated; check --batch and --dim");
      }
    }
    t.bytes_during.push_back(current);
    if (current > t.peak_bytes || i == 0) {
      t.peak_bytes = current;
      t.peak_step = static_cast<int32_t>(i);
    }
    for (BufferId b : step.handed_to_backward) {
      check(b, i);
      if (!alive[b]) {
        throw MemplanError("schedule step " + std::to_string(i) + " hands '" + s.buffers[b].name +
                           "' to the backward while it is not alive");
      }
    }
    for (BufferId b : step.frees) {
      check(b, i);
      if (!alive[b]) {
        throw MemplanError("schedule step " + std::to_string(i) + " frees '" + s.buffers[b].name +
                           "' which is not alive");
      }
      alive[b] = 0;
      current -= size[b];
    }
    t.bytes_after.push_back(current);
  }
  // What is alive at the peak: replay up to it.
  std::fill(alive.begin(), alive.end(), 0);
  for (int32_t i = 0; i <= t.peak_step && i < static_cast<int32_t>(s.steps.size()); ++i) {
    for (BufferId b : s.steps[i].allocs) alive[b] = 1;
    if (i < t.peak_step)
      for (BufferId b : s.steps[i].frees) alive[b] = 0;
  }
  for (size_t b = 0; b < s.buffers.size(); ++b) {
    if (!alive[b]) continue;
    t.breakdown_at_peak[static_cast<int>(s.buffers[b].category)] += size[b];
    t.alive_at_peak.push_back(static_cast<BufferId>(b));
  }
  std::stable_sort(t.alive_at_peak.begin(), t.alive_at_peak.end(),
                   [&](BufferId a, BufferId b) { return size[a] > size[b]; });
  return t;
}

}  // namespace memplan
