// What each op's backward saves, mirroring LibTorch autograd (derivatives.yaml; 2.11 to 2.14,
// measured on the pinned 2.14.1) for the ATen op the executor lowers it to.
#include <algorithm>

#include "op_rules_internal.h"

namespace memplan {
namespace rules {

void SavesInputs01(const Node&, const std::vector<Tensor>&, const std::vector<bool>&, SaveSpec& s) {
  s.inputs = {0, 1};  // convolution: input and weight
}
void SavesInput0(const Node&, const std::vector<Tensor>&, const std::vector<bool>&, SaveSpec& s) {
  s.inputs = {0};
}
void SavesOutput0(const Node&, const std::vector<Tensor>&, const std::vector<bool>&, SaveSpec& s) {
  s.outputs = {0};
}
void SavesBothInputs(const Node&, const std::vector<Tensor>&, const std::vector<bool>&,
                     SaveSpec& s) {
  s.inputs = {0, 1};
}
// mul / matmul / mm: the gradient of one operand needs the other.
void SavesOtherOperand(const Node&, const std::vector<Tensor>&, const std::vector<bool>& g,
                       SaveSpec& s) {
  if (g[0]) s.inputs.push_back(1);
  if (g[1]) s.inputs.push_back(0);
}
// at::matmul (LibTorch LinearAlgebra.cpp) is composite: autograd saves what the
// mm / bmm it calls receives. Both operands of rank <= 2: mm / mv on the operands. Rank >= 3
// times a matrix: the batch is folded into the rows of tensor1.contiguous().view(-1, k).
// Otherwise each operand is expanded to the broadcast batch and reshaped to [batch, n, m]
// for bmm. Where that reshape (or contiguous()) cannot be a view, the operand is copied
// into a new buffer, and the copy, not the operand, is what backward keeps.
void SavesMatMul(const Node& n, const std::vector<Tensor>& t, const std::vector<bool>& g,
                 SaveSpec& s) {
  const Tensor& a = t[n.inputs[0]];
  const Tensor& b = t[n.inputs[1]];
  const size_t ra = a.shape.size(), rb = b.shape.size();
  auto keep = [&](int i, bool is_view, const std::vector<int64_t>& mm_shape) {
    const Tensor& x = t[n.inputs[i]];
    if (is_view)
      s.inputs.push_back(i);
    else
      s.extras.push_back({i == 0 ? "contiguous copy of A" : "contiguous copy of B", x.dtype,
                          mm_shape, Numel(mm_shape) * static_cast<int64_t>(DTypeSize(x.dtype))});
  };
  if ((ra <= 2 && rb <= 2) || ra == 1 || rb == 1) return SavesOtherOperand(n, t, g, s);
  if (rb == 2) {  // fold: mm(tensor1.contiguous().view(-1, k), tensor2)
    if (g[0]) s.inputs.push_back(1);
    if (g[1])
      keep(0, IsContiguousLayout(a.shape, StridesOf(a)),
           {a.numel() / std::max<int64_t>(a.shape.back(), 1), a.shape.back()});
    return;
  }
  std::vector<int64_t> ba(a.shape.begin(), a.shape.end() - 2),
      bb(b.shape.begin(), b.shape.end() - 2);
  size_t r = std::max(ba.size(), bb.size());
  std::vector<int64_t> batch(r, 1);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - ba.size() ? 1 : ba[i - (r - ba.size())];
    int64_t db = i < r - bb.size() ? 1 : bb[i - (r - bb.size())];
    batch[i] = da == 1 ? db : da;
  }
  auto bmm_operand = [&](int i) {  // tensor.expand(batch + [rows, cols]).reshape([B, rows, cols])
    const Tensor& x = t[n.inputs[i]];
    std::vector<int64_t> exp = batch;
    exp.insert(exp.end(), x.shape.end() - 2, x.shape.end());
    std::vector<int64_t> st = StridesOf(x), est(exp.size(), 0);
    size_t off = exp.size() - x.shape.size();
    for (size_t d = 0; d < x.shape.size(); ++d)
      est[off + d] = (x.shape[d] == 1 && exp[off + d] != 1) ? 0 : st[d];
    std::vector<int64_t> bmm = {Numel(batch), x.shape[x.shape.size() - 2], x.shape.back()}, unused;
    keep(i, ViewStrides(exp, est, bmm, &unused), bmm);
  };
  if (g[0]) bmm_operand(1);
  if (g[1]) bmm_operand(0);
}
void SavesGemm(const Node& n, const std::vector<Tensor>&, const std::vector<bool>& g, SaveSpec& s) {
  // addmm(C, A, B): grad A needs B, grad B needs A.
  if (g[0]) s.inputs.push_back(1);
  if (g[1]) s.inputs.push_back(0);
}
void SavesDiv(const Node&, const std::vector<Tensor>&, const std::vector<bool>& g, SaveSpec& s) {
  if (g[0] || g[1]) s.inputs.push_back(1);
  if (g[1]) s.inputs.push_back(0);
}
void SavesPow(const Node& n, const std::vector<Tensor>& t, const std::vector<bool>& g,
              SaveSpec& s) {
  s.inputs = {0};
  if (g[1]) {
    s.inputs.push_back(1);
    s.outputs.push_back(0);
  }
}
void SavesWhere(const Node&, const std::vector<Tensor>&, const std::vector<bool>&, SaveSpec& s) {
  s.inputs = {0};  // the condition
}
void SavesGather(const Node&, const std::vector<Tensor>& t, const std::vector<bool>&, SaveSpec& s) {
  s.inputs = {1};  // the indices (embedding / index_select backward)
}
void SavesMaxPool(const Node& n, const std::vector<Tensor>& t, const std::vector<bool>&,
                  SaveSpec& s) {
  s.inputs = {0};
  const Tensor& out = t[n.outputs[0]];
  if (n.outputs.size() > 1 && n.outputs[1] != kNone) {
    s.outputs = {1};
  } else {
    s.extras.push_back({"indices", DType::kInt64, out.shape, out.numel() * 8});
  }
}
void SavesInputAndOutput(const Node&, const std::vector<Tensor>&, const std::vector<bool>&,
                         SaveSpec& s) {
  s.inputs = {0};
  s.outputs = {0};
}
void SavesBatchNorm(const Node& n, const std::vector<Tensor>& t, const std::vector<bool>&,
                    SaveSpec& s) {
  s.inputs = {0, 1, 3, 4};
  const Tensor& x = t[n.inputs[0]];
  int64_t channels = x.shape.size() > 1 ? x.shape[1] : 1;
  if (BatchNormIsTraining(n)) {
    s.extras.push_back({"save_mean", DType::kFloat32, {channels}, channels * 4});
    s.extras.push_back({"save_invstd", DType::kFloat32, {channels}, channels * 4});
  }
}
void SavesLayerNorm(const Node& n, const std::vector<Tensor>& t, const std::vector<bool>&,
                    SaveSpec& s) {
  s.inputs = {0, 1};
  if (n.inputs.size() > 2 && n.inputs[2] != kNone) s.inputs.push_back(2);
  const Tensor& x = t[n.inputs[0]];
  int64_t r = static_cast<int64_t>(x.shape.size());
  int64_t axis = n.attr_int("axis", -1);
  if (axis < 0) axis += r;
  std::vector<int64_t> stat(x.shape.begin(), x.shape.begin() + axis);
  stat.resize(r, 1);
  s.extras.push_back({"mean", DType::kFloat32, stat, Numel(stat) * 4});
  s.extras.push_back({"rstd", DType::kFloat32, stat, Numel(stat) * 4});
}
void SavesInstanceNorm(const Node& n, const std::vector<Tensor>& t, const std::vector<bool>&,
                       SaveSpec& s) {
  s.inputs = {0, 1};
  const Tensor& x = t[n.inputs[0]];
  int64_t nc = x.shape[0] * x.shape[1];
  s.extras.push_back({"save_mean", DType::kFloat32, {nc}, nc * 4});
  s.extras.push_back({"save_invstd", DType::kFloat32, {nc}, nc * 4});
}
// Only an active Dropout saves (an inactive one is the identity: FinishTrainingGraph asks no
// rule). A mask the graph reads is ONNX's bool output, and backward keeps it. Otherwise the
// executor runs what torch.nn.Dropout runs on the CPU (at::dropout's _dropout: a noise tensor
// of x's dtype, bernoulli then scaled, times x), and mul's backward keeps that noise.
void SavesDropout(const Node& n, const std::vector<Tensor>& t, const std::vector<bool>&,
                  SaveSpec& s) {
  if (n.outputs.size() > 1 && n.outputs[1] != kNone) {
    s.outputs = {1};
  } else {
    const Tensor& x = t[n.inputs[0]];
    s.extras.push_back({"noise", x.dtype, x.shape, x.bytes});
  }
}
// On CUDA torch.nn.Dropout runs the fused native_dropout, which keeps a bool mask.
void SavesDropoutOnCuda(const Node& n, const std::vector<Tensor>& t, const std::vector<bool>&,
                        SaveSpec& s) {
  if (n.outputs.size() > 1 && n.outputs[1] != kNone) {
    s.outputs = {1};
  } else {
    const Tensor& x = t[n.inputs[0]];
    s.extras.push_back({"mask", DType::kBool, x.shape, x.numel()});
  }
}
// The executor's GatherND is at::index on data viewed as [batch, rest...] with 1 + k index
// tensors: arange(batch) expanded (its storage: batch int64) and each of the k index columns
// with negative indices wrapped (a new int64 [batch, m] tensor). index's backward keeps them.
void SavesGatherND(const Node& n, const std::vector<Tensor>& t, const std::vector<bool>& g,
                   SaveSpec& s) {
  if (g.empty() || !g[0]) return;
  const Tensor& data = t[n.inputs[0]];
  const Tensor& idx = t[n.inputs[1]];
  const int64_t b = n.attr_int("batch_dims", 0);
  const int64_t k = idx.shape.back();
  int64_t nb = 1;
  for (int64_t d = 0; d < b; ++d) nb *= data.shape[d];
  const int64_t rows = idx.numel() / std::max<int64_t>(k, 1);  // batch x m
  s.extras.push_back({"batch index", DType::kInt64, {nb}, nb * 8});
  for (int64_t j = 0; j < k; ++j) {
    s.extras.push_back({"index column " + std::to_string(j), DType::kInt64, {rows}, rows * 8});
  }
}
// at::rms_norm on the CPU (LibTorch 2.14) is composite: pow(x, 2) keeps x, rsqrt keeps 1/rms
// (one float per row), x * (1/rms) keeps both, and the product with the scale keeps the other
// operand of each input that needs a gradient: the scale, and the normalised tensor.
void SavesRmsNorm(const Node& n, const std::vector<Tensor>& t, const std::vector<bool>& g,
                  SaveSpec& s) {
  const Tensor& x = t[n.inputs[0]];
  const bool grad_x = !g.empty() && g[0], grad_scale = g.size() > 1 && g[1];
  if (grad_x) {
    const int64_t r = static_cast<int64_t>(x.shape.size());
    int64_t axis = n.attr_int("axis", -1);
    if (axis < 0) axis += r;
    std::vector<int64_t> stat(x.shape.begin(), x.shape.begin() + std::clamp<int64_t>(axis, 0, r));
    stat.resize(r, 1);
    s.inputs = {0, 1};
    s.extras.push_back({"rstd", DType::kFloat32, stat, Numel(stat) * 4});
  }
  if (grad_scale) s.extras.push_back({"normalized", x.dtype, x.shape, x.bytes});
}
// Swish with alpha 1 is at::silu, which keeps its input; another alpha is x * sigmoid(alpha x),
// which keeps x and the sigmoid.
void SavesSwish(const Node& n, const std::vector<Tensor>& t, const std::vector<bool>&,
                SaveSpec& s) {
  s.inputs = {0};
  if (n.attr_float("alpha", 1.0) != 1.0) {
    const Tensor& x = t[n.inputs[0]];
    s.extras.push_back({"sigmoid", x.dtype, x.shape, x.bytes});
  }
}
bool AttentionCopiesK(const Tensor& kt) {
  std::vector<int64_t> shape = kt.shape, strides = StridesOf(kt);
  if (shape.size() < 2) return false;
  std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
  std::swap(strides[strides.size() - 1], strides[strides.size() - 2]);
  return !IsContiguousLayout(shape, strides);
}
// The executor runs at::scaled_dot_product_attention on Q, K^T transposed back and made contiguous
// (the CPU's flash attention needs the last axis contiguous: a copy of K), V and the mask; its
// backward (flash attention, CPU and CUDA) keeps Q, that copy of K, V, the mask, the output and one
// float log-sum-exp per query row (measured on LibTorch 2.14, CPU).
void SavesAttention(const Node& n, const std::vector<Tensor>& t, const std::vector<bool>&,
                    SaveSpec& s) {
  const Tensor& q = t[n.inputs[0]];
  const Tensor& kt = t[n.inputs[1]];
  s.inputs = {0, 2};
  if (n.inputs.size() > 3 && n.inputs[3] != kNone) s.inputs.push_back(3);
  s.outputs = {0};
  if (AttentionCopiesK(kt)) {
    s.extras.push_back(
        {"contiguous K", kt.dtype, {kt.shape[0], kt.shape[1], kt.shape[3], kt.shape[2]}, kt.bytes});
  } else {
    s.inputs.push_back(1);  // K^T is a transposed view of a contiguous K: kept as it is
  }
  const std::vector<int64_t> rows = {q.shape[0], q.shape[1], q.shape[2]};
  s.extras.push_back({"logsumexp", DType::kFloat32, rows, Numel(rows) * 4});
}
void SavesScatter(const Node&, const std::vector<Tensor>&, const std::vector<bool>&, SaveSpec& s) {
  s.inputs = {1};  // the indices
}
// The executor's ScatterND (reduction none or add) is at::index_put with the k index columns, each
// with negative indices wrapped (at::where: a new int64 tensor of one index per update row);
// index_put's backward keeps those, not the index input. Mul, max and min run other ATen ops,
// which keep the index input.
void SavesScatterND(const Node& n, const std::vector<Tensor>& t, const std::vector<bool>&,
                    SaveSpec& s) {
  const std::string red = n.attr_string("reduction", "none");
  const Tensor& idx = t[n.inputs[1]];
  if ((red != "none" && red != "add") || idx.shape.empty()) {
    s.inputs = {1};
    return;
  }
  const int64_t k = std::max<int64_t>(idx.shape.back(), 1);
  const int64_t rows = idx.numel() / k;
  for (int64_t j = 0; j < k; ++j) {
    s.extras.push_back({"index column " + std::to_string(j), DType::kInt64, {rows}, rows * 8});
  }
}
void SavesTopK(const Node&, const std::vector<Tensor>&, const std::vector<bool>&, SaveSpec& s) {
  s.outputs = {1};
}

void SavesCrossEntropy(const Node& n, const std::vector<Tensor>& t, const std::vector<bool>&,
                       SaveSpec& s) {
  const Tensor& x = t[n.inputs[0]];
  s.extras.push_back({"log_probs", x.dtype, x.shape, x.bytes});
}

}  // namespace rules

bool BatchNormIsTraining(const Node& n) {
  return n.attr_int("training_mode", 0) != 0 ||
         (n.outputs.size() > 1 && n.attr("training_mode") == nullptr);
}

}  // namespace memplan
