// Schedule pieces every step shares (persistent buffers, forward workspaces, the gradient flow),
// and the default training step: the segmented builder with no cuts.
#include <algorithm>
#include <unordered_map>

#include "memplan/analyzer.h"
#include "memplan/storage_facts.h"
#include "op_rules.h"

namespace memplan {

const char* PhaseName(Phase p) {
  switch (p) {
    case Phase::kSetup:
      return "setup";
    case Phase::kForward:
      return "forward";
    case Phase::kLoss:
      return "loss";
    case Phase::kBackward:
      return "backward";
    case Phase::kRecompute:
      return "recompute";
    case Phase::kOptimizer:
      return "optimizer";
    case Phase::kCommunication:
      return "communication";
    case Phase::kOffload:
      return "offload";
    case Phase::kPrefetch:
      return "prefetch";
  }
  return "forward";
}

bool IsPersistentCategory(MemoryCategory c) {
  return c == MemoryCategory::kParameter || c == MemoryCategory::kGradient ||
         c == MemoryCategory::kOptimizerState || c == MemoryCategory::kInput ||
         c == MemoryCategory::kConstant || c == MemoryCategory::kWorkspace;
}

const char* MemoryCategoryName(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::kParameter:
      return "parameters";
    case MemoryCategory::kGradient:
      return "gradients";
    case MemoryCategory::kOptimizerState:
      return "optimizer_state";
    case MemoryCategory::kInput:
      return "inputs";
    case MemoryCategory::kConstant:
      return "constants";
    case MemoryCategory::kActivation:
      return "activations";
    case MemoryCategory::kSavedExtra:
      return "saved_extras";
    case MemoryCategory::kActivationGradient:
      return "activation_gradients";
    case MemoryCategory::kTemporary:
      return "temporaries";
    case MemoryCategory::kWorkspace:
      return "library_workspace";
    case MemoryCategory::kCount:
      break;
  }
  return "?";
}

BufferId Schedule::AddBuffer(Buffer b) {
  buffers.push_back(std::move(b));
  return static_cast<BufferId>(buffers.size() - 1);
}

std::string Schedule::StepLabel(const TrainingGraph& g, size_t step) const {
  const Step& s = steps.at(step);
  std::string label = PhaseName(s.phase);
  if (s.node != kNone) label += " " + g.nodes[s.node].name + " (" + g.nodes[s.node].op_type + ")";
  if ((s.phase == Phase::kOffload || s.phase == Phase::kPrefetch) && s.copy_from >= 0 &&
      s.copy_from < static_cast<BufferId>(buffers.size())) {
    label += (s.copy_wait ? " done " : " start ") + buffers[s.copy_from].name;
  }
  return label;
}

PersistentBuffers AddPersistentBuffers(const TrainingGraph& g, Schedule& s) {
  PersistentBuffers p;
  p.setup.phase = Phase::kSetup;
  p.param_grad.assign(g.tensors.size(), kNone);
  p.storage.assign(g.tensors.size(), kNone);
  for (const Tensor& t : g.tensors) {
    if (!t.is_persistent() || t.is_view()) continue;
    MemoryCategory c = t.category == TensorCategory::kInput       ? MemoryCategory::kInput
                       : t.category == TensorCategory::kParameter ? MemoryCategory::kParameter
                                                                  : MemoryCategory::kConstant;
    p.storage[t.id] = s.AddBuffer({s.named ? t.name : "", t.bytes, c, t.id});
    p.setup.allocs.push_back(p.storage[t.id]);
  }
  if (g.library_workspace_bytes > 0) {
    p.setup.allocs.push_back(
        s.AddBuffer({"cuBLAS and cuBLASLt workspaces", g.library_workspace_bytes,
                     MemoryCategory::kWorkspace, kNone}));
  }
  int mult = OptimizerStateMultiplier(g.optimizer);
  for (TensorId pid : g.parameters) {
    const Tensor& t = g.tensors[pid];
    if (!t.has_gradient) continue;  // never receives a gradient: PyTorch leaves .grad empty
    // Gradients set to None between steps are born in the backward (GradientFlow).
    if (g.grads == GradientLifetime::kKept) {
      p.param_grad[pid] =
          s.AddBuffer({s.named ? "grad " + t.name : "", t.bytes, MemoryCategory::kGradient, pid});
      p.setup.allocs.push_back(p.param_grad[pid]);
    }
    if (mult > 0) {
      BufferId st =
          s.AddBuffer({s.named ? std::string(OptimizerName(g.optimizer)) + " state " + t.name : "",
                       mult * t.bytes, MemoryCategory::kOptimizerState, pid});
      p.setup.allocs.push_back(st);
    }
  }
  return p;
}

void AddForwardWorkspace(const Node& n, Schedule& s, Step& step) {
  if (n.forward_workspace_bytes <= 0) return;
  Buffer b{s.named ? n.name + ":forward workspace" : "", n.forward_workspace_bytes,
           MemoryCategory::kTemporary, kNone};
  b.margin_bytes = n.forward_workspace_margin_bytes;
  BufferId w = s.AddBuffer(std::move(b));
  step.allocs.push_back(w);
  step.frees.push_back(w);
}

namespace {

// Whether the gradient a view op hands to parameter `param` is dense in the parameter's own
// layout, so that AccumulateGrad takes it as .grad without a copy (the "gradient layout
// contract"). Backward formulas hand each input a gradient in that input's layout (mm's for a
// transposed operand is transposed too; TensorIterator follows its inputs), so undoing a
// view (reshape, squeeze, transpose) lands in the parameter's layout. A broadcast incoming
// gradient (stride 0) is not dense: copied.
bool GradViewIsDense(const TrainingGraph& g, const OpRule& rule, const Node& n, TensorId param,
                     bool out_broadcast) {
  if (out_broadcast) return false;
  if (IsIdentityInTraining(rule, n, g.tensors)) return true;
  const bool undoes_view = rule.view == ViewKind::kReshape || rule.view == ViewKind::kView ||
                           rule.view == ViewKind::kStridedView;
  // Sum-like views (Add, Concat, ReduceSum) hand on a shared, narrowed or reduced gradient that
  // AccumulateGrad copies; a new buffer is the safe answer (never less than taking it).
  return undoes_view && g.tensors[n.outputs[0]].numel() == g.tensors[param].numel();
}

// The strides of tensor t's gradient where it is a view of another gradient with its own strides
// (empty: dense). Transpose's backward permutes the incoming gradient back; the other views keep
// or re-view its strides (a slice of Concat's keeps them). Only a tensor read by one node can
// hold a view: several readers' gradients are summed into a new one.
std::vector<int64_t> GradStrides(const TrainingGraph& g, TensorId t, int depth = 0) {
  const Tensor& tensor = g.tensors[t];
  if (depth > 64 || tensor.consumers.size() != 1) return {};
  const Node& n = g.node(tensor.consumers[0]);
  const OpRule* rule = FindOpRule(n.op_type);
  const TensorId out = n.outputs[0];
  if (!n.has_backward || out == kNone || !rule || !rule->grad_is_view || rule->grad_is_broadcast ||
      rule->grad_reduces_broadcast_inputs || !g.tensors[out].has_gradient)
    return {};
  const Tensor& o = g.tensors[out];
  std::vector<int64_t> os = GradStrides(g, out, depth + 1);
  if (os.empty()) os = ContiguousStrides(o.shape);
  const std::vector<int64_t> perm = n.attr_ints("perm");
  if (rule->view == ViewKind::kStridedView && perm.size() == o.shape.size() &&
      tensor.shape.size() == perm.size()) {
    std::vector<int64_t> st(perm.size());
    for (size_t k = 0; k < perm.size(); ++k) st[static_cast<size_t>(perm[k])] = os[k];
    return st;
  }
  if (tensor.shape == o.shape) return os;
  if (rule->view == ViewKind::kReshape || rule->view == ViewKind::kView) {
    std::vector<int64_t> st;
    return ViewStrides(o.shape, os, tensor.shape, &st) ? st : std::vector<int64_t>{};
  }
  if (rule->view == ViewKind::kNone && tensor.shape.size() == o.shape.size()) return os;
  return {};
}

}  // namespace

GradientFlow::GradientFlow(const TrainingGraph& g, Schedule& s)
    : g_(g),
      s_(s),
      grad_(g.tensors.size(), kNone),
      broadcast_(g.tensors.size(), false),
      param_contributions_(g.tensors.size(), 0),
      param_held_(g.tensors.size(), kNone) {
  for (const Node& n : g.nodes) {
    if (!n.has_backward) continue;
    const OpRule* rule = FindOpRule(n.op_type);
    for (size_t slot = 0; slot < n.inputs.size(); ++slot) {
      const TensorId i = n.inputs[slot];
      if (i == kNone || !g.tensors[i].has_gradient ||
          g.tensors[i].category != TensorCategory::kParameter)
        continue;
      if (rule && slot < 32 && (rule->nondiff_inputs & (1u << slot))) continue;
      ++param_contributions_[i];
    }
  }
}

// A gradient buffer is created by the first backward op that produces it and freed after the
// backward of the tensor's producer consumed it. Views pass the incoming gradient through
// without a copy.
void GradientFlow::Backward(const Node& n, Step& step) {
  const TrainingGraph& g = g_;
  Schedule& s = s_;
  std::vector<BufferId>& grad = grad_;
  std::unordered_map<BufferId, int>& grad_readers = readers_;
  const OpRule* rule = FindOpRule(n.op_type);
  if (n.outputs[0] == g.loss) {
    BufferId seed = s.AddBuffer({s.named ? "grad " + g.tensors[g.loss].name : "", 4,
                                 MemoryCategory::kActivationGradient, g.loss});
    grad[g.loss] = seed;
    // Read by the loss node's backward and held by the backward call's root until it returns.
    grad_readers[seed] = 2;
    seed_ = seed;
    root_holds_seed_ = true;
    step.allocs.push_back(seed);
  }
  const TensorId out = n.outputs[0];
  BufferId out_grad = out != kNone ? grad[out] : kNone;
  const bool out_broadcast = out_grad != kNone && broadcast_[out];
  const bool born = g.grads == GradientLifetime::kNone;
  for (size_t slot = 0; slot < n.inputs.size(); ++slot) {
    TensorId i = n.inputs[slot];
    if (i == kNone || !g.tensors[i].has_gradient) continue;
    if (slot < 32 && (rule->nondiff_inputs & (1u << slot))) continue;
    const Tensor& t = g.tensors[i];
    const bool same_size = out != kNone && g.tensors[out].numel() == t.numel();
    // An input the forward broadcast gets the incoming gradient summed to its shape (the
    // engine's sum_to after add's backward): a new tensor of its own size, while the incoming
    // gradient goes on to the other readers.
    const bool reduced =
        rule->grad_reduces_broadcast_inputs && out != kNone && t.numel() < g.tensors[out].numel();
    bool view = (rule->grad_is_view || (rule->grad_is_view_at_same_size && same_size) ||
                 IsIdentityInTraining(*rule, n, g.tensors)) &&
                out_grad != kNone && !reduced;
    if (t.category != TensorCategory::kParameter && grad[i] != kNone && broadcast_[i]) {
      // Summed with a broadcast view (no bytes of its own): the sum is a new full-size
      // gradient, contiguous, which replaces the view.
      broadcast_[i] = false;
      const BufferId old = grad[i];
      grad[i] = s.AddBuffer(
          {s.named ? "grad " + t.name : "", t.bytes, MemoryCategory::kActivationGradient, i});
      grad_readers[grad[i]] = 1;
      step.allocs.push_back(grad[i]);
      if (--grad_readers[old] == 0) step.frees.push_back(old);
      continue;
    }
    if (t.category == TensorCategory::kParameter && param_contributions_[i] > 1 &&
        param_held_[i] == kNone) {
      // The first of several contributions: held (the gradient itself, or the storage of the
      // incoming gradient it is a view of; a broadcast input's reduced gradient is its own).
      if (view && out != kNone && g.tensors[out].numel() == t.numel()) {
        param_held_[i] = out_grad;
        ++grad_readers[out_grad];
      } else {
        param_held_[i] =
            s.AddBuffer({s.named ? (born ? "grad " : "grad contributions ") + t.name : "", t.bytes,
                         born ? MemoryCategory::kGradient : MemoryCategory::kTemporary, i});
        grad_readers[param_held_[i]] = 1;
        step.allocs.push_back(param_held_[i]);
      }
      --param_contributions_[i];
      continue;
    }
    if (t.category == TensorCategory::kParameter && param_held_[i] != kNone) {
      // A later contribution, added in place to the held one; after the last, AccumulateGrad
      // runs and the held buffer goes.
      if (!view || (out != kNone && g.tensors[out].numel() != t.numel())) {
        BufferId tmp = s.AddBuffer(
            {s.named ? "new grad " + t.name : "", t.bytes, MemoryCategory::kTemporary, i});
        step.allocs.push_back(tmp);
        step.frees.push_back(tmp);
      }
      if (--param_contributions_[i] == 0) {
        // Kept gradients: AccumulateGrad adds the sum in and the held buffer goes. Gradients
        // set to None: AccumulateGrad steals the sum as .grad; Finish frees it (its reader stays).
        if (!born && --grad_readers[param_held_[i]] == 0) step.frees.push_back(param_held_[i]);
        param_held_[i] = kNone;
      }
      continue;
    }
    if (t.category == TensorCategory::kParameter && born) {
      // The one contribution becomes .grad. AccumulateGrad steals it when it is dense in the
      // parameter's layout (a view of the incoming gradient then keeps that buffer alive until
      // the optimizer step has run); otherwise it clones it into a new buffer.
      if (view && GradViewIsDense(g, *rule, n, i, out_broadcast)) {
        ++grad_readers[out_grad];
      } else {
        const BufferId b =
            s.AddBuffer({s.named ? "grad " + t.name : "", t.bytes, MemoryCategory::kGradient, i});
        grad_readers[b] = 1;
        step.allocs.push_back(b);
      }
      continue;
    }
    if (t.category == TensorCategory::kParameter || grad[i] != kNone) {
      // Accumulated into an existing buffer: a temporary unless it is a view.
      if (!view) {
        BufferId tmp = s.AddBuffer(
            {s.named ? "new grad " + t.name : "", t.bytes, MemoryCategory::kTemporary, i});
        step.allocs.push_back(tmp);
        step.frees.push_back(tmp);
      }
      continue;
    }
    if (view) {
      grad[i] = out_grad;
      ++grad_readers[out_grad];
      // Expanding to a larger input makes a broadcast view; other views keep one broadcast
      // unless the op reduces this input (it was broadcast in the forward). One element has
      // no strides that matter.
      const Tensor& o = g.tensors[out];
      const bool expands = rule->grad_is_broadcast && t.numel() > o.numel();
      const bool keeps =
          out_broadcast && (t.shape == o.shape || !rule->grad_reduces_broadcast_inputs);
      broadcast_[i] = t.numel() > 1 && (expands || keeps);
    } else {
      grad[i] = s.AddBuffer(
          {s.named ? "grad " + t.name : "", t.bytes, MemoryCategory::kActivationGradient, i});
      grad_readers[grad[i]] = 1;
      step.allocs.push_back(grad[i]);
    }
  }
  // A permuted view (ViT's patch embedding: conv, reshape, transpose): convolution backward makes
  // it dense in the convolution's own memory format first, that of its output (measured,
  // LibTorch 2.14.1). ConvNeXt's permuted gradient is channels-last, as its convolution runs:
  // no copy.
  bool out_strided = false;
  if (rule->copies_strided_grad && out_grad != kNone && !out_broadcast) {
    const Tensor& o = g.tensors[out];
    const std::vector<int64_t> st = GradStrides(g, out);
    const bool channels_last = IsChannelsLastLayout(o.shape, StridesOf(o));
    out_strided = !st.empty() && (channels_last ? !IsChannelsLastLayout(o.shape, st)
                                                : !IsContiguousLayout(o.shape, st));
  }
  if ((rule->copies_broadcast_grad && out_broadcast) || out_strided) {
    BufferId c = s.AddBuffer(
        {s.named ? n.name + (out_strided ? ":contiguous copy of the strided incoming gradient"
                                         : ":contiguous copy of the broadcast incoming gradient")
                 : "",
         g.tensors[out].bytes, MemoryCategory::kTemporary, kNone});
    step.allocs.push_back(c);
    step.frees.push_back(c);
  }
  if (n.backward_workspace_bytes > 0) {
    Buffer b{s.named ? n.name + ":backward workspace" : "", n.backward_workspace_bytes,
             MemoryCategory::kTemporary, kNone};
    b.margin_bytes = n.backward_workspace_margin_bytes;
    BufferId w = s.AddBuffer(std::move(b));
    step.allocs.push_back(w);
    step.frees.push_back(w);
  }
  for (TensorId o : n.outputs) {
    if (o == kNone || grad[o] == kNone) continue;
    if (--grad_readers[grad[o]] == 0) step.frees.push_back(grad[o]);
  }
}

void GradientFlow::EndBackwardCall(std::vector<BufferId>& frees) {
  if (!root_holds_seed_) return;
  root_holds_seed_ = false;
  if (--readers_[seed_] == 0) frees.push_back(seed_);
}

void GradientFlow::Finish(Step& optimizer) {
  // Gradients nobody consumed (inputs of the first ops that require grad) die with the step.
  size_t first = optimizer.frees.size();
  for (auto& [b, readers] : readers_) {
    if (readers > 0) optimizer.frees.push_back(b);
  }
  std::sort(optimizer.frees.begin() + static_cast<std::ptrdiff_t>(first), optimizer.frees.end());
  if (g_.optimizer == Optimizer::kAdam) {
    // Adam's update builds one parameter-sized temporary (the denominator) at a time.
    int64_t largest = 0;
    for (TensorId p : g_.parameters)
      if (g_.tensors[p].has_gradient) largest = std::max(largest, g_.tensors[p].bytes);
    BufferId tmp = s_.AddBuffer({"adam denominator", largest, MemoryCategory::kTemporary, kNone});
    optimizer.allocs.push_back(tmp);
    optimizer.frees.push_back(tmp);
  }
}

Schedule BuildTrainingSchedule(const TrainingGraph& g) {
  return BuildScheduleFromCuts(g, ComputeGraphFacts(g), /*cuts=*/{});
}

}  // namespace memplan
