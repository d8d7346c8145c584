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

namespace {

// Simulate; `at_peak`: also what is alive at the peak (breakdown_at_peak, alive_at_peak).
MemoryTimeline Replay(const Schedule& s, const SimulatorOptions& options, bool at_peak) {
  MemoryTimeline t;
  std::vector<char> alive(s.buffers.size(), 0);
  std::vector<int64_t> size(s.buffers.size());
  for (size_t b = 0; b < s.buffers.size(); ++b) {
    if (s.buffers[b].bytes < 0 || s.buffers[b].bytes > INT64_MAX - 512) {
      throw MemplanError("schedule buffer '" + s.buffers[b].name + "' has an invalid size of " +
                         std::to_string(s.buffers[b].bytes) + " bytes");
    }
    const int64_t margin = options.count_margins ? 0 : s.buffers[b].margin_bytes;
    size[b] = AccountedBytes(s.buffers[b].bytes - margin, options.policy);
  }
  int64_t current = 0;
  int64_t host = 0;  // pinned host bytes alive (offload)
  t.bytes_during.reserve(s.steps.size());
  t.bytes_after.reserve(s.steps.size());
  const bool any_host =
      std::any_of(s.buffers.begin(), s.buffers.end(), [](const Buffer& b) { return b.host; });
  if (any_host) t.host_bytes_during.reserve(s.steps.size());
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
      if (s.buffers[b].host) {
        host += s.buffers[b].bytes;
        if (host > t.host_peak_bytes) {
          t.host_peak_bytes = host;
          t.host_peak_step = static_cast<int32_t>(i);
        }
        continue;
      }
      if (__builtin_add_overflow(current, size[b], &current)) {
        throw MemplanError("schedule step " + std::to_string(i) +
                           ": the bytes alive exceed 2^63 when '" + s.buffers[b].name + "' (" +
                           std::to_string(s.buffers[b].bytes) +
                           " B) is allocated; check --batch and --dim");
      }
    }
    t.bytes_during.push_back(current);
    if (any_host) t.host_bytes_during.push_back(host);
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
      if (s.buffers[b].host)
        host -= s.buffers[b].bytes;
      else
        current -= size[b];
    }
    t.bytes_after.push_back(current);
  }
  if (!at_peak) return t;
  // What is alive at the peak: replay up to it.
  std::fill(alive.begin(), alive.end(), 0);
  for (int32_t i = 0; i <= t.peak_step && i < static_cast<int32_t>(s.steps.size()); ++i) {
    for (BufferId b : s.steps[i].allocs) alive[b] = 1;
    if (i < t.peak_step)
      for (BufferId b : s.steps[i].frees) alive[b] = 0;
  }
  for (size_t b = 0; b < s.buffers.size(); ++b) {
    if (!alive[b] || s.buffers[b].host) continue;
    t.breakdown_at_peak[static_cast<int>(s.buffers[b].category)] += size[b];
    t.alive_at_peak.push_back(static_cast<BufferId>(b));
  }
  std::stable_sort(t.alive_at_peak.begin(), t.alive_at_peak.end(),
                   [&](BufferId a, BufferId b) { return size[a] > size[b]; });
  return t;
}

}  // namespace

MemoryTimeline Simulate(const Schedule& s, const SimulatorOptions& options) {
  return Replay(s, options, /*at_peak=*/true);
}

MemoryTimeline SimulateBytes(const Schedule& s, const SimulatorOptions& options) {
  return Replay(s, options, /*at_peak=*/false);
}

StreamTimeline SimulateStreams(const Schedule& s, const std::vector<double>& step_seconds,
                               const LinkRates& link) {
  if (step_seconds.size() != s.steps.size()) {
    throw MemplanError("stream replay: " + std::to_string(step_seconds.size()) +
                       " step times for a schedule of " + std::to_string(s.steps.size()) +
                       " steps");
  }
  StreamTimeline t;
  t.step_end.reserve(s.steps.size());
  double now = 0;
  double free_at[2] = {0, 0};                      // per direction: when its copy stream is idle
  std::vector<double> ends(s.buffers.size(), -1);  // per copy_to buffer: when its copy ends
  std::vector<int64_t> copy_of(s.buffers.size(), -1);  // per copy_to buffer: its entry in copies
  for (size_t i = 0; i < s.steps.size(); ++i) {
    const Step& step = s.steps[i];
    const bool copy = step.phase == Phase::kOffload || step.phase == Phase::kPrefetch;
    if (!copy) {
      now += step_seconds[i];
      t.compute_seconds += step_seconds[i];
      t.step_end.push_back(now);
      continue;
    }
    const BufferId to = step.copy_to;
    if (step.copy_from < 0 || to < 0 || step.copy_from >= static_cast<BufferId>(s.buffers.size()) ||
        to >= static_cast<BufferId>(s.buffers.size())) {
      throw MemplanError("schedule step " + std::to_string(i) + " copies between buffers " +
                         std::to_string(step.copy_from) + " and " + std::to_string(to) +
                         " that do not both exist");
    }
    if (step.copy_wait) {
      if (ends[to] < 0) {
        throw MemplanError("schedule step " + std::to_string(i) + " waits for the copy into '" +
                           s.buffers[to].name + "', which no earlier step started");
      }
      if (ends[to] > now) {
        t.stall_seconds += ends[to] - now;
        now = ends[to];
      }
      t.copies[copy_of[to]].wait_step = static_cast<int64_t>(i);
    } else {
      const int dir = step.phase == Phase::kOffload ? 0 : 1;
      const double rate =
          dir == 0 ? link.device_to_host_bytes_per_second : link.host_to_device_bytes_per_second;
      if (!(rate > 0)) {
        throw MemplanError(std::string("stream replay: the ") +
                           (dir == 0 ? "device-to-host" : "host-to-device") +
                           " link rate must be > 0 bytes per second for a schedule with copies");
      }
      const double begin = std::max(now, free_at[dir]);
      ends[to] = begin + static_cast<double>(s.buffers[step.copy_from].bytes) / rate;
      free_at[dir] = ends[to];
      copy_of[to] = static_cast<int64_t>(t.copies.size());
      t.copies.push_back({.start_step = i,
                          .from = step.copy_from,
                          .to = to,
                          .to_host = dir == 0,
                          .begin = begin,
                          .end = ends[to]});
    }
    t.step_end.push_back(now);
  }
  return t;
}

}  // namespace memplan
