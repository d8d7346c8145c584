// Shape rules of network layers: convolution, pooling, normalization, matmul, reductions,
// resizing, random sources and the losses memplan appends.
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "memplan/spatial_attrs.h"
#include "op_rules_internal.h"

namespace memplan::rules {
namespace {

std::vector<int64_t> SpatialOut(const InferContext& c, const std::vector<int64_t>& in_spatial,
                                const std::vector<int64_t>& kernel, bool ceil_mode) {
  const Node& n = c.node();
  const size_t k = kernel.size();
  std::vector<int64_t> in_shape = {1, 1};
  in_shape.insert(in_shape.end(), in_spatial.begin(), in_spatial.end());
  const SpatialAttrs a = ReadSpatialAttrs(n, in_shape, kernel);
  const std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  std::vector<int64_t> out(k);
  for (size_t i = 0; i < k; ++i) {
    const int64_t s = std::max<int64_t>(a.stride[i], 1);
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      out[i] = (in_spatial[i] + s - 1) / s;
      continue;
    }
    const int64_t eff = a.dilation[i] * (kernel[i] - 1) + 1;
    const int64_t span = in_spatial[i] + a.pad_begin[i] + a.pad_end[i] - eff;
    if (span < 0) c.fail("kernel is larger than the padded input");
    out[i] = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
    // As PyTorch: with ceil mode, the last window must start inside the input or left pad.
    if (ceil_mode && (out[i] - 1) * s >= in_spatial[i] + a.pad_begin[i]) --out[i];
  }
  return out;
}

std::vector<int64_t> ScaledShape(const InferContext& c, const std::vector<int64_t>& x,
                                 const ConstValue& scales) {
  if (scales.numel() != static_cast<int64_t>(x.size())) {
    c.reject("has " + std::to_string(scales.numel()) + " scales for an input of rank " +
             std::to_string(x.size()));
  }
  std::vector<int64_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    double d = std::floor(static_cast<double>(x[i]) * scales.at(static_cast<int64_t>(i)));
    if (!(d >= 0 && d < 9.0e18))
      c.reject("scale " + std::to_string(scales.at(static_cast<int64_t>(i))) +
               " gives an invalid size");
    out[i] = static_cast<int64_t>(d);
  }
  return out;
}

}  // namespace

void InferReduce(InferContext& c) {
  // ReduceSum takes axes as an input from opset 13, the others from opset 18.
  std::vector<int64_t> axes = AxesInput(c, "axes", 1);
  bool keep = c.node().attr_int("keepdims", 1) != 0;
  bool noop = c.node().attr_int("noop_with_empty_axes", 0) != 0;
  int64_t r = c.rank(0);
  std::vector<bool> reduce(r, axes.empty() && !noop);
  for (int64_t a : axes) reduce[NormAxis(a, r, c)] = true;
  std::vector<int64_t> out;
  int64_t prod = 1;
  for (int64_t d = 0; d < r; ++d) {
    if (reduce[d]) {
      if (keep) out.push_back(1);
    } else
      out.push_back(c.shape(0)[d]);
  }
  const ConstValue* v = c.value(0);
  if (v && c.node().op_type == "ReduceProd" && out.size() <= 1 && Numel(out) == 1) {
    for (int64_t i = 0; i < v->numel(); ++i) prod *= static_cast<int64_t>(v->at(i));
    ConstValue nv = MakeValue(c.dtype(0), out);
    Put(nv, 0, static_cast<double>(prod));
    return c.set_value(0, std::move(nv));
  }
  c.set(0, c.dtype(0), out);
}

void InferArgReduce(InferContext& c) {
  int64_t r = c.rank(0);
  int64_t axis = NormAxis(c.node().attr_int("axis", 0), r, c);
  std::vector<int64_t> out = c.shape(0);
  if (c.node().attr_int("keepdims", 1))
    out[axis] = 1;
  else
    out.erase(out.begin() + axis);
  c.set(0, DType::kInt64, out);
}

void InferConv(InferContext& c) {
  const std::vector<int64_t>& x = c.shape(0);
  const std::vector<int64_t>& w = c.shape(1);
  if (x.size() < 3 || w.size() != x.size()) c.fail("Conv input and weight ranks do not match");
  std::vector<int64_t> kernel(w.begin() + 2, w.end());
  std::vector<int64_t> out = {x[0], w[0]};
  for (int64_t s : SpatialOut(c, std::vector<int64_t>(x.begin() + 2, x.end()), kernel, false)) {
    out.push_back(s);
  }
  c.set(0, c.dtype(0), out);
}

void InferConvTranspose(InferContext& c) {
  const Node& n = c.node();
  const std::vector<int64_t>& x = c.shape(0);
  const std::vector<int64_t>& w = c.shape(1);
  if (x.size() < 3 || w.size() != x.size())
    c.fail("ConvTranspose input and weight ranks do not match");
  size_t k = x.size() - 2;
  int64_t group = n.attr_int("group", 1);
  std::vector<int64_t> strides = n.attr_ints("strides"), dil = n.attr_ints("dilations"),
                       pads = n.attr_ints("pads"), outpad = n.attr_ints("output_padding"),
                       out_shape = n.attr_ints("output_shape");
  strides.resize(k, 1);
  dil.resize(k, 1);
  pads.resize(2 * k, 0);
  outpad.resize(k, 0);
  std::vector<int64_t> out = {x[0], w[1] * group};
  for (size_t i = 0; i < k; ++i) {
    if (!out_shape.empty()) {
      out.push_back(out_shape[out_shape.size() - k + i]);
      continue;
    }
    out.push_back(strides[i] * (x[i + 2] - 1) + outpad[i] + ((w[i + 2] - 1) * dil[i] + 1) -
                  pads[i] - pads[i + k]);
  }
  c.set(0, c.dtype(0), out);
}

void InferPool(InferContext& c) {
  const std::vector<int64_t>& x = c.shape(0);
  std::vector<int64_t> kernel = c.node().attr_ints("kernel_shape");
  if (kernel.size() + 2 != x.size()) c.fail("pool kernel_shape does not match the input rank");
  bool ceil_mode = c.node().attr_int("ceil_mode", 0) != 0;
  std::vector<int64_t> out = {x[0], x[1]};
  for (int64_t s : SpatialOut(c, std::vector<int64_t>(x.begin() + 2, x.end()), kernel, ceil_mode)) {
    out.push_back(s);
  }
  c.set(0, c.dtype(0), out);
  if (c.has_output(1)) c.set(1, DType::kInt64, out);
}

void InferGlobalPool(InferContext& c) {
  std::vector<int64_t> out = c.shape(0);
  for (size_t i = 2; i < out.size(); ++i) out[i] = 1;
  c.set(0, c.dtype(0), out);
}

void InferBatchNorm(InferContext& c) {
  c.set(0, c.dtype(0), c.shape(0));
  int64_t channels = c.shape(0).size() > 1 ? c.shape(0)[1] : 1;
  for (size_t i = 1; i < c.num_outputs(); ++i) {
    if (c.has_output(i)) c.set(i, c.dtype(0), {channels});
  }
}

void InferLayerNorm(InferContext& c) {
  c.set(0, c.dtype(0), c.shape(0));
  int64_t r = c.rank(0);
  int64_t axis = NormAxis(c.node().attr_int("axis", -1), r, c);
  std::vector<int64_t> stat = c.shape(0);
  for (int64_t d = axis; d < r; ++d) stat[d] = 1;
  for (size_t i = 1; i < c.num_outputs(); ++i) {
    if (c.has_output(i)) c.set(i, DType::kFloat32, stat);
  }
}

void InferDropout(InferContext& c) {
  c.set(0, c.dtype(0), c.shape(0));
  if (c.has_output(1)) c.set(1, DType::kBool, c.shape(0));
}

void InferMatMul(InferContext& c) {
  std::vector<int64_t> a = c.shape(0), b = c.shape(1);
  if (a.empty() || b.empty()) c.fail("MatMul of a scalar");
  bool a1 = a.size() == 1, b1 = b.size() == 1;
  if (a1) a.insert(a.begin(), 1);
  if (b1) b.push_back(1);
  if (a.back() != b[b.size() - 2]) {
    c.fail("MatMul inner dimensions differ: " + ShapeString(c.shape(0)) + " x " +
           ShapeString(c.shape(1)));
  }
  std::vector<int64_t> batch = Broadcast(std::vector<int64_t>(a.begin(), a.end() - 2),
                                         std::vector<int64_t>(b.begin(), b.end() - 2), c);
  std::vector<int64_t> out = batch;
  if (!a1) out.push_back(a[a.size() - 2]);
  if (!b1) out.push_back(b.back());
  c.set(0, c.dtype(0), out);
}

void InferGemm(InferContext& c) {
  const std::vector<int64_t>& a = c.shape(0);
  const std::vector<int64_t>& b = c.shape(1);
  if (a.size() != 2 || b.size() != 2) c.fail("Gemm inputs must be matrices");
  int64_t m = c.node().attr_int("transA", 0) ? a[1] : a[0];
  int64_t n = c.node().attr_int("transB", 0) ? b[0] : b[1];
  c.set(0, c.dtype(0), {m, n});
}

void InferResize(InferContext& c) {
  const std::vector<int64_t>& x = c.shape(0);
  std::vector<int64_t> out = x;
  if (c.has(3)) {
    out = c.need_ints(3);
  } else if (c.has(2)) {
    out = ScaledShape(c, x, c.need_value(2));
  } else if (c.has(1) && c.num_inputs() == 2) {  // Upsample-style (opset 10)
    out = ScaledShape(c, x, c.need_value(1));
  }
  c.set(0, c.dtype(0), out);
}

void InferTopK(InferContext& c) {
  int64_t r = c.rank(0);
  int64_t axis = NormAxis(c.node().attr_int("axis", -1), r, c);
  std::vector<int64_t> out = c.shape(0);
  out[axis] = static_cast<int64_t>(c.need_scalar(1).at(0));
  if (out[axis] < 0 || out[axis] > c.shape(0)[axis]) {
    c.reject("TopK k " + std::to_string(out[axis]) + " is not within the axis size " +
             std::to_string(c.shape(0)[axis]));
  }
  c.set(0, c.dtype(0), out);
  if (c.has_output(1)) c.set(1, DType::kInt64, out);
}

void InferEinsum(InferContext& c) {
  std::string eq = c.node().attr_string("equation", "");
  std::string lhs = eq.substr(0, eq.find("->"));
  if (eq.find("->") == std::string::npos || eq.find("...") != std::string::npos) {
    c.fail("Einsum equation '" + eq + "' needs an explicit output without ellipsis");
  }
  std::string rhs = eq.substr(eq.find("->") + 2);
  std::unordered_map<char, int64_t> size;
  size_t input = 0, pos = 0;
  for (char ch : lhs + ",") {
    if (ch == ' ') continue;
    if (ch == ',') {
      if (input < c.num_inputs() && pos != static_cast<size_t>(c.rank(input))) {
        c.reject("Einsum equation '" + eq + "' gives input " + std::to_string(input) + " " +
                 std::to_string(pos) + " indices, but its rank is " +
                 std::to_string(c.rank(input)));
      }
      ++input;
      pos = 0;
      continue;
    }
    if (input >= c.num_inputs())
      c.reject("Einsum equation '" + eq + "' names more inputs than the node has");
    if (pos >= static_cast<size_t>(c.rank(input))) continue;  // reported at the ',' above
    size[ch] = c.shape(input)[pos++];
  }
  std::vector<int64_t> out;
  for (char ch : rhs) {
    if (ch == ' ') continue;
    auto it = size.find(ch);
    if (it == size.end())
      c.reject("Einsum output index '" + std::string(1, ch) + "' is not an input index");
    out.push_back(it->second);
  }
  c.set(0, c.dtype(0), out);
}

void InferRandomLike(InferContext& c) {
  DType dt = c.node().attr("dtype") ? DTypeFromOnnx(static_cast<int>(c.node().attr_int("dtype", 1)))
                                    : c.dtype(0);
  c.set(0, dt, c.shape(0));
}

void InferRandom(InferContext& c) {
  c.set(0, DTypeFromOnnx(static_cast<int>(c.node().attr_int("dtype", 1))),
        c.node().attr_ints("shape"));
}

void InferBernoulli(InferContext& c) {
  DType dt = c.node().attr("dtype") ? DTypeFromOnnx(static_cast<int>(c.node().attr_int("dtype", 1)))
                                    : c.dtype(0);
  c.set(0, dt, c.shape(0));
}

void InferNonDiffInt(InferContext& c) {  // NonZero cannot be shaped statically
  c.fail("the output size depends on tensor values (data-dependent shape)");
}

// The appended losses (cross entropy = log_softmax + nll_loss, as ATen does it).
// memplan.ScaledDotProductAttention(Q [..., T, d], K^T [..., d, S], V [..., S, dv], mask?):
// [..., T, dv] (the fused attention block, analyzer/src/fusion.cc).
void InferScaledDotProductAttention(InferContext& c) {
  const std::vector<int64_t>& q = c.shape(0);
  const std::vector<int64_t>& kt = c.shape(1);
  const std::vector<int64_t>& v = c.shape(2);
  if (q.size() != 4 || kt.size() != 4 || v.size() != 4)
    c.reject("attention inputs must have rank 4");
  if (q[3] != kt[2] || kt[3] != v[2] || q[0] != kt[0] || q[1] != kt[1] || q[0] != v[0] ||
      q[1] != v[1]) {
    c.reject("attention inputs " + ShapeString(q) + ", " + ShapeString(kt) + ", " + ShapeString(v) +
             " do not match");
  }
  if (c.has(3)) {
    const std::vector<int64_t>& m = c.shape(3);
    const std::vector<int64_t> scores = {q[0], q[1], q[2], kt[3]};
    bool ok = m.size() <= 4;
    for (size_t d = 0; ok && d < m.size(); ++d) ok = m[d] == 1 || m[d] == scores[4 - m.size() + d];
    if (!ok)
      c.reject("attention mask " + ShapeString(m) + " does not broadcast to the scores " +
               ShapeString(scores));
  }
  c.set(0, c.dtype(0), {q[0], q[1], q[2], v[3]});
}

// RMSNormalization (opset 23): Y has X's shape; the scale broadcasts to X's axes from `axis` on.
void InferRmsNorm(InferContext& c) {
  const std::vector<int64_t>& x = c.shape(0);
  const int64_t r = static_cast<int64_t>(x.size());
  int64_t axis = c.node().attr_int("axis", -1);
  if (axis < -r || axis >= r)
    c.reject("RMSNormalization axis " + std::to_string(axis) + " is out of range for rank " +
             std::to_string(r));
  if (axis < 0) axis += r;
  if (c.has(1)) {
    const std::vector<int64_t>& w = c.shape(1);
    const std::vector<int64_t> normalized(x.begin() + axis, x.end());
    bool ok = w.size() <= normalized.size();
    for (size_t d = 0; ok && d < w.size(); ++d)
      ok = w[d] == 1 || w[d] == normalized[normalized.size() - w.size() + d];
    if (!ok)
      c.reject("RMSNormalization scale " + ShapeString(w) +
               " does not broadcast to the normalised axes " + ShapeString(normalized));
  }
  c.set(0, c.dtype(0), x);
}

void InferScalarLoss(InferContext& c) { c.set(0, DType::kFloat32, {}); }

}  // namespace memplan::rules
