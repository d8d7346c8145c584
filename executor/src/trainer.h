// The trainer (trainer.cc, trainer_selective.cc, trainer_parallel.cc): the training step on
// LibTorch, selective recompute and data parallelism. Private: only the executor's .cc files
// include it (it includes torch).
#pragma once

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/function.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "backward_tracer.h"
#include "copy_link.h"
#include "distributed.h"
#include "kernels.h"
#include "memplan/analyzer.h"
#include "memplan/executor.h"
#include "memplan/plan.h"
#include "meter.h"
#include "saved_tensors.h"
#include "torch_compat.h"

namespace memplan::exec {

using Clock = std::chrono::steady_clock;
inline double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// `--device`: cpu, cuda or cuda:K, checked against the build and the visible devices.
c10::Device ParseDevice(const std::string& s);

// A profiler scope for the duration of a block (no-op without a profiler).
class ProfileGuard {
 public:
  ProfileGuard(ProfilerBackend* p, const ProfileScope& scope) : p_(p) {
    if (p_) p_->Enter(scope);
  }
  ~ProfileGuard() {
    if (p_) p_->Exit();
  }
  ProfileGuard(const ProfileGuard&) = delete;
  ProfileGuard& operator=(const ProfileGuard&) = delete;

 private:
  ProfilerBackend* p_;
};

// Where the step is, for error messages.
struct Location {
  std::string phase = "setup";
  NodeId node = kNone;
};

class Trainer;

// Where a tensor sits in its storage (offset in elements from the storage's start).
struct TensorGeometry {
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
  at::ScalarType dtype = at::kFloat;
};

// Runs before an autograd function: what `fn` is given to run (shard parameters' gathers,
// offload's prefetches).
class PreHook final : public torch::autograd::FunctionPreHook {
 public:
  explicit PreHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& grads) override {
    fn_();
    return grads;
  }

 private:
  std::function<void()> fn_;
};

// The trainer's side of the saved-tensor hooks (saved_tensors.h), owned apart from the trainer
// so that hooks outliving it (a graph released after a failed step) find nobody.
class SavedTensorBridge final : public exec::SavedTensorOwner {
 public:
  explicit SavedTensorBridge(Trainer* t) : trainer(t) {}
  void Packed(std::shared_ptr<exec::SavedSlot> slot) override;
  at::Tensor Unpack(const exec::SavedSlot& slot) override;
  void Released(const exec::SavedSlot& slot) override;
  Trainer* trainer;
};

class Trainer {
 public:
  Trainer(const TrainingGraph& g, const RunOptions& o)
      : g_(g), opt_(o), device_(ParseDevice(o.device)), meter_(MemoryMeter::For(device_)) {}

  ~Trainer() {
    StopObserving();
    meter_.SetObserver(nullptr);
    if (bridge_) bridge_->trainer = nullptr;
  }
  RunResult Run();

 private:
  void Setup();
  void MakeBatch();
  void SelectMicroBatch(int64_t m);
  int64_t IndexBound(TensorId t) const;
  void FollowSchedule();
  void Step(int64_t step, StepStats* stats);
  // Runs the forward of one segment. `grad` false: no autograd, checkpoints are stored.
  void Forward(size_t segment, bool grad, bool recompute);
  void RunNode(const Node& n, bool recompute);
  at::Tensor Value(TensorId id) const;
  void Backward(size_t segment);
  void OptimizerStep(int64_t step);
  // Data parallelism (plan.h): the buckets' flat buffers, the communication phase, the
  // sharded optimizer.
  bool Distributed() const { return comm_ != nullptr; }
  void MakeBuckets();
  void EnsureFullGradient(size_t b);
  void Accumulated(TensorId p);
  void ReduceScatterBucket(size_t b);
  // Shard parameters (plan.h): a bucket's flat parameters exist only inside gather spans.
  bool ShardParameters() const { return shard_ == ShardMode::kParameters; }
  bool LazyGradients() const {
    return shard_ == ShardMode::kGradients || shard_ == ShardMode::kParameters;
  }
  void GatherParameters(size_t b);
  void ReleaseParameters(size_t b);
  void HookBackwardGathers(const Node& n);
  void BeforeBackwardOf(const Node& n, std::function<void(Trainer&)> fn);
  void StartBackwardCall(size_t segment);
  void BackwardReached(int64_t key);
  void FollowDataParallelSteps(Schedule& s);
  void Communicate();
  void ShardedOptimizerStep(int64_t step);
  void Update(at::Tensor& w, const at::Tensor& gr, at::Tensor& s1, at::Tensor& s2, int64_t step);
  RankStats OwnStats(const RunResult& r) const;
  void GatherRanks(RunResult* r);
  void SeedFor(int64_t step, NodeId node);
  void SetupRandom(const Node& n, OpCall* call);
  OpCall CallFor(const Node& n, bool update_running_stats);
  // Selective recompute (RunOptions::recomputed) and offload (RunOptions::offloaded): the
  // selective step, carried out through saved-tensor hooks.
  friend class SavedTensorBridge;
  bool Selective() const { return !opt_.recomputed.empty() || Offloads(); }
  bool Offloads() const { return !opt_.offloaded.empty(); }
  void ResolveSaved();
  void ForgetDroppedStorage(TensorId t);
  at::Tensor UnpackSaved(const exec::SavedSlot& slot);
  void ReleaseSaved(TensorId root);
  at::Tensor Recomputed(TensorId root);
  at::Tensor RecomputeInput(TensorId t);
  std::set<TensorId> KeptStoragesRead(const Node& n) const;
  std::vector<at::Tensor> RecomputeNode(const Node& n);
  void StartSelectiveBackward();
  void EndSelectiveBackward();
  // Offload (trainer_offload.cc): the schedule's copies, as the forward and backward reach them.
  void FollowOffloadSteps(const Schedule& s);
  void ProducedOffloaded(const Node& n);
  void AfterForwardStep(const Node& n);
  void StartOffload(TensorId root);
  void FinishOffload(TensorId root);
  void PrefetchBefore(NodeId n);
  void StartPrefetch(TensorId root);
  const at::Tensor& Prefetched(TensorId root);
  at::Tensor OffloadedView(TensorId t);
  void EndOffloadBackward();
  void NoteTrace(const std::string& phase, NodeId node);
  void MakeProfiler();
  // Removes the backward observer and the allocator's observer (also when a step fails: the
  // meter outlives this trainer).
  void StopObserving();
  ProfileScope Scope(Phase phase, NodeId node = kNone, int32_t segment = 0) const {
    return {phase, node, segment, static_cast<int32_t>(micro_)};
  }

  const TrainingGraph& g_;
  RunOptions opt_;
  c10::Device device_;
  MemoryMeter& meter_;
  Location where_;

  std::vector<std::vector<NodeId>> segments_;
  std::vector<int> segment_of_;                                  // node -> segment
  std::vector<std::map<std::string, at::Tensor>> tensor_attrs_;  // node -> TENSOR attributes
  std::vector<const Kernel*> kernels_;
  std::vector<bool> skip_node_;  // every output folded to a constant
  // From the schedule: the values to drop after a node's forward / recompute step (the
  // buffers it frees or hands to the backward, with every tensor sharing their storage).
  std::vector<std::vector<TensorId>> release_forward_, release_recompute_;
  // Values of buffers a segment's backward frees (checkpoints, recomputed outputs, views of
  // them taken in later segments): dropped when that segment's backward ends.
  std::vector<std::vector<TensorId>> release_backward_;
  std::vector<std::vector<TensorId>> checkpoints_out_;  // segment -> checkpoints it produces
  std::vector<std::vector<TensorId>>
      checkpoints_free_;  // segment -> checkpoints freed after its backward

  std::vector<at::Tensor> persistent_;  // by TensorId
  std::vector<at::Tensor>
      full_batch_;                  // by TensorId: inputs of all micro-batches (micro_batches > 1)
  std::vector<at::Tensor> values_;  // by TensorId, this step's activations
  std::vector<at::Tensor> ckpt_;  // stored checkpoints (autograd leaves when they need a gradient)
  std::vector<at::Tensor> ckpt_grad_;        // complete gradients of freed checkpoint leaves
  std::vector<at::Tensor> state1_, state2_;  // optimizer state by TensorId
  std::vector<TensorId> trained_;            // parameters with a gradient
  at::Tensor loss_;
  int64_t step_ = 0;
  int64_t micro_ = 0;  // the micro-batch being run
  bool tracing_ = false;
  int64_t trace_peak_ = 0;
  std::vector<TraceEvent> trace_;
  std::unique_ptr<ProfilerBackend> profiler_;  // RunOptions::profile
  ProfilerBackend* profiling_ = nullptr;       // profiler_ during the profiled step
  std::optional<Profile> profile_;
  std::string profiler_warning_;
  at::CallbackHandle callback_ = 0;  // the backward functions' observer, while tracing or profiling
  double recompute_seconds_ = 0;
  std::map<std::string, std::vector<float>> last_gradients_;

  // Selective recompute. dropped_: per tensor, a storage the plan recomputes (roots only).
  std::vector<bool> dropped_;
  std::vector<std::vector<TensorId>> sharing_;  // per storage root: the tensors sharing it
  // Live dropped storages of this forward, by storage: what a saved tensor is a view of.
  std::unordered_map<const c10::StorageImpl*, TensorId> dropped_storage_;
  std::vector<std::shared_ptr<exec::SavedSlot>> pending_;  // saved during the node running
  std::vector<at::Tensor> recomputed_;  // per dropped root: held between its saver's backwards
  std::vector<int> savers_left_;        // per dropped root: recomputable slots not yet released
  std::vector<std::vector<int64_t>> dropped_strides_;  // per dropped root: its forward layout
  std::vector<TensorId> chain_;                        // roots recomputed by the current unpack
  // Per kept storage root: the recompute steps that read it (the schedule's count) and how many
  // are still to come this micro-batch; the executor holds it until the last.
  std::vector<int> recompute_reads_, recompute_reads_left_;
  int recompute_depth_ = 0;
  std::shared_ptr<SavedTensorBridge> bridge_;

  // Offload. offloaded_: per tensor, a storage the plan offloads (roots only). From the
  // schedule: per forward node, the offload copies started and waited for after its step; per
  // node, the prefetches started before its backward work (a pre-hook on its autograd functions).
  // A prefetch's wait is where the backward first reads the storage (Prefetched).
  std::vector<bool> offloaded_;
  std::vector<std::vector<TensorId>> offload_start_after_, offload_wait_after_, prefetch_before_;
  // Per offloaded root, this micro-batch: its device tensor from its forward to its offload's
  // wait, the saved slots that hold it until then, its host copy until its prefetch's wait, the
  // copies' tickets, and the prefetch's state (0: not started, 1: started, 2: waited for). The
  // prefetched storage is held in recomputed_[root] and released as a recomputed one is.
  std::vector<at::Tensor> offload_device_, host_copy_;
  std::vector<std::vector<std::shared_ptr<exec::SavedSlot>>> offload_slots_;
  std::vector<int> offload_ticket_, prefetch_ticket_, prefetch_state_;
  std::unordered_map<const c10::StorageImpl*, TensorId> offload_storage_;
  // Per tensor sharing an offloaded storage: its geometry in the storage (offset in elements
  // from the storage's start), to read it again from the prefetched copy.
  std::vector<TensorGeometry> offload_geometry_;
  std::unique_ptr<CopyLink> link_;
  HostMemory* host_memory_ = nullptr;

  // Data parallelism. A bucket's parameters (and, for shard none and optimizer, gradients) are
  // views of its flat buffers.
  struct FlatBucket {
    ParameterBucket layout;
    at::Tensor params;          // P_b elements
    at::Tensor grads;           // P_b: persistent (none, optimizer), or this step's (gradients)
    at::Tensor grad_shard;      // S_b (gradients)
    at::Tensor state1, state2;  // sharded modes: S_b each, as the optimizer needs
    // Shard gradients: the parameters' AccumulateGrad nodes (held, so that their post hooks
    // stay), and whether the bucket was reduced this step.
    std::vector<torch_compat::NodePtr> accumulators;
    bool reduced = false;
    // Shard parameters: the rank's shard (S_b, what the optimizer updates); the flat buffer's
    // storage seen through a tensor of its own version counter (gathers write through it, so
    // autograd's saved parameters see no in-place change); whether it holds the parameters now.
    at::Tensor param_shard;
    at::Tensor gather_target;
    bool gathered = false;
  };
  std::unique_ptr<exec::Communicator> comm_;
  ShardMode shard_ = ShardMode::kNone;
  std::vector<FlatBucket> buckets_;
  std::vector<int> bucket_of_;
  // Shard gradients and parameters, from the schedule (AddDataParallelSteps). Shard parameters:
  // per node, the buckets gathered before its forward [0] or recompute [1] step and released
  // after it. Per segment's backward call, its gathers, releases and reduce-scatters in schedule
  // order (key: 2 x the position of the step a gather precedes, 2 x that of the step a release
  // or reduce-scatter follows + 1), carried out as the engine reaches them: each node's backward
  // (a pre-hook, shard parameters: key_backward_, per node 2 x its first backward step's
  // position; -1: none) and each accumulation step's AccumulateGrad calls (a post hook: once the
  // step's last parameter is accumulated, every event up to the next step with a node).
  // The reduce-scatters after the backward's last step: comm_order_, in the schedule's order.
  enum class EventKind { kGather, kRelease, kReduce };
  struct BucketEvent {
    int64_t key = 0;
    int bucket = 0;
    EventKind kind = EventKind::kRelease;
  };
  // One backward step's AccumulateGrad calls: the events up to `bound` follow its `members`.
  struct AccumulationStep {
    int64_t bound = 0;
    int members = 0, left = 0;
  };
  std::vector<std::vector<int>> gathers_before_[2], releases_after_[2];
  std::vector<std::vector<BucketEvent>> backward_events_;
  std::vector<int64_t> key_backward_;
  // Per segment's backward call: its accumulation steps, and per parameter the one it is in.
  std::vector<std::vector<AccumulationStep>> accumulation_steps_;
  std::vector<std::unordered_map<TensorId, int>> accumulation_step_of_;
  std::vector<int> comm_order_;
  size_t backward_call_ = 0, backward_cursor_ = 0;
  // FSDP2's gradient order (ParallelLayout::flat_gradient_at_reduce): each parameter keeps its
  // own .grad until its bucket's reduce-scatter allocates the flat gradient and copies it in.
  bool grads_at_reduce_ = false;
  // Hooks left in a graph that outlives the trainer (a failed step) find nobody.
  std::shared_ptr<Trainer*> hook_owner_;
  double comm_seconds_ = 0;
  int64_t row_offset_ = 0;  // the rank's first row of the whole batch
};

}  // namespace memplan::exec
