// The profiler: measured time and memory per IR node and phase of one training step.
//
// The executor drives a ProfilerBackend: it enters a scope (phase, node, segment) around each
// node it runs, around each backward function autograd runs, and around the optimizer; the
// CPU backend also receives every allocation and free from the executor's counting
// allocator. Backends sit behind one interface (as kineto separates CUPTI from its
// consumers):
//   - the CPU backend: a steady clock around each scope, memory events from the allocator;
//   - the CUDA backend: CUPTI activity records (kernels, memcpy/memset, memory), attributed
//     to scopes through external correlation ids pushed per scope.
// The profiler knows nothing of LibTorch or Qt; the executor calls it, never the reverse.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "memplan/analyzer.h"
#include "memplan/training_graph.h"

namespace memplan {

// Where time and memory are attributed. `node` is kNone for phase-level work (the autograd
// engine between backward functions, input slicing); `segment` is the plan segment (0 for
// the plain step), `micro_batch` the micro-batch being run.
struct ProfileScope {
  Phase phase = Phase::kSetup;
  NodeId node = kNone;
  int32_t segment = 0;
  int32_t micro_batch = 0;
  bool operator==(const ProfileScope& o) const {
    return phase == o.phase && node == o.node && segment == o.segment &&
           micro_batch == o.micro_batch;
  }
};

// One execution of a scope: [begin, end) seconds from the start of the step.
struct ProfileSlice {
  double begin = 0;
  double end = 0;
  ProfileScope scope;
  int32_t depth = 0;  // nesting: node scopes sit inside phase scopes
};

// Totals per (node, phase, segment), over micro-batches and calls.
struct NodeProfile {
  NodeId node = kNone;
  std::string name;  // the node's name and op type (filled from the graph; kept in the JSON)
  std::string op;
  Phase phase = Phase::kForward;
  int32_t segment = 0;
  int64_t calls = 0;
  double seconds = 0;         // host wall time, exclusive of nested scopes
  double device_seconds = 0;  // CUDA: kernel time attributed to the scope; 0 on CPU
  // The cost model's prediction for the same work (filled by whoever writes the profile;
  // 0 when unknown).
  double predicted_seconds = 0;
  int64_t allocated_bytes = 0;
  int64_t freed_bytes = 0;
};

// An allocation (bytes > 0) or a free (bytes < 0), in the order they happened.
struct MemoryEvent {
  double time = 0;  // seconds from the start of the step
  int64_t bytes = 0;
  int64_t bytes_after = 0;  // bytes alive after the event
  ProfileScope scope;
};

struct Profile {
  std::string model;
  // The model's structure fingerprint (plan.h's StructureFingerprint: nodes, edges and
  // parameter shapes, batch-independent), so that a profile of another model is refused where
  // it is read (`plan --costs`). Empty in profiles written before it.
  std::string structure_fingerprint;
  std::string device;
  std::string backend;  // "cpu" (counting allocator + steady clock) or "cupti"
  int64_t step = 0;     // which step of the run was profiled (0-based)
  int64_t batch = 0;
  int64_t micro_batches = 1;
  double step_seconds = 0;
  int64_t start_bytes = 0;  // alive when the step began (parameters, gradients, state, batch)
  int64_t peak_bytes = 0;
  double peak_time = 0;
  ProfileScope peak_scope;
  std::vector<ProfileSlice> slices;  // in start order
  std::vector<NodeProfile> nodes;    // sorted by phase, segment, then node order
  std::vector<MemoryEvent> memory_events;
  // CUDA: the caching allocator's peaks over the step (0 elsewhere).
  int64_t cuda_allocated_peak_bytes = 0;
  int64_t cuda_reserved_peak_bytes = 0;
  // CUPTI records lost (buffers full), and anything else the user must know.
  int64_t dropped_records = 0;
  std::vector<std::string> warnings;

  // Exclusive seconds of the recompute phase of `segment` (-1: all segments).
  double RecomputeSeconds(int32_t segment = -1) const;
  // Exclusive seconds of every scope of a phase.
  double PhaseSeconds(Phase phase) const;
  // The predicted counterpart of RecomputeSeconds.
  double PredictedRecomputeSeconds(int32_t segment = -1) const;
};

// A backend records one step at a time. Every method may be called from any thread (autograd
// runs backward functions on its own threads); scopes nest per step, not per thread.
class ProfilerBackend {
 public:
  virtual ~ProfilerBackend() = default;
  virtual std::string name() const = 0;
  // `start_bytes`: the allocator's bytes alive when the step begins.
  virtual void BeginStep(int64_t start_bytes) = 0;
  virtual void Enter(const ProfileScope& scope) = 0;
  virtual void Exit() = 0;
  // An allocation (> 0) or free (< 0) seen by the executor's allocator, with the bytes alive
  // after it. Backends that see memory themselves (CUPTI) ignore it.
  virtual void OnMemory(int64_t bytes, int64_t bytes_after) = 0;
  // Ends the step and returns its profile (names not yet filled: see NameProfileNodes).
  virtual Profile EndStep() = 0;
};

std::unique_ptr<ProfilerBackend> MakeCpuProfiler();

// Whether this build has the CUPTI backend.
bool ProfilerHasCupti();
// The CUPTI backend for a CUDA device. Throws MemplanError with what to do when CUPTI cannot
// start: a build without CUPTI, no driver or device, or another profiler already subscribed.
std::unique_ptr<ProfilerBackend> MakeCuptiProfiler(int device_index);

// Fills NodeProfile::name and ::op from the graph.
void NameProfileNodes(const TrainingGraph& g, Profile& profile);

// Builds per-node totals from the slices and memory events (backends call it).
void AggregateProfile(Profile& profile);

// JSON ("kind": "profile"); ProfileFromJson throws MemplanError naming the bad field.
nlohmann::json ProfileToJson(const Profile& profile);
Profile ProfileFromJson(const nlohmann::json& j);

// A point of the predicted memory timeline: bytes alive after the schedule step of `scope`.
struct PredictedMemory {
  ProfileScope scope;
  int64_t bytes = 0;
};
// The predicted timeline of a schedule, one point per step (setup and optimizer included).
// `segment_of_node` maps each node to its plan segment (empty: all 0).
std::vector<PredictedMemory> PredictedMemoryOf(const Schedule& s, const MemoryTimeline& t,
                                               const std::vector<int32_t>& segment_of_node = {});

// Chrome trace-event JSON (opens in ui.perfetto.dev and chrome://tracing): a track of phase
// and segment spans, one slice per node execution, recompute spans marked, and counters of
// the measured bytes and (when given) the predicted bytes, placed at the end of the measured
// slice of the same scope.
nlohmann::json TraceEventsJson(const Profile& profile,
                               const std::vector<PredictedMemory>& predicted = {});

// The summary the command line prints: step time, recompute per segment, the slowest ops.
std::string FormatProfileSummary(const Profile& profile, int slowest = 5);

}  // namespace memplan
