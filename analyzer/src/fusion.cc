// Composite ops an exporter spelled out, fused back into the one op PyTorch runs.
//
// TorchScript exports before opset 20 have no Gelu op and write erf-GELU as
// Div(x, √2) -> Erf -> Add(1) -> Mul(x, ·) -> Mul(0.5). Run op by op, autograd then saves
// x/√2, 1 + erf and x for the backward (three tensors of x's size per GELU: +12 MiB per block
// of gpt at batch 8), where the training program the model came from runs at::gelu, which
// saves x alone. memplan models, and the executor runs, what that program runs. ONNX Runtime's
// training fuses the same patterns (its GeluFusion).
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "loader_internal.h"

namespace memplan {
namespace {

struct Uses {
  std::vector<NodeId> producer;           // per tensor
  std::vector<std::vector<NodeId>> readers;  // per tensor, one entry per input slot
  std::vector<bool> graph_output;
};

Uses UsesOf(const TrainingGraph& g) {
  Uses u;
  u.producer.assign(g.tensors.size(), kNone);
  u.readers.assign(g.tensors.size(), {});
  u.graph_output.assign(g.tensors.size(), false);
  for (const Node& n : g.nodes) {
    for (TensorId i : n.inputs) if (i != kNone) u.readers[i].push_back(n.id);
    for (TensorId o : n.outputs) if (o != kNone) u.producer[o] = n.id;
  }
  for (TensorId o : g.outputs) u.graph_output[o] = true;
  return u;
}

// A known scalar (any shape of one element) equal to `want` to float precision.
bool IsScalar(const TrainingGraph& g, TensorId t, double want) {
  if (t == kNone) return false;
  const std::optional<ConstValue>& v = g.tensors[t].value;
  if (!v || v->numel() != 1 || (v->is_float() ? v->floats.size() : v->ints.size()) != 1) return false;
  return std::fabs(v->at(0) - want) <= 1e-6 * std::fabs(want);
}

// The node reading `t`, when it is the only reader and `t` is no graph output.
NodeId SoleReader(const Uses& u, TensorId t) {
  if (t == kNone || u.graph_output[t] || u.readers[t].size() != 1) return kNone;
  return u.readers[t][0];
}

// For a binary node: the input slot that is not `slot_of_known` (0 or 1), or -1.
int OtherSlot(const Node& n, TensorId known) {
  if (n.inputs.size() != 2) return -1;
  if (n.inputs[0] == known) return 1;
  if (n.inputs[1] == known) return 0;
  return -1;
}

struct GeluMatch {
  TensorId x = kNone, y = kNone;
  std::vector<NodeId> nodes;  // the composite's nodes, the last one producing y
};

// Matches erf-GELU around Erf node `e`: y = x * (1 + erf(x / √2)) * 0.5, the scaling by 0.5
// applied to x or to the product, x / √2 written as a Div or as a Mul by 1/√2.
std::optional<GeluMatch> MatchErfGelu(const TrainingGraph& g, const Uses& u, const Node& e) {
  if (e.op_type != "Erf" || e.inputs.size() != 1 || e.outputs.size() != 1) return std::nullopt;
  if (e.inputs[0] == kNone || e.outputs[0] == kNone) return std::nullopt;
  const NodeId scale_id = u.producer[e.inputs[0]];
  if (scale_id == kNone || SoleReader(u, e.inputs[0]) != e.id) return std::nullopt;
  const Node& scale = g.nodes[scale_id];
  TensorId x = kNone;
  if (scale.op_type == "Div" && scale.inputs.size() == 2 && IsScalar(g, scale.inputs[1], std::sqrt(2.0))) {
    x = scale.inputs[0];
  } else if (scale.op_type == "Mul" && scale.inputs.size() == 2) {
    for (int s = 0; s < 2; ++s) {
      if (IsScalar(g, scale.inputs[s], 1.0 / std::sqrt(2.0))) x = scale.inputs[1 - s];
    }
  }
  if (x == kNone || !IsFloating(g.tensors[x].dtype) || scale.outputs.size() != 1) return std::nullopt;

  const NodeId plus_id = SoleReader(u, e.outputs[0]);
  if (plus_id == kNone || g.nodes[plus_id].op_type != "Add") return std::nullopt;
  const Node& plus = g.nodes[plus_id];
  const int one_slot = OtherSlot(plus, e.outputs[0]);
  if (one_slot < 0 || !IsScalar(g, plus.inputs[one_slot], 1.0)) return std::nullopt;

  GeluMatch m;
  m.x = x;
  m.nodes = {scale_id, e.id, plus_id};
  // The product with x, then 0.5: Mul(Mul(x, 1 + erf), 0.5).
  const NodeId times_id = SoleReader(u, plus.outputs[0]);
  if (times_id == kNone || g.nodes[times_id].op_type != "Mul") return std::nullopt;
  const Node& times = g.nodes[times_id];
  const int other = OtherSlot(times, plus.outputs[0]);
  if (other < 0) return std::nullopt;
  if (times.inputs[other] == x) {
    const NodeId half_id = SoleReader(u, times.outputs[0]);
    if (half_id == kNone || g.nodes[half_id].op_type != "Mul") return std::nullopt;
    const Node& half = g.nodes[half_id];
    const int h = OtherSlot(half, times.outputs[0]);
    if (h < 0 || !IsScalar(g, half.inputs[h], 0.5)) return std::nullopt;
    m.nodes.push_back(times_id);
    m.nodes.push_back(half_id);
    m.y = half.outputs[0];
  } else {
    // Mul(Mul(x, 0.5), 1 + erf): the halved x must be read by this product alone.
    const TensorId halved = times.inputs[other];
    if (halved == kNone) return std::nullopt;
    const NodeId half_id = u.producer[halved];
    if (half_id == kNone || SoleReader(u, halved) != times_id || g.nodes[half_id].op_type != "Mul") return std::nullopt;
    const Node& half = g.nodes[half_id];
    const int h = OtherSlot(half, x);
    if (h < 0 || !IsScalar(g, half.inputs[h], 0.5)) return std::nullopt;
    m.nodes.push_back(half_id);
    m.nodes.push_back(times_id);
    m.y = times.outputs[0];
  }
  const Tensor& tx = g.tensors[x];
  const Tensor& ty = g.tensors[m.y];
  // Constants broadcast to x's shape and keep its dtype, or this is not x's GELU.
  if (ty.shape != tx.shape || ty.dtype != tx.dtype) return std::nullopt;
  for (NodeId n : m.nodes) {
    if (g.nodes[n].outputs.size() != 1 || g.nodes[n].outputs[0] == kNone) return std::nullopt;
  }
  return m;
}

// A name for the fused node: the composite's scope (what precedes the last '/') and "Gelu",
// unless a node already has it; then the last node's name.
std::string FusedName(const Node& last, const std::set<std::string>& taken) {
  const size_t slash = last.name.rfind('/');
  if (slash != std::string::npos) {
    const std::string name = last.name.substr(0, slash + 1) + "Gelu";
    if (!taken.count(name)) return name;
  }
  return last.name;
}

}  // namespace

int FuseCompositeOps(TrainingGraph& g) {
  const Uses u = UsesOf(g);
  std::vector<bool> removed(g.nodes.size(), false);
  std::set<std::string> taken;
  for (const Node& n : g.nodes) taken.insert(n.name);
  std::vector<std::pair<NodeId, GeluMatch>> fused;  // the node that becomes Gelu, its match
  for (const Node& n : g.nodes) {
    std::optional<GeluMatch> m = MatchErfGelu(g, u, n);
    if (!m) continue;
    bool overlaps = false;
    for (NodeId k : m->nodes) overlaps = overlaps || removed[k];
    if (overlaps) continue;
    for (NodeId k : m->nodes) removed[k] = true;
    fused.emplace_back(m->nodes.back(), *m);
  }
  if (fused.empty()) return 0;

  for (auto& [last_id, m] : fused) {
    Node& last = g.nodes[last_id];
    const std::string name = FusedName(last, taken);
    taken.insert(name);
    Node gelu;
    gelu.id = last_id;
    gelu.name = name;
    gelu.op_type = "Gelu";
    gelu.inputs = {m.x};
    gelu.outputs = {m.y};
    last = std::move(gelu);
    removed[last_id] = false;
  }
  // Constant nodes that fed only the removed nodes go too.
  std::vector<int> live_readers(g.tensors.size(), 0);
  for (const Node& n : g.nodes) {
    if (removed[n.id]) continue;
    for (TensorId i : n.inputs) if (i != kNone) ++live_readers[i];
  }
  for (TensorId o : g.outputs) ++live_readers[o];
  for (Node& n : g.nodes) {
    if (removed[n.id] || n.op_type != "Constant") continue;
    bool read = false;
    for (TensorId o : n.outputs) read = read || (o != kNone && live_readers[o] > 0);
    if (!read && n.outputs[0] != kNone && !u.readers[n.outputs[0]].empty()) removed[n.id] = true;
  }

  // Drop the removed nodes and the tensors only they produced; renumber both.
  std::vector<bool> dead_tensor(g.tensors.size(), false);
  for (const Node& n : g.nodes) {
    if (!removed[n.id]) continue;
    for (TensorId o : n.outputs) if (o != kNone) dead_tensor[o] = true;
  }
  for (const Node& n : g.nodes) {
    if (removed[n.id]) continue;
    for (TensorId o : n.outputs) if (o != kNone) dead_tensor[o] = false;
  }
  std::vector<TensorId> new_id(g.tensors.size(), kNone);
  std::vector<Tensor> tensors;
  tensors.reserve(g.tensors.size());
  for (Tensor& t : g.tensors) {
    if (dead_tensor[t.id]) continue;
    new_id[t.id] = static_cast<TensorId>(tensors.size());
    tensors.push_back(std::move(t));
  }
  for (Tensor& t : tensors) {
    t.id = new_id[t.id];
    t.storage = t.storage == kNone ? kNone : new_id[t.storage];
    if (t.storage == kNone) t.storage = t.id;
  }
  auto remap = [&](std::vector<TensorId>& ids) {
    for (TensorId& i : ids) if (i != kNone) i = new_id[i];
  };
  std::vector<Node> nodes;
  nodes.reserve(g.nodes.size());
  for (Node& n : g.nodes) {
    if (removed[n.id]) continue;
    remap(n.inputs);
    remap(n.outputs);
    n.id = static_cast<NodeId>(nodes.size());
    nodes.push_back(std::move(n));
  }
  g.tensors = std::move(tensors);
  g.nodes = std::move(nodes);
  remap(g.inputs);
  remap(g.outputs);
  g.notes.push_back("fused " + std::to_string(fused.size()) +
                    " erf-GELU subgraph(s) (Div, Erf, Add, Mul, Mul, as TorchScript exports GELU before opset 20) "
                    "into Gelu, the op the source model runs: its backward saves only the input");
  return static_cast<int>(fused.size());
}

}  // namespace memplan
