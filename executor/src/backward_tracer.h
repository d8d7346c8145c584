// The backward trace of `memplan run --trace`: autograd runs backward functions on its own
// threads, so a RecordFunction observer maps each to the IR node that created it (through
// autograd sequence numbers) and records the allocator after it.
#pragma once

#include <ATen/record_function.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "memplan/executor.h"
#include "meter.h"

namespace memplan::exec {

// The backward trace: maps autograd sequence numbers to IR nodes and records the allocator
// after each backward function.
// The profile's backward scopes come from the same callbacks.
struct BackwardTracer {
  std::mutex mu;
  bool active = false;
  MemoryMeter* meter = nullptr;
  std::map<uint64_t, NodeId> seq_to_node;  // first sequence number of each traced node
  std::vector<TraceEvent>* events = nullptr;
  int64_t* step_peak = nullptr;
  NodeId last = kNone;
  int64_t last_end_bytes = 0;
  std::string phase = "backward";
  // --profile: each backward function is a scope of the profiler while it is set.
  ProfilerBackend* profiler = nullptr;
  const std::vector<int>* segment_of = nullptr;  // node -> plan segment
  int32_t micro_batch = 0;

  NodeId NodeOf(int64_t seq) {
    if (seq < 0) return last;  // AccumulateGrad: belongs to the op that produced the gradient
    auto it = seq_to_node.upper_bound(static_cast<uint64_t>(seq));
    if (it == seq_to_node.begin()) return kNone;
    return std::prev(it)->second;
  }
};

// The process's one tracer (RecordFunction callbacks are plain functions).
BackwardTracer& Tracer();
std::unique_ptr<at::ObserverContext> TraceStart(const at::RecordFunction&);
void TraceEnd(const at::RecordFunction& fn, at::ObserverContext*);

}  // namespace memplan::exec
