// The training step on LibTorch: setup (weights, optimizer state, batch), forward, the loss,
// backward, the optimizer, and plan execution with recompute. When a value is dropped is not
// decided here: the executor carries out the planner's schedule (BuildSegmentedSchedule).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/SequenceNumber.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>

#include "kernels.h"
#include "memplan/analyzer.h"
#include "memplan/executor.h"
#include "memplan/onnx_convert.h"
#include "memplan/plan.h"
#include "memplan/planner.h"
#include "meter.h"
#include "backward_tracer.h"
#include "distributed.h"
#include "initial_values.h"
#include "memplan/storage_facts.h"
#include "saved_tensors.h"
#include "tensor_io.h"

namespace memplan {

using exec::FindKernel;
using exec::Kernel;
using exec::MemoryMeter;
using exec::OpCall;
using exec::BackwardTracer;
using exec::Tracer;
using exec::TraceStart;
using exec::TraceEnd;
using exec::FromConstValue;

namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

uint64_t Mix(uint64_t x) { return exec::SplitMix64(x); }

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

c10::Device ParseDevice(const std::string& s) {
  if (s == "cpu") return c10::Device(c10::kCPU);
  if (s == "cuda" || s.rfind("cuda:", 0) == 0) {
    if (!ExecutorHasCuda()) {
      throw MemplanError("--device " + s + ": this memplan was built against a LibTorch without CUDA (" +
                         ExecutorBackendDescription() + "); build it against the CUDA torch wheel (make, scripts/install-deps.sh)");
    }
    int index = 0;
    if (s.size() > 5) {
      char* end = nullptr;
      long v = std::strtol(s.c_str() + 5, &end, 10);
      if (*end != '\0' || v < 0) throw MemplanError("--device " + s + ": expected cuda:K with K a device index");
      index = static_cast<int>(v);
    }
    int count = exec::CudaDeviceCount();
    if (count == 0) {
      const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
      throw MemplanError("--device " + s + ": no CUDA device is visible (memplan has CUDA " + exec::CudaBuildVersion() +
                         "; CUDA_VISIBLE_DEVICES=" + (visible ? "'" + std::string(visible) + "'" : "unset") +
                         "): check the GPU driver (nvidia-smi), or run with --device cpu");
    }
    if (index >= count) {
      throw MemplanError("--device " + s + ": only " + std::to_string(count) + " CUDA device(s) are visible");
    }
    return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
  }
  throw MemplanError("--device must be cpu, cuda or cuda:K (got '" + s + "')");
}

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
  void StartEarlyReduce();
  void Accumulated(TensorId p);
  void ReduceScatterBucket(size_t b);
  // Shard parameters (plan.h): a bucket's flat parameters exist only inside gather spans.
  bool ShardParameters() const { return shard_ == ShardMode::kParameters; }
  bool LazyGradients() const { return shard_ == ShardMode::kGradients || shard_ == ShardMode::kParameters; }
  void GatherParameters(size_t b);
  void ReleaseParameters(size_t b);
  void HookBackwardGathers(const Node& n);
  void StartBackwardCall(size_t segment);
  void Communicate();
  void ShardedOptimizerStep(int64_t step);
  void Update(at::Tensor& w, const at::Tensor& gr, at::Tensor& s1, at::Tensor& s2, int64_t step);
  RankStats OwnStats(const RunResult& r) const;
  void GatherRanks(RunResult* r);
  void SeedFor(int64_t step, NodeId node);
  void SetupRandom(const Node& n, OpCall* call);
  OpCall CallFor(const Node& n, bool update_running_stats);
  // Selective recompute (RunOptions::recomputed), carried out through saved-tensor hooks.
  friend class SavedTensorBridge;
  bool Selective() const { return !opt_.recomputed.empty(); }
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
  std::vector<int> segment_of_;                        // node -> segment
  std::vector<std::map<std::string, at::Tensor>> tensor_attrs_;  // node -> TENSOR attributes
  std::vector<const Kernel*> kernels_;
  std::vector<bool> skip_node_;                         // every output folded to a constant
  // From the schedule: the values to drop after a node's forward / recompute step (the
  // buffers it frees or hands to the backward, with every tensor sharing their storage).
  std::vector<std::vector<TensorId>> release_forward_, release_recompute_;
  // Values of buffers a segment's backward frees (checkpoints, recomputed outputs, views of
  // them taken in later segments): dropped when that segment's backward ends.
  std::vector<std::vector<TensorId>> release_backward_;
  std::vector<std::vector<TensorId>> checkpoints_out_;  // segment -> checkpoints it produces
  std::vector<std::vector<TensorId>> checkpoints_free_;  // segment -> checkpoints freed after its backward

  std::vector<at::Tensor> persistent_;  // by TensorId
  std::vector<at::Tensor> full_batch_;  // by TensorId: inputs of all micro-batches (micro_batches > 1)
  std::vector<at::Tensor> values_;      // by TensorId, this step's activations
  std::vector<at::Tensor> ckpt_;        // stored checkpoints (autograd leaves when they need a gradient)
  std::vector<at::Tensor> ckpt_grad_;   // complete gradients of freed checkpoint leaves
  std::vector<at::Tensor> state1_, state2_;  // optimizer state by TensorId
  std::vector<TensorId> trained_;       // parameters with a gradient
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
  std::vector<TensorId> chain_;         // roots recomputed by the current unpack
  // Per kept storage root: the recompute steps that read it (the schedule's count) and how many
  // are still to come this micro-batch; the executor holds it until the last.
  std::vector<int> recompute_reads_, recompute_reads_left_;
  int recompute_depth_ = 0;
  std::shared_ptr<SavedTensorBridge> bridge_;

  // Data parallelism. A bucket's parameters (and, for shard none and optimizer, gradients) are
  // views of its flat buffers.
  struct FlatBucket {
    ParameterBucket layout;
    at::Tensor params;      // P_b elements
    at::Tensor grads;       // P_b: persistent (none, optimizer), or this step's (gradients)
    at::Tensor grad_shard;  // S_b (gradients)
    at::Tensor state1, state2;  // sharded modes: S_b each, as the optimizer needs
    // Shard gradients: the parameters' AccumulateGrad nodes (held, so that their post hooks
    // stay), how many of the parameters still await their last accumulation in this backward,
    // and whether the bucket was reduced this step.
    std::vector<c10::intrusive_ptr<torch::autograd::Node>> accumulators;
    int64_t pending = 0;
    bool reduced = false;
    // Shard parameters: the rank's shard (S_b, what the optimizer updates); the flat buffer's
    // storage seen through a tensor of its own version counter (gathers write through it, so
    // autograd's saved parameters see no in-place change); whether it holds the parameters now;
    // the gradients still to accumulate in this backward call before it is released.
    at::Tensor param_shard;
    at::Tensor gather_target;
    bool gathered = false;
    int64_t call_pending = 0;
  };
  std::unique_ptr<exec::Communicator> comm_;
  ShardMode shard_ = ShardMode::kNone;
  std::vector<FlatBucket> buckets_;
  // Shard gradients: per parameter, the AccumulateGrad calls of one micro-batch (one per
  // segment whose nodes read it) and those still to come in the last micro-batch's backward.
  std::vector<int> accum_expected_, accum_left_;
  std::vector<int> bucket_of_;
  // Shard parameters: per node, the buckets it reads and those its forward pass releases after
  // it (the planner's BucketsReadBy and ForwardReleases). Shard gradients and parameters: per
  // segment, the parameters its backward call accumulates a gradient into.
  std::vector<std::vector<int>> reads_, releases_;
  std::vector<std::vector<TensorId>> segment_params_;
  // Hooks left in a graph that outlives the trainer (a failed step) find nobody.
  std::shared_ptr<Trainer*> hook_owner_;
  bool early_reduce_ = false;
  double comm_seconds_ = 0;
  int64_t row_offset_ = 0;  // the rank's first row of the whole batch
};

void SavedTensorBridge::Packed(std::shared_ptr<exec::SavedSlot> slot) {
  if (trainer) trainer->pending_.push_back(std::move(slot));
}
at::Tensor SavedTensorBridge::Unpack(const exec::SavedSlot& slot) {
  if (!trainer) throw MemplanError("internal error: a recomputable tensor was read after its run ended");
  return trainer->UnpackSaved(slot);
}
void SavedTensorBridge::Released(const exec::SavedSlot& slot) {
  if (trainer) trainer->ReleaseSaved(slot.root);
}

at::Tensor Trainer::Value(TensorId id) const {
  if (persistent_[id].defined()) return persistent_[id];
  if (values_[id].defined()) return values_[id];
  if (ckpt_[id].defined()) return ckpt_[id];
  throw MemplanError("internal error: tensor '" + g_.tensors[id].name + "' is read after it was released");
}

int64_t Trainer::IndexBound(TensorId t) const {
  // Follow the integer input through views and casts to an op that indexes along an axis with it.
  std::vector<TensorId> frontier = {t};
  std::set<TensorId> seen;
  while (!frontier.empty()) {
    TensorId cur = frontier.back();
    frontier.pop_back();
    if (!seen.insert(cur).second) continue;
    for (NodeId c : g_.tensors[cur].consumers) {
      const Node& n = g_.nodes[c];
      const int indices = AxisIndicesInput(n.op_type);
      if (indices >= 0 && static_cast<int>(n.inputs.size()) > indices && n.inputs[indices] == cur) {
        const Tensor& data = g_.tensors[n.inputs[0]];
        int64_t axis = n.attr_int("axis", 0);
        if (axis < 0) axis += static_cast<int64_t>(data.shape.size());
        if (axis >= 0 && axis < static_cast<int64_t>(data.shape.size())) return data.shape[axis];
      }
      if (PassesInputValues(n.op_type) && n.inputs[0] == cur) {
        for (TensorId o : n.outputs) if (o != kNone) frontier.push_back(o);
      }
    }
  }
  return 2;
}

void Trainer::Setup() {
  CheckExecutorSupports(g_);
  if (g_.loss == kNone) throw MemplanError(g_.model_path + ": the graph has no loss");
  CheckSegments(g_, opt_.segments);
  if (Selective()) {
    if (opt_.segments.size() > 1) {
      throw MemplanError("the plan both recomputes tensors selectively and cuts the model into " +
                         std::to_string(opt_.segments.size()) + " segments, which memplan does not combine; re-plan with `memplan plan`");
    }
    dropped_.assign(g_.tensors.size(), false);
    for (TensorId t : opt_.recomputed) {
      if (t < 0 || t >= static_cast<TensorId>(g_.tensors.size())) throw MemplanError("the plan recomputes a tensor the model lacks");
      dropped_[t] = true;
    }
    exec::InstallSavedTensorEngine();
    bridge_ = std::make_shared<SavedTensorBridge>(this);
  }
  segments_ = opt_.segments;
  if (segments_.empty()) {
    segments_.emplace_back();
    for (const Node& n : g_.nodes) segments_[0].push_back(n.id);
  }
  if (opt_.threads > 0) at::set_num_threads(opt_.threads);
  if (opt_.micro_batches < 1) throw MemplanError("micro_batches must be at least 1");

  exec::ModelData model;
  exec::LoadModelData(g_.model_path, opt_.model_bytes, &model);

  const size_t nt = g_.tensors.size(), nn = g_.nodes.size();
  persistent_.assign(nt, at::Tensor());
  values_.assign(nt, at::Tensor());
  ckpt_.assign(nt, at::Tensor());
  ckpt_grad_.assign(nt, at::Tensor());
  state1_.assign(nt, at::Tensor());
  state2_.assign(nt, at::Tensor());
  kernels_.assign(nn, nullptr);
  skip_node_.assign(nn, false);
  tensor_attrs_.assign(nn, {});

  for (const Node& n : g_.nodes) {
    kernels_[n.id] = FindKernel(n.op_type);
    skip_node_[n.id] = NodeIsFolded(g_, n);
    if (skip_node_[n.id]) continue;
    for (TensorId o : n.outputs) {
      if (o == kNone) continue;
      auto it = model.node_by_output.find(g_.tensors[o].name);
      if (it != model.node_by_output.end()) {
        tensor_attrs_[n.id] = exec::TensorAttributes(*it->second, model.dir);
        for (auto& [k, v] : tensor_attrs_[n.id]) v = v.to(device_);
      }
      break;
    }
  }

  // Persistent tensors: parameters (with zeroed gradients), constants, the batch.
  for (const Tensor& t : g_.tensors) {
    if (!t.is_persistent() || t.category == TensorCategory::kInput) continue;
    at::Tensor v;
    if (t.category == TensorCategory::kConstant && t.producer != kNone) {
      v = FromConstValue(*t.value);
    } else if (t.category == TensorCategory::kConstant && t.value && !opt_.random_weights) {
      v = FromConstValue(*t.value);
    } else {
      bool random = false;
      v = exec::InitialValue(g_, t, model, opt_.random_weights, opt_.seed, &random);
    }
    if (v.sizes() != at::IntArrayRef(t.shape)) {
      throw MemplanError(g_.model_path + ": initializer '" + t.name + "' has a shape that does not match the graph");
    }
    persistent_[t.id] = v.to(device_).contiguous();
  }
  int mult = OptimizerStateMultiplier(g_.optimizer);
  for (TensorId p : g_.parameters) {
    const Tensor& t = g_.tensors[p];
    persistent_[p].requires_grad_(true);
    if (!t.has_gradient) continue;
    trained_.push_back(p);
    if (Distributed()) continue;  // MakeBuckets: views of the buckets' flat buffers
    persistent_[p].mutable_grad() = at::zeros_like(persistent_[p]);
    if (mult >= 1) state1_[p] = at::zeros_like(persistent_[p]);
    if (mult >= 2) state2_[p] = at::zeros_like(persistent_[p]);
  }
  if (Distributed()) MakeBuckets();
  MakeBatch();
  FollowSchedule();
}

void Trainer::MakeBatch() {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(Mix(opt_.seed + 0x5eed));
  std::vector<TensorId> ins = g_.inputs;
  if (g_.loss_target != kNone) ins.push_back(g_.loss_target);
  std::set<std::string> known;
  for (TensorId i : ins) known.insert(g_.tensors[i].name);
  for (const auto& [name, file] : opt_.input_files) {
    if (!known.count(name)) {
      throw MemplanError("--input " + name + "=" + file + ": the model has no input named '" + name + "'");
    }
  }
  const int64_t k = opt_.micro_batches;
  // Data parallelism: the whole batch is drawn (or read) as one process draws it, and the rank
  // keeps its rows, so that N ranks train on exactly the batch one process trains on.
  const int64_t ranks = Distributed() ? comm_->world_size() : 1;
  full_batch_.assign(g_.tensors.size(), at::Tensor());
  for (TensorId i : ins) {
    Tensor t = g_.tensors[i];  // with micro-batches or ranks: the whole batch along dim 0
    if (k > 1 || ranks > 1) {
      if (t.shape.empty() || t.shape[0] != g_.batch) {
        throw MemplanError(std::string(ranks > 1 ? "data parallelism" : "micro-batching") +
                           " splits every input along its first dimension, but input '" + t.name + "' has shape " +
                           ShapeString(t.shape) + " at batch " + std::to_string(g_.batch));
      }
      t.shape[0] *= k * ranks;
    }
    at::ScalarType st = exec::ScalarTypeOf(t.dtype);
    auto opts = at::TensorOptions().dtype(st);
    at::Tensor v;
    auto file = opt_.input_files.find(t.name);
    if (file != opt_.input_files.end()) {
      v = exec::ReadTensorFile(file->second, g_.allow_external_data_outside_model_dir);
      if (v.sizes() != at::IntArrayRef(t.shape) || v.scalar_type() != st) {
        std::ostringstream got;
        got << v.sizes() << " " << v.scalar_type();
        throw MemplanError("--input " + t.name + "=" + file->second + ": the file holds a " + got.str() + " tensor; the model wants " +
                           DTypeName(t.dtype) + ShapeString(t.shape) + " at --batch " + std::to_string(g_.batch * k * ranks));
      }
    } else if (i == g_.loss_target && g_.loss_kind == LossKind::kCrossEntropy) {
      const Tensor& logits = g_.tensors[g_.nodes[g_.tensors[g_.loss].producer].inputs[0]];
      int64_t classes = logits.shape.empty() ? 1 : logits.shape.back();
      v = at::randint(0, std::max<int64_t>(classes, 1), t.shape, gen, opts);
    } else if (IsFloating(t.dtype)) {
      v = at::randn(t.shape, gen, at::TensorOptions().dtype(at::kFloat)).to(st);
    } else if (t.dtype == DType::kBool) {
      v = at::randint(0, 2, t.shape, gen, at::TensorOptions().dtype(at::kLong)).to(at::kBool);
    } else {
      v = at::randint(0, IndexBound(i), t.shape, gen, opts);
    }
    if (ranks > 1) v = v.narrow(0, row_offset_, g_.batch * k).clone();
    if (k > 1) full_batch_[i] = v.to(device_).contiguous();
    else persistent_[i] = v.to(device_).contiguous();
  }
}

void Trainer::SelectMicroBatch(int64_t m) {
  micro_ = m;
  if (opt_.micro_batches <= 1) return;
  for (size_t i = 0; i < full_batch_.size(); ++i) {
    if (full_batch_[i].defined()) persistent_[i] = full_batch_[i].narrow(0, m * g_.batch, g_.batch);  // a view
  }
}

void Trainer::FollowSchedule() {
  const size_t nt = g_.tensors.size(), nn = g_.nodes.size(), ns = segments_.size();
  segment_of_.assign(nn, 0);
  for (size_t s = 0; s < ns; ++s) for (NodeId n : segments_[s]) segment_of_[n] = static_cast<int>(s);
  // Selective plans: BuildSelectiveSchedule validates the tensors (a view, the loss's output).
  const Schedule schedule = Selective() ? BuildSelectiveSchedule(g_, ComputeGraphFacts(g_), opt_.recomputed)
                                        : BuildSegmentedSchedule(g_, opt_.segments);
  // A buffer holds one storage; the executor holds a value per tensor sharing it. The loss is
  // the backward's root, held by Step() itself.
  sharing_.assign(nt, {});
  std::vector<std::vector<TensorId>>& sharing = sharing_;
  for (const Tensor& t : g_.tensors) {
    if (t.is_persistent() || t.producer == kNone || t.storage == g_.tensors[g_.loss].storage) continue;
    sharing[t.storage].push_back(t.id);
  }
  if (Selective()) {
    // Recompute runs inside autograd's backward, when a saved tensor is read, not at the
    // schedule's steps; a kept storage it reads is held until the last recompute step that reads
    // it (counted here), which is when the schedule frees it or hands it to the backward.
    recompute_reads_.assign(nt, 0);
    for (const memplan::Step& step : schedule.steps) {
      if (step.phase != Phase::kRecompute || step.node == kNone) continue;
      for (TensorId r : KeptStoragesRead(g_.nodes[step.node])) ++recompute_reads_[r];
    }
    recompute_reads_left_ = recompute_reads_;
    recomputed_.assign(nt, at::Tensor());
    savers_left_.assign(nt, 0);
    dropped_strides_.assign(nt, {});
  }
  auto tensors_of = [&](BufferId b) -> const std::vector<TensorId>& {
    static const std::vector<TensorId> none;
    const Buffer& buf = schedule.buffers[b];
    if (buf.category != MemoryCategory::kActivation || buf.tensor == kNone) return none;
    return sharing[g_.tensors[buf.tensor].storage];
  };
  std::vector<size_t> freed_at(schedule.buffers.size(), schedule.steps.size());
  for (size_t i = 0; i < schedule.steps.size(); ++i) {
    for (BufferId b : schedule.steps[i].frees) freed_at[b] = i;
  }
  release_forward_.assign(nn, {});
  release_recompute_.assign(nn, {});
  release_backward_.assign(ns, {});
  checkpoints_out_.assign(ns, {});
  checkpoints_free_.assign(ns, {});
  for (const memplan::Step& step : schedule.steps) {
    if (step.node == kNone) continue;
    if (step.phase == Phase::kBackward) {
      for (BufferId b : step.frees) {
        for (TensorId t : tensors_of(b)) release_backward_[segment_of_[step.node]].push_back(t);
      }
      continue;
    }
    const bool forward = step.phase == Phase::kForward || step.phase == Phase::kLoss;
    if (!forward && (step.phase != Phase::kRecompute || Selective())) continue;
    std::vector<TensorId>& release = (forward ? release_forward_ : release_recompute_)[step.node];
    for (const auto* list : {&step.frees, &step.handed_to_backward}) {
      for (BufferId b : *list) for (TensorId t : tensors_of(b)) release.push_back(t);
    }
    // A checkpoint: allocated in the forward of an earlier segment, freed in a later phase.
    const int k = segment_of_[step.node];
    if (!forward || k + 1 == static_cast<int>(ns)) continue;
    for (BufferId b : step.allocs) {
      if (tensors_of(b).empty() || freed_at[b] == schedule.steps.size()) continue;
      const memplan::Step& free_step = schedule.steps[freed_at[b]];
      if (free_step.phase == Phase::kForward || free_step.phase == Phase::kLoss) continue;
      for (TensorId t : tensors_of(b)) {
        if (segment_of_[g_.tensors[t].producer] != k) continue;  // a later segment's view of it
        checkpoints_out_[k].push_back(t);
        checkpoints_free_[segment_of_[free_step.node]].push_back(t);
      }
    }
  }
  // Views of parameters and constants (a class token expanded, a position table sliced) have
  // no buffer: they cost nothing, so the schedule says nothing about them. The executor drops
  // each after its last reader in its segment; one a later segment reads is kept as a
  // checkpoint so that the gradient reaches the parameter through it.
  for (const Tensor& t : g_.tensors) {
    if (t.is_persistent() || t.producer == kNone || !g_.tensors[t.storage].is_persistent()) continue;
    const int k = segment_of_[t.producer];
    NodeId last = t.producer;
    int later = -1;
    for (NodeId c : t.consumers) {
      const int j = segment_of_[c];
      if (j == k) last = std::max(last, c);
      else if (j > k && (later < 0 || j < later)) later = j;
    }
    if (later >= 0) {
      checkpoints_out_[k].push_back(t.id);
      checkpoints_free_[later].push_back(t.id);
    } else {
      release_forward_[last].push_back(t.id);
      release_recompute_[last].push_back(t.id);
    }
  }
}

void Trainer::SeedFor(int64_t step, NodeId node) {
  uint64_t seed = Mix(Mix(opt_.seed) ^ Mix(static_cast<uint64_t>(step) * 0x10001ULL + static_cast<uint64_t>(node)));
  auto gen = at::globalContext().defaultGenerator(device_);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_current_seed(seed);
}

void Trainer::NoteTrace(const std::string& phase, NodeId node) {
  if (!tracing_) return;
  trace_.push_back({phase, node, "", meter_.current(), meter_.peak(), {}});
  if (node != kNone) {
    for (size_t t = 0; t < values_.size(); ++t) {
      if (values_[t].defined() || ckpt_[t].defined()) trace_.back().held.push_back(static_cast<TensorId>(t));
    }
  }
  trace_peak_ = std::max(trace_peak_, meter_.peak());
  meter_.ResetPeak();
}

// A kernel call for `n` without its inputs: attributes, and for random ops the seeds.
OpCall Trainer::CallFor(const Node& n, bool update_running_stats) {
  OpCall call;
  call.node = &n;
  call.opset = g_.opset;
  call.tensor_attrs = &tensor_attrs_[n.id];
  call.update_running_stats = update_running_stats;
  call.in.reserve(n.inputs.size());
  SetupRandom(n, &call);
  return call;
}

void Trainer::SetupRandom(const Node& n, OpCall* call) {
  if (RandomnessOf(n.op_type) == Randomness::kNone) return;
  // Seeded by (step, node) and drawn row by row over the whole batch: a recompute, or a
  // micro-batch, draws exactly the forward's values.
  SeedFor(step_ * opt_.micro_batches + micro_, n.id);
  call->random_seed = Mix(Mix(opt_.seed) ^ Mix(static_cast<uint64_t>(step_) * 0x10001ULL + static_cast<uint64_t>(n.id)));
  call->batch_rows = g_.batch;
  call->batch_row_offset = row_offset_ + micro_ * g_.batch;
  call->training_mode = DropoutIsActive(n, g_.tensors);  // Dropout's mode: the analyzer's rule
}

void Trainer::RunNode(const Node& n, bool recompute) {
  where_.node = n.id;
  if (skip_node_[n.id]) {
    // A folded node (Shape, Size, ...) computes nothing, but it may be a value's last reader:
    // release it here too, or the value stays referenced until the next step overwrites it.
    for (TensorId t : (recompute ? release_recompute_ : release_forward_)[n.id]) values_[t].reset();
    return;
  }
  OpCall call = CallFor(n, /*update_running_stats=*/!recompute);
  if (ShardParameters()) {
    for (int b : reads_[n.id]) GatherParameters(static_cast<size_t>(b));
  }
  for (TensorId i : n.inputs) call.in.push_back(i == kNone ? at::Tensor() : Value(i));
  const bool map_backward = tracing_ || profiling_;
  uint64_t seq0 = map_backward ? at::sequence_number::peek() : 0;
  const Phase phase = recompute ? Phase::kRecompute : (n.id == g_.tensors[g_.loss].producer ? Phase::kLoss : Phase::kForward);
  ProfileGuard scope(profiling_, Scope(phase, n.id, segment_of_[n.id]));
  std::vector<at::Tensor> outs = (*kernels_[n.id])(call);
  call.in.clear();
  if (map_backward && at::sequence_number::peek() != seq0) {
    std::lock_guard<std::mutex> lock(Tracer().mu);
    Tracer().seq_to_node[seq0] = n.id;
  }
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    TensorId o = n.outputs[k];
    if (o == kNone || g_.tensors[o].category == TensorCategory::kConstant) continue;
    if (k >= outs.size() || !outs[k].defined()) {
      throw MemplanError(n.op_type + " node '" + n.name + "': output " + std::to_string(k) + " ('" + g_.tensors[o].name +
                         "') is not produced by the executor's implementation");
    }
    // Kernels build small helper tensors on the CPU; keep every value on the run's device.
    if (outs[k].device() != device_) outs[k] = outs[k].to(device_);
    values_[o] = std::move(outs[k]);
  }
  outs.clear();
  if (ShardParameters()) {
    if (at::GradMode::is_enabled()) HookBackwardGathers(n);
    for (int b : releases_[n.id]) ReleaseParameters(static_cast<size_t>(b));
  }
  if (Selective() && !recompute) {
    for (TensorId o : n.outputs) {
      if (o != kNone && dropped_[o] && values_[o].defined()) {
        dropped_storage_[values_[o].storage().unsafeGetStorageImpl()] = o;
        dropped_strides_[o] = values_[o].strides().vec();
      }
    }
    ResolveSaved();
  }
  for (TensorId t : (recompute ? release_recompute_ : release_forward_)[n.id]) {
    if (Selective()) ForgetDroppedStorage(t);
    values_[t].reset();
  }
}

// What the node just run saved for backward: a view of a dropped storage becomes a reference
// to it (recomputed when read); anything else stays held, as autograd holds it.
void Trainer::ResolveSaved() {
  for (const std::shared_ptr<exec::SavedSlot>& slot : pending_) {
    const at::Tensor& held = slot->held;
    if (!held.defined() || !held.has_storage()) continue;
    auto it = dropped_storage_.find(held.storage().unsafeGetStorageImpl());
    if (it == dropped_storage_.end()) continue;
    const at::Tensor& base = values_[it->second];
    if (held.scalar_type() != base.scalar_type()) continue;  // a reinterpretation: keep it
    slot->root = it->second;
    slot->sizes = held.sizes().vec();
    slot->strides = held.strides().vec();
    slot->offset = held.storage_offset() - base.storage_offset();
    slot->held.reset();
    ++savers_left_[it->second];
  }
  pending_.clear();
}

void Trainer::ForgetDroppedStorage(TensorId t) {
  if (!dropped_[t] || !values_[t].defined()) return;
  dropped_storage_.erase(values_[t].storage().unsafeGetStorageImpl());
}

at::Tensor Trainer::UnpackSaved(const exec::SavedSlot& slot) {
  at::Tensor base = Recomputed(slot.root);
  return base.as_strided(slot.sizes, slot.strides, base.storage_offset() + slot.offset);
}

// The last backward function that saved `root` is done with it (plan.h: held until the backward
// of its last saver).
void Trainer::ReleaseSaved(TensorId root) {
  if (--savers_left_[root] <= 0) recomputed_[root].reset();
}

// A dropped storage, recomputed without autograd from what is held, recursively.
at::Tensor Trainer::Recomputed(TensorId root) {
  if (recomputed_[root].defined()) return recomputed_[root];
  const bool outermost = recompute_depth_ == 0;
  auto t0 = Clock::now();
  ++recompute_depth_;
  std::vector<at::Tensor> outs;
  try {
    outs = RecomputeNode(g_.nodes[g_.tensors[root].producer]);
  } catch (...) {
    --recompute_depth_;
    throw;
  }
  --recompute_depth_;
  at::Tensor value = recomputed_[root];
  if (!value.defined()) {
    throw MemplanError("internal error: recomputing '" + g_.tensors[root].name + "' did not produce it");
  }
  if (outermost) {
    // A storage recomputed only as an input of the chain: no backward still to run saved it.
    for (TensorId r : chain_) {
      if (savers_left_[r] <= 0) recomputed_[r].reset();
    }
    chain_.clear();
    recompute_seconds_ += Seconds(t0, Clock::now());
  }
  return value;
}

// The kept activation storages `n` reads (each once), which a recompute of `n` keeps alive.
std::set<TensorId> Trainer::KeptStoragesRead(const Node& n) const {
  std::set<TensorId> read;
  for (TensorId i : n.inputs) {
    if (i == kNone || g_.tensors[i].is_persistent()) continue;
    const TensorId root = g_.tensors[i].storage;
    if (!g_.tensors[root].is_persistent() && !dropped_[root]) read.insert(root);
  }
  return read;
}

at::Tensor Trainer::RecomputeInput(TensorId t) {
  if (persistent_[t].defined()) return persistent_[t];
  const TensorId root = g_.tensors[t].storage;
  if (root == t && dropped_[t]) return Recomputed(t);
  if (!dropped_[root] && values_[t].defined()) return values_[t];
  if (ckpt_[t].defined()) return ckpt_[t];
  // A view of a dropped storage, or of a parameter the forward let go: views cost nothing, so
  // their producer runs again.
  const Node& p = g_.nodes[g_.tensors[t].producer];
  std::vector<at::Tensor> outs = RecomputeNode(p);
  for (size_t k = 0; k < p.outputs.size() && k < outs.size(); ++k) {
    if (p.outputs[k] == t) return outs[k];
  }
  throw MemplanError("internal error: recomputing " + p.op_type + " node '" + p.name + "' did not produce '" +
                     g_.tensors[t].name + "'");
}

// Runs `n` again without autograd (batch-norm statistics untouched, dropout with the forward's
// mask). Dropped storages it produces are kept for the backward; the rest is returned only.
std::vector<at::Tensor> Trainer::RecomputeNode(const Node& n) {
  c10::AutoGradMode no_grad(false);
  where_.node = n.id;
  OpCall call = CallFor(n, /*update_running_stats=*/false);
  for (TensorId i : n.inputs) call.in.push_back(i == kNone ? at::Tensor() : RecomputeInput(i));
  std::vector<at::Tensor> outs;
  {
    ProfileGuard scope(profiling_, Scope(Phase::kRecompute, n.id, segment_of_[n.id]));
    outs = (*kernels_[n.id])(call);
  }
  call.in.clear();
  for (size_t k = 0; k < n.outputs.size() && k < outs.size(); ++k) {
    const TensorId o = n.outputs[k];
    if (o == kNone || !outs[k].defined()) continue;
    if (outs[k].device() != device_) outs[k] = outs[k].to(device_);
    if (dropped_[o] && !recomputed_[o].defined()) {
      // Saved views are rebuilt on the forward's layout; a kernel that lays out differently
      // when run again gets it back by a copy.
      if (!dropped_strides_[o].empty() && outs[k].strides().vec() != dropped_strides_[o]) {
        outs[k] = at::empty_strided(outs[k].sizes(), dropped_strides_[o], outs[k].options()).copy_(outs[k]);
      }
      recomputed_[o] = outs[k];
      chain_.push_back(o);
    }
  }
  // Kept storages this recompute read: held until their last recompute step.
  for (TensorId r : KeptStoragesRead(n)) {
    if (recompute_reads_left_[r] > 0 && --recompute_reads_left_[r] == 0) {
      for (TensorId t : sharing_[r]) values_[t].reset();
    }
  }
  return outs;
}

void Trainer::StartSelectiveBackward() { recompute_reads_left_ = recompute_reads_; }

void Trainer::EndSelectiveBackward() {
  // Everything the backward held for recompute is released with its last saver; what autograd
  // never read (a saver whose gradient was not needed) goes now.
  std::fill(recomputed_.begin(), recomputed_.end(), at::Tensor());
  std::fill(savers_left_.begin(), savers_left_.end(), 0);
  chain_.clear();
  for (size_t r = 0; r < recompute_reads_left_.size(); ++r) {
    if (recompute_reads_left_[r] > 0) {
      for (TensorId t : sharing_[r]) values_[t].reset();
    }
  }
  dropped_storage_.clear();
  pending_.clear();
}

void Trainer::Forward(size_t segment, bool grad, bool recompute) {
  c10::AutoGradMode mode(grad);
  // Selective plans: what autograd saves goes through the trainer (saved_tensors.h).
  std::optional<exec::SaveTensorsThrough> hooks;
  if (Selective() && grad && !recompute) hooks.emplace(bridge_);
  for (NodeId id : segments_[segment]) {
    RunNode(g_.nodes[id], recompute);
    NoteTrace(recompute ? "recompute" : (id == g_.tensors[g_.loss].producer ? "loss" : "forward"), id);
  }
  if (!grad) {
    // Store the checkpoints this segment produced; those a gradient must reach are leaves.
    for (TensorId c : checkpoints_out_[segment]) {
      at::Tensor v = std::move(values_[c]);
      if (g_.tensors[c].has_gradient && at::isFloatingType(v.scalar_type())) v = v.detach().requires_grad_(true);
      ckpt_[c] = std::move(v);
    }
  }
}

void Trainer::Backward(size_t segment) {
  std::vector<at::Tensor> roots, grads;
  if (segment + 1 == segments_.size()) {
    roots.push_back(loss_);
  } else {
    for (TensorId c : checkpoints_out_[segment]) {
      if (values_[c].defined() && values_[c].requires_grad() && ckpt_grad_[c].defined()) {
        roots.push_back(values_[c]);
        grads.push_back(ckpt_grad_[c]);
      }
    }
  }
  where_.phase = "backward";
  where_.node = kNone;
  if (ShardParameters()) StartBackwardCall(segment);
  if (!roots.empty()) {
    torch::autograd::backward(roots, grads, /*retain_graph=*/false, /*create_graph=*/false);
  }
  roots.clear();
  grads.clear();
  // A bucket read in this call only through a view taken in an earlier segment (no gradient
  // accumulated here) is released when the call ends.
  if (ShardParameters()) {
    for (size_t b = 0; b < buckets_.size(); ++b) ReleaseParameters(b);
  }
  // This segment's recomputed outputs and their incoming gradients are done.
  for (TensorId c : checkpoints_out_[segment]) {
    values_[c].reset();
    ckpt_grad_[c].reset();
  }
  if (segment + 1 == segments_.size()) loss_ = at::Tensor();
  for (TensorId t : release_backward_[segment]) values_[t].reset();
  // Checkpoints whose earliest reader is this segment: keep only their gradient.
  for (TensorId c : checkpoints_free_[segment]) {
    if (ckpt_[c].defined() && ckpt_[c].requires_grad()) {
      ckpt_grad_[c] = ckpt_[c].grad();
      ckpt_[c].mutable_grad().reset();
    }
    ckpt_[c].reset();
  }
  NoteTrace("backward", kNone);
}

void Trainer::OptimizerStep(int64_t step) {
  where_.phase = "optimizer";
  where_.node = kNone;
  c10::AutoGradMode no_grad(false);
  for (TensorId p : trained_) {
    at::Tensor& w = persistent_[p];
    Update(w, w.grad(), state1_[p], state2_[p], step);
  }
  NoteTrace("optimizer", kNone);
}

// One optimizer update of `w` (a parameter, or a rank's shard of a bucket) in place.
void Trainer::Update(at::Tensor& w, const at::Tensor& gr, at::Tensor& s1, at::Tensor& s2, int64_t step) {
  const double lr = opt_.learning_rate;
  switch (g_.optimizer) {
    case Optimizer::kSgd: w.add_(gr, -lr); break;
    case Optimizer::kMomentum:
      s1.mul_(0.9).add_(gr);
      w.add_(s1, -lr);
      break;
    case Optimizer::kAdam: {
      const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
      double t = static_cast<double>(step + 1);
      double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
      s1.mul_(b1).add_(gr, 1 - b1);
      s2.mul_(b2).addcmul_(gr, gr, 1 - b2);
      at::Tensor denom = s2.sqrt();  // the one temporary of w's size
      denom.div_(std::sqrt(bc2)).add_(eps);
      w.addcdiv_(s1, denom, -lr / bc1);
      break;
    }
  }
}

// The buckets of plan.h: every trained parameter becomes a view of its bucket's flat parameter
// buffer (padding zero); gradients and optimizer state are flat per bucket or per shard.
void Trainer::MakeBuckets() {
  c10::AutoGradMode no_grad(false);
  ParallelLayout layout = opt_.distributed.layout;
  layout.devices = comm_->world_size();
  const int64_t n = layout.devices;
  const int mult = OptimizerStateMultiplier(g_.optimizer);
  const bool sharded = shard_ != ShardMode::kNone;
  for (const ParameterBucket& lb : ParameterBuckets(g_, layout)) {
    const size_t b = buckets_.size();
    FlatBucket fb;
    fb.layout = lb;
    const int64_t P = lb.elements, S = P / n;
    const at::TensorOptions o = at::TensorOptions().dtype(persistent_[lb.parameters[0]].scalar_type()).device(device_);
    fb.params = at::zeros({P}, o);
    if (LazyGradients()) fb.grad_shard = at::zeros({S}, o);
    else fb.grads = at::zeros({P}, o);
    if (mult >= 1) fb.state1 = at::zeros({sharded ? S : P}, o);
    if (mult >= 2) fb.state2 = at::zeros({sharded ? S : P}, o);
    for (size_t k = 0; k < lb.parameters.size(); ++k) {
      const TensorId p = lb.parameters[k];
      auto view = [&](const at::Tensor& flat) {
        return flat.narrow(0, lb.offsets[k], persistent_[p].numel()).view(persistent_[p].sizes());
      };
      at::Tensor w = view(fb.params);
      w.copy_(persistent_[p].detach());
      persistent_[p] = w;  // the parameter's own buffer is freed
      persistent_[p].requires_grad_(true);
      if (fb.grads.defined()) persistent_[p].mutable_grad() = view(fb.grads);
      if (!sharded && mult >= 1) state1_[p] = view(fb.state1);
      if (!sharded && mult >= 2) state2_[p] = view(fb.state2);
      if (LazyGradients()) {
        // Runs before AccumulateGrad: the gradient is accumulated into the bucket's flat buffer.
        persistent_[p].register_hook([this, b](const at::Tensor&) { EnsureFullGradient(b); });
        // Runs after AccumulateGrad: the bucket is reduced once its last gradient is in.
        c10::intrusive_ptr<torch::autograd::Node> acc = torch::autograd::impl::grad_accumulator(persistent_[p]);
        acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
            [this, p](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
              Accumulated(p);
              return outputs;
            }));
        fb.accumulators.push_back(std::move(acc));
        if (bucket_of_.empty()) bucket_of_.assign(g_.tensors.size(), -1);
        bucket_of_[p] = static_cast<int>(b);
      }
    }
    if (ShardParameters()) {
      fb.param_shard = fb.params.narrow(0, comm_->rank() * S, S).clone();
      fb.gather_target = at::empty({0}, o).set_(fb.params.storage(), 0, {P}, {1});
      fb.gathered = true;
    }
    buckets_.push_back(std::move(fb));
    if (ShardParameters()) ReleaseParameters(b);
  }
  if (!LazyGradients()) return;
  // Autograd sums a parameter's gradients within a backward call before its AccumulateGrad
  // runs: one call per segment whose nodes read the parameter.
  segment_params_.assign(segments_.size(), {});
  for (size_t k = 0; k < segments_.size(); ++k) {
    std::set<TensorId> read;
    for (NodeId n : segments_[k]) {
      for (TensorId in : g_.nodes[n].inputs) {
        if (in != kNone && bucket_of_[in] >= 0) read.insert(in);
      }
    }
    segment_params_[k].assign(read.begin(), read.end());
  }
  if (ShardParameters()) {
    reads_.assign(g_.nodes.size(), {});
    for (const Node& n : g_.nodes) reads_[n.id] = BucketsReadBy(g_, n, bucket_of_);
    releases_ = ForwardReleases(g_, segments_, bucket_of_);
    hook_owner_ = std::make_shared<Trainer*>(this);
  }
}

// Shard parameters: bucket b's flat parameters all-gathered from the ranks' shards into the
// storage every parameter of the bucket (and every saved reference to one) views.
void Trainer::GatherParameters(size_t b) {
  FlatBucket& fb = buckets_[b];
  if (fb.gathered) return;
  c10::AutoGradMode no_grad(false);
  c10::StorageImpl* storage = fb.gather_target.storage().unsafeGetStorageImpl();
  const size_t nbytes = static_cast<size_t>(fb.layout.bytes);
  storage->set_data_ptr_noswap(storage->allocator()->allocate(nbytes));
  storage->set_nbytes(nbytes);
  fb.gathered = true;
  auto t0 = Clock::now();
  comm_->AllGather(fb.gather_target, fb.param_shard, "the all-gather of bucket " + std::to_string(b) + "'s parameters");
  comm_seconds_ += Seconds(t0, Clock::now());
}

// Returns the flat parameters' memory; the storage object stays, so the views autograd saved
// read the next gather's values (FSDP frees its flat parameters the same way).
void Trainer::ReleaseParameters(size_t b) {
  FlatBucket& fb = buckets_[b];
  if (!fb.gathered) return;
  c10::StorageImpl* storage = fb.gather_target.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, storage->device()));
  storage->set_nbytes(0);
  fb.gathered = false;
}

namespace {
// Runs before an autograd function: what `fn` is given to run.
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
}  // namespace

// Shard parameters: the backward of `n` (the autograd functions of its outputs, which the
// engine runs before the rest of the node's backward) first gathers the buckets it reads.
void Trainer::HookBackwardGathers(const Node& n) {
  if (reads_[n.id].empty()) return;
  std::set<torch::autograd::Node*> hooked;
  for (TensorId o : n.outputs) {
    if (o == kNone || !values_[o].defined()) continue;
    const auto fn = values_[o].grad_fn();
    if (!fn || !hooked.insert(fn.get()).second) continue;
    std::weak_ptr<Trainer*> owner = hook_owner_;
    const NodeId id = n.id;
    fn->add_pre_hook(std::make_unique<PreHook>([owner, id] {
      std::shared_ptr<Trainer*> t = owner.lock();
      if (!t || !*t) return;
      for (int b : (*t)->reads_[id]) (*t)->GatherParameters(static_cast<size_t>(b));
    }));
  }
}

// Shard parameters, before a segment's backward call: each bucket is released once the
// gradients of its parameters that this call accumulates are in (Accumulated).
void Trainer::StartBackwardCall(size_t segment) {
  for (FlatBucket& fb : buckets_) fb.call_pending = 0;
  for (TensorId p : segment_params_[segment]) ++buckets_[static_cast<size_t>(bucket_of_[p])].call_pending;
}

// Shard gradients: bucket b's full flat gradient (zeroed), and its parameters' .grad views of
// it, from the first backward step of the step that produces one of their gradients.
void Trainer::EnsureFullGradient(size_t b) {
  FlatBucket& fb = buckets_[b];
  if (fb.grads.defined()) return;
  if (fb.reduced) {
    throw MemplanError("internal: a gradient of bucket " + std::to_string(b) +
                       "'s parameters arrived after the bucket's reduce-scatter (plan.h: a bucket is reduced after "
                       "the last backward call that reads its parameters)");
  }
  c10::AutoGradMode no_grad(false);
  fb.grads = at::zeros({fb.layout.elements}, fb.params.options());
  for (size_t k = 0; k < fb.layout.parameters.size(); ++k) {
    at::Tensor& w = persistent_[fb.layout.parameters[k]];
    w.mutable_grad() = fb.grads.narrow(0, fb.layout.offsets[k], w.numel()).view(w.sizes());
  }
}

// Shard gradients, before the last micro-batch's backward: each parameter expects one
// AccumulateGrad call per backward call that reaches it, that is per segment whose nodes read
// it (autograd sums a tensor's gradients before its AccumulateGrad runs).
void Trainer::StartEarlyReduce() {
  if (accum_expected_.empty()) {
    accum_expected_.assign(g_.tensors.size(), 0);
    for (const std::vector<TensorId>& read : segment_params_) {
      for (TensorId t : read) ++accum_expected_[t];
    }
  }
  accum_left_ = accum_expected_;
  for (FlatBucket& fb : buckets_) {
    fb.pending = 0;
    for (TensorId p : fb.layout.parameters) fb.pending += accum_expected_[p] > 0 ? 1 : 0;
  }
  early_reduce_ = true;
}

// AccumulateGrad's post hook (the autograd engine's thread): the bucket's reduce-scatter runs
// as soon as the last of its parameters' gradients is in. Every rank runs the same graph in the
// same order, so the collectives match.
void Trainer::Accumulated(TensorId p) {
  const size_t b = static_cast<size_t>(bucket_of_[p]);
  FlatBucket& fb = buckets_[b];
  if (early_reduce_ && accum_left_[p] > 0 && --accum_left_[p] == 0 && --fb.pending == 0 && !fb.reduced) {
    auto t0 = Clock::now();
    ReduceScatterBucket(b);
    comm_seconds_ += Seconds(t0, Clock::now());
  }
  // Shard parameters: the call is done with the bucket once its last gradient is in.
  if (ShardParameters() && fb.call_pending > 0 && --fb.call_pending == 0) ReleaseParameters(b);
}

// Shard gradients: reduce-scatter (sum) of bucket b's flat gradient into the rank's shard, / N,
// then the flat gradient is freed.
void Trainer::ReduceScatterBucket(size_t b) {
  c10::AutoGradMode no_grad(false);
  FlatBucket& fb = buckets_[b];
  EnsureFullGradient(b);  // no parameter of the bucket got a gradient this step: zeros
  comm_->ReduceScatterSum(fb.grad_shard, fb.grads, "the reduce-scatter of bucket " + std::to_string(b));
  fb.grad_shard.div_(static_cast<double>(comm_->world_size()));
  for (TensorId p : fb.layout.parameters) persistent_[p].mutable_grad().reset();
  fb.grads.reset();
  fb.reduced = true;
}

// The communication phase (plan.h): per bucket, in bucket order, the gradient all-reduce (or,
// for a bucket of shard gradients the backward did not reduce, the reduce-scatter into the
// rank's shard), averaged over the ranks.
void Trainer::Communicate() {
  where_.phase = "communication";
  where_.node = kNone;
  c10::AutoGradMode no_grad(false);
  const double n = static_cast<double>(comm_->world_size());
  auto t0 = Clock::now();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    ProfileGuard scope(profiling_, Scope(Phase::kCommunication));
    FlatBucket& fb = buckets_[b];
    if (LazyGradients()) {
      if (fb.reduced) continue;
      ReduceScatterBucket(b);
    } else {
      comm_->AllReduceSum(fb.grads, "the all-reduce of bucket " + std::to_string(b));
      fb.grads.div_(n);
    }
    NoteTrace("communication", kNone);
  }
  comm_seconds_ += Seconds(t0, Clock::now());
}

// Shard optimizer and gradients: each rank updates its shard of every bucket, then the bucket's
// parameters are all-gathered from every rank's shard.
void Trainer::ShardedOptimizerStep(int64_t step) {
  where_.phase = "optimizer";
  where_.node = kNone;
  c10::AutoGradMode no_grad(false);
  const int64_t n = comm_->world_size(), r = comm_->rank();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    FlatBucket& fb = buckets_[b];
    const int64_t S = fb.layout.elements / n;
    if (ShardParameters()) {  // the next forward gathers the parameters
      Update(fb.param_shard, fb.grad_shard, fb.state1, fb.state2, step);
      continue;
    }
    at::Tensor w = fb.params.narrow(0, r * S, S);
    at::Tensor gr = shard_ == ShardMode::kGradients ? fb.grad_shard : fb.grads.narrow(0, r * S, S);
    Update(w, gr, fb.state1, fb.state2, step);
    auto t0 = Clock::now();
    at::Tensor mine = w.clone();  // the all-gather writes the buffer `w` views
    comm_->AllGather(fb.params, mine, "the all-gather of bucket " + std::to_string(b));
    mine.reset();
    comm_seconds_ += Seconds(t0, Clock::now());
  }
  NoteTrace("optimizer", kNone);
}

void Trainer::StopObserving() {
  BackwardTracer& tracer = Tracer();
  {
    std::lock_guard<std::mutex> lock(tracer.mu);
    tracer.active = false;
    tracer.profiler = nullptr;
  }
  if (callback_) at::removeCallback(callback_);
  callback_ = 0;
}

void Trainer::MakeProfiler() {
  if (!opt_.profile) return;
  if (device_.is_cpu()) {
    profiler_ = MakeCpuProfiler();
    return;
  }
  try {
    profiler_ = MakeCuptiProfiler(device_.has_index() ? device_.index() : 0);
  } catch (const MemplanError& e) {
    // Host times are still worth having; the profile says what is missing.
    profiler_ = MakeCpuProfiler();
    profiler_warning_ = std::string("CUPTI is unavailable (") + e.what() +
                        "): host times only, no device times or memory events";
  }
}

void Trainer::Step(int64_t step, StepStats* stats) {
  step_ = step;
  tracing_ = opt_.trace && step == (opt_.trace_step < 0 ? opt_.steps - 1 : opt_.trace_step);
  recompute_seconds_ = 0;
  comm_seconds_ = 0;
  micro_ = 0;
  meter_.ResetPeak();
  trace_peak_ = 0;
  profiling_ = profiler_ && step == (opt_.profile_step < 0 ? opt_.steps - 1 : opt_.profile_step) ? profiler_.get() : nullptr;
  BackwardTracer& tracer = Tracer();
  if (profiling_) {
    // On CUDA the profiled step starts with an empty cache: otherwise its allocations reuse
    // earlier steps' blocks and CUPTI's memory records stay empty.
    meter_.ReleaseCachedBlocks();
    profiling_->BeginStep(meter_.current());
    meter_.SetObserver(profiling_);
    std::lock_guard<std::mutex> lock(tracer.mu);
    tracer.seq_to_node.clear();
    tracer.segment_of = &segment_of_;
  }
  auto t0 = Clock::now();
  {
    ProfileGuard scope(profiling_, Scope(Phase::kSetup));
    c10::AutoGradMode no_grad(false);
    if (!Distributed()) {
      for (TensorId p : trained_) persistent_[p].mutable_grad().zero_();
    } else if (!LazyGradients()) {
      for (FlatBucket& b : buckets_) b.grads.zero_();
    } else {  // shard gradients: the flat gradients are allocated by the backward (EnsureFullGradient)
      for (FlatBucket& b : buckets_) b.reduced = false;
    }
  }
  if (tracing_ || profiling_) {
    callback_ = at::addGlobalCallback(at::RecordFunctionCallback(TraceStart, TraceEnd)
                                       .scopes({at::RecordScope::BACKWARD_FUNCTION}));
  }
  if (tracing_) {
    trace_.clear();
    tracer.seq_to_node.clear();
    tracer.meter = &meter_;
    tracer.events = &trace_;
    tracer.step_peak = &trace_peak_;
    tracer.last_end_bytes = INT64_MAX;
    trace_.push_back({"setup", kNone, "", meter_.current(), meter_.peak(), {}});
    meter_.ResetPeak();
  }
  const size_t K = segments_.size();
  const int64_t micro_batches = opt_.micro_batches;
  double loss_value = 0;
  for (int64_t m = 0; m < micro_batches; ++m) {
    micro_ = m;
    {
      ProfileGuard scope(profiling_, Scope(Phase::kSetup));
      SelectMicroBatch(m);
    }
    // 1. Forward: segments 0..K-2 without autograd, the last with.
    where_.phase = "forward";
    for (size_t s = 0; s < K; ++s) {
      ProfileGuard scope(profiling_, Scope(Phase::kForward, kNone, static_cast<int32_t>(s)));
      Forward(s, /*grad=*/s + 1 == K, /*recompute=*/false);
    }
    loss_ = values_[g_.loss].defined() ? values_[g_.loss] : persistent_[g_.loss];
    values_[g_.loss].reset();
    double micro_loss = loss_.item<double>();
    loss_value += micro_loss / static_cast<double>(micro_batches);
    // Gradient accumulation: each micro-batch contributes its share of the batch's mean.
    if (micro_batches > 1) loss_ = at::mul(loss_, 1.0 / static_cast<double>(micro_batches));
    // 2. Backward of the last segment, then recompute + backward of the others in reverse.
    {
      std::lock_guard<std::mutex> lock(tracer.mu);
      tracer.active = tracing_ && m + 1 == micro_batches;
      tracer.phase = "backward";
      tracer.last_end_bytes = meter_.current();
      tracer.profiler = profiling_;
      tracer.micro_batch = static_cast<int32_t>(m);
    }
    // Shard gradients: the last micro-batch reduces each bucket as soon as it is complete.
    if (Distributed() && LazyGradients() && m + 1 == micro_batches) StartEarlyReduce();
    {
      ProfileGuard scope(profiling_, Scope(Phase::kBackward, kNone, static_cast<int32_t>(K - 1)));
      if (Selective()) StartSelectiveBackward();
      Backward(K - 1);
      if (Selective()) EndSelectiveBackward();
    }
    for (size_t s = K - 1; s-- > 0;) {
      where_.phase = "recompute";
      {
        std::lock_guard<std::mutex> lock(tracer.mu);
        tracer.active = false;
      }
      auto r0 = Clock::now();
      {
        ProfileGuard scope(profiling_, Scope(Phase::kRecompute, kNone, static_cast<int32_t>(s)));
        Forward(s, /*grad=*/true, /*recompute=*/true);
      }
      recompute_seconds_ += Seconds(r0, Clock::now());
      {
        std::lock_guard<std::mutex> lock(tracer.mu);
        tracer.active = tracing_ && m + 1 == micro_batches;
      }
      ProfileGuard scope(profiling_, Scope(Phase::kBackward, kNone, static_cast<int32_t>(s)));
      Backward(s);
    }
  }
  early_reduce_ = false;
  micro_ = 0;
  {
    ProfileGuard scope(profiling_, Scope(Phase::kSetup));
    SelectMicroBatch(0);
  }
  if (Distributed()) Communicate();
  StopObserving();
  int64_t peak = std::max(meter_.peak(), trace_peak_);
  int64_t reserved = meter_.reserved_peak();
  if (opt_.keep_gradients && step + 1 == opt_.steps) {
    // Copied outside the measured region.
    meter_.SetObserver(nullptr);
    meter_.ResetPeak();
    for (TensorId p : trained_) {
      if (!persistent_[p].grad().defined()) continue;  // shard gradients: only the shard is kept
      at::Tensor gr = persistent_[p].grad().detach().to(at::kCPU).to(at::kFloat).contiguous();
      const float* d = gr.data_ptr<float>();
      last_gradients_[g_.tensors[p].name] = std::vector<float>(d, d + gr.numel());
    }
    meter_.ResetPeak();
    meter_.SetObserver(profiling_);
  }
  {
    ProfileGuard scope(profiling_, Scope(Phase::kOptimizer));
    if (Distributed() && shard_ != ShardMode::kNone) ShardedOptimizerStep(step);
    else OptimizerStep(step);
  }
  peak = std::max({peak, meter_.peak(), trace_peak_});
  reserved = std::max(reserved, meter_.reserved_peak());
  exec::Synchronize(device_);  // the step time covers the device's work
  auto t1 = Clock::now();
  stats->step = step;
  stats->loss = loss_value;
  stats->seconds = Seconds(t0, t1);
  stats->recompute_seconds = recompute_seconds_;
  stats->comm_seconds = comm_seconds_;
  stats->peak_bytes = peak;
  stats->reserved_peak_bytes = device_.is_cuda() ? reserved : peak;
  if (profiling_) {
    meter_.SetObserver(nullptr);
    Profile p = profiling_->EndStep();
    profiling_ = nullptr;
    p.model = g_.model_path;
    p.device = device_.str() + " (" + ExecutorBackendDescription() + ")";
    p.step = step;
    p.batch = g_.batch * opt_.micro_batches;
    p.micro_batches = opt_.micro_batches;
    if (device_.is_cuda()) {
      p.cuda_allocated_peak_bytes = peak;
      p.cuda_reserved_peak_bytes = reserved;
    }
    if (!profiler_warning_.empty()) p.warnings.push_back(profiler_warning_);
    NameProfileNodes(g_, p);
    profile_ = std::move(p);
  }
  where_.phase = "between steps";
}

RunResult Trainer::Run() {
  RunResult result;
  if (opt_.steps < 1) throw MemplanError("--steps must be at least 1");
  const DistributedOptions& d = opt_.distributed;
  std::string rank_suffix;
  if (d.world_size > 1) {
    if (d.layout.devices != d.world_size) {
      throw MemplanError("rank " + std::to_string(d.rank) + ": WORLD_SIZE is " + std::to_string(d.world_size) +
                         " but the plan's layout has " + std::to_string(d.layout.devices) +
                         " devices; start as many ranks as the plan has devices, or re-plan with --devices " +
                         std::to_string(d.world_size));
    }
    if (d.layout.shard == ShardMode::kParameters && !opt_.recomputed.empty()) {
      throw MemplanError("a selective plan does not combine with shard parameters yet; re-plan with another "
                         "--strategy or --shard gradients");
    }
    shard_ = d.layout.shard;
    comm_ = exec::Communicator::Connect(d, opt_.device);
    row_offset_ = d.rank * opt_.micro_batches * g_.batch;
    rank_suffix = ", rank " + std::to_string(d.rank) + " of " + std::to_string(d.world_size) + " (" + comm_->backend() + ")";
  }
  meter_.SetLimit(opt_.memory_limit_bytes);
  try {
    Setup();
    // After Setup: it applies --threads, which the description names.
    result.device = device_.str() + " (" + ExecutorBackendDescription() + ")" + rank_suffix;
    MakeProfiler();
    result.persistent_bytes = meter_.current();
    for (int64_t s = 0; s < opt_.steps; ++s) {
      StepStats st;
      Step(s, &st);
      result.steps.push_back(st);
      result.max_peak_bytes = std::max(result.max_peak_bytes, st.peak_bytes);
      if (opt_.on_step) opt_.on_step(st);
    }
  } catch (const c10::Error& e) {
    StopObserving();
    meter_.SetObserver(nullptr);
    std::string what = e.what_without_backtrace();
    std::string first = what.substr(0, what.find('\n'));
    std::string at = where_.phase;
    if (where_.node != kNone) at += " of " + g_.nodes[where_.node].op_type + " node '" + g_.nodes[where_.node].name + "'";
    values_.clear();
    ckpt_.clear();
    ckpt_grad_.clear();
    loss_ = at::Tensor();
    int64_t peak = meter_.peak();
    meter_.SetLimit(0);
    if (exec::IsOutOfMemory(what)) {
      if (where_.phase == "setup") {
        throw MemplanError("out of memory in the setup: the parameters, gradients, optimizer state and batch alone need more "
                           "than the device holds (" + first + "); no plan can help: use a smaller --batch, another "
                           "--optimizer or more devices");
      }
      throw MemplanError("out of memory in the " + at + " (step " + std::to_string(step_ + 1) + "): " + first +
                         "; the step had reached " + FormatBytes(peak) +
                         ". Plan with a smaller budget (memplan plan MODEL --budget SIZE) or use a smaller --batch.");
    }
    throw MemplanError("LibTorch failed in the " + at + ": " + first);
  }
  meter_.SetLimit(0);
  result.measured_peak_bytes = result.steps.back().peak_bytes;
  result.trace = std::move(trace_);
  result.profile = std::move(profile_);
  result.gradients = std::move(last_gradients_);
  if (opt_.keep_gradients) {
    if (ShardParameters()) {
      for (size_t b = 0; b < buckets_.size(); ++b) GatherParameters(b);
    }
    for (TensorId p : trained_) {
      at::Tensor v = persistent_[p].detach().to(at::kCPU).to(at::kFloat).contiguous();
      const float* d = v.data_ptr<float>();
      result.parameters[g_.tensors[p].name] = std::vector<float>(d, d + v.numel());
    }
    for (const Tensor& t : g_.tensors) {
      if (t.category != TensorCategory::kConstant || t.producer != kNone || !IsFloating(t.dtype)) continue;
      at::Tensor v = persistent_[t.id].detach().to(at::kCPU).to(at::kFloat).contiguous();
      const float* d = v.data_ptr<float>();
      result.buffers[t.name] = std::vector<float>(d, d + v.numel());
    }
  }
  if (Distributed()) GatherRanks(&result);
  return result;
}

RankStats Trainer::OwnStats(const RunResult& r) const {
  RankStats s;
  s.rank = comm_ ? comm_->rank() : 0;
  s.measured_peak_bytes = r.measured_peak_bytes;
  s.max_peak_bytes = r.max_peak_bytes;
  s.persistent_bytes = r.persistent_bytes;
  for (const StepStats& st : r.steps) {
    s.step_seconds.push_back(st.seconds);
    s.comm_seconds.push_back(st.comm_seconds);
    s.loss.push_back(st.loss);
    s.peak_bytes.push_back(st.peak_bytes);
  }
  return s;
}

// Every rank's figures reach every rank (one all-gather of float64s, after the last step); the
// step's loss becomes the mean over the ranks.
void Trainer::GatherRanks(RunResult* r) {
  const RankStats own = OwnStats(*r);
  std::vector<double> figures = {static_cast<double>(own.measured_peak_bytes), static_cast<double>(own.max_peak_bytes),
                                 static_cast<double>(own.persistent_bytes)};
  for (size_t i = 0; i < own.loss.size(); ++i) {
    figures.insert(figures.end(), {own.step_seconds[i], own.comm_seconds[i], own.loss[i], static_cast<double>(own.peak_bytes[i])});
  }
  const std::vector<std::vector<double>> all = comm_->GatherFigures(figures, "the final gathering of the ranks' figures");
  r->ranks.clear();
  for (size_t k = 0; k < all.size(); ++k) {
    const std::vector<double>& f = all[k];
    RankStats s;
    s.rank = static_cast<int64_t>(k);
    s.measured_peak_bytes = static_cast<int64_t>(f[0]);
    s.max_peak_bytes = static_cast<int64_t>(f[1]);
    s.persistent_bytes = static_cast<int64_t>(f[2]);
    for (size_t i = 0; i < own.loss.size(); ++i) {
      s.step_seconds.push_back(f[3 + 4 * i]);
      s.comm_seconds.push_back(f[4 + 4 * i]);
      s.loss.push_back(f[5 + 4 * i]);
      s.peak_bytes.push_back(static_cast<int64_t>(f[6 + 4 * i]));
    }
    r->ranks.push_back(std::move(s));
  }
  for (size_t i = 0; i < r->steps.size(); ++i) {
    double sum = 0;
    for (const RankStats& s : r->ranks) sum += s.loss[i];
    r->steps[i].loss = sum / static_cast<double>(r->ranks.size());
  }
}

}  // namespace

RunResult RunTraining(const TrainingGraph& g, const RunOptions& options) {
  // Data-parallel ranks on "cuda" take the device of their local rank, as under torchrun.
  if (options.distributed.world_size > 1 && options.device == "cuda") {
    RunOptions o = options;
    o.device = "cuda:" + std::to_string(options.distributed.local_rank);
    Trainer trainer(g, o);
    return trainer.Run();
  }
  Trainer trainer(g, options);
  return trainer.Run();
}

}  // namespace memplan
