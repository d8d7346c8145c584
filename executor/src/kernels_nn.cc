// Convolution, matrix products, normalization, activations, pooling, dropout, resizing and
// the losses (the ONNX ones and those memplan appends).
//
// Lowering choices that the analyzer's saved-tensor rules rely on:
//   Conv -> convolution (saves input, weight); Gemm -> addmm with transposed views;
//   BatchNormalization -> native_batch_norm (saves input, weight, save_mean, save_invstd);
//   LayerNormalization -> native_layer_norm; Dropout -> native_dropout's bool mask on CUDA,
//   at::dropout's noise on the CPU;
//   MaxPool -> max_pool*_with_indices (input + int64 indices); GlobalAveragePool -> mean;
//   Clip -> clamp with scalar bounds; cross-entropy -> log_softmax + nll_loss.
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <numeric>

#include "kernels.h"
#include "memplan/spatial_attrs.h"

namespace memplan::exec {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

bool DropoutActive(const OpCall& c) {
  if (c.training_mode) return *c.training_mode;
  // The analyzer's rule on this call's values of ratio (input 1) and training_mode (input 2).
  auto value = [&](size_t slot) {
    std::optional<ConstValue> v;
    if (!c.has(slot)) return v;
    v.emplace();
    v->dtype = DType::kFloat64;
    if (c.in[slot].numel() == 0) {
      v->shape = {0};
    } else {
      v->floats = {ToDouble(c.in[slot])};
    }
    return v;
  };
  const std::optional<ConstValue> ratio = value(1), mode = value(2);
  return DropoutIsActive(*c.node, ratio ? &*ratio : nullptr, mode ? &*mode : nullptr);
}

namespace {

using Outs = std::vector<at::Tensor>;

int64_t FloorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

// Spatial geometry of conv and pooling: the node's attributes (spatial_attrs.h) checked
// against the input's rank.
struct Geometry : SpatialAttrs {
  // ATen pad list (last dim first) for the spatial dims.
  std::vector<int64_t> PadList() const {
    std::vector<int64_t> l;
    for (size_t i = pad_begin.size(); i-- > 0;) {
      l.push_back(pad_begin[i]);
      l.push_back(pad_end[i]);
    }
    return l;
  }
};

Geometry SpatialGeometry(const OpCall& c, const at::Tensor& x, const std::vector<int64_t>& kernel) {
  if (static_cast<size_t>(x.dim()) != kernel.size() + 2)
    c.Fail("input rank does not match the kernel");
  return {ReadSpatialAttrs(*c.node, x.sizes().vec(), kernel)};
}

std::vector<int64_t> KernelShape(const OpCall& c, const at::Tensor* weight) {
  std::vector<int64_t> k =
      KernelShapeOf(*c.node, weight ? weight->sizes().vec() : std::vector<int64_t>{});
  if (k.empty()) c.Fail("kernel_shape is missing");
  return k;
}

// ---- convolution and matrix products ----

Outs Conv(const OpCall& c) {
  at::Tensor x = c.x(0);
  const at::Tensor& w = c.x(1);
  at::Tensor b = c.has(2) ? c.in[2] : at::Tensor();
  std::vector<int64_t> kernel = KernelShape(c, &w);
  Geometry g = SpatialGeometry(c, x, kernel);
  std::vector<int64_t> padding = g.pad_begin;
  if (!g.symmetric()) {  // asymmetric pads: an explicit zero pad, then a valid convolution
    x = at::constant_pad_nd(x, g.PadList(), 0);
    std::fill(padding.begin(), padding.end(), 0);
  }
  std::vector<int64_t> out_pad(kernel.size(), 0);
  return {at::convolution(x, w, b, g.stride, padding, g.dilation, false, out_pad, g.group)};
}

Outs ConvTranspose(const OpCall& c) {
  const at::Tensor& x = c.x(0);
  const at::Tensor& w = c.x(1);
  std::vector<int64_t> kernel = KernelShape(c, &w);
  size_t k = kernel.size();
  int64_t group = c.attr_int("group", 1);
  std::vector<int64_t> stride = c.attr_ints("strides"), dil = c.attr_ints("dilations"),
                       pads = c.attr_ints("pads"), outpad = c.attr_ints("output_padding"),
                       out_shape = c.attr_ints("output_shape");
  stride.resize(k, 1);
  dil.resize(k, 1);
  pads.resize(2 * k, 0);
  outpad.resize(k, 0);
  std::string auto_pad = c.attr_string("auto_pad", "NOTSET");
  std::vector<int64_t> zeros(k, 0);
  // The full ("natural") transposed convolution, then ONNX's pads crop it and output
  // padding extends it.
  at::Tensor y = at::convolution(x, w, {}, stride, zeros, dil, true, zeros, group);
  std::vector<int64_t> list;
  for (size_t j = k; j-- > 0;) {
    int64_t in = x.size(static_cast<int64_t>(j) + 2);
    int64_t natural = stride[j] * (in - 1) + (kernel[j] - 1) * dil[j] + 1;
    int64_t begin = pads[j], end = pads[j + k];
    int64_t target = -1;
    if (!out_shape.empty())
      target = out_shape[out_shape.size() - k + j];
    else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")
      target = in * stride[j];
    if (target >= 0) {
      int64_t total = natural + outpad[j] - target;
      int64_t half = FloorDiv(total, 2);
      if (auto_pad == "SAME_UPPER") {
        begin = half;
        end = total - half;
      } else {
        begin = total - half;
        end = half;
      }
    }
    list.push_back(-begin);
    list.push_back(outpad[j] - end);
  }
  bool trivial = std::all_of(list.begin(), list.end(), [](int64_t v) { return v == 0; });
  if (!trivial) y = at::constant_pad_nd(y, list, 0);
  if (c.has(2)) {
    std::vector<int64_t> shape(y.dim(), 1);
    shape[1] = -1;
    y = at::add(y, c.in[2].view(shape));
  }
  return {y};
}

Outs Gemm(const OpCall& c) {
  at::Tensor a = c.x(0), b = c.x(1);
  if (c.attr_int("transA", 0)) a = a.t();
  if (c.attr_int("transB", 0)) b = b.t();
  double alpha = c.attr_float("alpha", 1.0), beta = c.attr_float("beta", 1.0);
  if (c.has(2) && beta != 0) return {at::addmm(c.in[2], a, b, beta, alpha)};
  at::Tensor y = at::mm(a, b);
  if (alpha != 1.0) y = at::mul(y, alpha);
  return {y};
}

Outs MatMul(const OpCall& c) { return {at::matmul(c.x(0), c.x(1))}; }

Outs Einsum(const OpCall& c) {
  std::string eq = c.attr_string("equation", "");
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  std::vector<at::Tensor> ops(c.in.begin(), c.in.end());
  return {at::einsum(eq, ops)};
}

// ---- normalization ----

Outs BatchNormalization(const OpCall& c) {
  const at::Tensor& x = c.x(0);
  const at::Tensor &scale = c.x(1), &bias = c.x(2), &mean = c.x(3), &var = c.x(4);
  double eps = c.attr_float("epsilon", 1e-5), m = c.attr_float("momentum", 0.9);
  // Outputs 1 and 2, the running statistics, are inputs 3 and 4 (InPlaceInputOf).
  auto in_place = [&](size_t output) -> const at::Tensor& {
    return c.x(static_cast<size_t>(InPlaceInputOf(c.node->op_type, output)));
  };
  if (!BatchNormIsTraining(*c.node)) {
    auto r = at::native_batch_norm(x, scale, bias, mean, var, false, 0.0, eps);
    Outs o = {std::get<0>(r)};
    for (size_t i = 1; i < c.num_outputs(); ++i) o.push_back(in_place(std::min<size_t>(i, 2)));
    return o;
  }
  // Training: normalize with the batch statistics; the running statistics follow ONNX
  // (running = running * momentum + batch * (1 - momentum), the batch variance biased), in
  // place, once per step.
  auto r = at::native_batch_norm(x, scale, bias, {}, {}, true, 0.0, eps);
  const at::Tensor& save_mean = std::get<1>(r);
  const at::Tensor& save_invstd = std::get<2>(r);
  at::Tensor batch_var;
  if (c.update_running_stats || c.num_outputs() > 3) {
    c10::AutoGradMode no_grad(false);
    batch_var = at::sub(at::pow(save_invstd, -2), eps);
    if (c.update_running_stats) {
      mean.mul_(m).add_(save_mean.to(mean.scalar_type()), 1 - m);
      var.mul_(m).add_(batch_var.to(var.scalar_type()), 1 - m);
    }
  }
  Outs o = {std::get<0>(r)};
  for (size_t i = 1; i < std::min<size_t>(c.num_outputs(), 3); ++i) o.push_back(in_place(i));
  if (c.num_outputs() > 3) o.push_back(save_mean);  // opset < 14: saved mean and variance
  if (c.num_outputs() > 4) o.push_back(batch_var);
  return o;
}

Outs LayerNormalization(const OpCall& c) {
  const at::Tensor& x = c.x(0);
  int64_t axis = NormAxis(c.attr_int("axis", -1), x.dim(), c);
  std::vector<int64_t> normalized(x.sizes().begin() + axis, x.sizes().end());
  at::Tensor w = c.x(1), b = c.has(2) ? c.in[2] : at::Tensor();
  if (w.sizes() != at::IntArrayRef(normalized)) w = w.expand(normalized).contiguous();
  if (b.defined() && b.sizes() != at::IntArrayRef(normalized))
    b = b.expand(normalized).contiguous();
  auto r = at::native_layer_norm(x, normalized, w, b, c.attr_float("epsilon", 1e-5));
  Outs o = {std::get<0>(r)};
  if (c.num_outputs() > 1) o.push_back(std::get<1>(r));
  if (c.num_outputs() > 2) o.push_back(std::get<2>(r));
  return o;
}

// ONNX's RMSNormalization (opset 23) over the axes from `axis` on, as PyTorch runs it:
// at::rms_norm.
Outs RMSNormalization(const OpCall& c) {
  const at::Tensor& x = c.x(0);
  int64_t axis = NormAxis(c.attr_int("axis", -1), x.dim(), c);
  std::vector<int64_t> normalized(x.sizes().begin() + axis, x.sizes().end());
  at::Tensor w = c.x(1);
  if (w.sizes() != at::IntArrayRef(normalized)) w = w.expand(normalized).contiguous();
  return {at::rms_norm(x, normalized, w, c.attr_float("epsilon", 1e-5))};
}

Outs InstanceNormalization(const OpCall& c) {
  return {at::instance_norm(c.x(0), c.x(1), c.x(2), {}, {}, true, 0.0,
                            c.attr_float("epsilon", 1e-5), false)};
}

Outs MeanVarianceNormalization(const OpCall& c) {
  const at::Tensor& x = c.x(0);
  std::vector<int64_t> axes = c.attr_ints("axes");
  if (axes.empty()) axes = {0, 2, 3};
  for (int64_t& a : axes) a = NormAxis(a, x.dim(), c);
  at::Tensor mean = at::mean(x, axes, true);
  at::Tensor sq_mean = at::mean(at::mul(x, x), axes, true);
  at::Tensor std = at::sqrt(at::sub(sq_mean, at::mul(mean, mean)));
  return {at::div(at::sub(x, mean), at::add(std, 1e-9))};
}

Outs Lrn(const OpCall& c) {
  const at::Tensor& x = c.x(0);
  int64_t size = c.attr_int("size", 1);
  double alpha = c.attr_float("alpha", 1e-4), beta = c.attr_float("beta", 0.75),
         bias = c.attr_float("bias", 1.0);
  int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  at::Tensor sq = at::mul(x, x).transpose(1, -1);
  at::Tensor padded = at::constant_pad_nd(sq, {lo, hi}, 0);
  at::Tensor sums = padded.unfold(-1, size, 1).sum(-1).transpose(1, -1);
  return {
      at::div(x, at::pow(at::add(at::mul(sums, alpha / static_cast<double>(size)), bias), beta))};
}

// ---- activations ----

Outs Relu(const OpCall& c) { return {at::relu(c.x(0))}; }
Outs LeakyRelu(const OpCall& c) { return {at::leaky_relu(c.x(0), c.attr_float("alpha", 0.01))}; }
Outs Elu(const OpCall& c) { return {at::elu(c.x(0), c.attr_float("alpha", 1.0))}; }
Outs Selu(const OpCall& c) {
  return {at::elu(c.x(0), c.attr_float("alpha", 1.67326319217681884765625),
                  c.attr_float("gamma", 1.05070102214813232421875), 1.0)};
}
Outs Celu(const OpCall& c) { return {at::celu(c.x(0), c.attr_float("alpha", 1.0))}; }
Outs Sigmoid(const OpCall& c) { return {at::sigmoid(c.x(0))}; }
Outs HardSigmoid(const OpCall& c) {
  double alpha = c.attr_float("alpha", 0.2), beta = c.attr_float("beta", 0.5);
  if (std::fabs(alpha - 1.0 / 6.0) < 1e-6 && std::fabs(beta - 0.5) < 1e-9)
    return {at::hardsigmoid(c.x(0))};
  return {at::clamp(at::add(at::mul(c.x(0), alpha), beta), 0.0, 1.0)};
}
Outs HardSwish(const OpCall& c) { return {at::hardswish(c.x(0))}; }
Outs Tanh(const OpCall& c) { return {at::tanh(c.x(0))}; }
Outs Softplus(const OpCall& c) { return {at::softplus(c.x(0), 1.0, 20.0)}; }
Outs Softsign(const OpCall& c) { return {at::div(c.x(0), at::add(at::abs(c.x(0)), 1.0))}; }
Outs Mish(const OpCall& c) { return {at::mish(c.x(0))}; }
// The attention block fused back (analyzer/src/fusion.cc): softmax(Q K^T scale + mask) V as PyTorch
// runs it. K^T comes as the exported graph computed it; the CPU's flash attention needs K's last
// axis contiguous, so K is copied. Rows the mask hides entirely give 0 (the exporter's
// IsNaN/Where) where nan_to_zero is set.
Outs ScaledDotProductAttention(const OpCall& c) {
  const at::Tensor k = c.x(1).transpose(-2, -1).contiguous();
  std::optional<at::Tensor> mask;
  if (c.has(3)) mask = c.in[3];
  at::Tensor y = at::scaled_dot_product_attention(c.x(0), k, c.x(2), mask, 0.0, false,
                                                  c.attr_float("scale", 1.0));
  // (The analyzer does not count this rare case's extra tensors.)
  if (c.attr_int("nan_to_zero", 0) != 0 && y.isnan().any().item<bool>()) {
    y = at::nan_to_num(y, 0.0);
  }
  return {y};
}

Outs Swish(const OpCall& c) {
  const double alpha = c.attr_float("alpha", 1.0);
  if (alpha == 1.0) return {at::silu(c.x(0))};
  return {at::mul(c.x(0), at::sigmoid(at::mul(c.x(0), alpha)))};
}
Outs Gelu(const OpCall& c) { return {at::gelu(c.x(0), c.attr_string("approximate", "none"))}; }
Outs Erf(const OpCall& c) { return {at::erf(c.x(0))}; }
Outs Exp(const OpCall& c) { return {at::exp(c.x(0))}; }
Outs Log(const OpCall& c) { return {at::log(c.x(0))}; }
Outs Sqrt(const OpCall& c) { return {at::sqrt(c.x(0))}; }
Outs Reciprocal(const OpCall& c) { return {at::reciprocal(c.x(0))}; }
Outs Sin(const OpCall& c) { return {at::sin(c.x(0))}; }
Outs Cos(const OpCall& c) { return {at::cos(c.x(0))}; }
Outs Tan(const OpCall& c) { return {at::tan(c.x(0))}; }
Outs Asin(const OpCall& c) { return {at::asin(c.x(0))}; }
Outs Acos(const OpCall& c) { return {at::acos(c.x(0))}; }
Outs Atan(const OpCall& c) { return {at::atan(c.x(0))}; }
Outs Sinh(const OpCall& c) { return {at::sinh(c.x(0))}; }
Outs Cosh(const OpCall& c) { return {at::cosh(c.x(0))}; }
Outs Asinh(const OpCall& c) { return {at::asinh(c.x(0))}; }
Outs Acosh(const OpCall& c) { return {at::acosh(c.x(0))}; }
Outs Atanh(const OpCall& c) { return {at::atanh(c.x(0))}; }
Outs ThresholdedRelu(const OpCall& c) {
  double alpha = c.attr_float("alpha", 1.0);
  return {at::threshold(c.x(0), alpha, 0.0)};
}
Outs Shrink(const OpCall& c) {
  const at::Tensor& x = c.x(0);
  double bias = c.attr_float("bias", 0.0), lambd = c.attr_float("lambd", 0.5);
  at::Tensor zero = at::zeros({}, x.options());
  at::Tensor y = at::where(at::lt(x, -lambd), at::add(x, bias),
                           at::where(at::gt(x, lambd), at::sub(x, bias), zero));
  return {y.to(x.scalar_type())};
}

c10::optional<c10::Scalar> BoundScalar(const OpCall& c, size_t slot, const char* attr,
                                       double fallback) {
  if (c.opset >= 11) {
    if (!c.has(slot) || c.in[slot].numel() == 0) return c10::nullopt;
    return c.in[slot].reshape({-1})[0].item();
  }
  if (!c.has_attr(attr)) return c10::nullopt;
  return c10::Scalar(c.attr_float(attr, fallback));
}
Outs Clip(const OpCall& c) {
  auto lo = BoundScalar(c, 1, "min", -INFINITY), hi = BoundScalar(c, 2, "max", INFINITY);
  if (!lo && !hi) return {c.x(0).clone()};
  return {at::clamp(c.x(0), lo, hi)};
}

Outs PRelu(const OpCall& c) {
  const at::Tensor& x = c.x(0);
  const at::Tensor& slope = c.x(1);
  // at::prelu takes one slope per channel (dim 1); ONNX broadcasts numpy-style.
  bool per_channel = x.dim() >= 2 && slope.numel() == x.size(1) && slope.dim() <= x.dim() &&
                     slope.dim() >= x.dim() - 1;
  if (per_channel) {
    int64_t lead = x.dim() - slope.dim();
    for (int64_t d = 0; d < slope.dim(); ++d) {
      if (d + lead != 1 && slope.size(d) != 1) per_channel = false;
    }
  }
  if (slope.numel() == 1 || per_channel) return {at::prelu(x, slope.reshape({-1}))};
  return {at::where(at::lt(x, 0), at::mul(x, slope), x)};
}

at::Tensor CoercedSoftmax(const OpCall& c, int kind) {
  const at::Tensor& x = c.x(0);
  auto apply = [&](const at::Tensor& t, int64_t dim) {
    if (kind == 0) return at::softmax(t, dim);
    if (kind == 1) return at::log_softmax(t, dim);
    at::Tensor idx = at::argmax(t, dim, true);
    return at::zeros_like(t).scatter_(dim, idx, 1.0);
  };
  if (c.opset >= 13) return apply(x, NormAxis(c.attr_int("axis", -1), x.dim(), c));
  int64_t axis = NormAxis(c.attr_int("axis", 1), x.dim(), c);
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.size(d);
  return apply(x.reshape({outer, -1}), 1).reshape(x.sizes());
}
Outs Softmax(const OpCall& c) { return {CoercedSoftmax(c, 0)}; }
Outs LogSoftmax(const OpCall& c) { return {CoercedSoftmax(c, 1)}; }
Outs Hardmax(const OpCall& c) { return {CoercedSoftmax(c, 2)}; }

// ---- pooling ----

bool NativePads(const Geometry& g, const std::vector<int64_t>& kernel) {
  if (!g.symmetric()) return false;
  for (size_t i = 0; i < kernel.size(); ++i) {
    if (g.pad_begin[i] * 2 > (kernel[i] - 1) * g.dilation[i] + 1) return false;
  }
  return true;
}

Outs MaxPool(const OpCall& c) {
  at::Tensor x = c.x(0);
  at::ScalarType type = x.scalar_type();
  if (!at::isFloatingType(type)) x = x.to(at::kFloat);
  std::vector<int64_t> kernel = KernelShape(c, nullptr);
  Geometry g = SpatialGeometry(c, x, kernel);
  bool ceil_mode = c.attr_int("ceil_mode", 0) != 0;
  std::vector<int64_t> padding = g.pad_begin;
  bool explicit_pad = !NativePads(g, kernel);
  if (explicit_pad) {
    x = at::constant_pad_nd(x, g.PadList(), -std::numeric_limits<double>::infinity());
    std::fill(padding.begin(), padding.end(), 0);
  }
  std::tuple<at::Tensor, at::Tensor> r;
  switch (kernel.size()) {
    case 1:
      r = at::max_pool1d_with_indices(x, kernel, g.stride, padding, g.dilation, ceil_mode);
      break;
    case 2:
      r = at::max_pool2d_with_indices(x, kernel, g.stride, padding, g.dilation, ceil_mode);
      break;
    case 3:
      r = at::max_pool3d_with_indices(x, kernel, g.stride, padding, g.dilation, ceil_mode);
      break;
    default:
      c.Fail("MaxPool over " + std::to_string(kernel.size()) +
             " spatial dimensions is not supported");
  }
  at::Tensor y = std::get<0>(r);
  if (y.scalar_type() != type) y = y.to(type);
  Outs o = {y};
  if (c.want(1)) {
    if (explicit_pad) c.Fail("MaxPool indices with asymmetric or large pads are not supported");
    // ATen indexes within each (n, c) plane; ONNX over the whole tensor.
    at::Tensor idx = std::get<1>(r);
    int64_t plane = 1;
    for (int64_t d = 2; d < c.x(0).dim(); ++d) plane *= c.x(0).size(d);
    if (c.attr_int("storage_order", 0) != 0 && kernel.size() == 2) {
      int64_t h = c.x(0).size(2), w = c.x(0).size(3);
      idx = at::add(at::mul(at::remainder(idx, w), h), at::div(idx, w, "floor"));
    }
    std::vector<int64_t> shape(idx.dim(), 1);
    shape[0] = idx.size(0);
    shape[1] = idx.size(1);
    at::Tensor base = at::arange(idx.size(0) * idx.size(1), idx.options()).view(shape) * plane;
    o.push_back(at::add(idx, base));
  }
  return o;
}

Outs AveragePool(const OpCall& c) {
  at::Tensor x = c.x(0);
  std::vector<int64_t> kernel = KernelShape(c, nullptr);
  Geometry g = SpatialGeometry(c, x, kernel);
  bool ceil_mode = c.attr_int("ceil_mode", 0) != 0;
  bool include_pad = c.attr_int("count_include_pad", 0) != 0;
  auto pool = [&](const at::Tensor& t, const std::vector<int64_t>& pad, bool include) {
    switch (kernel.size()) {
      case 1:
        return at::avg_pool1d(t, kernel, g.stride, pad, ceil_mode, include);
      case 2:
        return at::avg_pool2d(t, kernel, g.stride, pad, ceil_mode, include);
      case 3:
        return at::avg_pool3d(t, kernel, g.stride, pad, ceil_mode, include);
      default:
        c.Fail("AveragePool over " + std::to_string(kernel.size()) +
               " spatial dimensions is not supported");
    }
  };
  if (std::any_of(g.dilation.begin(), g.dilation.end(), [](int64_t d) { return d != 1; })) {
    // Dilated windows (opset 19), which LibTorch's avg_pool lacks: a window sum by a dilated
    // convolution with a kernel of ones, divided by each window's count. Ceil mode extends the
    // input at the end (counted in no window); explicit pads count when count_include_pad.
    size_t nd = kernel.size();
    std::vector<int64_t> extra(nd, 0), zero(nd, 0);
    for (size_t d = 0; d < nd; ++d) {
      int64_t in = x.size(static_cast<int64_t>(d) + 2), s = g.stride[d];
      int64_t eff = (kernel[d] - 1) * g.dilation[d] + 1,
              span = in + g.pad_begin[d] + g.pad_end[d] - eff;
      int64_t o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
      if (ceil_mode && (o - 1) * s >= in + g.pad_begin[d]) --o;  // a window starts inside the input
      extra[d] = std::max<int64_t>(0, (o - 1) * s + eff - (in + g.pad_begin[d] + g.pad_end[d]));
    }
    std::vector<int64_t> extra_list;
    for (size_t i = nd; i-- > 0;) {
      extra_list.push_back(0);
      extra_list.push_back(extra[i]);
    }
    std::vector<int64_t> flat = {-1, 1}, ones_shape = {1, 1}, kshape = {1, 1};
    for (int64_t d = 2; d < x.dim(); ++d) {
      flat.push_back(x.size(d));
      ones_shape.push_back(x.size(d));
    }
    kshape.insert(kshape.end(), kernel.begin(), kernel.end());
    at::Tensor w = at::ones(kshape, x.options());
    auto window_sum = [&](const at::Tensor& t) {
      return at::convolution(t, w, {}, g.stride, zero, g.dilation, false, zero, 1);
    };
    at::Tensor padded =
        at::constant_pad_nd(at::constant_pad_nd(x.reshape(flat), g.PadList(), 0), extra_list, 0);
    at::Tensor mask =
        at::constant_pad_nd(at::ones(ones_shape, x.options()), g.PadList(), include_pad ? 1 : 0);
    at::Tensor y =
        at::div(window_sum(padded), window_sum(at::constant_pad_nd(mask, extra_list, 0)));
    std::vector<int64_t> out = {x.size(0), x.size(1)};
    for (int64_t d = 2; d < y.dim(); ++d) out.push_back(y.size(d));
    return {y.reshape(out)};
  }
  if (NativePads(g, kernel)) return {pool(x, g.pad_begin, include_pad)};
  std::vector<int64_t> zero(kernel.size(), 0);
  at::Tensor padded = at::constant_pad_nd(x, g.PadList(), 0);
  at::Tensor avg = pool(padded, zero, true);
  if (include_pad) return {avg};
  // Divide by the number of real (unpadded) elements in each window.
  std::vector<int64_t> ones_shape(x.dim(), 1);
  for (int64_t d = 2; d < x.dim(); ++d) ones_shape[d] = x.size(d);
  at::Tensor ones = at::constant_pad_nd(at::ones(ones_shape, x.options()), g.PadList(), 0);
  return {at::div(avg, pool(ones, zero, true))};
}

std::vector<int64_t> SpatialDims(const at::Tensor& x) {
  std::vector<int64_t> dims;
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}
Outs GlobalAveragePool(const OpCall& c) {
  return {MeanSavingNothing(c.x(0), SpatialDims(c.x(0)), true)};
}
Outs GlobalMaxPool(const OpCall& c) { return {at::amax(c.x(0), SpatialDims(c.x(0)), true)}; }

// ---- dropout ----

// y = x * mask * scale, saving only the bool mask: native_dropout's memory and backward, with a
// mask drawn by the caller. The mask is copied into the result first: the CPU's x * mask would
// make a copy of the mask in x's dtype beside it (a temporary the size of x).
at::Tensor TimesMask(const at::Tensor& x, const at::Tensor& mask, double scale) {
  at::Tensor y = at::empty_like(x);
  y.copy_(mask);
  return y.mul_(x).mul_(scale);
}
struct MaskedScale : public torch::autograd::Function<MaskedScale> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& mask, double scale) {
    // A saved variable, not saved_data: saved-tensor hooks (selective recompute) must see it.
    ctx->save_for_backward({mask});
    ctx->saved_data["scale"] = scale;
    return TimesMask(x, mask, scale);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    at::Tensor mask = ctx->get_saved_variables()[0];
    double scale = ctx->saved_data["scale"].toDouble();
    return {TimesMask(grad[0], mask, scale), at::Tensor(), at::Tensor()};
  }
};

// The keep-mask (1 kept, 0 dropped) in `dtype`, row r of the batch axis from its own seed (see
// OpCall::random_seed).
at::Tensor DropoutMask(const OpCall& c, const at::Tensor& x, double keep, at::ScalarType dtype) {
  at::Tensor mask = at::empty(x.sizes(), x.options().dtype(dtype));
  auto gen = at::globalContext().defaultGenerator(x.device());
  const bool rows = x.dim() > 0 && c.batch_rows > 0 && x.size(0) == c.batch_rows;
  const int64_t n = rows ? x.size(0) : 1;
  for (int64_t r = 0; r < n; ++r) {
    uint64_t row = rows ? static_cast<uint64_t>(c.batch_row_offset + r) : 0xffffffffULL;
    {
      std::lock_guard<std::mutex> lock(gen.mutex());  // bernoulli_ takes it again: not held there
      gen.set_current_seed(SplitMix64(c.random_seed ^ SplitMix64(row)));
    }
    (rows ? mask.select(0, r) : mask).bernoulli_(keep, gen);
  }
  return mask;
}

Outs Dropout(const OpCall& c) {
  const at::Tensor& x = c.x(0);
  double ratio = c.has(1) ? ToDouble(c.in[1]) : c.attr_float("ratio", 0.5);
  if (DropoutActive(c)) {
    const double keep = 1.0 - ratio;
    if (c.want(1) || !x.is_cpu()) {  // ONNX's mask, or CUDA's native_dropout: a bool mask
      at::Tensor mask = DropoutMask(c, x, keep, at::kBool);
      return {MaskedScale::apply(x, mask, keep == 0 ? 0.0 : 1.0 / keep), mask};
    }
    // torch.nn.Dropout on the CPU (at::dropout's _dropout): noise of x's dtype, scaled in place,
    // times x; mul's backward keeps the noise (op_saves.cc's SavesDropout).
    at::Tensor noise = DropoutMask(c, x, keep, x.scalar_type());
    if (keep > 0) noise.div_(keep);
    return {x * noise};
  }
  Outs o = {x};  // inference (or ratio 0): the identity, an alias as the analyzer's view rule
  if (c.want(1)) o.push_back(at::ones(x.sizes(), x.options().dtype(at::kBool)));
  return o;
}

// ---- resizing ----

struct ResizeSpec {
  std::vector<int64_t> out;
  std::vector<double> scale;  // out / in, or the given scales
  std::vector<int64_t> axes;  // the axes that scales, sizes and roi name (opset 18); empty: all
};

ResizeSpec ResizeTarget(const OpCall& c, const at::Tensor& x, bool upsample_op) {
  ResizeSpec s;
  int64_t r = x.dim();
  std::vector<double> scales;
  std::vector<int64_t> sizes;
  if (upsample_op) {
    if (c.has(1)) {
      at::Tensor t = c.in[1].to(at::kDouble).contiguous();
      scales.assign(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
    } else {
      for (double f :
           c.node->attr("scales") ? c.node->attr("scales")->floats : std::vector<double>{})
        scales.push_back(f);
    }
  } else if (c.opset < 11) {
    at::Tensor t = c.x(1).to(at::kDouble).contiguous();
    scales.assign(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
  } else {
    if (c.has(3) && c.in[3].numel() > 0)
      sizes = ToInts(c.in[3]);
    else if (c.has(2) && c.in[2].numel() > 0) {
      at::Tensor t = c.in[2].to(at::kDouble).contiguous();
      scales.assign(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
    }
  }
  // Opset 18: scales and sizes for `axes` only; the other axes keep their size.
  if (!upsample_op) {
    for (int64_t a : c.attr_ints("axes")) s.axes.push_back(NormAxis(a, r, c));
  }
  if (!s.axes.empty()) {
    size_t n = s.axes.size();
    if ((!sizes.empty() && sizes.size() != n) || (sizes.empty() && scales.size() != n)) {
      c.Fail("Resize scales or sizes do not match its axes");
    }
    std::vector<int64_t> full_sizes(x.sizes().begin(), x.sizes().end());
    std::vector<double> full_scales(r, 1.0);
    for (size_t i = 0; i < n; ++i) {
      if (!sizes.empty())
        full_sizes[s.axes[i]] = sizes[i];
      else
        full_scales[s.axes[i]] = scales[i];
    }
    if (!sizes.empty())
      sizes = full_sizes;
    else
      scales = full_scales;
  }
  std::string policy =
      upsample_op ? "stretch" : c.attr_string("keep_aspect_ratio_policy", "stretch");
  if (!sizes.empty() && policy != "stretch") {
    // One scale for the resized axes: the largest that fits in sizes (not_larger) or the
    // smallest that covers them (not_smaller); out = round-half-up(scale x in).
    if (static_cast<int64_t>(sizes.size()) != r) c.Fail("Resize sizes do not match the input rank");
    if (policy != "not_larger" && policy != "not_smaller")
      c.Fail("Resize keep_aspect_ratio_policy '" + policy + "' is not supported");
    std::vector<int64_t> resized = s.axes;
    if (resized.empty()) {
      resized.resize(r);
      std::iota(resized.begin(), resized.end(), 0);
    }
    double scale = policy == "not_larger" ? std::numeric_limits<double>::infinity() : 0.0;
    for (int64_t a : resized) {
      double f = static_cast<double>(sizes[a]) / static_cast<double>(x.size(a));
      scale = policy == "not_larger" ? std::min(scale, f) : std::max(scale, f);
    }
    s.out.assign(x.sizes().begin(), x.sizes().end());
    s.scale.assign(r, 1.0);
    for (int64_t a : resized) {
      s.out[a] = static_cast<int64_t>(std::floor(scale * static_cast<double>(x.size(a)) + 0.5));
      s.scale[a] = scale;
    }
    return s;
  }
  if (!sizes.empty()) {
    if (static_cast<int64_t>(sizes.size()) != r) c.Fail("Resize sizes do not match the input rank");
    s.out = sizes;
    for (int64_t d = 0; d < r; ++d)
      s.scale.push_back(static_cast<double>(sizes[d]) / static_cast<double>(x.size(d)));
  } else {
    if (static_cast<int64_t>(scales.size()) != r)
      c.Fail("Resize scales do not match the input rank");
    s.scale = scales;
    for (int64_t d = 0; d < r; ++d)
      s.out.push_back(static_cast<int64_t>(std::floor(x.size(d) * scales[d])));
  }
  return s;
}

double SourceCoordinate(const std::string& mode, int64_t i, double scale, int64_t in, int64_t out,
                        double roi_start, double roi_end) {
  double x = static_cast<double>(i);
  if (mode == "half_pixel") return (x + 0.5) / scale - 0.5;
  if (mode == "half_pixel_symmetric") {
    // half_pixel, shifted so that the output stays centred when out != scale x in.
    double adjustment = static_cast<double>(out) / (scale * static_cast<double>(in));
    double center = static_cast<double>(in) / 2;
    return center * (1 - adjustment) + (x + 0.5) / scale - 0.5;
  }
  if (mode == "pytorch_half_pixel") return out > 1 ? (x + 0.5) / scale - 0.5 : 0.0;
  if (mode == "align_corners") {
    // ONNX's reference uses the unrounded output length (in x scale).
    double len = scale * static_cast<double>(in);
    return out == 1 || len == 1 ? 0.0 : x * static_cast<double>(in - 1) / (len - 1);
  }
  if (mode == "asymmetric") return x / scale;
  if (mode == "tf_half_pixel_for_nn") return (x + 0.5) / scale;
  if (mode == "tf_crop_and_resize") {
    double len = static_cast<double>(in - 1);
    return out > 1
               ? roi_start * len + x * (roi_end - roi_start) * len / static_cast<double>(out - 1)
               : 0.5 * (roi_start + roi_end) * len;
  }
  throw MemplanError("Resize coordinate_transformation_mode '" + mode + "' is not supported");
}

int64_t NearestIndex(const std::string& mode, double v) {
  double f = std::floor(v);
  if (mode == "floor") return static_cast<int64_t>(f);
  if (mode == "ceil") return static_cast<int64_t>(std::ceil(v));
  if (v - f == 0.5) return static_cast<int64_t>(mode == "round_prefer_ceil" ? f + 1 : f);
  return static_cast<int64_t>(std::round(v));
}

// Interpolation taps along one axis: out[i] = sum_k w[k][i] * in[idx[k][i]].
struct Taps {
  std::vector<std::vector<int64_t>> idx;
  std::vector<std::vector<double>> w;
  std::vector<bool> outside;  // tf_crop_and_resize: sample outside the input
};

Taps AxisTaps(const OpCall& c, const std::string& mode, const std::string& coord,
              const std::string& nearest, int64_t in, int64_t out, double scale, double roi_start,
              double roi_end) {
  int ntaps = mode == "nearest" ? 1 : mode == "cubic" ? 4 : 2;
  double a = c.attr_float("cubic_coeff_a", -0.75);
  bool exclude = c.attr_int("exclude_outside", 0) != 0;
  if (mode != "nearest" && scale < 1 && c.attr_int("antialias", 0) != 0) {
    // Antialiased downsampling (opset 18): the linear or cubic filter stretched by 1 / scale,
    // over n taps around the source coordinate, normalised to sum 1 (ONNX's reference).
    int64_t start = static_cast<int64_t>(std::floor((mode == "cubic" ? -2.0 : -1.0) / scale)) + 1;
    int64_t n = 2 - 2 * start;
    Taps t;
    t.idx.assign(n, std::vector<int64_t>(out));
    t.w.assign(n, std::vector<double>(out));
    t.outside.assign(out, false);
    auto filter = [&](double v) {
      v = std::abs(v);
      if (mode == "linear") return std::clamp(1 - v, 0.0, 1.0);
      if (v <= 1) return ((a + 2) * v - (a + 3)) * v * v + 1;
      return v < 2 ? ((a * v - 5 * a) * v + 8 * a) * v - 4 * a : 0.0;
    };
    for (int64_t i = 0; i < out; ++i) {
      double x = SourceCoordinate(coord, i, scale, in, out, roi_start, roi_end);
      double f = std::floor(x);
      double ratio = x == f ? 1.0 : x - f;
      int64_t first = static_cast<int64_t>(f) + (x == f ? -n / 2 : -n / 2 + 1);
      double sum = 0;
      for (int64_t k = 0; k < n; ++k) {
        int64_t j = first + k;
        double w = filter(scale * static_cast<double>(start + k - ratio));
        if (exclude && (j < 0 || j >= in)) w = 0;
        t.w[k][i] = w;
        t.idx[k][i] = std::clamp<int64_t>(j, 0, in - 1);
        sum += w;
      }
      for (int64_t k = 0; k < n; ++k) t.w[k][i] = sum != 0 ? t.w[k][i] / sum : 0;
    }
    return t;
  }
  Taps t;
  t.idx.assign(ntaps, std::vector<int64_t>(out));
  t.w.assign(ntaps, std::vector<double>(out));
  t.outside.assign(out, false);
  for (int64_t i = 0; i < out; ++i) {
    double x = SourceCoordinate(coord, i, scale, in, out, roi_start, roi_end);
    if (coord == "tf_crop_and_resize" && (x < 0 || x > static_cast<double>(in - 1)))
      t.outside[i] = true;
    if (mode == "nearest") {
      t.idx[0][i] = std::clamp<int64_t>(NearestIndex(nearest, x), 0, in - 1);
      t.w[0][i] = 1;
    } else if (mode == "cubic") {
      double f = std::floor(x), s = x - f;
      double ws[4] = {((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a,
                      ((a + 2) * s - (a + 3)) * s * s + 1,
                      ((a + 2) * (1 - s) - (a + 3)) * (1 - s) * (1 - s) + 1,
                      ((a * (2 - s) - 5 * a) * (2 - s) + 8 * a) * (2 - s) - 4 * a};
      double sum = 0;
      for (int k = 0; k < 4; ++k) {
        int64_t j = static_cast<int64_t>(f) - 1 + k;
        if (exclude && (j < 0 || j >= in)) ws[k] = 0;
        sum += ws[k];
        t.idx[k][i] = std::clamp<int64_t>(j, 0, in - 1);
      }
      for (int k = 0; k < 4; ++k) t.w[k][i] = exclude && sum != 0 ? ws[k] / sum : ws[k];
    } else {
      double v = std::clamp(x, 0.0, static_cast<double>(in - 1));
      int64_t i0 = static_cast<int64_t>(std::floor(v));
      t.idx[0][i] = i0;
      t.idx[1][i] = std::min<int64_t>(i0 + 1, in - 1);
      t.w[1][i] = v - static_cast<double>(i0);
      t.w[0][i] = 1 - t.w[1][i];
    }
  }
  return t;
}

Outs ResizeImpl(const OpCall& c, bool upsample_op) {
  const at::Tensor& x = c.x(0);
  ResizeSpec s = ResizeTarget(c, x, upsample_op);
  std::string mode = c.attr_string("mode", "nearest");
  if (mode == "bilinear") mode = "linear";
  std::string coord =
      upsample_op ? "asymmetric" : c.attr_string("coordinate_transformation_mode", "half_pixel");
  std::string nearest = upsample_op ? "floor" : c.attr_string("nearest_mode", "round_prefer_floor");
  if (c.opset < 11 && !upsample_op) {
    coord = "asymmetric";
    nearest = "floor";
  }
  if (mode != "nearest" && mode != "linear" && mode != "cubic")
    c.Fail("Resize mode '" + mode + "' is not supported");
  int64_t r = x.dim();
  // The common training case: bilinear over the spatial dims with half-pixel centres (what
  // segmentation heads export): upsample_bilinear2d saves nothing but sizes.
  bool spatial_only = r == 4 && s.out[0] == x.size(0) && s.out[1] == x.size(1);
  std::vector<int64_t> spatial_out(s.out.begin() + std::min<int64_t>(2, r), s.out.end());
  bool given_scales = !c.has(3) || c.in[3].numel() == 0;
  std::vector<double> spatial_scales(s.scale.begin() + std::min<int64_t>(2, r), s.scale.end());
  if (mode == "linear" && spatial_only && c.attr_int("antialias", 0) == 0 &&
      (coord == "half_pixel" || coord == "pytorch_half_pixel") &&
      std::all_of(spatial_out.begin(), spatial_out.end(), [](int64_t v) { return v > 1; })) {
    auto scale_arg =
        given_scales ? c10::optional<at::ArrayRef<double>>(spatial_scales) : c10::nullopt;
    auto size_arg = given_scales ? at::OptionalIntArrayRef() : at::OptionalIntArrayRef(spatial_out);
    return {at::upsample_bilinear2d(x, size_arg, false, scale_arg)};
  }
  // Otherwise: separable interpolation with ONNX's own coordinate formulas.
  std::vector<double> roi;
  if (coord == "tf_crop_and_resize") {
    if (!c.has(1)) c.Fail("Resize tf_crop_and_resize needs the roi input");
    at::Tensor t = c.in[1].to(at::kDouble).contiguous();
    roi.assign(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
    if (!s.axes.empty()) {  // roi for `axes` only: the others are whole (0 to 1)
      size_t n = s.axes.size();
      if (roi.size() != 2 * n) c.Fail("Resize roi does not have 2 x axes values");
      std::vector<double> full(2 * r, 0.0);
      std::fill(full.begin() + r, full.end(), 1.0);
      for (size_t i = 0; i < n; ++i) {
        full[s.axes[i]] = roi[i];
        full[s.axes[i] + r] = roi[i + n];
      }
      roi = full;
    }
    if (static_cast<int64_t>(roi.size()) != 2 * r)
      c.Fail("Resize roi does not have 2 x rank values");
  }
  at::Tensor y = at::isFloatingType(x.scalar_type()) ? x : x.to(at::kFloat);
  at::Tensor outside;
  auto opts = at::TensorOptions().dtype(at::kLong);
  for (int64_t d = 0; d < r; ++d) {
    int64_t in = x.size(d), out = s.out[d];
    if (in == out && s.scale[d] == 1.0 && roi.empty()) continue;
    Taps t = AxisTaps(c, mode, coord, nearest, in, out, s.scale[d], roi.empty() ? 0 : roi[d],
                      roi.empty() ? 1 : roi[d + r]);
    std::vector<int64_t> shape(r, 1);
    shape[d] = out;
    at::Tensor acc;
    for (size_t k = 0; k < t.idx.size(); ++k) {
      at::Tensor g = at::index_select(y, d, at::tensor(t.idx[k], opts).to(x.device()));
      if (mode != "nearest") {
        at::Tensor w = at::tensor(t.w[k], at::TensorOptions().dtype(at::kDouble))
                           .to(y.device())
                           .to(y.scalar_type())
                           .view(shape);
        g = at::mul(g, w);
      }
      acc = acc.defined() ? at::add(acc, g) : g;
    }
    y = acc;
    if (!roi.empty()) {
      std::vector<uint8_t> o(t.outside.begin(), t.outside.end());
      at::Tensor m = at::tensor(o, at::TensorOptions().dtype(at::kByte))
                         .to(at::kBool)
                         .to(x.device())
                         .view(shape);
      outside = outside.defined() ? at::logical_or(outside, m) : m;
    }
  }
  if (outside.defined()) {
    y = at::where(outside,
                  at::scalar_tensor(c.attr_float("extrapolation_value", 10.0), y.options()), y);
  }
  return {y.scalar_type() == x.scalar_type()
              ? y
              : (at::isFloatingType(x.scalar_type()) ? y.to(x.scalar_type())
                                                     : at::round(y).to(x.scalar_type()))};
}
Outs Resize(const OpCall& c) { return ResizeImpl(c, false); }
Outs Upsample(const OpCall& c) { return ResizeImpl(c, true); }

// ---- losses ----

int64_t ReductionOf(const OpCall& c) {
  std::string r = c.attr_string("reduction", "mean");
  if (r == "none") return at::Reduction::None;
  if (r == "sum") return at::Reduction::Sum;
  if (r == "mean") return at::Reduction::Mean;
  c.Fail("unknown reduction '" + r + "'");
}
int64_t IgnoreIndex(const OpCall& c) {
  return c.has_attr("ignore_index") ? c.attr_int("ignore_index", -100)
                                    : std::numeric_limits<int64_t>::min();
}
Outs NegativeLogLikelihoodLoss(const OpCall& c) {
  at::Tensor w = c.has(2) ? c.in[2] : at::Tensor();
  return {at::nll_loss_nd(c.x(0), c.x(1).to(at::kLong), w, ReductionOf(c), IgnoreIndex(c))};
}
Outs SoftmaxCrossEntropyLoss(const OpCall& c) {
  at::Tensor log_prob = at::log_softmax(c.x(0), 1);
  at::Tensor w = c.has(2) ? c.in[2] : at::Tensor();
  at::Tensor loss =
      at::nll_loss_nd(log_prob, c.x(1).to(at::kLong), w, ReductionOf(c), IgnoreIndex(c));
  if (c.want(1)) return {loss, log_prob};
  return {loss};
}

// Cross-entropy over the last axis against int64 class ids (memplan's appended loss).
Outs CrossEntropyLoss(const OpCall& c) {
  const at::Tensor& logits = c.x(0);
  int64_t classes = logits.dim() > 0 ? logits.size(-1) : 1;
  at::Tensor log_probs = at::log_softmax(logits, -1);
  at::Tensor loss = at::nll_loss(log_probs.reshape({-1, classes}), c.x(1).reshape({-1}), {},
                                 at::Reduction::Mean, -100);
  return {loss};
}
Outs MseLoss(const OpCall& c) { return {at::mse_loss(c.x(0), c.x(1), at::Reduction::Mean)}; }
Outs SumLoss(const OpCall& c) { return {at::sum(c.x(0))}; }

}  // namespace

void RegisterNnKernels(KernelTable& t) {
  t["Conv"] = Conv;
  t["ConvTranspose"] = ConvTranspose;
  t["Gemm"] = Gemm;
  t["MatMul"] = MatMul;
  t["Einsum"] = Einsum;
  t["BatchNormalization"] = BatchNormalization;
  t["LayerNormalization"] = LayerNormalization;
  t["RMSNormalization"] = RMSNormalization;
  t["InstanceNormalization"] = InstanceNormalization;
  t["MeanVarianceNormalization"] = MeanVarianceNormalization;
  t["LRN"] = Lrn;
  t["Relu"] = Relu;
  t["LeakyRelu"] = LeakyRelu;
  t["Elu"] = Elu;
  t["Selu"] = Selu;
  t["Celu"] = Celu;
  t["Sigmoid"] = Sigmoid;
  t["HardSigmoid"] = HardSigmoid;
  t["HardSwish"] = HardSwish;
  t["Tanh"] = Tanh;
  t["Softplus"] = Softplus;
  t["Softsign"] = Softsign;
  t["Mish"] = Mish;
  t["Gelu"] = Gelu;
  t["Swish"] = Swish;
  t["memplan.ScaledDotProductAttention"] = ScaledDotProductAttention;
  t["Erf"] = Erf;
  t["Exp"] = Exp;
  t["Log"] = Log;
  t["Sqrt"] = Sqrt;
  t["Reciprocal"] = Reciprocal;
  t["Sin"] = Sin;
  t["Cos"] = Cos;
  t["Tan"] = Tan;
  t["Asin"] = Asin;
  t["Acos"] = Acos;
  t["Atan"] = Atan;
  t["Sinh"] = Sinh;
  t["Cosh"] = Cosh;
  t["Asinh"] = Asinh;
  t["Acosh"] = Acosh;
  t["Atanh"] = Atanh;
  t["ThresholdedRelu"] = ThresholdedRelu;
  t["Shrink"] = Shrink;
  t["Clip"] = Clip;
  t["PRelu"] = PRelu;
  t["Softmax"] = Softmax;
  t["LogSoftmax"] = LogSoftmax;
  t["Hardmax"] = Hardmax;
  t["MaxPool"] = MaxPool;
  t["AveragePool"] = AveragePool;
  t["GlobalAveragePool"] = GlobalAveragePool;
  t["GlobalMaxPool"] = GlobalMaxPool;
  t["Dropout"] = Dropout;
  t["Resize"] = Resize;
  t["Upsample"] = Upsample;
  t["NegativeLogLikelihoodLoss"] = NegativeLogLikelihoodLoss;
  t["SoftmaxCrossEntropyLoss"] = SoftmaxCrossEntropyLoss;
  t["memplan.CrossEntropyLoss"] = CrossEntropyLoss;
  t["memplan.MseLoss"] = MseLoss;
  t["memplan.SumLoss"] = SumLoss;
}

}  // namespace memplan::exec
