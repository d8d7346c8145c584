// Composite ops an exporter spelled out, fused back into the one op PyTorch runs.
//
// TorchScript exports before opset 20 have no Gelu op and write erf-GELU as
// Div(x, √2) -> Erf -> Add(1) -> Mul(x, ·) -> Mul(0.5), and the tanh approximation (torch's
// approximate='tanh', GPT-2's "gelu_new") as 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))).
// Run op by op, autograd then saves x/√2, 1 + erf and x for the backward (three tensors of x's
// size per GELU: +12 MiB per block of gpt at batch 8), where the training program the model
// came from runs at::gelu, which saves x alone. Before opset 17 they write layer_norm as nine
// ops, whose backward keeps x - mean, the deviation and the normalised tensor instead of x and
// two per-row statistics. memplan models, and the executor runs, what that program runs. ONNX
// Runtime's training fuses the same patterns (GeluFusion, LayerNormFusion).
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "loader_internal.h"

namespace memplan {
namespace {

struct Uses {
  std::vector<NodeId> producer;              // per tensor
  std::vector<std::vector<NodeId>> readers;  // per tensor, one entry per input slot
  std::vector<bool> graph_output;
};

Uses UsesOf(const TrainingGraph& g) {
  Uses u;
  u.producer.assign(g.tensors.size(), kNone);
  u.readers.assign(g.tensors.size(), {});
  u.graph_output.assign(g.tensors.size(), false);
  for (const Node& n : g.nodes) {
    for (TensorId i : n.inputs)
      if (i != kNone) u.readers[i].push_back(n.id);
    for (TensorId o : n.outputs)
      if (o != kNone) u.producer[o] = n.id;
  }
  for (TensorId o : g.outputs) u.graph_output[o] = true;
  return u;
}

// A known scalar (any shape of one element) equal to `want` to its dtype's precision: an fp16
// or bf16 export stores √2 as 1.4140625, 1.1e-4 off (half an ulp: 4.9e-4 in fp16, 3.9e-3 in bf16).
bool IsScalar(const TrainingGraph& g, TensorId t, double want) {
  if (t == kNone) return false;
  const std::optional<ConstValue>& v = g.tensors[t].value;
  if (!v || v->numel() != 1 || (v->is_float() ? v->floats.size() : v->ints.size()) != 1)
    return false;
  const double tolerance = v->dtype == DType::kBFloat16  ? 4e-3
                           : v->dtype == DType::kFloat16 ? 5e-4
                                                         : 1e-6;
  return std::fabs(v->at(0) - want) <= tolerance * std::fabs(want);
}

// The node reading `t`, when it is the only reader and `t` is no graph output.
NodeId SoleReader(const Uses& u, TensorId t) {
  if (t == kNone || u.graph_output[t] || u.readers[t].size() != 1) return kNone;
  return u.readers[t][0];
}

// For a binary node reading `known`: the slot of its other input (0 or 1), or -1.
int OtherSlot(const Node& n, TensorId known) {
  if (n.inputs.size() != 2) return -1;
  if (n.inputs[0] == known) return 1;
  if (n.inputs[1] == known) return 0;
  return -1;
}

struct GeluMatch {
  TensorId x = kNone, y = kNone;
  std::vector<NodeId> nodes;  // the composite's nodes, the last one producing y
  std::string approximate;    // Gelu's attribute: "none" (erf) or "tanh"
};

// The binary op `op` producing `t`, read by `reader` alone, with a scalar `c` on one side:
// its other operand, or kNone.
TensorId ScaledBy(const TrainingGraph& g, const Uses& u, TensorId t, NodeId reader, const char* op,
                  double c, std::vector<NodeId>* nodes) {
  if (t == kNone || SoleReader(u, t) != reader) return kNone;
  const NodeId p = u.producer[t];
  if (p == kNone || g.nodes[p].op_type != op || g.nodes[p].inputs.size() != 2) return kNone;
  const Node& n = g.nodes[p];
  for (int s = 0; s < 2; ++s) {
    // Div by c only as x / c; Mul by c on either side.
    if ((s == 1 || n.op_type == "Mul") && IsScalar(g, n.inputs[s], c)) {
      nodes->push_back(p);
      return n.inputs[1 - s];
    }
  }
  return kNone;
}

// The binary `op` that alone reads `t`, with a scalar `c` as its other operand, or kNone.
NodeId ReaderWithScalar(const TrainingGraph& g, const Uses& u, TensorId t, const char* op,
                        double c) {
  const NodeId r = SoleReader(u, t);
  if (r == kNone || g.nodes[r].op_type != op) return kNone;
  const int other = OtherSlot(g.nodes[r], t);
  return other >= 0 && IsScalar(g, g.nodes[r].inputs[other], c) ? r : kNone;
}

// erf's argument x / √2 (a Div, or a Mul by 1/√2): x, or kNone.
TensorId ErfInput(const TrainingGraph& g, const Uses& u, const Node& e,
                  std::vector<NodeId>* nodes) {
  TensorId x = ScaledBy(g, u, e.inputs[0], e.id, "Div", std::sqrt(2.0), nodes);
  if (x == kNone) x = ScaledBy(g, u, e.inputs[0], e.id, "Mul", 1.0 / std::sqrt(2.0), nodes);
  return x;
}

// tanh's argument √(2/π) (x + 0.044715 x³), the cube a Pow(x, 3) or Mul(x, Mul(x, x)): x, or kNone.
TensorId TanhInput(const TrainingGraph& g, const Uses& u, const Node& e,
                   std::vector<NodeId>* nodes) {
  constexpr double kPi = 3.14159265358979323846;
  const TensorId sum = ScaledBy(g, u, e.inputs[0], e.id, "Mul", std::sqrt(2.0 / kPi), nodes);
  const NodeId add_id = sum == kNone ? kNone : u.producer[sum];
  if (add_id == kNone || SoleReader(u, sum) != nodes->back() || g.nodes[add_id].op_type != "Add" ||
      g.nodes[add_id].inputs.size() != 2) {
    return kNone;
  }
  const Node& add = g.nodes[add_id];
  nodes->push_back(add_id);
  for (int s = 0; s < 2; ++s) {
    const TensorId x = add.inputs[s];
    std::vector<NodeId> cube_nodes;
    const TensorId cube = ScaledBy(g, u, add.inputs[1 - s], add_id, "Mul", 0.044715, &cube_nodes);
    const NodeId c =
        cube == kNone || SoleReader(u, cube) != cube_nodes.back() ? kNone : u.producer[cube];
    if (x == kNone || c == kNone || g.nodes[c].inputs.size() != 2) continue;
    const Node& cn = g.nodes[c];
    bool is_cube = false;
    if (cn.op_type == "Pow") {
      is_cube = cn.inputs[0] == x && IsScalar(g, cn.inputs[1], 3.0);
    } else if (cn.op_type == "Mul") {
      // Mul(x, x²) with x² = Mul(x, x) read by it alone.
      for (int k = 0; k < 2 && !is_cube; ++k) {
        const TensorId sq = cn.inputs[1 - k];
        const NodeId q = sq == kNone ? kNone : u.producer[sq];
        if (cn.inputs[k] == x && q != kNone && SoleReader(u, sq) == c &&
            g.nodes[q].op_type == "Mul" && g.nodes[q].inputs.size() == 2 &&
            g.nodes[q].inputs[0] == x && g.nodes[q].inputs[1] == x) {
          is_cube = true;
          cube_nodes.push_back(q);
        }
      }
    }
    if (!is_cube) continue;
    cube_nodes.push_back(c);
    nodes->insert(nodes->end(), cube_nodes.begin(), cube_nodes.end());
    return x;
  }
  return kNone;
}

// Matches GELU around its Erf or Tanh node `e`: y = x * (1 + erf(x / √2)) * 0.5, or the tanh
// approximation, the scaling by 0.5 applied to x or to the product.
std::optional<GeluMatch> MatchGelu(const TrainingGraph& g, const Uses& u, const Node& e) {
  if ((e.op_type != "Erf" && e.op_type != "Tanh") || e.inputs.size() != 1 || e.outputs.size() != 1)
    return std::nullopt;
  if (e.inputs[0] == kNone || e.outputs[0] == kNone) return std::nullopt;
  GeluMatch m;
  m.approximate = e.op_type == "Erf" ? "none" : "tanh";
  const TensorId x =
      e.op_type == "Erf" ? ErfInput(g, u, e, &m.nodes) : TanhInput(g, u, e, &m.nodes);
  if (x == kNone || !IsFloating(g.tensors[x].dtype)) return std::nullopt;
  m.x = x;
  m.nodes.push_back(e.id);

  const NodeId plus_id = ReaderWithScalar(g, u, e.outputs[0], "Add", 1.0);
  if (plus_id == kNone) return std::nullopt;
  const Node& plus = g.nodes[plus_id];
  m.nodes.push_back(plus_id);
  // The product with x, then 0.5: Mul(Mul(x, 1 + erf), 0.5).
  const NodeId times_id = SoleReader(u, plus.outputs[0]);
  if (times_id == kNone || g.nodes[times_id].op_type != "Mul") return std::nullopt;
  const Node& times = g.nodes[times_id];
  const int other = OtherSlot(times, plus.outputs[0]);
  if (other < 0) return std::nullopt;
  if (times.inputs[other] == x) {
    const NodeId half_id = ReaderWithScalar(g, u, times.outputs[0], "Mul", 0.5);
    if (half_id == kNone) return std::nullopt;
    m.nodes.push_back(times_id);
    m.nodes.push_back(half_id);
    m.y = g.nodes[half_id].outputs[0];
  } else {
    // Mul(Mul(x, 0.5), 1 + erf): the halved x must be read by this product alone.
    if (ScaledBy(g, u, times.inputs[other], times_id, "Mul", 0.5, &m.nodes) != x)
      return std::nullopt;
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

// A ReduceMean keeping dims over the trailing `k` axes of a rank-`rank` input: k, or 0.
int TrailingMeanAxes(const TrainingGraph& g, const Node& n, size_t rank) {
  if (n.op_type != "ReduceMean" || n.attr_int("keepdims", 1) != 1 || n.inputs.empty()) return 0;
  std::vector<int64_t> axes = n.attr_ints("axes");
  if (n.inputs.size() > 1 && n.inputs[1] != kNone) {  // opset 18: axes as an input
    const std::optional<ConstValue>& v = g.tensors[n.inputs[1]].value;
    if (!v || v->is_float()) return 0;
    axes = v->ints;
  }
  if (axes.empty()) return 0;
  std::set<int64_t> norm;
  for (int64_t a : axes) norm.insert(a < 0 ? a + static_cast<int64_t>(rank) : a);
  const int64_t k = static_cast<int64_t>(norm.size());
  if (k > static_cast<int64_t>(rank) || *norm.begin() != static_cast<int64_t>(rank) - k ||
      *norm.rbegin() != static_cast<int64_t>(rank) - 1)
    return 0;
  return static_cast<int>(k);
}

// The node producing `t` when it is an `op` read by `reader` alone, or nullptr.
const Node* SoleProducer(const TrainingGraph& g, const Uses& u, TensorId t, NodeId reader,
                         const char* op) {
  if (t == kNone || SoleReader(u, t) != reader) return nullptr;
  const NodeId p = u.producer[t];
  return p != kNone && g.nodes[p].op_type == op ? &g.nodes[p] : nullptr;
}

struct LayerNormMatch {
  TensorId x = kNone, scale = kNone, bias = kNone, y = kNone;
  int64_t axis = -1;
  double epsilon = 0;
  std::vector<NodeId> nodes;  // the last one produces y
};

// Matches layer normalisation as TorchScript exports it before opset 17, around its Sqrt:
// d = x - ReduceMean(x); s = Sqrt(ReduceMean(Pow(d, 2)) + eps); y = d / s * scale + bias, the
// means over the trailing axes. LayerNormalization keeps x, mean and 1/std for the backward;
// op by op autograd keeps d, s and d / s.
std::optional<LayerNormMatch> MatchLayerNorm(const TrainingGraph& g, const Uses& u,
                                             const Node& sq) {
  if (sq.op_type != "Sqrt" || sq.inputs.size() != 1 || sq.outputs.size() != 1 ||
      sq.outputs[0] == kNone)
    return std::nullopt;
  LayerNormMatch m;
  const Node* plus = SoleProducer(g, u, sq.inputs[0], sq.id, "Add");
  if (!plus || plus->inputs.size() != 2) return std::nullopt;
  const Node* var = nullptr;
  for (int k = 0; k < 2 && !var; ++k) {
    const std::optional<ConstValue>& e =
        plus->inputs[k] == kNone ? std::nullopt : g.tensors[plus->inputs[k]].value;
    if (!e || e->numel() != 1 || !e->is_float() || e->floats.size() != 1) continue;
    var = SoleProducer(g, u, plus->inputs[1 - k], plus->id, "ReduceMean");
    m.epsilon = e->floats[0];
  }
  if (!var || m.epsilon < 0) return std::nullopt;
  const Node* pow = SoleProducer(g, u, var->inputs[0], var->id, "Pow");
  if (!pow || pow->inputs.size() != 2 || !IsScalar(g, pow->inputs[1], 2.0)) return std::nullopt;
  const TensorId d = pow->inputs[0];
  const NodeId sub_id = d == kNone ? kNone : u.producer[d];
  if (sub_id == kNone || g.nodes[sub_id].op_type != "Sub" || g.nodes[sub_id].inputs.size() != 2)
    return std::nullopt;
  const Node& sub = g.nodes[sub_id];
  const TensorId x = sub.inputs[0];
  const Node* mean = SoleProducer(g, u, sub.inputs[1], sub_id, "ReduceMean");
  if (x == kNone || !mean || mean->inputs[0] != x || !IsFloating(g.tensors[x].dtype))
    return std::nullopt;
  const size_t rank = g.tensors[x].shape.size();
  const int k = TrailingMeanAxes(g, *mean, rank);
  if (k == 0 || TrailingMeanAxes(g, *var, rank) != k) return std::nullopt;
  // d is read by the Pow and by the division, nothing else.
  const NodeId div_id = SoleReader(u, sq.outputs[0]);
  if (div_id == kNone || g.nodes[div_id].op_type != "Div" || g.nodes[div_id].inputs.size() != 2 ||
      g.nodes[div_id].inputs[0] != d || g.nodes[div_id].inputs[1] != sq.outputs[0] ||
      u.graph_output[d] || u.readers[d].size() != 2) {
    return std::nullopt;
  }
  const Node& div = g.nodes[div_id];
  // The affine part: scale and bias of the normalised dims' shape. LayerNormalization needs a
  // scale, so an unscaled normalisation stays as it is.
  const std::vector<int64_t> normalized(g.tensors[x].shape.end() - k, g.tensors[x].shape.end());
  auto affine = [&](TensorId t, NodeId reader, const char* op, TensorId* param) {
    if (t == kNone || SoleReader(u, t) != reader) return false;
    const Node& n = g.nodes[reader];
    if (n.op_type != op || n.inputs.size() != 2) return false;
    const int other = OtherSlot(n, t);
    if (other < 0 || n.inputs[other] == kNone || g.tensors[n.inputs[other]].shape != normalized)
      return false;
    *param = n.inputs[other];
    return true;
  };
  const NodeId mul_id = SoleReader(u, div.outputs[0]);
  if (mul_id == kNone || !affine(div.outputs[0], mul_id, "Mul", &m.scale)) return std::nullopt;
  m.nodes = {mean->id, sub_id, pow->id, var->id, plus->id, sq.id, div_id, mul_id};
  m.y = g.nodes[mul_id].outputs[0];
  const NodeId add_id = SoleReader(u, m.y);
  if (add_id != kNone && affine(m.y, add_id, "Add", &m.bias)) {
    m.nodes.push_back(add_id);
    m.y = g.nodes[add_id].outputs[0];
  }
  if (g.tensors[m.y].shape != g.tensors[x].shape || g.tensors[m.y].dtype != g.tensors[x].dtype)
    return std::nullopt;
  for (NodeId n : m.nodes) {
    if (g.nodes[n].outputs.size() != 1 || g.nodes[n].outputs[0] == kNone) return std::nullopt;
  }
  m.x = x;
  m.axis = static_cast<int64_t>(rank) - k;
  return m;
}

struct RmsNormMatch {
  TensorId x = kNone, scale = kNone, y = kNone;
  int64_t axis = -1;
  double epsilon = 0;
  std::vector<NodeId> nodes;  // the last one produces y
};

// The scalar epsilon added to a ReduceMean's output by `plus`: the ReduceMean, or nullptr.
const Node* MeanPlusEpsilon(const TrainingGraph& g, const Uses& u, const Node& plus,
                            double* epsilon) {
  if (plus.op_type != "Add" || plus.inputs.size() != 2) return nullptr;
  for (int k = 0; k < 2; ++k) {
    const std::optional<ConstValue>& e =
        plus.inputs[k] == kNone ? std::nullopt : g.tensors[plus.inputs[k]].value;
    if (!e || e->numel() != 1 || !e->is_float() || e->floats.size() != 1 || e->floats[0] < 0)
      continue;
    if (const Node* mean = SoleProducer(g, u, plus.inputs[1 - k], plus.id, "ReduceMean")) {
      *epsilon = e->floats[0];
      return mean;
    }
  }
  return nullptr;
}

// Matches RMS normalisation as the dynamo exporter writes torch's rms_norm and Hugging Face's
// LlamaRMSNorm, around its Sqrt: r = 1 / Sqrt(ReduceMean(Pow(x, 2)) + eps) (a Reciprocal, or a
// Div of 1), then x * r and the product with a scale of the normalised axes' shape (either
// order), or x / Sqrt(...) * scale; the mean over trailing axes. The intermediates have no
// other reader. Op by op autograd keeps the root, its inverse and x * r; at::rms_norm keeps x,
// 1/rms and the normalised tensor.
std::optional<RmsNormMatch> MatchRmsNorm(const TrainingGraph& g, const Uses& u, const Node& sq) {
  if (sq.op_type != "Sqrt" || sq.inputs.size() != 1 || sq.outputs.size() != 1 ||
      sq.outputs[0] == kNone)
    return std::nullopt;
  RmsNormMatch m;
  const NodeId plus_id = sq.inputs[0] == kNone ? kNone : u.producer[sq.inputs[0]];
  if (plus_id == kNone || SoleReader(u, sq.inputs[0]) != sq.id) return std::nullopt;
  const Node* mean = MeanPlusEpsilon(g, u, g.nodes[plus_id], &m.epsilon);
  if (!mean) return std::nullopt;
  const Node* pow = SoleProducer(g, u, mean->inputs[0], mean->id, "Pow");
  if (!pow || pow->inputs.size() != 2 || !IsScalar(g, pow->inputs[1], 2.0)) return std::nullopt;
  const TensorId x = pow->inputs[0];
  if (x == kNone || !IsFloating(g.tensors[x].dtype)) return std::nullopt;
  const size_t rank = g.tensors[x].shape.size();
  const int k = TrailingMeanAxes(g, *mean, rank);
  if (k == 0) return std::nullopt;
  m.nodes = {pow->id, mean->id, plus_id, sq.id};
  // x * (1 / s), or x / s.
  const NodeId after_sqrt = SoleReader(u, sq.outputs[0]);
  if (after_sqrt == kNone) return std::nullopt;
  const Node& inv = g.nodes[after_sqrt];
  TensorId normed = kNone;
  NodeId normed_id = kNone;
  if (inv.op_type == "Div" && inv.inputs.size() == 2 && inv.inputs[0] == x &&
      inv.inputs[1] == sq.outputs[0]) {
    normed_id = after_sqrt;
  } else {
    const bool reciprocal = inv.op_type == "Reciprocal" && inv.inputs.size() == 1;
    const bool one_over = inv.op_type == "Div" && inv.inputs.size() == 2 &&
                          inv.inputs[1] == sq.outputs[0] && IsScalar(g, inv.inputs[0], 1.0);
    if ((!reciprocal && !one_over) || inv.outputs.size() != 1 || inv.outputs[0] == kNone)
      return std::nullopt;
    m.nodes.push_back(after_sqrt);
    normed_id = SoleReader(u, inv.outputs[0]);
    if (normed_id == kNone || g.nodes[normed_id].op_type != "Mul" ||
        OtherSlot(g.nodes[normed_id], inv.outputs[0]) < 0 ||
        g.nodes[normed_id].inputs[OtherSlot(g.nodes[normed_id], inv.outputs[0])] != x) {
      return std::nullopt;
    }
  }
  m.nodes.push_back(normed_id);
  normed = g.nodes[normed_id].outputs.empty() ? kNone : g.nodes[normed_id].outputs[0];
  if (normed == kNone) return std::nullopt;
  // The scale: RMSNormalization needs one, so an unscaled normalisation stays as it is.
  const std::vector<int64_t> normalized(g.tensors[x].shape.end() - k, g.tensors[x].shape.end());
  const NodeId mul_id = SoleReader(u, normed);
  if (mul_id == kNone || g.nodes[mul_id].op_type != "Mul") return std::nullopt;
  const int other = OtherSlot(g.nodes[mul_id], normed);
  if (other < 0) return std::nullopt;
  const TensorId scale = g.nodes[mul_id].inputs[other];
  if (scale == kNone || g.tensors[scale].shape != normalized ||
      g.tensors[scale].dtype != g.tensors[x].dtype)
    return std::nullopt;
  m.nodes.push_back(mul_id);
  m.scale = scale;
  m.y = g.nodes[mul_id].outputs.empty() ? kNone : g.nodes[mul_id].outputs[0];
  if (m.y == kNone || g.tensors[m.y].shape != g.tensors[x].shape ||
      g.tensors[m.y].dtype != g.tensors[x].dtype)
    return std::nullopt;
  for (NodeId n : m.nodes) {
    if (g.nodes[n].outputs.size() != 1 || g.nodes[n].outputs[0] == kNone) return std::nullopt;
  }
  m.x = x;
  m.axis = static_cast<int64_t>(rank) - k;
  return m;
}

// SiLU as the dynamo exporter writes F.silu and Hugging Face's "silu" activation: Mul(x,
// Sigmoid(x)), either order, the sigmoid read by the product alone. Op by op autograd keeps x and
// sigmoid(x); at::silu keeps x.
struct SiluMatch {
  TensorId x = kNone, y = kNone;
  std::vector<NodeId> nodes;
};
std::optional<SiluMatch> MatchSilu(const TrainingGraph& g, const Uses& u, const Node& s) {
  if (s.op_type != "Sigmoid" || s.inputs.size() != 1 || s.outputs.size() != 1 ||
      s.inputs[0] == kNone || s.outputs[0] == kNone) {
    return std::nullopt;
  }
  const TensorId x = s.inputs[0];
  if (!IsFloating(g.tensors[x].dtype)) return std::nullopt;
  const NodeId mul_id = SoleReader(u, s.outputs[0]);
  if (mul_id == kNone || g.nodes[mul_id].op_type != "Mul") return std::nullopt;
  const Node& mul = g.nodes[mul_id];
  const int other = OtherSlot(mul, s.outputs[0]);
  if (other < 0 || mul.inputs[other] != x || mul.outputs.size() != 1 || mul.outputs[0] == kNone)
    return std::nullopt;
  const Tensor& ty = g.tensors[mul.outputs[0]];
  if (ty.shape != g.tensors[x].shape || ty.dtype != g.tensors[x].dtype) return std::nullopt;
  return SiluMatch{x, mul.outputs[0], {s.id, mul_id}};
}

// Attention as the dynamo exporter writes scaled_dot_product_attention (opset 20) and as
// TorchScript writes it by hand: MatMul(Q, K^T), an optional scaling (Mul or Div by a scalar), an
// optional additive mask (Add of a tensor that needs no gradient), Softmax over the last axis, the
// optional replacement of NaN rows by 0 (IsNaN, Where(·, 0, p)), MatMul(·, V). Q [..., T, d], K^T
// [..., d, S] and V [..., S, dv] of one batch shape, rank 4. Op by op autograd keeps the T x S
// probabilities (the softmax's output, the second MatMul's operand) and the NaN mask; PyTorch's
// scaled_dot_product_attention (flash attention on the CPU and on CUDA) keeps Q, K, V, its output
// and one log-sum-exp per row.
// Whether each tensor depends on a trainable parameter (fusion runs before gradients are known).
std::vector<bool> DependsOnParameters(const TrainingGraph& g) {
  std::vector<bool> dep = TrainableInitializers(g);
  for (const Node& n : g.nodes) {
    bool any = false;
    for (TensorId i : n.inputs) any = any || (i != kNone && dep[i]);
    for (TensorId o : n.outputs) {
      if (o != kNone) dep[o] = any && IsFloating(g.tensors[o].dtype);
    }
  }
  return dep;
}

struct AttentionMatch {
  TensorId q = kNone, kt = kNone, v = kNone, mask = kNone, y = kNone;
  double scale = 1.0;
  bool nan_to_zero = false;
  std::vector<NodeId> nodes;
};
std::optional<AttentionMatch> MatchAttention(const TrainingGraph& g, const Uses& u,
                                             const std::vector<bool>& trained, const Node& sm) {
  if (sm.op_type != "Softmax" || sm.inputs.size() != 1 || sm.outputs.size() != 1 ||
      sm.inputs[0] == kNone || sm.outputs[0] == kNone) {
    return std::nullopt;
  }
  const int64_t rank = static_cast<int64_t>(g.tensors[sm.inputs[0]].shape.size());
  if (rank != 4 || (sm.attr_int("axis", -1) != -1 && sm.attr_int("axis", -1) != rank - 1))
    return std::nullopt;
  AttentionMatch m;
  std::vector<NodeId> before;  // from the first MatMul to the softmax, in reverse
  TensorId t = sm.inputs[0];
  NodeId reader = sm.id;
  NodeId p = u.producer[t];
  if (p == kNone || SoleReader(u, t) != reader) return std::nullopt;
  if (g.nodes[p].op_type == "Add" && g.nodes[p].inputs.size() == 2) {
    const Node& add = g.nodes[p];
    for (int k = 0; k < 2 && m.mask == kNone; ++k) {
      const TensorId other = add.inputs[1 - k];
      const NodeId q = add.inputs[k] == kNone ? kNone : u.producer[add.inputs[k]];
      if (other == kNone || q == kNone || trained[other] || !IsFloating(g.tensors[other].dtype))
        continue;
      if (g.nodes[q].op_type != "MatMul" && g.nodes[q].op_type != "Mul" &&
          g.nodes[q].op_type != "Div")
        continue;
      m.mask = other;
      before.push_back(p);
      reader = p;
      t = add.inputs[k];
      p = q;
    }
    if (m.mask == kNone || SoleReader(u, t) != reader) return std::nullopt;
  }
  if (g.nodes[p].op_type == "Mul" || g.nodes[p].op_type == "Div") {
    std::vector<NodeId> scaled;
    const Node& sc = g.nodes[p];
    TensorId inner = kNone;
    for (int k = 0; k < 2 && inner == kNone; ++k) {
      const TensorId c = sc.inputs.size() == 2 ? sc.inputs[k] : kNone;
      const std::optional<ConstValue>& v = c == kNone ? std::nullopt : g.tensors[c].value;
      if (!v || v->numel() != 1 || !v->is_float() || v->floats.size() != 1 || v->floats[0] == 0)
        continue;
      if (sc.op_type == "Div" && k == 0) continue;  // c / s is no scaling
      inner = sc.inputs[1 - k];
      m.scale = sc.op_type == "Mul" ? v->floats[0] : 1.0 / v->floats[0];
    }
    if (inner == kNone || SoleReader(u, inner) != p) return std::nullopt;
    before.push_back(p);
    reader = p;
    t = inner;
    p = u.producer[t];
    if (p == kNone) return std::nullopt;
  }
  const Node& mm = g.nodes[p];
  if (mm.op_type != "MatMul" || mm.inputs.size() != 2 || SoleReader(u, t) != reader)
    return std::nullopt;
  before.push_back(p);
  m.q = mm.inputs[0];
  m.kt = mm.inputs[1];
  // After the softmax: the optional NaN replacement, then the product with V.
  TensorId probs = sm.outputs[0];
  std::vector<NodeId> after;
  const std::vector<NodeId>& readers = u.readers[probs];
  if (!u.graph_output[probs] && readers.size() == 2) {
    NodeId isnan = kNone, where = kNone;
    for (NodeId r : readers) (g.nodes[r].op_type == "IsNaN" ? isnan : where) = r;
    if (isnan == kNone || where == kNone || g.nodes[where].op_type != "Where" ||
        g.nodes[where].inputs.size() != 3 || g.nodes[isnan].outputs.size() != 1 ||
        SoleReader(u, g.nodes[isnan].outputs[0]) != where ||
        g.nodes[where].inputs[0] != g.nodes[isnan].outputs[0] ||
        g.nodes[where].inputs[2] != probs || !IsScalar(g, g.nodes[where].inputs[1], 0.0)) {
      return std::nullopt;
    }
    after = {isnan, where};
    probs = g.nodes[where].outputs.empty() ? kNone : g.nodes[where].outputs[0];
    m.nan_to_zero = true;
  }
  const NodeId mm2_id = SoleReader(u, probs);
  if (mm2_id == kNone || g.nodes[mm2_id].op_type != "MatMul" ||
      g.nodes[mm2_id].inputs.size() != 2 || g.nodes[mm2_id].inputs[0] != probs ||
      g.nodes[mm2_id].outputs.empty()) {
    return std::nullopt;
  }
  m.v = g.nodes[mm2_id].inputs[1];
  m.y = g.nodes[mm2_id].outputs[0];
  if (m.q == kNone || m.kt == kNone || m.v == kNone || m.y == kNone) return std::nullopt;
  const std::vector<int64_t>& qs = g.tensors[m.q].shape;
  const std::vector<int64_t>& ks = g.tensors[m.kt].shape;
  const std::vector<int64_t>& vs = g.tensors[m.v].shape;
  if (qs.size() != 4 || ks.size() != 4 || vs.size() != 4) return std::nullopt;
  for (int d = 0; d < 2; ++d) {
    if (ks[d] != qs[d] || vs[d] != qs[d]) return std::nullopt;
  }
  if (qs[3] != ks[2] || ks[3] != vs[2]) return std::nullopt;
  const DType dt = g.tensors[m.q].dtype;
  if (!IsFloating(dt) || g.tensors[m.kt].dtype != dt || g.tensors[m.v].dtype != dt ||
      g.tensors[m.y].dtype != dt) {
    return std::nullopt;
  }
  if (m.mask != kNone) {
    // The mask broadcasts to [..., T, S].
    const std::vector<int64_t>& ms = g.tensors[m.mask].shape;
    const std::vector<int64_t> full = {qs[0], qs[1], qs[2], ks[3]};
    if (ms.size() > 4) return std::nullopt;
    for (size_t d = 0; d < ms.size(); ++d) {
      const int64_t want = full[4 - ms.size() + d];
      if (ms[d] != 1 && ms[d] != want) return std::nullopt;
    }
    if (g.tensors[m.mask].dtype != dt) return std::nullopt;
  }
  m.nodes.assign(before.rbegin(), before.rend());
  m.nodes.push_back(sm.id);
  m.nodes.insert(m.nodes.end(), after.begin(), after.end());
  m.nodes.push_back(mm2_id);
  for (NodeId n : m.nodes) {
    if (g.nodes[n].outputs.size() != 1 || g.nodes[n].outputs[0] == kNone) return std::nullopt;
  }
  return m;
}

// A name for the fused node: the composite's scope (what precedes the last '/') and its op,
// unless a node already has it; then the last node's name.
std::string FusedName(const Node& last, const std::string& op, const std::set<std::string>& taken) {
  const size_t slash = last.name.rfind('/');
  if (slash != std::string::npos) {
    const std::string name = last.name.substr(0, slash + 1) + op;
    if (!taken.count(name)) return name;
  }
  return last.name;
}

Attribute StringAttribute(const std::string& s) {
  Attribute a;
  a.kind = Attribute::Kind::kString;
  a.s = s;
  return a;
}

struct Fusion {
  std::vector<NodeId> nodes;  // replaced; the last one's place takes `node`
  Node node;                  // op, inputs, outputs, attributes
  std::string what;           // for the note
};

std::optional<Fusion> MatchAny(const TrainingGraph& g, const Uses& u,
                               const std::vector<bool>& trained, const Node& n) {
  if (std::optional<GeluMatch> m = MatchGelu(g, u, n)) {
    Fusion f{m->nodes, {}, m->approximate == "tanh" ? "tanh-GELU" : "erf-GELU"};
    f.node.op_type = "Gelu";
    f.node.inputs = {m->x};
    f.node.outputs = {m->y};
    if (m->approximate != "none")
      f.node.attributes["approximate"] = StringAttribute(m->approximate);
    return f;
  }
  if (std::optional<LayerNormMatch> m = MatchLayerNorm(g, u, n)) {
    Fusion f{m->nodes, {}, "layer normalisation"};
    f.node.op_type = "LayerNormalization";
    f.node.inputs = {m->x, m->scale};
    if (m->bias != kNone) f.node.inputs.push_back(m->bias);
    f.node.outputs = {m->y};
    Attribute axis;
    axis.kind = Attribute::Kind::kInt;
    axis.i = m->axis;
    f.node.attributes["axis"] = axis;
    Attribute eps;
    eps.kind = Attribute::Kind::kFloat;
    eps.f = m->epsilon;
    f.node.attributes["epsilon"] = eps;
    return f;
  }
  if (std::optional<RmsNormMatch> m = MatchRmsNorm(g, u, n)) {
    Fusion f{m->nodes, {}, "RMS normalisation"};
    f.node.op_type = "RMSNormalization";
    f.node.inputs = {m->x, m->scale};
    f.node.outputs = {m->y};
    Attribute axis;
    axis.kind = Attribute::Kind::kInt;
    axis.i = m->axis;
    f.node.attributes["axis"] = axis;
    Attribute eps;
    eps.kind = Attribute::Kind::kFloat;
    eps.f = m->epsilon;
    f.node.attributes["epsilon"] = eps;
    return f;
  }
  if (std::optional<AttentionMatch> m = MatchAttention(g, u, trained, n)) {
    Fusion f{m->nodes, {}, "attention"};
    f.node.op_type = "memplan.ScaledDotProductAttention";
    f.node.inputs = {m->q, m->kt, m->v};
    if (m->mask != kNone) f.node.inputs.push_back(m->mask);
    f.node.outputs = {m->y};
    Attribute scale;
    scale.kind = Attribute::Kind::kFloat;
    scale.f = m->scale;
    f.node.attributes["scale"] = scale;
    Attribute nan;
    nan.kind = Attribute::Kind::kInt;
    nan.i = m->nan_to_zero ? 1 : 0;
    f.node.attributes["nan_to_zero"] = nan;
    return f;
  }
  if (std::optional<SiluMatch> m = MatchSilu(g, u, n)) {
    Fusion f{m->nodes, {}, "SiLU"};
    f.node.op_type = "Swish";  // ONNX's name (opset 24), alpha 1: x * sigmoid(x)
    f.node.inputs = {m->x};
    f.node.outputs = {m->y};
    return f;
  }
  return std::nullopt;
}

}  // namespace

int FuseCompositeOps(TrainingGraph& g) {
  const Uses u = UsesOf(g);
  const std::vector<bool> trained = DependsOnParameters(g);
  std::vector<bool> removed(g.nodes.size(), false);
  std::set<std::string> taken;
  for (const Node& n : g.nodes) taken.insert(n.name);
  std::vector<Fusion> fused;
  for (const Node& n : g.nodes) {
    std::optional<Fusion> f = MatchAny(g, u, trained, n);
    if (!f) continue;
    bool overlaps = false;
    for (NodeId k : f->nodes) overlaps = overlaps || removed[k];
    if (overlaps) continue;
    for (NodeId k : f->nodes) removed[k] = true;
    fused.push_back(std::move(*f));
  }
  if (fused.empty()) return 0;

  std::map<std::string, int> counts;
  for (Fusion& f : fused) {
    const NodeId last_id = f.nodes.back();
    Node& last = g.nodes[last_id];
    f.node.id = last_id;
    f.node.name = FusedName(last, f.node.op_type, taken);
    taken.insert(f.node.name);
    last = std::move(f.node);
    removed[last_id] = false;
    ++counts[f.what];
  }
  // Constant nodes that fed only the removed nodes go too.
  std::vector<int> live_readers(g.tensors.size(), 0);
  for (const Node& n : g.nodes) {
    if (removed[n.id]) continue;
    for (TensorId i : n.inputs)
      if (i != kNone) ++live_readers[i];
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
    for (TensorId o : n.outputs)
      if (o != kNone) dead_tensor[o] = true;
  }
  for (const Node& n : g.nodes) {
    if (removed[n.id]) continue;
    for (TensorId o : n.outputs)
      if (o != kNone) dead_tensor[o] = false;
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
    for (TensorId& i : ids)
      if (i != kNone) i = new_id[i];
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
  std::string what;
  for (const auto& [kind, n] : counts)
    what += (what.empty() ? "" : ", ") + std::to_string(n) + " " + kind;
  g.notes.push_back(
      "fused " + what +
      " subgraph(s) (written op by op, as TorchScript exports them before opsets 17 and 20 and the "
      "dynamo exporter before opsets 23 and 24) into the one op the source model runs (Gelu, "
      "LayerNormalization, RMSNormalization, Swish for SiLU, scaled-dot-product attention): "
      "autograd keeps less for "
      "the backward");
  return static_cast<int>(fused.size());
}

}  // namespace memplan
