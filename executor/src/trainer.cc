// The training step on LibTorch: setup (weights, optimizer state, batch), forward, the loss,
// backward, the optimizer, and plan execution with recompute. When a value is dropped is not
// decided here: the executor carries out the planner's schedule (BuildSegmentedSchedule).
#include "trainer.h"

#include <ATen/Parallel.h>
#include <ATen/SequenceNumber.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <sstream>

#include "initial_values.h"
#include "memplan/device_name.h"
#include "memplan/onnx_convert.h"
#include "memplan/planner.h"
#include "memplan/storage_facts.h"
#include "tensor_io.h"

namespace memplan {
namespace exec {

namespace {
uint64_t Mix(uint64_t x) { return exec::SplitMix64(x); }

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}
}  // namespace

c10::Device ParseDevice(const std::string& s) {
  const DeviceName name = ParseDeviceName(s);
  if (!name.cuda) return c10::Device(c10::kCPU);
  if (!ExecutorHasCuda()) {
    throw MemplanError("--device " + s +
                       ": this memplan was built against a LibTorch without CUDA (" +
                       ExecutorBackendDescription() +
                       "); build it against the CUDA torch wheel (make, scripts/install-deps.sh)");
  }
  const int index = std::max(name.index, 0);
  int count = exec::CudaDeviceCount();
  if (count == 0) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    throw MemplanError("--device " + s + ": no CUDA device is visible (memplan has CUDA " +
                       exec::CudaBuildVersion() + "; CUDA_VISIBLE_DEVICES=" +
                       (visible ? "'" + std::string(visible) + "'" : "unset") +
                       "): check the GPU driver (nvidia-smi), or run with --device cpu");
  }
  if (index >= count) {
    throw MemplanError("--device " + s + ": only " + std::to_string(count) +
                       " CUDA device(s) are visible");
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

at::Tensor Trainer::Value(TensorId id) const {
  if (persistent_[id].defined()) return persistent_[id];
  if (values_[id].defined()) return values_[id];
  if (ckpt_[id].defined()) return ckpt_[id];
  throw MemplanError("internal error: tensor '" + g_.tensors[id].name +
                     "' is read after it was released");
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
        for (TensorId o : n.outputs)
          if (o != kNone) frontier.push_back(o);
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
                         std::to_string(opt_.segments.size()) +
                         " segments, which memplan does not combine; re-plan with `memplan plan`");
    }
    dropped_.assign(g_.tensors.size(), false);
    for (TensorId t : opt_.recomputed) {
      if (t < 0 || t >= static_cast<TensorId>(g_.tensors.size()))
        throw MemplanError("the plan recomputes a tensor the model lacks");
      dropped_[t] = true;
    }
    offloaded_.assign(g_.tensors.size(), false);
    for (const OffloadChoice& c : opt_.offloaded) {
      if (c.tensor < 0 || c.tensor >= static_cast<TensorId>(g_.tensors.size()))
        throw MemplanError("the plan offloads a tensor the model lacks");
      offloaded_[c.tensor] = true;
    }
    exec::InstallSavedTensorEngine();
    bridge_ = std::make_shared<SavedTensorBridge>(this);
  }
  if (Offloads()) {
    link_ = std::make_unique<CopyLink>(device_, opt_.emulate_link ? opt_.link : LinkRates{});
    host_memory_ = &HostMemory::For(device_);
    if (!hook_owner_) hook_owner_ = std::make_shared<Trainer*>(this);
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
      throw MemplanError(g_.model_path + ": initializer '" + t.name +
                         "' has a shape that does not match the graph");
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
    // Gradients set to None between steps are born in the first step's backward.
    if (g_.grads == GradientLifetime::kKept)
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
      throw MemplanError("--input " + name + "=" + file + ": the model has no input named '" +
                         name + "'");
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
                           " splits every input along its first dimension, but input '" + t.name +
                           "' has shape " + ShapeString(t.shape) + " at batch " +
                           std::to_string(g_.batch));
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
        throw MemplanError("--input " + t.name + "=" + file->second + ": the file holds a " +
                           got.str() + " tensor; the model wants " + DTypeName(t.dtype) +
                           ShapeString(t.shape) + " at --batch " +
                           std::to_string(g_.batch * k * ranks));
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
    if (k > 1)
      full_batch_[i] = v.to(device_).contiguous();
    else
      persistent_[i] = v.to(device_).contiguous();
  }
}

void Trainer::SelectMicroBatch(int64_t m) {
  micro_ = m;
  if (opt_.micro_batches <= 1) return;
  for (size_t i = 0; i < full_batch_.size(); ++i) {
    if (full_batch_[i].defined())
      persistent_[i] = full_batch_[i].narrow(0, m * g_.batch, g_.batch);  // a view
  }
}

void Trainer::FollowSchedule() {
  const size_t nt = g_.tensors.size(), nn = g_.nodes.size(), ns = segments_.size();
  segment_of_.assign(nn, 0);
  for (size_t s = 0; s < ns; ++s)
    for (NodeId n : segments_[s]) segment_of_[n] = static_cast<int>(s);
  // Selective plans: BuildSelectiveSchedule validates the tensors (a view, the loss's output).
  Schedule schedule = Selective() ? BuildSelectiveSchedule(g_, ComputeGraphFacts(g_),
                                                           opt_.recomputed, opt_.offloaded)
                                  : BuildSegmentedSchedule(g_, opt_.segments);
  // The rank's schedule: its gathers, releases and reduce-scatters.
  if (Distributed() && LazyGradients()) FollowDataParallelSteps(schedule);
  // A buffer holds one storage; the executor holds a value per tensor sharing it. The loss is
  // the backward's root, held by Step() itself.
  sharing_.assign(nt, {});
  std::vector<std::vector<TensorId>>& sharing = sharing_;
  for (const Tensor& t : g_.tensors) {
    if (t.is_persistent() || t.producer == kNone || t.storage == g_.tensors[g_.loss].storage)
      continue;
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
  if (Offloads()) FollowOffloadSteps(schedule);
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
  // Per step, its segment (a step without a node: that of the step before it).
  std::vector<int> step_segment(schedule.steps.size(), 0);
  for (size_t i = 0; i < schedule.steps.size(); ++i) {
    const NodeId node = schedule.steps[i].node;
    step_segment[i] = node != kNone ? segment_of_[node] : (i > 0 ? step_segment[i - 1] : 0);
  }
  for (size_t i = 0; i < schedule.steps.size(); ++i) {
    const memplan::Step& step = schedule.steps[i];
    // Views of parameters and constants own no buffer: the schedule names them where they are
    // dropped. One a later segment's backward drops is kept across segments as a checkpoint.
    if (step.phase == Phase::kBackward) {
      for (TensorId v : step.dropped_views) {
        checkpoints_out_[segment_of_[g_.tensors[v].producer]].push_back(v);
        checkpoints_free_[step_segment[i]].push_back(v);
      }
    } else if (step.node != kNone) {
      const bool forward = step.phase == Phase::kForward || step.phase == Phase::kLoss;
      for (TensorId v : step.dropped_views)
        (forward ? release_forward_ : release_recompute_)[step.node].push_back(v);
    }
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
      for (BufferId b : *list)
        for (TensorId t : tensors_of(b)) release.push_back(t);
    }
    // A checkpoint: allocated in the forward of an earlier segment, freed in a later phase.
    const int k = segment_of_[step.node];
    if (!forward || k + 1 == static_cast<int>(ns)) continue;
    for (BufferId b : step.allocs) {
      if (tensors_of(b).empty() || freed_at[b] == schedule.steps.size()) continue;
      const Phase free_phase = schedule.steps[freed_at[b]].phase;
      if (free_phase == Phase::kForward || free_phase == Phase::kLoss) continue;
      for (TensorId t : tensors_of(b)) {
        if (segment_of_[g_.tensors[t].producer] != k) continue;  // a later segment's view of it
        checkpoints_out_[k].push_back(t);
        checkpoints_free_[step_segment[freed_at[b]]].push_back(t);
      }
    }
  }
}

void Trainer::SeedFor(int64_t step, NodeId node) {
  uint64_t seed = Mix(Mix(opt_.seed) ^
                      Mix(static_cast<uint64_t>(step) * 0x10001ULL + static_cast<uint64_t>(node)));
  auto gen = at::globalContext().defaultGenerator(device_);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_current_seed(seed);
}

void Trainer::NoteTrace(const std::string& phase, NodeId node) {
  if (!tracing_) return;
  trace_.push_back({phase, node, "", meter_.current(), meter_.peak(), {}});
  if (node != kNone) {
    for (size_t t = 0; t < values_.size(); ++t) {
      if (values_[t].defined() || ckpt_[t].defined())
        trace_.back().held.push_back(static_cast<TensorId>(t));
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
  call->random_seed = Mix(Mix(opt_.seed) ^ Mix(static_cast<uint64_t>(step_) * 0x10001ULL +
                                               static_cast<uint64_t>(n.id)));
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
    if (!recompute) AfterForwardStep(n);
    return;
  }
  OpCall call = CallFor(n, /*update_running_stats=*/!recompute);
  if (ShardParameters()) {
    for (int b : gathers_before_[recompute][n.id]) GatherParameters(static_cast<size_t>(b));
  }
  for (TensorId i : n.inputs) call.in.push_back(i == kNone ? at::Tensor() : Value(i));
  const bool map_backward = tracing_ || profiling_;
  uint64_t seq0 = map_backward ? at::sequence_number::peek() : 0;
  const Phase phase = recompute
                          ? Phase::kRecompute
                          : (n.id == g_.tensors[g_.loss].producer ? Phase::kLoss : Phase::kForward);
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
      throw MemplanError(n.op_type + " node '" + n.name + "': output " + std::to_string(k) + " ('" +
                         g_.tensors[o].name +
                         "') is not produced by the executor's implementation");
    }
    // Kernels build small helper tensors on the CPU; keep every value on the run's device.
    if (outs[k].device() != device_) outs[k] = outs[k].to(device_);
    values_[o] = std::move(outs[k]);
  }
  outs.clear();
  if (ShardParameters()) {
    if (at::GradMode::is_enabled()) HookBackwardGathers(n);
    for (int b : releases_after_[recompute][n.id]) ReleaseParameters(static_cast<size_t>(b));
  }
  if (Offloads() && !recompute) ProducedOffloaded(n);
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
  if (!recompute) AfterForwardStep(n);
}

void Trainer::Forward(size_t segment, bool grad, bool recompute) {
  c10::AutoGradMode mode(grad);
  // Selective plans: what autograd saves goes through the trainer (saved_tensors.h).
  std::optional<exec::SaveTensorsThrough> hooks;
  if (Selective() && grad && !recompute) hooks.emplace(bridge_);
  for (NodeId id : segments_[segment]) {
    RunNode(g_.nodes[id], recompute);
    NoteTrace(recompute ? "recompute" : (id == g_.tensors[g_.loss].producer ? "loss" : "forward"),
              id);
  }
  if (!grad) {
    // Store the checkpoints this segment produced; those a gradient must reach are leaves.
    for (TensorId c : checkpoints_out_[segment]) {
      at::Tensor v = std::move(values_[c]);
      if (g_.tensors[c].has_gradient && at::isFloatingType(v.scalar_type()))
        v = v.detach().requires_grad_(true);
      ckpt_[c] = std::move(v);
    }
  }
}

// `fn` runs before the backward of `n`: a pre-hook on the autograd functions of its outputs, which
// the engine runs before the rest of the node's backward. Hooks left in a graph that outlives
// this trainer find nobody.
void Trainer::BeforeBackwardOf(const Node& n, std::function<void(Trainer&)> fn) {
  std::set<torch::autograd::Node*> hooked;
  for (TensorId o : n.outputs) {
    if (o == kNone || !values_[o].defined()) continue;
    const auto grad_fn = values_[o].grad_fn();
    if (!grad_fn || !hooked.insert(grad_fn.get()).second) continue;
    std::weak_ptr<Trainer*> owner = hook_owner_;
    grad_fn->add_pre_hook(std::make_unique<PreHook>([owner, fn] {
      std::shared_ptr<Trainer*> t = owner.lock();
      if (t && *t) fn(**t);
    }));
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
  if (Distributed() && LazyGradients()) StartBackwardCall(segment);
  if (!roots.empty()) {
    torch::autograd::backward(roots, grads, /*retain_graph=*/false, /*create_graph=*/false);
  }
  roots.clear();
  grads.clear();
  // The call's last releases and reduce-scatters.
  if (Distributed() && LazyGradients()) BackwardReached(INT64_MAX);
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
    if (!w.grad().defined())
      continue;  // no gradient reached it this step: skipped, as torch.optim does
    Update(w, w.grad(), state1_[p], state2_[p], step);
  }
  NoteTrace("optimizer", kNone);
}

// One optimizer update of `w` (a parameter, or a rank's shard of a bucket) in place.
void Trainer::Update(at::Tensor& w, const at::Tensor& gr, at::Tensor& s1, at::Tensor& s2,
                     int64_t step) {
  const double lr = opt_.learning_rate;
  switch (g_.optimizer) {
    case Optimizer::kSgd:
      w.add_(gr, -lr);
      break;
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
  if (host_memory_) host_memory_->ResetPeak();
  if (link_) link_->StartStep();
  trace_peak_ = 0;
  profiling_ = profiler_ && step == (opt_.profile_step < 0 ? opt_.steps - 1 : opt_.profile_step)
                   ? profiler_.get()
                   : nullptr;
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
      if (g_.grads == GradientLifetime::kKept) {
        for (TensorId p : trained_) persistent_[p].mutable_grad().zero_();
      }
    } else if (!LazyGradients()) {
      for (FlatBucket& b : buckets_) b.grads.zero_();
    } else {  // shard gradients: the flat gradients are allocated by the backward or the
              // reduce-scatter (EnsureFullGradient)
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
    if (Distributed() && shard_ != ShardMode::kNone)
      ShardedOptimizerStep(step);
    else
      OptimizerStep(step);
    // optimizer.zero_grad() at its default: the gradients die with the step. (Data-parallel
    // ranks keep their buckets' gradients, as DDP's reducer does: their graph is kept.)
    if (!Distributed() && g_.grads == GradientLifetime::kNone) {
      for (TensorId p : trained_) persistent_[p].mutable_grad().reset();
    }
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
  if (host_memory_) stats->host_peak_bytes = host_memory_->peak();
  if (link_) stats->stall_seconds = link_->stall_seconds();
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
      throw MemplanError(
          "rank " + std::to_string(d.rank) + ": WORLD_SIZE is " + std::to_string(d.world_size) +
          " but the plan's layout has " + std::to_string(d.layout.devices) +
          " devices; start as many ranks as the plan has devices, or re-plan with --devices " +
          std::to_string(d.world_size));
    }
    if (d.layout.shard == ShardMode::kParameters && !opt_.recomputed.empty()) {
      throw MemplanError(
          "a selective plan does not combine with shard parameters yet; re-plan with another "
          "--strategy or --shard gradients");
    }
    shard_ = d.layout.shard;
    comm_ = exec::Communicator::Connect(d, opt_.device);
    row_offset_ = d.rank * opt_.micro_batches * g_.batch;
    rank_suffix = ", rank " + std::to_string(d.rank) + " of " + std::to_string(d.world_size) +
                  " (" + comm_->backend() + ")";
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
    if (where_.node != kNone)
      at += " of " + g_.nodes[where_.node].op_type + " node '" + g_.nodes[where_.node].name + "'";
    values_.clear();
    ckpt_.clear();
    ckpt_grad_.clear();
    loss_ = at::Tensor();
    int64_t peak = meter_.peak();
    meter_.SetLimit(0);
    if (exec::IsOutOfMemory(what)) {
      if (where_.phase == "setup") {
        throw MemplanError(
            "out of memory in the setup: the parameters, gradients, optimizer state and batch "
            "alone need more "
            "than the device holds (" +
            first +
            "); no plan can help: use a smaller --batch, another "
            "--optimizer or more devices");
      }
      throw MemplanError("out of memory in the " + at + " (step " + std::to_string(step_ + 1) +
                         "): " + first + "; the step had reached " + FormatBytes(peak) +
                         ". Plan with a smaller budget (memplan plan MODEL --budget SIZE) or use a "
                         "smaller --batch.");
    }
    throw MemplanError("LibTorch failed in the " + at + ": " + first);
  }
  meter_.SetLimit(0);
  result.measured_peak_bytes = result.steps.back().peak_bytes;
  result.measured_host_peak_bytes = result.steps.back().host_peak_bytes;
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
      if (t.category != TensorCategory::kConstant || t.producer != kNone || !IsFloating(t.dtype))
        continue;
      at::Tensor v = persistent_[t.id].detach().to(at::kCPU).to(at::kFloat).contiguous();
      const float* d = v.data_ptr<float>();
      result.buffers[t.name] = std::vector<float>(d, d + v.numel());
    }
  }
  if (Distributed()) GatherRanks(&result);
  return result;
}

}  // namespace exec

RunResult RunTraining(const TrainingGraph& g, const RunOptions& options) {
  // Data-parallel ranks on "cuda" take the device of their local rank, as under torchrun.
  if (options.distributed.world_size > 1 && options.device == "cuda") {
    RunOptions o = options;
    o.device = "cuda:" + std::to_string(options.distributed.local_rank);
    exec::Trainer trainer(g, o);
    return trainer.Run();
  }
  exec::Trainer trainer(g, options);
  return trainer.Run();
}

}  // namespace memplan
