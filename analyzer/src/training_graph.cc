#include <algorithm>
#include <climits>
#include <map>

#include "loader_internal.h"
#include "memplan/analyzer.h"
#include "op_rules.h"

namespace memplan {

int64_t Tensor::numel() const { return Numel(shape); }

const Attribute* Node::attr(const std::string& key) const {
  auto it = attributes.find(key);
  return it == attributes.end() ? nullptr : &it->second;
}
int64_t Node::attr_int(const std::string& key, int64_t fallback) const {
  const Attribute* a = attr(key);
  return a ? a->i : fallback;
}
double Node::attr_float(const std::string& key, double fallback) const {
  const Attribute* a = attr(key);
  return a ? a->f : fallback;
}
std::vector<int64_t> Node::attr_ints(const std::string& key) const {
  const Attribute* a = attr(key);
  return a ? a->ints : std::vector<int64_t>{};
}
std::string Node::attr_string(const std::string& key, const std::string& fallback) const {
  const Attribute* a = attr(key);
  return a ? a->s : fallback;
}

TensorId TrainingGraph::FindTensor(const std::string& name) const {
  for (const Tensor& t : tensors)
    if (t.name == name) return t.id;
  return kNone;
}
NodeId TrainingGraph::FindNode(const std::string& name) const {
  for (const Node& n : nodes)
    if (n.name == name) return n.id;
  return kNone;
}
int64_t TrainingGraph::param_bytes() const {
  int64_t b = 0;
  for (TensorId p : parameters) b += tensors[p].bytes;
  return b;
}
LoadOptions LoadOptions::AtBatch(const TrainingGraph& g, int64_t new_batch) const {
  LoadOptions o = *this;
  o.batch = new_batch;
  if (!g.batch_dim.empty()) o.dims.erase(g.batch_dim);
  return o;
}

int64_t TrainingGraph::input_bytes() const {
  int64_t b = 0;
  for (TensorId i : inputs) b += tensors[i].bytes;
  if (loss_target != kNone) b += tensors[loss_target].bytes;
  return b;
}
std::string DescribeNodesByOp(const TrainingGraph& g,
                              const std::function<bool(const Node&)>& pick) {
  std::map<std::string, std::vector<std::string>> by_op;
  for (const Node& n : g.nodes) {
    if (pick(n)) by_op[n.op_type].push_back(n.name);
  }
  std::string out;
  for (const auto& [op, nodes] : by_op) {
    if (!out.empty()) out += "; ";
    out += "op " + op + " (node '" + nodes[0] + "'" +
           (nodes.size() > 1 ? " and " + std::to_string(nodes.size() - 1) + " more" : "") + ")";
  }
  return out;
}

double TrainingGraph::forward_flops() const {
  double f = 0;
  for (const Node& n : nodes) f += n.forward_flops;
  return f;
}
double TrainingGraph::backward_flops() const {
  double f = 0;
  for (const Node& n : nodes) f += n.backward_flops;
  return f;
}

namespace {

// The tensors of one graph add up to at most this: a training step holds each tensor a few
// times over (value, gradient, optimizer state, recompute), and every sum stays below 2^63.
constexpr int64_t kMaxGraphBytes = int64_t{1} << 58;  // 256 PiB

int64_t CheckedBytes(const Tensor& t, const std::string& file) {
  __int128 n = 1;
  for (int64_t d : t.shape) {
    n *= d;
    if (n > static_cast<__int128>(LLONG_MAX)) break;
  }
  n *= DTypeSize(t.dtype);
  if (n > static_cast<__int128>(LLONG_MAX)) {
    throw MemplanError(file + ": tensor '" + t.name + "' of shape " + ShapeString(t.shape) +
                       " would need more than 2^63 bytes; check --batch and --dim");
  }
  return static_cast<int64_t>(n);
}

bool IsDiffSlot(const OpRule& r, size_t slot) {
  return slot >= 32 || !(r.nondiff_inputs & (1u << slot));
}

// The strides ATen gives a view's output (output 0 of a view op, or each Split part).
// Transpose -> permute (strides permuted); Expand -> expand (stride 0 on broadcast dims);
// Slice -> slice (strides times the step); Split -> split_with_sizes (narrow: strides kept);
// Squeeze / Unsqueeze / Identity / same-type Cast -> a view computed as reshape would.
std::vector<int64_t> ViewOutputStrides(const Node& n, const std::vector<Tensor>& tensors,
                                       const Tensor& in, const Tensor& out) {
  std::vector<int64_t> st = StridesOf(in);
  if (n.op_type == "Transpose") {
    std::vector<int64_t> perm = n.attr_ints("perm");
    if (perm.empty())
      for (int64_t i = static_cast<int64_t>(in.shape.size()) - 1; i >= 0; --i) perm.push_back(i);
    std::vector<int64_t> r;
    for (int64_t p : perm) r.push_back(st[p]);
    return r;
  }
  if (n.op_type == "Expand") {
    std::vector<int64_t> r(out.shape.size(), 0);
    size_t off = out.shape.size() - in.shape.size();
    for (size_t d = 0; d < in.shape.size(); ++d) {
      r[off + d] = (in.shape[d] == 1 && out.shape[off + d] != 1) ? 0 : st[d];
    }
    return r;
  }
  if (n.op_type == "Slice" && n.inputs.size() > 4 && n.inputs[4] != kNone &&
      tensors[n.inputs[4]].value) {
    // Positive steps multiply the stride of their axis.
    std::vector<int64_t> steps = tensors[n.inputs[4]].value->ints, axes;
    if (n.inputs[3] != kNone && tensors[n.inputs[3]].value) axes = tensors[n.inputs[3]].value->ints;
    for (size_t i = 0; i < steps.size(); ++i) {
      int64_t a = i < axes.size() ? axes[i] : static_cast<int64_t>(i);
      if (a < 0) a += static_cast<int64_t>(st.size());
      if (a >= 0 && a < static_cast<int64_t>(st.size()) && steps[i] > 0) st[a] *= steps[i];
    }
    return st;
  }
  if (in.shape.size() == out.shape.size() && (n.op_type == "Slice" || n.op_type == "Split"))
    return st;
  std::vector<int64_t> r;
  if (ViewStrides(in.shape, st, out.shape, &r)) return r;
  return ContiguousStrides(out.shape);
}

// How output `o` of the node relates to its first input's storage.
ViewKind EffectiveView(const Node& n, const OpRule& r, const std::vector<Tensor>& t, size_t o) {
  // An inactive Dropout's wanted mask is a fresh all-true tensor (PyTorch and ONNX Runtime
  // materialise it).
  if (IsIdentityInTraining(r, n, t)) return o == 0 ? ViewKind::kView : ViewKind::kNone;
  return r.view;
}

void AppendLoss(TrainingGraph& g, const LoadOptions& opt) {
  TensorId logits = kNone;
  for (TensorId o : g.outputs) {
    if (IsFloating(g.tensors[o].dtype)) {
      logits = o;
      break;
    }
  }
  if (logits == kNone) {
    throw MemplanError(g.model_path + ": no floating-point graph output to train on");
  }
  if (g.outputs.size() > 1) {
    g.notes.push_back("the loss uses the first floating output '" + g.tensors[logits].name +
                      "'; the other outputs are computed but not trained");
  }
  const Tensor& out = g.tensors[logits];
  if (out.numel() == 1 && out.shape.size() <= 1) {
    g.loss = logits;
    g.loss_kind = LossKind::kModelOutput;
    g.notes.push_back("the model's output '" + out.name + "' is a scalar; it is used as the loss");
    return;
  }
  Node n;
  n.id = static_cast<NodeId>(g.nodes.size());
  n.name = "memplan::loss";
  n.domain = "memplan";
  n.inputs = {logits};
  auto add_tensor = [&](const std::string& name, DType dt, std::vector<int64_t> shape,
                        TensorCategory c) {
    Tensor t;
    t.id = static_cast<TensorId>(g.tensors.size());
    t.storage = t.id;
    t.name = name;
    t.dtype = dt;
    t.shape = std::move(shape);
    t.category = c;
    g.tensors.push_back(t);
    return t.id;
  };
  switch (opt.loss) {
    case LossKind::kCrossEntropy: {
      n.op_type = "memplan.CrossEntropyLoss";
      std::vector<int64_t> tshape(out.shape.begin(), out.shape.end() - (out.shape.empty() ? 0 : 1));
      g.loss_target = add_tensor("memplan::target", DType::kInt64, tshape, TensorCategory::kInput);
      n.inputs.push_back(g.loss_target);
      break;
    }
    case LossKind::kMse:
      n.op_type = "memplan.MseLoss";
      g.loss_target = add_tensor("memplan::target", out.dtype, out.shape, TensorCategory::kInput);
      n.inputs.push_back(g.loss_target);
      break;
    case LossKind::kSum:
    case LossKind::kModelOutput:
      n.op_type = "memplan.SumLoss";
      break;
  }
  g.loss = add_tensor("memplan::loss", DType::kFloat32, {}, TensorCategory::kActivation);
  n.outputs = {g.loss};
  g.nodes.push_back(std::move(n));
}

}  // namespace

std::vector<bool> TrainableInitializers(const TrainingGraph& g) {
  std::vector<bool> produced(g.tensors.size(), false), out(g.tensors.size(), false);
  for (const Node& n : g.nodes) {
    for (TensorId o : n.outputs)
      if (o != kNone) produced[o] = true;
  }
  for (TensorId o : g.outputs) produced[o] = true;  // a graph output is not trained
  for (const Node& n : g.nodes) {
    const OpRule* r = FindOpRule(n.op_type);
    if (!r || !r->differentiable) continue;
    for (size_t s = 0; s < n.inputs.size(); ++s) {
      const TensorId i = n.inputs[s];
      if (i == kNone || produced[i] || !IsDiffSlot(*r, s)) continue;
      const Tensor& t = g.tensors[i];
      if (t.category == TensorCategory::kConstant && IsFloating(t.dtype) && t.numel() > 1)
        out[i] = true;
    }
  }
  return out;
}

void ApplySaves(Node& n, const std::vector<Tensor>& t, const OpRule& r, SaveFn saves) {
  n.saved_for_backward.clear();
  n.saved_extras.clear();
  if (!n.has_backward || !saves || IsIdentityInTraining(r, n, t)) return;
  std::vector<bool> needs(n.inputs.size(), false);
  for (size_t s = 0; s < n.inputs.size(); ++s)
    needs[s] = n.inputs[s] != kNone && t[n.inputs[s]].has_gradient && IsDiffSlot(r, s);
  SaveSpec spec;
  saves(n, t, needs, spec);
  for (int i : spec.inputs) {
    if (i < static_cast<int>(n.inputs.size()) && n.inputs[i] != kNone)
      n.saved_for_backward.push_back(n.inputs[i]);
  }
  for (int o : spec.outputs) {
    if (o < static_cast<int>(n.outputs.size()) && n.outputs[o] != kNone)
      n.saved_for_backward.push_back(n.outputs[o]);
  }
  std::sort(n.saved_for_backward.begin(), n.saved_for_backward.end());
  n.saved_for_backward.erase(std::unique(n.saved_for_backward.begin(), n.saved_for_backward.end()),
                             n.saved_for_backward.end());
  n.saved_extras = spec.extras;
}

void FinishTrainingGraph(TrainingGraph& g, const LoadOptions& opt) {
  g.cpu_kernels = opt.cpu_kernels ? *opt.cpu_kernels : CpuKernelsOfThisMachine();
  AppendLoss(g, opt);
  // Outputs a kernel makes only when read, and nothing reads, are not made at all.
  std::vector<bool> read(g.tensors.size(), false);
  for (const Node& n : g.nodes)
    for (TensorId i : n.inputs)
      if (i != kNone) read[i] = true;
  for (TensorId o : g.outputs) read[o] = true;
  for (Node& n : g.nodes) {
    const OpRule* r = FindOpRule(n.op_type);
    for (size_t o = 0; r && o < n.outputs.size() && o < 32; ++o) {
      if (n.outputs[o] != kNone && (r->outputs_made_when_read >> o & 1u) && !read[n.outputs[o]])
        n.outputs[o] = kNone;
    }
  }
  int64_t total = 0;
  const Tensor* largest = nullptr;
  for (Tensor& t : g.tensors) {
    t.bytes = CheckedBytes(t, g.model_path);
    t.consumers.clear();
    t.producer = kNone;
    if (!largest || t.bytes > largest->bytes) largest = &t;
    if (__builtin_add_overflow(total, t.bytes, &total) || total > kMaxGraphBytes) {
      throw MemplanError(
          g.model_path + ": the model's tensors need more than " + FormatBytes(kMaxGraphBytes) +
          " (memplan's limit, so that a step's byte counts stay exact); the largest is '" +
          largest->name + "' of shape " + ShapeString(largest->shape) + " (" +
          FormatBytes(largest->bytes) + "): check --batch and --dim");
    }
  }
  for (const Node& n : g.nodes) {
    for (TensorId i : n.inputs)
      if (i != kNone) g.tensors[i].consumers.push_back(n.id);
    for (TensorId o : n.outputs)
      if (o != kNone) g.tensors[o].producer = n.id;
  }
  for (TensorId o : g.outputs) g.tensors[o].category = TensorCategory::kOutput;
  // Tensors whose value is known are folded into constants (shape arithmetic).
  for (Tensor& t : g.tensors) {
    if (t.value && t.producer != kNone) t.category = TensorCategory::kConstant;
  }

  g.parameters.clear();
  const std::vector<bool> trainable = TrainableInitializers(g);
  for (Tensor& t : g.tensors) {
    if (trainable[t.id]) {
      t.category = TensorCategory::kParameter;
      t.requires_grad = true;
      g.parameters.push_back(t.id);
    }
  }

  // requires_grad forward, has_gradient backward from the loss.
  for (const Node& n : g.nodes) {
    const OpRule* r = FindOpRule(n.op_type);
    bool any = false;
    for (size_t s = 0; s < n.inputs.size(); ++s) {
      if (n.inputs[s] != kNone && g.tensors[n.inputs[s]].requires_grad && IsDiffSlot(*r, s))
        any = true;
    }
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      if (n.outputs[o] == kNone) continue;
      Tensor& t = g.tensors[n.outputs[o]];
      t.requires_grad = any && r->differentiable && IsFloating(t.dtype) &&
                        InPlaceInputOf(n.op_type, o) == kNone &&
                        t.category != TensorCategory::kConstant;
    }
  }
  if (!g.tensors[g.loss].requires_grad) {
    throw MemplanError(g.model_path +
                       ": the loss does not depend on any trainable parameter; nothing to train");
  }
  g.tensors[g.loss].has_gradient = true;
  for (auto it = g.nodes.rbegin(); it != g.nodes.rend(); ++it) {
    Node& n = *it;
    const OpRule* r = FindOpRule(n.op_type);
    bool out_grad = false;
    for (TensorId o : n.outputs)
      if (o != kNone && g.tensors[o].has_gradient) out_grad = true;
    n.has_backward = false;
    if (!out_grad || !r->differentiable) continue;
    for (size_t s = 0; s < n.inputs.size(); ++s) {
      TensorId i = n.inputs[s];
      if (i != kNone && g.tensors[i].requires_grad && IsDiffSlot(*r, s)) {
        g.tensors[i].has_gradient = true;
        n.has_backward = true;
      }
    }
  }

  // Per-op rules: FLOPs, saved tensors, extras, views.
  for (Node& n : g.nodes) {
    const OpRule* r = FindOpRule(n.op_type);
    n.forward_flops = r->flops(n, g.tensors);
    n.backward_flops = n.has_backward ? r->backward_factor * n.forward_flops : 0;
    ApplySaves(n, g.tensors, *r, r->saves);
    n.gradient_passes_through = r->grad_is_view;
    n.inputs_read_through_view = r->inputs_read_through_view ? r->inputs_read_through_view(n) : 0;
    const CpuKernels& k = g.cpu_kernels;
    n.forward_workspace_bytes = r->forward_workspace ? r->forward_workspace(n, g.tensors, k) : 0;
    n.backward_workspace_bytes =
        n.has_backward && r->backward_workspace ? r->backward_workspace(n, g.tensors, k) : 0;
    // Unverified kernels: the margin is counted in the workspace, and recorded as such.
    const WorkspaceMargin m =
        r->workspace_margin ? r->workspace_margin(n, g.tensors, k) : WorkspaceMargin{};
    n.forward_workspace_margin_bytes = m.forward_bytes;
    n.backward_workspace_margin_bytes = n.has_backward ? m.backward_bytes : 0;
    n.forward_workspace_bytes += n.forward_workspace_margin_bytes;
    n.backward_workspace_bytes += n.backward_workspace_margin_bytes;
    // Measured on the device (memplan calibrate): exact, no margin.
    if (!opt.cpu_workspaces.empty()) {
      const auto it = opt.cpu_workspaces.find(WorkspaceSignature(n, g.tensors));
      if (it != opt.cpu_workspaces.end()) {
        n.forward_workspace_bytes = it->second.forward_bytes;
        n.backward_workspace_bytes = n.has_backward ? it->second.backward_bytes : 0;
        n.forward_workspace_margin_bytes = n.backward_workspace_margin_bytes = 0;
      }
    }
    // Storage: views share their input's storage.
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      if (n.outputs[o] == kNone) continue;
      const ViewKind view = EffectiveView(n, *r, g.tensors, o);
      Tensor& t = g.tensors[n.outputs[o]];
      if (t.category == TensorCategory::kConstant) continue;
      const int inplace = InPlaceInputOf(n.op_type, o);
      if (inplace != kNone && inplace < static_cast<int>(n.inputs.size()) &&
          n.inputs[inplace] != kNone) {
        t.storage = g.tensors[n.inputs[inplace]].storage;
        continue;
      }
      if (n.inputs.empty() || n.inputs[0] == kNone) continue;
      const Tensor& in = g.tensors[n.inputs[0]];
      switch (view) {
        case ViewKind::kNone:
          // TensorIterator ops lay their output out like their (non-contiguous) inputs.
          if (FollowsInputLayout(n.op_type)) {
            std::vector<const Tensor*> ins;
            for (size_t s = 0; s < n.inputs.size(); ++s) {
              const bool first_only =
                  n.op_type == "Clip" || n.op_type == "memplan.ScaledDotProductAttention";
              if (n.inputs[s] != kNone && !(first_only && s > 0))
                ins.push_back(&g.tensors[n.inputs[s]]);
            }
            std::vector<int64_t> st = TensorIteratorStrides(t.shape, ins);
            if (!IsContiguousLayout(t.shape, st)) t.strides = st;
          }
          break;
        case ViewKind::kView:
        case ViewKind::kStridedView:
          t.storage = in.storage;
          t.strides = ViewOutputStrides(n, g.tensors, in, t);
          break;
        case ViewKind::kReshape: {
          // at::reshape: a view when computeStride finds strides for the new shape, else a
          // contiguous copy with its own storage.
          std::vector<int64_t> st;
          if (ViewStrides(in.shape, StridesOf(in), t.shape, &st)) {
            t.storage = in.storage;
            t.strides = st;
          }
          break;
        }
      }
      if (IsContiguousLayout(t.shape, t.strides)) t.strides.clear();
      t.contiguous = t.strides.empty();
    }
  }
}

}  // namespace memplan
