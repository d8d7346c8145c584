// Data parallelism (plan.h's contract): buckets, per-rank persistent memory, the
// communication phase and the sharded optimizer as a rewrite of a one-device plan's schedule.
#include <algorithm>
#include <climits>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "memplan/planner.h"

namespace memplan {

const char* ShardModeName(ShardMode m) {
  switch (m) {
    case ShardMode::kNone:
      return "none";
    case ShardMode::kOptimizer:
      return "optimizer";
    case ShardMode::kGradients:
      return "gradients";
    case ShardMode::kParameters:
      return "parameters";
  }
  return "none";
}

ShardMode ParseShardMode(const std::string& name) {
  for (ShardMode m :
       {ShardMode::kNone, ShardMode::kOptimizer, ShardMode::kGradients, ShardMode::kParameters}) {
    if (name == ShardModeName(m)) return m;
  }
  throw MemplanError("unknown shard mode '" + PrintableText(name) +
                     "' (one of none, optimizer, gradients, parameters)");
}

const char* ShardRuntimeName(ShardRuntime r) {
  return r == ShardRuntime::kFsdp2 ? "fsdp2" : "memplan";
}

ShardRuntime ParseShardRuntime(const std::string& name) {
  for (ShardRuntime r : {ShardRuntime::kMemplan, ShardRuntime::kFsdp2}) {
    if (name == ShardRuntimeName(r)) return r;
  }
  throw MemplanError("unknown sharding runtime '" + PrintableText(name) +
                     "' (one of memplan, fsdp2)");
}

bool FlatGradientAtReduce(const ParallelLayout& layout) {
  if (layout.shard != ShardMode::kGradients && layout.shard != ShardMode::kParameters) return false;
  return layout.flat_gradient_at_reduce.value_or(layout.shard == ShardMode::kParameters);
}

int64_t ParameterBucket::shard_elements() const {
  return devices > 0 ? elements / devices : elements;
}

namespace {

void CheckLayout(const ParallelLayout& layout) {
  if (layout.devices < 1)
    throw MemplanError("the device count must be at least 1 (got " +
                       std::to_string(layout.devices) + ")");
  if (layout.bucket_bytes < 1)
    throw MemplanError("the bucket size must be at least 1 byte (got " +
                       std::to_string(layout.bucket_bytes) + ")");
  if (layout.runtime == ShardRuntime::kFsdp2 &&
      (layout.shard != ShardMode::kParameters || !FlatGradientAtReduce(layout))) {
    throw MemplanError(
        "the fsdp2 runtime predicts fully_shard, which shards parameters: plan it with --shard "
        "parameters (and FSDP2's gradient order)");
  }
}

// A temporary that `step` allocates and frees: alive during the step's work only.
void AddTransient(Schedule& s, Step& step, const std::string& name, int64_t bytes) {
  const BufferId t = s.AddBuffer({name, bytes, MemoryCategory::kTemporary, kNone});
  step.allocs.push_back(t);
  step.frees.push_back(t);
}

// A communication step that only frees `b`.
Step FreeStep(BufferId b) {
  Step f;
  f.phase = Phase::kCommunication;
  f.frees.push_back(b);
  return f;
}

int64_t CheckedMul(int64_t a, int64_t b, const std::string& what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw MemplanError(what + " needs more than 2^63 bytes");
  return r;
}

}  // namespace

// Shard gradients and parameters: a parameter's unit, as FSDP2 wraps modules, is the module
// scope the exporter keeps in the name of the first node reading it ("/layer1/layer1.0/conv1/Conv"
// -> "/layer1/layer1.0/conv1"; "/Add" -> "", the root's own parameters). A node name without a
// scope, or a parameter nothing reads, makes the parameter a unit of its own.
std::string ModuleUnitOf(const TrainingGraph& g, TensorId pid) {
  const Tensor& t = g.tensors[pid];
  if (t.consumers.empty()) return "\x01" + t.name;
  const std::string& node = g.nodes[*std::min_element(t.consumers.begin(), t.consumers.end())].name;
  const size_t slash = node.rfind('/');
  if (slash == std::string::npos) return "\x01" + t.name;
  return node.substr(0, slash);
}

namespace {

// The units of g's trained parameters in the order of their first reader (the forward's), each
// with its parameters in g.parameters order. Without module units, one unit per parameter in
// g.parameters order.
std::vector<std::vector<TensorId>> TrainedUnits(const TrainingGraph& g, bool module_units) {
  std::vector<std::vector<TensorId>> units;
  std::vector<std::pair<NodeId, size_t>> order;  // first reader, unit
  std::unordered_map<std::string, size_t> unit_of;
  for (TensorId pid : g.parameters) {
    const Tensor& t = g.tensors[pid];
    if (!t.has_gradient) continue;
    if (!module_units) {
      units.push_back({pid});
      continue;
    }
    const NodeId first = t.consumers.empty()
                             ? static_cast<NodeId>(g.nodes.size())
                             : *std::min_element(t.consumers.begin(), t.consumers.end());
    auto [it, added] = unit_of.emplace(ModuleUnitOf(g, pid), units.size());
    if (added) {
      units.emplace_back();
      order.push_back({first, it->second});
    } else {
      std::pair<NodeId, size_t>& o = order[it->second];
      o.first = std::min(o.first, first);
    }
    units[it->second].push_back(pid);
  }
  if (!module_units) return units;
  std::stable_sort(order.begin(), order.end());
  std::vector<std::vector<TensorId>> sorted;
  for (const auto& o : order) sorted.push_back(std::move(units[o.second]));
  return sorted;
}

}  // namespace

std::vector<ParameterBucket> ParameterBuckets(const TrainingGraph& g,
                                              const ParallelLayout& layout) {
  CheckLayout(layout);
  // Shard gradients and parameters group whole module units (FSDP2), consecutive units while
  // they fit the bucket size (a unit larger than it is a bucket of its own); none and optimizer
  // group parameters as DDP does, closing a bucket once it holds the bucket size.
  const bool module_units =
      layout.shard == ShardMode::kGradients || layout.shard == ShardMode::kParameters;
  std::vector<ParameterBucket> out;
  DType dtype = DType::kUndefined;
  TensorId first = kNone;
  int64_t held = 0;  // unpadded bytes in the current bucket
  for (const std::vector<TensorId>& unit : TrainedUnits(g, module_units)) {
    int64_t unit_bytes = 0;
    for (TensorId pid : unit) {
      const Tensor& t = g.tensors[pid];
      if (first == kNone) {
        dtype = t.dtype;
        first = pid;
      } else if (t.dtype != dtype) {
        throw MemplanError(g.model_path + ": trained parameters '" + g.tensors[first].name + "' (" +
                           DTypeName(dtype) + ") and '" + t.name + "' (" + DTypeName(t.dtype) +
                           ") differ in dtype; data-parallel buckets need one dtype (export the "
                           "model in one precision)");
      }
      unit_bytes += CheckedMul(t.numel(), DTypeSize(t.dtype), "parameter '" + t.name + "'");
    }
    const bool full = module_units ? held > 0 && held + unit_bytes > layout.bucket_bytes
                                   : held >= layout.bucket_bytes;
    if (out.empty() || full) {
      out.emplace_back();
      held = 0;
    }
    ParameterBucket& b = out.back();
    for (TensorId pid : unit) {
      b.parameters.push_back(pid);
      b.offsets.push_back(b.elements);
      b.elements += g.tensors[pid].numel();
    }
    held += unit_bytes;
  }
  const int64_t n = layout.devices;
  const int64_t elem = first == kNone ? 0 : DTypeSize(dtype);
  for (ParameterBucket& b : out) {
    b.devices = n;
    b.elements = (b.elements + n - 1) / n * n;  // padding: every rank owns an equal shard
    b.bytes = CheckedMul(b.elements, elem, "a parameter bucket");
  }
  return out;
}

RankPersistent RankPersistentBytes(const TrainingGraph& g, const ParallelLayout& layout) {
  RankPersistent r;
  const int64_t mult = OptimizerStateMultiplier(g.optimizer);
  for (const ParameterBucket& b : ParameterBuckets(g, layout)) {
    const int64_t shard = b.bytes / b.devices;
    const bool sharded = layout.shard != ShardMode::kNone && layout.devices > 1;
    const bool shard_gradients = sharded && layout.shard != ShardMode::kOptimizer;
    r.parameters += sharded && layout.shard == ShardMode::kParameters ? shard : b.bytes;
    r.gradients += shard_gradients ? shard : b.bytes;
    r.optimizer_state += mult * (sharded ? shard : b.bytes);
  }
  return r;
}

double PredictCommSeconds(const std::vector<ParameterBucket>& buckets, const ParallelLayout& layout,
                          const std::vector<int64_t>& gathers) {
  if (layout.devices <= 1) return 0;
  const double n = static_cast<double>(layout.devices);
  const double part = (n - 1) / n / layout.link_bytes_per_second;
  double seconds = 0;
  for (size_t i = 0; i < buckets.size(); ++i) {
    const double bytes = static_cast<double>(buckets[i].bytes);
    switch (layout.shard) {
      case ShardMode::kNone:  // all-reduce
        seconds += 2 * part * bytes + layout.link_latency_seconds;
        break;
      case ShardMode::kOptimizer:  // all-reduce, then the parameters' all-gather
        seconds += 3 * part * bytes + 2 * layout.link_latency_seconds;
        break;
      case ShardMode::kGradients:  // reduce-scatter, then the all-gather
        seconds += 2 * part * bytes + 2 * layout.link_latency_seconds;
        break;
      case ShardMode::kParameters:  // reduce-scatter, and an all-gather per gather span
        seconds += static_cast<double>(1 + (i < gathers.size() ? gathers[i] : 2)) *
                   (part * bytes + layout.link_latency_seconds);
        break;
    }
  }
  return seconds;
}

std::vector<int> BucketOfTensor(const TrainingGraph& g,
                                const std::vector<ParameterBucket>& buckets) {
  std::vector<int> bucket_of(g.tensors.size(), -1);
  for (size_t b = 0; b < buckets.size(); ++b) {
    for (TensorId t : buckets[b].parameters) bucket_of[t] = static_cast<int>(b);
  }
  return bucket_of;
}

std::vector<int> BucketsReadBy(const TrainingGraph& g, const Node& n,
                               const std::vector<int>& bucket_of) {
  std::vector<int> read;
  if (NodeIsFolded(g, n)) return read;
  for (TensorId in : n.inputs) {
    if (in == kNone) continue;
    const int b = bucket_of[g.tensors[in].storage];
    if (b >= 0 && std::find(read.begin(), read.end(), b) == read.end()) read.push_back(b);
  }
  std::sort(read.begin(), read.end());
  return read;
}

namespace {

// Shard parameters (plan.h): in every pass (the forward of one segment with the loss, the
// recompute of one segment, one segment's backward call) each bucket's flat parameters are
// gathered before the first step that reads them and released after the last. Returns how many
// gathers each bucket has per micro-batch.
// `overridden[i]`: step i touches the buckets `touch[i]`, not its node's (an accumulation group).
std::vector<int64_t> AddGatherSpans(Schedule& s, const TrainingGraph& g,
                                    const std::vector<std::vector<NodeId>>& segments,
                                    const std::vector<ParameterBucket>& buckets,
                                    const std::vector<int>& bucket_of,
                                    const std::vector<char>& overridden,
                                    const std::vector<std::vector<int>>& touch,
                                    const ParallelLayout& layout) {
  std::vector<int> segment_of(g.nodes.size(), 0);
  for (size_t k = 0; k < segments.size(); ++k) {
    for (NodeId n : segments[k]) segment_of[n] = static_cast<int>(k);
  }
  // 1. Per step, its pass and the buckets it touches. A backward step touches the buckets its
  // node reads and those whose parameters' gradient temporaries it allocates.
  const size_t nsteps = s.steps.size();
  std::vector<int> pass(nsteps, -1);
  std::vector<char> backward_pass;
  std::vector<std::vector<int>> touched(nsteps);
  std::pair<int, int> key = {-1, -1};
  for (size_t i = 0; i < nsteps; ++i) {
    const Step& st = s.steps[i];
    if (st.node == kNone) continue;
    int kind = -1;
    if (st.phase == Phase::kForward || st.phase == Phase::kLoss)
      kind = 0;
    else if (st.phase == Phase::kRecompute)
      kind = 1;
    else if (st.phase == Phase::kBackward)
      kind = 2;
    if (kind < 0) continue;
    const std::pair<int, int> k = {kind, segment_of[st.node]};
    if (k != key) {
      key = k;
      backward_pass.push_back(kind == 2);
    }
    pass[i] = static_cast<int>(backward_pass.size()) - 1;
    if (overridden[i]) {
      touched[i] = touch[i];
      continue;
    }
    touched[i] = BucketsReadBy(g, g.nodes[st.node], bucket_of);
    if (kind == 2) {
      for (BufferId a : st.allocs) {
        const Buffer& buf = s.buffers[a];
        if (buf.category != MemoryCategory::kTemporary || buf.tensor == kNone ||
            bucket_of[buf.tensor] < 0)
          continue;
        const int b = bucket_of[buf.tensor];
        if (std::find(touched[i].begin(), touched[i].end(), b) == touched[i].end())
          touched[i].push_back(b);
      }
    }
  }
  // 2. Per pass and bucket, the first and last step touching it.
  const size_t nb = buckets.size(), np = backward_pass.size();
  std::vector<size_t> first(np * nb, SIZE_MAX), last(np * nb, SIZE_MAX);
  for (size_t i = 0; i < nsteps; ++i) {
    for (int b : touched[i]) {
      const size_t at = static_cast<size_t>(pass[i]) * nb + static_cast<size_t>(b);
      if (first[at] == SIZE_MAX) first[at] = i;
      last[at] = i;
    }
  }
  // 3. Where each bucket is gathered: before its first step; in a backward call one bucket
  // ahead (FSDP2's default backward prefetch): each bucket but the call's first is gathered
  // before the first step of the bucket the call reaches before it.
  std::vector<size_t> gather_at = first;
  std::vector<std::vector<size_t>> gathered_before(nsteps);  // per step: pass * nb + bucket
  for (size_t pi = 0; pi < np; ++pi) {
    std::vector<std::pair<size_t, size_t>> order;  // first step, bucket
    for (size_t b = 0; b < nb; ++b) {
      if (first[pi * nb + b] != SIZE_MAX) order.push_back({first[pi * nb + b], b});
    }
    std::sort(order.begin(), order.end());
    for (size_t j = 1; backward_pass[pi] && j < order.size(); ++j)
      gather_at[pi * nb + order[j].second] = order[j - 1].first;
    for (const auto& [step, b] : order)
      gathered_before[gather_at[pi * nb + b]].push_back(pi * nb + b);
  }
  // 4. The gather steps, and the releases: a forward or recompute pass releases a bucket with
  // its last reader's step; a backward call once that step (its last accumulation) is done.
  // FSDP2's runtime adds its copy-outs and all-gather outputs (plan.h).
  const bool fsdp2 = layout.runtime == ShardRuntime::kFsdp2;
  std::vector<size_t> pass_end(np, SIZE_MAX);  // fsdp2: a forward or recompute pass's last step
  std::vector<std::vector<size_t>> copied_out_before(nsteps);  // fsdp2, backward prefetches
  if (fsdp2) {
    for (size_t i = 0; i < nsteps; ++i) {
      if (pass[i] >= 0 && s.steps[i].phase != Phase::kLoss) pass_end[pass[i]] = i;
    }
    for (size_t at = 0; at < np * nb; ++at) {
      if (first[at] != SIZE_MAX && gather_at[at] != first[at])
        copied_out_before[first[at]].push_back(at);
    }
  }
  std::vector<BufferId> held_output(np, kNone);  // fsdp2: the forward's last all-gather output
  auto copy_out = [&](size_t at) {
    const size_t b = at % nb, pi = at / nb;
    Step c;
    c.phase = Phase::kCommunication;
    const std::string name = "bucket " + std::to_string(b) + " all-gather output";
    if (backward_pass[pi]) {  // freed at its copy-out
      AddTransient(s, c, name, buckets[b].bytes);
      return c;
    }
    const BufferId o = s.AddBuffer({name, buckets[b].bytes, MemoryCategory::kTemporary, kNone});
    c.allocs.push_back(o);
    if (held_output[pi] != kNone) c.frees.push_back(held_output[pi]);
    held_output[pi] = o;
    return c;
  };
  std::vector<int64_t> gathers(nb, 0);
  std::vector<BufferId> gathered(np * nb, kNone);
  std::vector<Step> out;
  out.reserve(nsteps + 3 * np * nb);
  for (size_t i = 0; i < nsteps; ++i) {
    std::vector<BufferId> released;
    if (pass[i] >= 0) {
      const size_t row = static_cast<size_t>(pass[i]) * nb;
      for (size_t at : copied_out_before[i]) out.push_back(copy_out(at));
      for (size_t at : gathered_before[i]) {
        const size_t b = at % nb;
        Step gather;
        gather.phase = Phase::kCommunication;
        gathered[at] =
            s.AddBuffer({"bucket " + std::to_string(b) + " gathered parameters", buckets[b].bytes,
                         MemoryCategory::kParameter, kNone, static_cast<int32_t>(b)});
        gather.allocs.push_back(gathered[at]);
        if (fsdp2 && layout.staged_collectives)
          AddTransient(s, gather, "bucket " + std::to_string(b) + " all-gather staging",
                       buckets[b].bytes);
        out.push_back(std::move(gather));
        if (fsdp2 && gather_at[at] == first[at]) out.push_back(copy_out(at));
        ++gathers[b];
      }
      for (size_t b = 0; b < nb; ++b) {
        if (last[row + b] == i) released.push_back(gathered[row + b]);
      }
    }
    out.push_back(std::move(s.steps[i]));
    if (pass[i] >= 0 && pass_end[pass[i]] == i && held_output[pass[i]] != kNone) {
      out.back().frees.push_back(held_output[pass[i]]);  // FSDP2's root post-forward
      held_output[pass[i]] = kNone;
    }
    if (released.empty()) continue;
    if (backward_pass[static_cast<size_t>(pass[i])]) {
      Step release;
      release.phase = Phase::kCommunication;
      release.frees = std::move(released);
      out.push_back(std::move(release));
    } else {
      for (BufferId b : released) out.back().frees.push_back(b);
    }
  }
  s.steps = std::move(out);
  return gathers;
}

}  // namespace

void ApplyDataParallel(Plan& p, const TrainingGraph& rank_graph, const ParallelLayout& layout,
                       const SimulatorOptions& sim) {
  CheckLayout(layout);
  if (!(layout.link_bytes_per_second > 0) || !(layout.link_latency_seconds >= 0)) {
    throw MemplanError("the link bandwidth must be > 0 and its latency >= 0");
  }
  p.layout = layout;
  if (layout.devices == 1) return;
  if (layout.shard == ShardMode::kParameters && !p.recomputed.empty()) {
    throw MemplanError(
        "--shard parameters does not combine with a selective plan yet (its recompute runs inside "
        "the backward, where no parameter gather is scheduled); plan with another --strategy, or "
        "--shard gradients");
  }
  const std::vector<int64_t> gathers =
      AddDataParallelSteps(p.schedule, rank_graph, p.segments, p.micro_batches, layout);
  p.timeline = Simulate(p.schedule, sim);
  p.predicted_peak_bytes = p.timeline.peak_bytes;
  p.feasible = p.budget_bytes <= 0 || p.predicted_peak_bytes + p.margin_bytes <= p.budget_bytes;
  p.predicted_comm_seconds =
      PredictCommSeconds(ParameterBuckets(rank_graph, layout), layout, gathers);
}

std::vector<int64_t> AddDataParallelSteps(Schedule& s, const TrainingGraph& rank_graph,
                                          const std::vector<std::vector<NodeId>>& segments,
                                          int64_t micro_batches, const ParallelLayout& layout) {
  CheckLayout(layout);
  if (layout.devices == 1) return {};
  const TrainingGraph& g = rank_graph;
  if (g.grads != GradientLifetime::kKept) {
    throw MemplanError(
        "internal: data-parallel ranks step with kept gradients (SteppedGradients); the rank's "
        "graph "
        "was loaded with gradients set to None");
  }
  if (s.steps.empty() || s.steps.front().phase != Phase::kSetup ||
      s.steps.back().phase != Phase::kOptimizer) {
    throw MemplanError(
        "internal: data-parallel steps need a training step's schedule (setup first, optimizer "
        "last)");
  }
  const std::vector<ParameterBucket> buckets = ParameterBuckets(g, layout);
  const std::vector<int> bucket_of = BucketOfTensor(g, buckets);
  const bool sharded = layout.shard != ShardMode::kNone;
  const bool zero3 = layout.shard == ShardMode::kParameters;
  const bool lazy = layout.shard == ShardMode::kGradients || zero3;
  const int64_t mult = OptimizerStateMultiplier(g.optimizer);

  // 1. Phase 1: drop the per-parameter buffers of the trained parameters (buffers renumbered).
  std::vector<char> dropped(s.buffers.size(), 0);
  for (BufferId b : s.steps.front().allocs) {
    const Buffer& buf = s.buffers[b];
    const bool persistent = buf.category == MemoryCategory::kParameter ||
                            buf.category == MemoryCategory::kGradient ||
                            buf.category == MemoryCategory::kOptimizerState;
    if (persistent && buf.tensor != kNone && bucket_of[buf.tensor] >= 0) dropped[b] = 1;
  }
  // Adam's per-parameter temporary in the optimizer step: sharded modes update per bucket.
  Step& optimizer = s.steps.back();
  if (sharded) {
    for (BufferId b : optimizer.allocs) {
      if (s.buffers[b].category == MemoryCategory::kTemporary) dropped[b] = 1;
    }
  }
  std::vector<BufferId> renumber(s.buffers.size(), kNone);
  std::vector<Buffer> kept;
  kept.reserve(s.buffers.size());
  for (size_t b = 0; b < s.buffers.size(); ++b) {
    if (dropped[b]) continue;
    renumber[b] = static_cast<BufferId>(kept.size());
    kept.push_back(std::move(s.buffers[b]));
  }
  s.buffers = std::move(kept);
  auto rewrite = [&](std::vector<BufferId>& ids) {
    std::vector<BufferId> out;
    out.reserve(ids.size());
    for (BufferId b : ids) {
      if (renumber[b] != kNone) out.push_back(renumber[b]);
    }
    ids = std::move(out);
  };
  for (Step& st : s.steps) {
    rewrite(st.allocs);
    rewrite(st.frees);
    rewrite(st.handed_to_backward);
  }

  // 2. The buckets' flat buffers in the setup step. Gradient shards set to None between steps
  // are born at their reduce-scatter and freed after the optimizer step (step 5).
  const std::string opt = OptimizerName(g.optimizer);
  const bool shards_freed = lazy && layout.gradient_shards == GradientLifetime::kNone;
  std::vector<BufferId> flat_grad(buckets.size(), kNone), grad_shard(buckets.size(), kNone);
  for (size_t b = 0; b < buckets.size(); ++b) {
    const std::string name = "bucket " + std::to_string(b);
    const int64_t padded = buckets[b].bytes, shard = padded / layout.devices;
    Step& setup = s.steps.front();
    if (zero3)
      setup.allocs.push_back(
          s.AddBuffer({name + " parameter shard", shard, MemoryCategory::kParameter, kNone}));
    else
      setup.allocs.push_back(
          s.AddBuffer({name + " parameters", padded, MemoryCategory::kParameter, kNone}));
    if (lazy) {
      grad_shard[b] =
          s.AddBuffer({name + " gradient shard", shard, MemoryCategory::kGradient, kNone});
      if (!shards_freed) setup.allocs.push_back(grad_shard[b]);
      flat_grad[b] = s.AddBuffer({name + " flat gradients", padded, MemoryCategory::kGradient,
                                  kNone, static_cast<int32_t>(b)});
    } else {
      setup.allocs.push_back(
          s.AddBuffer({name + " gradients", padded, MemoryCategory::kGradient, kNone}));
    }
    if (mult > 0) {
      setup.allocs.push_back(s.AddBuffer({name + " " + opt + " state",
                                          CheckedMul(mult, sharded ? shard : padded, name),
                                          MemoryCategory::kOptimizerState, kNone}));
    }
  }

  // 3-4. Shard gradients with one micro-batch: each flat gradient is allocated in the first
  // backward step that accumulates into one of the bucket's parameters, and its communication
  // step follows the last one (plan.h). That first step is split in two, as LibTorch runs it:
  // the op's backward (its workspace and the node's incoming gradients freed at its end), then
  // AccumulateGrad (the flat gradient allocated while the gradient temporaries are alive).
  // Otherwise (none, optimizer; micro-batches: every micro-batch but the last holds every flat
  // gradient through its backward) the communication phase follows the backward.
  const bool early = lazy && micro_batches <= 1;
  std::vector<size_t> first_touch(buckets.size(), 0), last_touch(buckets.size(), 0);  // 0: none
  if (early) {
    for (size_t i = 1; i + 1 < s.steps.size(); ++i) {
      const Step& st = s.steps[i];
      if (st.phase != Phase::kBackward) continue;
      std::vector<char> hit(buckets.size(), 0);
      for (BufferId a : st.allocs) {
        const Buffer& buf = s.buffers[a];
        if (buf.category == MemoryCategory::kTemporary && buf.tensor != kNone &&
            bucket_of[buf.tensor] >= 0)
          hit[bucket_of[buf.tensor]] = 1;
      }
      if (st.node != kNone) {
        for (TensorId in : g.nodes[st.node].inputs) {
          if (in != kNone && bucket_of[in] >= 0) hit[bucket_of[in]] = 1;
        }
      }
      for (size_t b = 0; b < buckets.size(); ++b) {
        if (!hit[b]) continue;
        if (first_touch[b] == 0) first_touch[b] = i;
        last_touch[b] = i;
      }
    }
  }
  // A node's parameters accumulate their gradients in two groups, as LibTorch's engine runs
  // them: first those its ATen op reads directly (AccumulateGrad runs as soon as it is ready),
  // then those read through a view the kernel makes (Gemm's transposed weight: after
  // TBackward0). A bucket whose last gradient is in the first group is reduced, and its
  // parameters released, before the second group allocates another bucket's flat gradient.
  auto read_through_view = [&](const Node& n, TensorId t) {
    bool read = false, direct = false;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      if (n.inputs[k] != t) continue;
      read = true;
      if (k >= 32 || !(n.inputs_read_through_view >> k & 1u)) direct = true;
    }
    return read && !direct;
  };
  std::vector<Step> steps;
  steps.reserve(s.steps.size() + 3 * buckets.size());
  // Per step of `steps`: whether its gather-span touches are `touch[i]` rather than its node's.
  std::vector<char> overridden;
  std::vector<std::vector<int>> touch;
  auto push = [&](Step st, const std::vector<int>* touches = nullptr) {
    steps.push_back(std::move(st));
    overridden.push_back(touches != nullptr);
    touch.push_back(touches ? *touches : std::vector<int>{});
  };
  std::vector<Step> tail_comm;  // after the backward, before the optimizer
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (early && last_touch[b] != 0) continue;
    Step c;
    c.phase = Phase::kCommunication;
    if (lazy) {
      // Micro-batches: from the setup; no gradient reaches the bucket: allocated here (zeros).
      if (early)
        c.allocs.push_back(flat_grad[b]);
      else
        s.steps.front().allocs.push_back(flat_grad[b]);
      if (shards_freed) c.allocs.push_back(grad_shard[b]);  // the reduce-scatter's output
      c.frees.push_back(flat_grad[b]);
    }
    tail_comm.push_back(std::move(c));
  }
  const bool fsdp2_order = FlatGradientAtReduce(layout) && early;
  const bool fsdp2_buffers = layout.runtime == ShardRuntime::kFsdp2;
  if (fsdp2_buffers && !fsdp2_order) {
    throw MemplanError(
        "the fsdp2 runtime is predicted for one micro-batch (FSDP2's reduce-scatter in each "
        "backward); plan it with --micro-batches 1");
  }
  BufferId held_input = kNone;  // fsdp2: the last reduce-scatter input, freed by the next
  // The loss's storage (its own tensor, or what it is a view of): its buffer, like the seed
  // gradient's (tensor g.loss), dies as the backward call returns.
  const TensorId loss_storage =
      g.loss == kNone || g.tensors[g.loss].storage == kNone ? g.loss : g.tensors[g.loss].storage;
  std::vector<std::vector<BufferId>> pending(buckets.size());
  std::vector<char> has_grad(g.tensors.size(), 0);
  auto reduce = [&](size_t i, const std::vector<char>& group) {
    for (size_t b = 0; b < buckets.size(); ++b) {
      if (!early || last_touch[b] != i || !group[b]) continue;
      Step c;
      c.phase = Phase::kCommunication;
      c.node = kNone;
      if (fsdp2_buffers) {
        // FSDP2 holds the previous reduce-scatter input until this one starts (plan.h).
        if (held_input != kNone) push(FreeStep(held_input));
        c.allocs.push_back(flat_grad[b]);
        c.frees = std::move(pending[b]);
        push(std::move(c));
        Step rs;
        rs.phase = Phase::kCommunication;
        const std::string name = "bucket " + std::to_string(b);
        const int64_t shard = buckets[b].bytes / layout.devices;
        if (shards_freed)
          rs.allocs.push_back(grad_shard[b]);
        else  // added into the kept shard
          AddTransient(s, rs, name + " reduce-scatter output", shard);
        if (layout.staged_collectives)
          AddTransient(s, rs, name + " reduce-scatter staging", buckets[b].bytes);
        push(std::move(rs));
        held_input = flat_grad[b];
        continue;
      }
      if (fsdp2_order) {
        c.allocs.push_back(flat_grad[b]);
        for (BufferId f : pending[b]) c.frees.push_back(f);
      }
      if (shards_freed) c.allocs.push_back(grad_shard[b]);  // the reduce-scatter's output
      c.frees.push_back(flat_grad[b]);
      push(std::move(c));
    }
  };
  const std::vector<char> every_bucket(buckets.size(), 1);
  for (size_t i = 0; i < s.steps.size(); ++i) {
    if (i + 1 == s.steps.size()) {
      if (held_input != kNone) push(FreeStep(held_input));  // FSDP2's, as the backward ends
      for (Step& c : tail_comm) push(std::move(c));
    }
    Step& st = s.steps[i];
    const NodeId node = st.node;
    const Phase phase = st.phase;
    const Node* n = node != kNone ? &g.nodes[node] : nullptr;
    // The buckets of this step's parameters that accumulate in the second group.
    std::vector<char> late(buckets.size(), 0);
    bool late_first = false;
    if (early && n && phase == Phase::kBackward && n->inputs_read_through_view != 0) {
      std::vector<char> direct(buckets.size(), 0), viewed(buckets.size(), 0);
      for (TensorId in : n->inputs) {
        if (in == kNone || bucket_of[in] < 0) continue;
        (read_through_view(*n, in) ? viewed : direct)[bucket_of[in]] = 1;
      }
      for (size_t b = 0; b < buckets.size(); ++b) {
        late[b] = viewed[b] && !direct[b];
        late_first = late_first || (late[b] && first_touch[b] == i && last_touch[b] != 0);
      }
    }
    // FSDP2's order (ParallelLayout::flat_gradient_at_reduce): no accumulation step; the
    // gradients this step hands to AccumulateGrad stay alive until their bucket's reduce step.
    if (fsdp2_order && n && phase == Phase::kBackward) {
      std::vector<BufferId> rest;
      const std::vector<int> read = BucketsReadBy(g, *n, bucket_of);
      for (BufferId f : st.frees) {
        const Buffer& buf = s.buffers[f];
        const bool param_tmp = buf.category == MemoryCategory::kTemporary && buf.tensor != kNone &&
                               bucket_of[buf.tensor] >= 0;
        const bool handed_on =
            n->gradient_passes_through && !read.empty() &&
            buf.category == MemoryCategory::kActivationGradient &&
            std::find(n->outputs.begin(), n->outputs.end(), buf.tensor) != n->outputs.end();
        // A parameter's first gradient becomes its .grad (AccumulateGrad takes it); a later one
        // is added into it and freed here.
        if (param_tmp && !has_grad[buf.tensor]) {
          has_grad[buf.tensor] = 1;
          pending[bucket_of[buf.tensor]].push_back(f);
        } else if (handed_on) {
          pending[read[0]].push_back(f);
        } else {
          rest.push_back(f);
        }
      }
      st.frees = std::move(rest);
      push(std::move(st));
      reduce(i, every_bucket);
      continue;
    }
    std::vector<BufferId> first_here[2];
    for (size_t b = 0; b < buckets.size(); ++b) {
      if (early && first_touch[b] == i && last_touch[b] != 0)
        first_here[late[b] ? 1 : 0].push_back(flat_grad[b]);
    }
    if (first_here[0].empty() && first_here[1].empty()) {
      push(std::move(st));
      reduce(i, every_bucket);
      continue;
    }
    // The accumulation steps: the parameters' gradient temporaries stay alive into them.
    Step acc[2];
    for (int k = 0; k < 2; ++k) {
      acc[k].phase = phase;
      acc[k].node = node;
      acc[k].allocs = std::move(first_here[k]);
    }
    // A view op on a parameter (a Transpose of a weight) hands its incoming gradient on as
    // the parameter's: that gradient, too, lives until AccumulateGrad has run.
    const bool hands_on = n && n->gradient_passes_through;
    std::vector<BufferId> rest;
    for (BufferId f : st.frees) {
      const Buffer& buf = s.buffers[f];
      const bool param_tmp = buf.category == MemoryCategory::kTemporary && buf.tensor != kNone &&
                             bucket_of[buf.tensor] >= 0;
      const bool handed_on =
          hands_on && buf.category == MemoryCategory::kActivationGradient &&
          std::find(n->outputs.begin(), n->outputs.end(), buf.tensor) != n->outputs.end();
      if (param_tmp)
        acc[late_first && read_through_view(*n, buf.tensor) ? 1 : 0].frees.push_back(f);
      else if (handed_on)
        acc[0].frees.push_back(f);
      else if (buf.tensor != kNone && (buf.tensor == g.loss || buf.tensor == loss_storage))
        // The loss and its seed live until the backward call returns (GradientFlow::
        // EndBackwardCall), after this node's AccumulateGrad steps.
        acc[late_first ? 1 : 0].frees.push_back(f);
      else
        rest.push_back(f);
    }
    st.frees = std::move(rest);
    push(std::move(st));
    if (!late_first) {
      push(std::move(acc[0]));
      reduce(i, every_bucket);
      continue;
    }
    std::vector<char> first_group(buckets.size(), 0);
    std::vector<int> touches[2];
    for (int b : BucketsReadBy(g, *n, bucket_of)) touches[late[b] ? 1 : 0].push_back(b);
    for (size_t b = 0; b < buckets.size(); ++b) first_group[b] = !late[b];
    push(std::move(acc[0]), &touches[0]);
    reduce(i, first_group);
    push(std::move(acc[1]), &touches[1]);
    reduce(i, late);
  }
  s.steps = std::move(steps);

  // 4b. Shard parameters: the gather spans.
  std::vector<int64_t> gathers;
  if (zero3) {
    gathers = AddGatherSpans(s, g, segments, buckets, bucket_of, overridden, touch, layout);
    for (int64_t& k : gathers) k *= std::max<int64_t>(1, micro_batches);
  }

  // 5. The sharded optimizer: per bucket, the update (Adam's S_b temporary), then the
  // all-gather's copy of the rank's shard.
  if (sharded) {
    for (size_t b = 0; b < buckets.size(); ++b) {
      const std::string name = "bucket " + std::to_string(b);
      const int64_t shard = buckets[b].bytes / layout.devices;
      Step update;
      update.phase = Phase::kOptimizer;
      if (g.optimizer == Optimizer::kAdam)
        AddTransient(s, update, name + " adam denominator", shard);
      s.steps.push_back(std::move(update));
      if (zero3) continue;  // the next forward gathers the parameters
      Step gather;
      gather.phase = Phase::kOptimizer;
      AddTransient(s, gather, name + " all-gather copy of the shard", shard);
      s.steps.push_back(std::move(gather));
    }
  }
  // zero_grad() sets the gradient shards to None after the step.
  if (shards_freed) {
    for (BufferId b : grad_shard) s.steps.back().frees.push_back(b);
  }

  return gathers;
}

}  // namespace memplan
