// Data parallelism in the trainer (plan.h): buckets and their flat buffers, shard gradients and
// parameters, the communication phase, the sharded optimizer, and gathering the ranks' figures.
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <climits>
#include <functional>

#include "memplan/planner.h"
#include "trainer.h"

namespace memplan::exec {

// The buckets of plan.h: every trained parameter becomes a view of its bucket's flat parameter
// buffer (padding zero); gradients and optimizer state are flat per bucket or per shard.
void Trainer::MakeBuckets() {
  c10::AutoGradMode no_grad(false);
  ParallelLayout layout = opt_.distributed.layout;
  layout.devices = comm_->world_size();
  const int64_t n = layout.devices;
  const int mult = OptimizerStateMultiplier(g_.optimizer);
  const bool sharded = shard_ != ShardMode::kNone;
  // FSDP2's gradient order (ParallelLayout::flat_gradient_at_reduce), where the planner's
  // schedule has it: shard gradients and parameters with one micro-batch.
  grads_at_reduce_ = LazyGradients() && FlatGradientAtReduce(layout) && opt_.micro_batches <= 1;
  for (const ParameterBucket& lb : ParameterBuckets(g_, layout)) {
    const size_t b = buckets_.size();
    FlatBucket fb;
    fb.layout = lb;
    const int64_t P = lb.elements, S = P / n;
    const at::TensorOptions o =
        at::TensorOptions().dtype(persistent_[lb.parameters[0]].scalar_type()).device(device_);
    fb.params = at::zeros({P}, o);
    if (LazyGradients()) {
      // Gradient shards set to None between steps: born at the reduce-scatter.
      if (layout.gradient_shards == GradientLifetime::kKept) fb.grad_shard = at::zeros({S}, o);
    } else
      fb.grads = at::zeros({P}, o);
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
        // FSDP2's order: AccumulateGrad keeps the parameter's own gradient (no hook, so that it
        // takes the incoming gradient without a copy) until the bucket's reduce-scatter.
        if (!grads_at_reduce_)
          persistent_[p].register_hook([this, b](const at::Tensor&) { EnsureFullGradient(b); });
        // Runs after AccumulateGrad: the schedule's events after its accumulation step.
        torch_compat::NodePtr acc = torch::autograd::impl::grad_accumulator(persistent_[p]);
        acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
            [this, p](const torch::autograd::variable_list& outputs,
                      const torch::autograd::variable_list&) {
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
  if (LazyGradients()) hook_owner_ = std::make_shared<Trainer*>(this);
}

// Shard gradients and parameters: the rank's schedule (AddDataParallelSteps adds its steps to
// the one-device schedule `s`, as the planner does), as events per pass.
void Trainer::FollowDataParallelSteps(Schedule& s) {
  ParallelLayout layout = opt_.distributed.layout;
  layout.devices = comm_->world_size();
  AddDataParallelSteps(s, g_, opt_.segments, opt_.micro_batches, layout);
  const size_t nn = g_.nodes.size(), ns = segments_.size();
  for (int k = 0; k < 2; ++k) {
    gathers_before_[k].assign(nn, {});
    releases_after_[k].assign(nn, {});
  }
  backward_events_.assign(ns, {});
  accumulation_steps_.assign(ns, {});
  accumulation_step_of_.assign(ns, {});
  comm_order_.clear();
  key_backward_.assign(nn, -1);
  // The backward ends with its last step; the communication steps after it are the
  // communication phase's (Communicate).
  size_t last_backward = 0;
  for (size_t i = 0; i < s.steps.size(); ++i) {
    if (s.steps[i].phase == Phase::kBackward) last_backward = i;
  }
  // Per backward step with a node, the next step with a node (its events' bound).
  std::vector<size_t> next_node(s.steps.size() + 1, s.steps.size());
  for (size_t i = s.steps.size(); i-- > 0;)
    next_node[i] = s.steps[i].node != kNone ? i : next_node[i + 1];
  // FSDP2's order (ParallelLayout::flat_gradient_at_reduce): the parameters' gradients a
  // backward step hands to AccumulateGrad are freed by their bucket's communication step
  // instead: per buffer, whether one frees it (a buffer of no bucket), and per tensor, whether
  // its handed-on gradient is such a buffer.
  std::vector<char> freed_at_reduce(s.buffers.size(), 0), handed_at_reduce(g_.tensors.size(), 0);
  for (const memplan::Step& st : s.steps) {
    if (st.phase != Phase::kCommunication) continue;
    for (BufferId b : st.frees) {
      const Buffer& buf = s.buffers[b];
      if (buf.bucket >= 0 || buf.tensor == kNone) continue;
      freed_at_reduce[b] = 1;
      if (buf.category == MemoryCategory::kActivationGradient) handed_at_reduce[buf.tensor] = 1;
    }
  }
  std::vector<int> gathers;  // buckets gathered before the next step with a node
  int segment = 0;
  for (size_t i = 0; i < s.steps.size(); ++i) {
    const memplan::Step& st = s.steps[i];
    const int64_t key = 2 * static_cast<int64_t>(i);
    for (BufferId b : st.allocs) {
      const Buffer& buf = s.buffers[b];
      if (buf.bucket >= 0 && buf.category == MemoryCategory::kParameter)
        gathers.push_back(buf.bucket);
    }
    if (st.node != kNone) segment = segment_of_[st.node];
    const bool forward = st.phase == Phase::kForward || st.phase == Phase::kLoss;
    const bool recompute = st.phase == Phase::kRecompute;
    if (st.node != kNone && !gathers.empty()) {
      if (forward || recompute) {
        gathers_before_[recompute][st.node] = gathers;
      } else {
        for (int b : gathers) backward_events_[segment].push_back({key, b, EventKind::kGather});
      }
      gathers.clear();
    }
    const bool backward = st.node != kNone && st.phase == Phase::kBackward;
    if (backward && key_backward_[st.node] < 0) key_backward_[st.node] = key;
    if (backward) {
      // The parameters whose gradients this step hands to AccumulateGrad: those whose
      // gradient temporary it frees (FSDP2's order: or allocates, a communication step freeing
      // it), and those a view op on a parameter (Transpose of a weight) hands its incoming
      // gradient on to, which it frees (or a communication step does). A parameter accumulates
      // once per backward call, in the last such step of the call.
      const Node& n = g_.nodes[st.node];
      std::vector<TensorId> accumulated;
      auto hands_on = [&](TensorId t) {
        if (!n.gradient_passes_through ||
            std::find(n.outputs.begin(), n.outputs.end(), t) == n.outputs.end())
          return;
        for (TensorId in : n.inputs) {
          if (in != kNone && bucket_of_[in] >= 0) accumulated.push_back(in);
        }
      };
      for (BufferId b : st.frees) {
        const Buffer& buf = s.buffers[b];
        if (buf.tensor == kNone) continue;
        if (buf.category == MemoryCategory::kTemporary && bucket_of_[buf.tensor] >= 0)
          accumulated.push_back(buf.tensor);
        if (buf.category == MemoryCategory::kActivationGradient) hands_on(buf.tensor);
      }
      for (BufferId b : st.allocs) {
        const Buffer& buf = s.buffers[b];
        if (freed_at_reduce[b] && buf.category == MemoryCategory::kTemporary &&
            bucket_of_[buf.tensor] >= 0)
          accumulated.push_back(buf.tensor);
      }
      for (TensorId o : n.outputs) {
        if (o != kNone && handed_at_reduce[o]) hands_on(o);
      }
      if (!accumulated.empty()) {
        std::vector<AccumulationStep>& steps = accumulation_steps_[segment];
        AccumulationStep a;
        a.bound = 2 * static_cast<int64_t>(next_node[i + 1]) - 1;
        steps.push_back(a);
        for (TensorId p : accumulated)
          accumulation_step_of_[segment][p] = static_cast<int>(steps.size()) - 1;
      }
    }
    for (BufferId b : st.frees) {
      const Buffer& buf = s.buffers[b];
      if (buf.bucket < 0) continue;
      if (buf.category == MemoryCategory::kGradient) {  // a reduce-scatter
        if (i > last_backward)
          comm_order_.push_back(buf.bucket);
        else
          backward_events_[segment].push_back({key + 1, buf.bucket, EventKind::kReduce});
      } else if (st.node != kNone && (forward || recompute)) {
        releases_after_[recompute][st.node].push_back(buf.bucket);
      } else {
        backward_events_[segment].push_back({key + 1, buf.bucket, EventKind::kRelease});
      }
    }
  }
  for (size_t k = 0; k < ns; ++k) {
    for (const auto& [p, a] : accumulation_step_of_[k]) ++accumulation_steps_[k][a].members;
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
  comm_->AllGather(fb.gather_target, fb.param_shard,
                   "the all-gather of bucket " + std::to_string(b) + "'s parameters");
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

// Shard parameters: the backward of `n` (the autograd functions of its outputs, which the engine
// runs before the rest of the node's backward, in the schedule's order) first carries out the
// schedule's releases and gathers up to its step.
void Trainer::HookBackwardGathers(const Node& n) {
  if (key_backward_[n.id] < 0) return;
  const int64_t key = key_backward_[n.id];
  BeforeBackwardOf(n, [key](Trainer& t) { t.BackwardReached(key); });
}

// Shard gradients and parameters: a segment's backward call starts at the first of its
// schedule events; none of its accumulation steps has run.
void Trainer::StartBackwardCall(size_t segment) {
  backward_call_ = segment;
  backward_cursor_ = 0;
  for (AccumulationStep& a : accumulation_steps_[segment]) a.left = a.members;
}

// The schedule's events of the current backward call up to `key`; INT64_MAX: the releases and
// reduce-scatters left when the call ends.
void Trainer::BackwardReached(int64_t key) {
  const std::vector<BucketEvent>& events = backward_events_[backward_call_];
  for (; backward_cursor_ < events.size() && events[backward_cursor_].key <= key;
       ++backward_cursor_) {
    const BucketEvent& e = events[backward_cursor_];
    const size_t b = static_cast<size_t>(e.bucket);
    switch (e.kind) {
      case EventKind::kGather:
        if (key != INT64_MAX) GatherParameters(b);
        break;
      case EventKind::kRelease:
        ReleaseParameters(b);
        break;
      case EventKind::kReduce:
        if (!buckets_[b].reduced) {
          auto t0 = Clock::now();
          ReduceScatterBucket(b);
          comm_seconds_ += Seconds(t0, Clock::now());
        }
        break;
    }
  }
}

// Shard gradients: bucket b's full flat gradient (zeroed), and its parameters' .grad views of
// it, from the first backward step of the step that produces one of their gradients. FSDP2's
// order: allocated by the reduce-scatter, each parameter's own gradient copied in.
void Trainer::EnsureFullGradient(size_t b) {
  FlatBucket& fb = buckets_[b];
  if (fb.grads.defined()) return;
  if (fb.reduced) {
    throw MemplanError("internal: a gradient of bucket " + std::to_string(b) +
                       "'s parameters arrived after the bucket's reduce-scatter (plan.h: a bucket "
                       "is reduced after "
                       "the last backward call that reads its parameters)");
  }
  c10::AutoGradMode no_grad(false);
  fb.grads = at::zeros({fb.layout.elements}, fb.params.options());
  for (size_t k = 0; k < fb.layout.parameters.size(); ++k) {
    at::Tensor& w = persistent_[fb.layout.parameters[k]];
    at::Tensor view = fb.grads.narrow(0, fb.layout.offsets[k], w.numel()).view(w.sizes());
    if (!grads_at_reduce_)
      w.mutable_grad() = view;
    else if (w.grad().defined())
      view.copy_(w.grad());
  }
}

// AccumulateGrad's post hook (the autograd engine's thread): once the last parameter of its
// accumulation step is in, the schedule's events up to the step's bound (a reduce-scatter,
// the release of a gathered bucket). Every rank runs the same graph in the same order, so the
// collectives match.
void Trainer::Accumulated(TensorId p) {
  if (grads_at_reduce_ && buckets_[static_cast<size_t>(bucket_of_[p])].reduced) {
    throw MemplanError("internal: parameter " + g_.tensors[p].name +
                       " got its gradient after its bucket's reduce-scatter (plan.h: a bucket is "
                       "reduced after the last backward call that reads its parameters)");
  }
  const auto& of = accumulation_step_of_[backward_call_];
  const auto it = of.find(p);
  if (it == of.end()) return;
  AccumulationStep& a = accumulation_steps_[backward_call_][it->second];
  if (a.left > 0 && --a.left == 0) BackwardReached(a.bound);
}

// Shard gradients: reduce-scatter (sum) of bucket b's flat gradient into the rank's shard, / N,
// then the flat gradient is freed. As the schedule's communication step: the flat gradient
// (FSDP2's order: allocated here, the parameters' gradients copied in) and the shard are
// allocated, then the parameters' gradients freed.
void Trainer::ReduceScatterBucket(size_t b) {
  c10::AutoGradMode no_grad(false);
  FlatBucket& fb = buckets_[b];
  EnsureFullGradient(b);  // no parameter of the bucket got a gradient this step: zeros
  if (!fb.grad_shard.defined())
    fb.grad_shard = at::empty({fb.layout.elements / comm_->world_size()}, fb.grads.options());
  for (TensorId p : fb.layout.parameters) persistent_[p].mutable_grad().reset();
  comm_->ReduceScatterSum(fb.grad_shard, fb.grads,
                          "the reduce-scatter of bucket " + std::to_string(b));
  fb.grad_shard.div_(static_cast<double>(comm_->world_size()));
  fb.grads.reset();
  fb.reduced = true;
}

// The communication phase (plan.h): per bucket, in bucket order, the gradient all-reduce (or,
// for a bucket of shard gradients the backward did not reduce, the reduce-scatter into the
// rank's shard, in the order of the schedule's communication steps), averaged over the ranks.
void Trainer::Communicate() {
  where_.phase = "communication";
  where_.node = kNone;
  c10::AutoGradMode no_grad(false);
  const double n = static_cast<double>(comm_->world_size());
  auto t0 = Clock::now();
  // Shard gradients and parameters: the schedule's communication steps first (the buckets
  // reduced in the backward are skipped).
  std::vector<int> order = comm_order_;
  for (size_t b = 0; b < buckets_.size(); ++b) order.push_back(static_cast<int>(b));
  for (int bi : order) {
    const size_t b = static_cast<size_t>(bi);
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
  // zero_grad() sets the gradient shards to None (ParallelLayout::gradient_shards).
  if (opt_.distributed.layout.gradient_shards == GradientLifetime::kNone) {
    for (FlatBucket& fb : buckets_) fb.grad_shard.reset();
  }
  NoteTrace("optimizer", kNone);
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
  std::vector<double> figures = {static_cast<double>(own.measured_peak_bytes),
                                 static_cast<double>(own.max_peak_bytes),
                                 static_cast<double>(own.persistent_bytes)};
  for (size_t i = 0; i < own.loss.size(); ++i) {
    figures.insert(figures.end(), {own.step_seconds[i], own.comm_seconds[i], own.loss[i],
                                   static_cast<double>(own.peak_bytes[i])});
  }
  const std::vector<std::vector<double>> all =
      comm_->GatherFigures(figures, "the final gathering of the ranks' figures");
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

}  // namespace memplan::exec
