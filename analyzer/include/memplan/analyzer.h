// Schedules, memory simulation, bottlenecks and the analysis result.
//
// A Schedule is a list of steps; each step allocates some buffers and then frees some. The
// simulator replays any schedule (the default training step, or a planner's schedule with
// recompute) and returns the memory timeline. Liveness is decided by whoever builds the
// schedule; the simulator only checks that it is consistent.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "memplan/parse.h"
#include "memplan/training_graph.h"

namespace memplan {

using BufferId = int32_t;

// kCommunication: a data-parallel rank's gradient collectives, between backward and optimizer.
// kOffload, kPrefetch: copies of a saved storage to pinned host memory and back on a copy stream
// (offload, plan.h); their steps have no node (Step::copy_from and copy_to name the buffers).
enum class Phase {
  kSetup,
  kForward,
  kLoss,
  kBackward,
  kRecompute,
  kOptimizer,
  kCommunication,
  kOffload,
  kPrefetch,
};
const char* PhaseName(Phase p);

// What memory is for, in the breakdown at the peak.
enum class MemoryCategory {
  kParameter,
  kGradient,  // parameter gradients (persistent, accumulated in place)
  kOptimizerState,
  kInput,               // the batch and the loss target
  kConstant,            // non-trainable initializers (batch-norm running stats, ...)
  kActivation,          // forward values, alive until their last reader
  kSavedExtra,          // allocated by a forward op for its backward only
  kActivationGradient,  // gradients of activations, alive between producer and consumer
  kTemporary,           // gradients computed then accumulated into an existing buffer
  kWorkspace,           // CUDA libraries' workspaces (cuBLAS, cuBLASLt), kept from first use on
  kCount,
};
constexpr int kNumMemoryCategories = static_cast<int>(MemoryCategory::kCount);
// Memory alive between steps (parameters, their gradients, optimizer state, the batch,
// constants), as opposed to what one step allocates and frees.
bool IsPersistentCategory(MemoryCategory c);
const char* MemoryCategoryName(MemoryCategory c);

struct Buffer {
  std::string name;
  int64_t bytes = 0;
  MemoryCategory category = MemoryCategory::kActivation;
  TensorId tensor = kNone;  // the graph tensor it holds (or whose gradient it holds)
  // Data parallelism: the parameter bucket whose gathered flat parameters (kParameter) or flat
  // gradients (kGradient) it holds (-1: none).
  int32_t bucket = -1;
  // Pinned host memory (offload): counted in MemoryTimeline's host peak, not in the device's.
  bool host = false;
  // How much of `bytes` is a margin (a workspace whose rule was not verified on the device:
  // Node::forward_workspace_margin_bytes): counted unless SimulatorOptions::count_margins is off.
  int64_t margin_bytes = 0;
};

struct Step {
  Phase phase = Phase::kForward;
  NodeId node = kNone;           // kNone for setup / optimizer steps
  std::vector<BufferId> allocs;  // allocated before the step's work; all alive together
  std::vector<BufferId> frees;   // freed after the step's work
  // Activations whose last forward reader is this step but which a backward step saved for
  // later (that step frees them): an executor drops its own reference here, autograd keeps
  // the memory. Forward and recompute steps only.
  std::vector<BufferId> handed_to_backward;
  // Views of parameters and constants (a class token expanded, a position table sliced) own no
  // bytes, so no buffer holds them. An executor drops its reference to each after the step that
  // lists it: its last reader in a forward or recompute pass or, for a view a later segment
  // reads (kept across segments like a checkpoint), the end of that segment's backward.
  std::vector<TensorId> dropped_views;
  // Offload and prefetch steps (Phase::kOffload: device to host; Phase::kPrefetch: host to
  // device): one copy of buffer copy_from into buffer copy_to on the copy stream of its
  // direction. The start step (copy_wait false) allocates copy_to and enqueues the copy; the
  // compute stream goes on. The wait step (copy_wait true, the same two buffers) is where the
  // compute stream waits until that copy has completed; it then frees copy_from.
  BufferId copy_from = -1;
  BufferId copy_to = -1;
  bool copy_wait = false;
};

struct Schedule {
  std::vector<Buffer> buffers;
  std::vector<Step> steps;
  // Buffer names are most of what building a schedule allocates: a planner's search, which
  // replays thousands of schedules and prints none, builds them without (every name "").
  bool named = true;

  BufferId AddBuffer(Buffer b);
  std::string StepLabel(const TrainingGraph& g, size_t step) const;
};

// The default training step: forward in topological order, loss, backward in reverse,
// optimizer update. Every forward value is stored (no recompute).
Schedule BuildTrainingSchedule(const TrainingGraph& g);

// The persistent and per-step buffers shared by every schedule of a graph (parameters,
// gradients, optimizer state, inputs, constants), allocated in one setup step.
// Returns the setup step; `param_grad` maps a parameter TensorId to its gradient buffer.
struct PersistentBuffers {
  Step setup;
  std::vector<BufferId> param_grad;  // indexed by TensorId; kNone for non-parameters
  std::vector<BufferId> storage;     // indexed by TensorId; the buffer of persistent tensors
};
PersistentBuffers AddPersistentBuffers(const TrainingGraph& g, Schedule& s);
// A forward (or recompute) step's temporaries: allocated and freed within the step.
void AddForwardWorkspace(const Node& n, Schedule& s, Step& step);

// The gradient side of the backward pass, node by node. Every schedule builder (the training
// step above, the planner's segmented schedules) runs the same per-node logic in the same
// reverse topological order, so that their gradient buffers agree exactly.
class GradientFlow {
 public:
  GradientFlow(const TrainingGraph& g, Schedule& s);
  // Node n's backward (call in reverse topological order, for nodes with has_backward):
  // allocates the gradients it produces (passing the incoming gradient through where the op
  // hands back a view; a temporary where it accumulates into an existing buffer or a
  // parameter's gradient), its workspace, the contiguous copy an op makes of a broadcast
  // incoming gradient, and frees its outputs' gradients once every tensor sharing the buffer
  // has been consumed.
  void Backward(const Node& n, Step& step);
  // The backward call through the loss has returned. Autograd's engine holds the seed gradient,
  // ones_like(loss), in the call's root (GraphRoot) for the whole call, and the caller holds the
  // loss (the executor, like any PyTorch loop's `loss.backward()`): both die when the call
  // returns. Puts the seed into `frees` unless a view of it is still read; the schedule builder
  // frees the loss's storage at the same point: after the last step of the plain step's backward,
  // or of a segmented step's last segment (the one backward call that reaches the loss).
  void EndBackwardCall(std::vector<BufferId>& frees);
  // The optimizer step: frees the gradients nobody consumed; Adam's one temporary.
  void Finish(Step& optimizer);
  // The buffer holding tensor t's gradient (kNone until a backward step produced it).
  BufferId gradient(TensorId t) const { return grad_[t]; }
  // The seed gradient's buffer (kNone until the loss node's backward created it).
  BufferId seed() const { return seed_; }

 private:
  const TrainingGraph& g_;
  Schedule& s_;
  std::vector<BufferId> grad_;
  std::unordered_map<BufferId, int> readers_;  // tensors still to consume a grad buffer
  // Per tensor: its gradient is (so far) a broadcast view (the sum loss's expanded scalar, and
  // views of it), which some backward ops copy before reading.
  std::vector<bool> broadcast_;
  // A parameter read by several nodes (tied weights): autograd's input buffer for its
  // AccumulateGrad holds the first gradient contribution (the others are added to it in place)
  // until the last has arrived. Per tensor: contributions still to come, and the held buffer.
  std::vector<int> param_contributions_;
  std::vector<BufferId> param_held_;
  BufferId seed_ = kNone;         // ones_like(loss)
  bool root_holds_seed_ = false;  // until EndBackwardCall
};

// How allocation sizes are accounted.
enum class AllocatorPolicy {
  kExact,        // tensor bytes (a CPU counting allocator)
  kCudaCaching,  // CUDA caching allocator: blocks rounded up to 512 B
};

struct SimulatorOptions {
  AllocatorPolicy policy = AllocatorPolicy::kExact;
  // Buffers count their margins (what a budget must keep free); off: the prediction alone.
  bool count_margins = true;
};

struct MemoryTimeline {
  std::vector<int64_t> bytes_during;  // per step: bytes alive after its allocs, before frees
  std::vector<int64_t> bytes_after;   // per step: after its frees
  int64_t peak_bytes = 0;
  int32_t peak_step = 0;
  std::array<int64_t, kNumMemoryCategories> breakdown_at_peak{};
  std::vector<BufferId> alive_at_peak;  // largest first
  // Pinned host memory (buffers with `host`; exact bytes whatever the policy): its peak over the
  // step and the first step reaching it. Host buffers count in none of the fields above.
  int64_t host_peak_bytes = 0;
  int32_t host_peak_step = 0;
  // Per step, pinned host bytes alive after its allocations, before its frees (as bytes_during);
  // empty when the schedule has no host buffer.
  std::vector<int64_t> host_bytes_during;
};

// Replays a schedule. Throws MemplanError if a buffer is allocated while alive, or freed
// while dead (a broken schedule is a bug in its builder, reported with the step).
MemoryTimeline Simulate(const Schedule& s, const SimulatorOptions& options = {});
// Simulate without what is alive at the peak (breakdown_at_peak and alive_at_peak stay empty),
// for the thousands of replays of a planner's search, which reads only the bytes.
MemoryTimeline SimulateBytes(const Schedule& s, const SimulatorOptions& options = {});

// The link between device memory and pinned host memory: one copy stream per direction (a GPU
// has a copy engine each way), each moving a copy at its rate. Offloading a storage of B bytes
// takes B / device_to_host_bytes_per_second on its stream; prefetching it back, B /
// host_to_device_bytes_per_second.
struct LinkRates {
  double device_to_host_bytes_per_second = 0;
  double host_to_device_bytes_per_second = 0;
};

// The compute stream and the two copy streams of a schedule, replayed in time.
struct StreamTimeline {
  double compute_seconds = 0;  // the steps' own seconds, summed
  double stall_seconds = 0;    // what the compute stream waited for copies (wait steps)
  double total_seconds() const { return compute_seconds + stall_seconds; }
  std::vector<double> step_end;  // per step: when the compute stream has finished it
  // Each copy, in the order started: the steps that start and wait for it, its direction, and
  // when its stream moves it (a direction's copies never overlap).
  struct Copy {
    size_t start_step = 0;
    int64_t wait_step = -1;  // -1: no step waits for it
    BufferId from = -1, to = -1;
    bool to_host = false;  // Phase::kOffload: device to host; else host to device
    double begin = 0, end = 0;
  };
  std::vector<Copy> copies;
};
// Replays the streams: the compute stream runs the steps in order, step i taking
// step_seconds[i] (transfer steps take none). A copy start step enqueues its copy on its
// direction's stream at the compute stream's time: it begins when that stream is free (copies
// of one direction run one after the other, in the order started) and lasts its bytes (exact)
// over the direction's rate. A wait step holds the compute stream until its copy has ended; the
// time held is stall. Deterministic and pure. Throws MemplanError when step_seconds does not
// have one entry per step, a wait has no earlier start of the same copy, or a schedule with
// copies has a rate that is not > 0.
StreamTimeline SimulateStreams(const Schedule& s, const std::vector<double>& step_seconds,
                               const LinkRates& link);

// Bytes a buffer occupies under a policy.
int64_t AccountedBytes(int64_t bytes, AllocatorPolicy policy);

// Forward tensors that every path from the data inputs to the loss passes through, in
// topological order (exact: the dominators of the loss).
std::vector<TensorId> FindBottlenecks(const TrainingGraph& g);

struct Analysis {
  TrainingGraph graph;
  Schedule schedule;
  MemoryTimeline timeline;
  std::vector<TensorId> bottlenecks;
  double seconds = 0;  // wall time of load + analysis
  // The timeline is the prediction; the workspace margins (rules unverified on the graph's CPU
  // kernels) are what its peak may fall short by: the peak with them less the peak without, and
  // by op type (WorkspaceMarginsByOp).
  int64_t margin_bytes = 0;
  std::map<std::string, int64_t> margin_by_op;
};

Analysis Analyze(TrainingGraph g);

// JSON per DESIGN.md ("kind": "analysis").
nlohmann::json AnalysisToJson(const Analysis& a);
nlohmann::json TimelineToJson(const TrainingGraph& g, const Schedule& s, const MemoryTimeline& t);
std::string FormatBytes(int64_t bytes);
// Writes a JSON result with WriteFileAtomically (memplan/parse.h). Strings that are not UTF-8
// (names from a model) are written with U+FFFD in place of the bad bytes.
void WriteJsonFile(const std::string& path, const nlohmann::json& j);

}  // namespace memplan
