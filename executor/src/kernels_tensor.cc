// Elementwise arithmetic, comparisons, reductions, data movement and shape ops.
//
// Lowering choices follow the analyzer's rules: views stay views (Reshape, Flatten, Squeeze,
// Unsqueeze, Transpose, Slice with positive steps, Split, Expand, Identity, same-type Cast),
// Gather is an index_select/embedding (saves the indices), reductions use mean/sum (save
// nothing) or amax/amin (save input and output).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kernels.h"

namespace memplan::exec {

// ---- OpCall and helpers ----

const at::Tensor& OpCall::x(size_t i) const {
  if (!has(i)) Fail("input " + std::to_string(i) + " is required but omitted");
  return in[i];
}

const at::Tensor* OpCall::attr_tensor(const char* name) const {
  if (!tensor_attrs) return nullptr;
  auto it = tensor_attrs->find(name);
  return it == tensor_attrs->end() ? nullptr : &it->second;
}

void OpCall::Fail(const std::string& why) const {
  throw MemplanError(node->op_type + " node '" + node->name + "': " + why);
}

std::vector<int64_t> ToInts(const at::Tensor& t) {
  at::Tensor c = t.scalar_type() == at::kLong && t.is_contiguous() && t.device().is_cpu()
                     ? t
                     : t.to(at::kCPU).to(at::kLong).contiguous();
  const int64_t* p = c.data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + c.numel());
}

double ToDouble(const at::Tensor& t) {
  if (t.numel() < 1) throw MemplanError("expected a scalar tensor, got an empty one");
  return t.reshape({-1})[0].item<double>();
}

int64_t NormAxis(int64_t axis, int64_t rank, const OpCall& c) {
  int64_t r = std::max<int64_t>(rank, 1);
  if (axis < -r || axis >= r) {
    c.Fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  }
  return axis < 0 ? axis + r : axis;
}

std::vector<int64_t> AxesArg(const OpCall& c, size_t slot, const char* name) {
  if (c.has(slot)) return ToInts(c.in[slot]);
  return c.attr_ints(name);
}

at::ScalarType ScalarTypeOf(DType d) {
  switch (d) {
    case DType::kFloat32:
      return at::kFloat;
    case DType::kFloat16:
      return at::kHalf;
    case DType::kBFloat16:
      return at::kBFloat16;
    case DType::kFloat64:
      return at::kDouble;
    case DType::kInt8:
      return at::kChar;
    case DType::kInt16:
      return at::kShort;
    case DType::kInt32:
      return at::kInt;
    case DType::kInt64:
      return at::kLong;
    case DType::kUInt8:
      return at::kByte;
    case DType::kUInt16:
      return at::kInt;  // LibTorch has no uint16/32/64: held widened
    case DType::kUInt32:
      return at::kLong;
    case DType::kUInt64:
      return at::kLong;
    case DType::kBool:
      return at::kBool;
    default:
      break;
  }
  throw MemplanError(std::string("tensors of type ") + DTypeName(d) +
                     " are not supported by the executor");
}

at::ScalarType ScalarTypeOfOnnx(int onnx_elem_type) {
  DType d = DTypeFromOnnx(onnx_elem_type);
  if (d == DType::kUndefined) {
    throw MemplanError("ONNX element type " + std::to_string(onnx_elem_type) +
                       " is not supported by the executor");
  }
  return ScalarTypeOf(d);
}

at::Tensor MeanSavingNothing(const at::Tensor& x, at::IntArrayRef dims, bool keepdim) {
  // Sum then an in-place scale by 1/n saves only sizes, as the analyzer's rule assumes, on every
  // LibTorch: 1.13's mean.dim saved its whole input (MeanBackward1 kept `self`); 2.14's keeps
  // only the input's sizes and element count.
  int64_t n = 1;
  for (int64_t d : dims) n *= x.size(d);
  at::Tensor s = at::sum(x, dims, keepdim);
  return n == 1 ? s : s.mul_(1.0 / static_cast<double>(n));
}

namespace {

using Outs = std::vector<at::Tensor>;

bool IsFloat(const at::Tensor& t) { return at::isFloatingType(t.scalar_type()); }

std::vector<int64_t> BroadcastShapes(at::IntArrayRef a, at::IntArrayRef b, const OpCall& c) {
  size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) c.Fail("shapes do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// ---- elementwise binary ----

Outs Add(const OpCall& c) { return {at::add(c.x(0), c.x(1))}; }
Outs Sub(const OpCall& c) { return {at::sub(c.x(0), c.x(1))}; }
Outs Mul(const OpCall& c) { return {at::mul(c.x(0), c.x(1))}; }
Outs Div(const OpCall& c) {
  const at::Tensor &a = c.x(0), &b = c.x(1);
  if (!IsFloat(a)) return {at::div(a, b, "trunc").to(a.scalar_type())};
  return {at::div(a, b)};
}
Outs Pow(const OpCall& c) {
  const at::Tensor &a = c.x(0), &b = c.x(1);
  // A constant scalar exponent: pow(Tensor, Scalar) saves only the base.
  if (b.numel() == 1 && b.dim() <= 1 && !b.requires_grad() && IsFloat(a)) {
    double e = ToDouble(b);
    return {at::pow(a, e)};
  }
  at::Tensor r = at::pow(a, b);
  if (r.scalar_type() != a.scalar_type()) r = r.to(a.scalar_type());
  return {r};
}
Outs Mod(const OpCall& c) {
  const at::Tensor &a = c.x(0), &b = c.x(1);
  if (c.attr_int("fmod", 0) != 0) return {at::fmod(a, b)};
  return {at::remainder(a, b)};
}
template <at::Tensor (*F)(const at::Tensor&, const at::Tensor&)>
Outs Variadic(const OpCall& c) {
  at::Tensor acc = c.x(0);
  for (size_t i = 1; i < c.in.size(); ++i) acc = F(acc, c.x(i));
  return {acc};
}
at::Tensor AddT(const at::Tensor& a, const at::Tensor& b) { return at::add(a, b); }
at::Tensor MaxT(const at::Tensor& a, const at::Tensor& b) { return at::maximum(a, b); }
at::Tensor MinT(const at::Tensor& a, const at::Tensor& b) { return at::minimum(a, b); }
Outs Sum(const OpCall& c) {
  if (c.in.size() == 1) return {c.x(0).clone()};
  return Variadic<AddT>(c);
}
Outs Max(const OpCall& c) {
  if (c.in.size() == 1) return {c.x(0).clone()};
  return Variadic<MaxT>(c);
}
Outs Min(const OpCall& c) {
  if (c.in.size() == 1) return {c.x(0).clone()};
  return Variadic<MinT>(c);
}
Outs Mean(const OpCall& c) {
  at::Tensor acc = c.in.size() == 1 ? c.x(0).clone() : Variadic<AddT>(c)[0];
  return {at::div(acc, static_cast<double>(c.in.size()))};
}
Outs Equal(const OpCall& c) { return {at::eq(c.x(0), c.x(1))}; }
Outs Less(const OpCall& c) { return {at::lt(c.x(0), c.x(1))}; }
Outs LessOrEqual(const OpCall& c) { return {at::le(c.x(0), c.x(1))}; }
Outs Greater(const OpCall& c) { return {at::gt(c.x(0), c.x(1))}; }
Outs GreaterOrEqual(const OpCall& c) { return {at::ge(c.x(0), c.x(1))}; }
Outs And(const OpCall& c) { return {at::logical_and(c.x(0), c.x(1))}; }
Outs Or(const OpCall& c) { return {at::logical_or(c.x(0), c.x(1))}; }
Outs Xor(const OpCall& c) { return {at::logical_xor(c.x(0), c.x(1))}; }
Outs Where(const OpCall& c) {
  at::Tensor cond = c.x(0);
  if (cond.scalar_type() != at::kBool) cond = cond.to(at::kBool);
  return {at::where(cond, c.x(1), c.x(2))};
}

// ---- elementwise unary (non-differentiable or trivial) ----

Outs Neg(const OpCall& c) { return {at::neg(c.x(0))}; }
Outs Abs(const OpCall& c) { return {at::abs(c.x(0))}; }
Outs Floor(const OpCall& c) { return {IsFloat(c.x(0)) ? at::floor(c.x(0)) : c.x(0).clone()}; }
Outs Ceil(const OpCall& c) { return {IsFloat(c.x(0)) ? at::ceil(c.x(0)) : c.x(0).clone()}; }
Outs Round(const OpCall& c) { return {at::round(c.x(0))}; }
Outs Sign(const OpCall& c) { return {at::sign(c.x(0))}; }
Outs Not(const OpCall& c) { return {at::logical_not(c.x(0))}; }
Outs IsNaN(const OpCall& c) { return {at::isnan(c.x(0))}; }
Outs IsInf(const OpCall& c) {
  const at::Tensor& x = c.x(0);
  bool neg = c.attr_int("detect_negative", 1) != 0, pos = c.attr_int("detect_positive", 1) != 0;
  if (neg && pos) return {at::isinf(x)};
  if (neg) return {at::isneginf(x)};
  if (pos) return {at::isposinf(x)};
  return {at::zeros_like(x, x.options().dtype(at::kBool))};
}
Outs Identity(const OpCall& c) { return {c.x(0)}; }

Outs Cast(const OpCall& c) {
  at::ScalarType to = ScalarTypeOfOnnx(static_cast<int>(c.attr_int("to", 1)));
  const at::Tensor& x = c.x(0);
  if (x.scalar_type() == to) return {x};  // same type: an alias, as the analyzer's view rule
  if (at::isFloatingType(x.scalar_type()) && !at::isFloatingType(to) && to != at::kBool) {
    return {at::trunc(x).to(to)};  // float -> int truncates toward zero
  }
  return {x.to(to)};
}
Outs CastLike(const OpCall& c) {
  at::ScalarType to = c.x(1).scalar_type();
  const at::Tensor& x = c.x(0);
  if (x.scalar_type() == to) return {x};
  return {x.to(to)};
}

// ---- reductions ----

struct ReduceArgs {
  std::vector<int64_t> axes;
  bool keep = true;
  bool noop = false;
};

ReduceArgs GetReduceArgs(const OpCall& c) {
  ReduceArgs r;
  r.axes = AxesArg(c, 1, "axes");
  r.keep = c.attr_int("keepdims", 1) != 0;
  int64_t rank = c.x(0).dim();
  if (r.axes.empty()) {
    if (c.attr_int("noop_with_empty_axes", 0) != 0) {
      r.noop = true;
    } else {
      r.axes.resize(rank);
      std::iota(r.axes.begin(), r.axes.end(), 0);
    }
  }
  for (int64_t& a : r.axes) a = NormAxis(a, rank, c);
  std::sort(r.axes.begin(), r.axes.end());
  r.axes.erase(std::unique(r.axes.begin(), r.axes.end()), r.axes.end());
  return r;
}

at::Tensor KeepType(at::Tensor r, const at::Tensor& like) {
  return r.scalar_type() == like.scalar_type() ? r : r.to(like.scalar_type());
}

Outs ReduceMean(const OpCall& c) {
  ReduceArgs r = GetReduceArgs(c);
  const at::Tensor& x = c.x(0);
  if (r.noop) return {x};
  if (!IsFloat(x)) return {KeepType(at::mean(x.to(at::kDouble), r.axes, r.keep), x)};
  return {MeanSavingNothing(x, r.axes, r.keep)};
}
Outs ReduceSum(const OpCall& c) {
  ReduceArgs r = GetReduceArgs(c);
  const at::Tensor& x = c.x(0);
  if (r.noop) return {x};
  return {KeepType(at::sum(x, r.axes, r.keep), x)};
}
// Max or min over an empty set (opset 18): the identity of the reduction, the type's lowest
// value for max and its largest for min (-inf/inf for floats, false/true for bool). Undefined
// when no reduced axis is empty.
at::Tensor EmptyExtremum(const at::Tensor& x, const ReduceArgs& r, bool max) {
  if (std::none_of(r.axes.begin(), r.axes.end(), [&](int64_t a) { return x.size(a) == 0; }))
    return {};
  std::vector<int64_t> shape;
  for (int64_t d = 0; d < x.dim(); ++d) {
    bool reduced = std::find(r.axes.begin(), r.axes.end(), d) != r.axes.end();
    if (!reduced)
      shape.push_back(x.size(d));
    else if (r.keep)
      shape.push_back(1);
  }
  at::Scalar fill;
  if (x.scalar_type() == at::kBool) {
    fill = !max;
  } else {
    AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, x.scalar_type(),
                               "EmptyExtremum", [&] {
                                 using L = std::numeric_limits<scalar_t>;
                                 fill = L::has_infinity ? (max ? -L::infinity() : L::infinity())
                                                        : (max ? L::lowest() : L::max());
                               });
  }
  return at::full(shape, fill, x.options());
}
Outs ReduceMax(const OpCall& c) {
  ReduceArgs r = GetReduceArgs(c);
  if (r.noop) return {c.x(0)};
  if (at::Tensor e = EmptyExtremum(c.x(0), r, true); e.defined()) return {e};
  return {at::amax(c.x(0), r.axes, r.keep)};
}
Outs ReduceMin(const OpCall& c) {
  ReduceArgs r = GetReduceArgs(c);
  if (r.noop) return {c.x(0)};
  if (at::Tensor e = EmptyExtremum(c.x(0), r, false); e.defined()) return {e};
  return {at::amin(c.x(0), r.axes, r.keep)};
}
Outs ReduceProd(const OpCall& c) {
  ReduceArgs r = GetReduceArgs(c);
  at::Tensor x = c.x(0);
  if (r.noop) return {x};
  for (auto it = r.axes.rbegin(); it != r.axes.rend(); ++it) x = at::prod(x, *it, r.keep);
  return {KeepType(x, c.x(0))};
}
Outs ReduceL1(const OpCall& c) {
  ReduceArgs r = GetReduceArgs(c);
  if (r.noop) return {c.x(0)};
  return {KeepType(at::sum(at::abs(c.x(0)), r.axes, r.keep), c.x(0))};
}
Outs ReduceL2(const OpCall& c) {
  ReduceArgs r = GetReduceArgs(c);
  const at::Tensor& x = c.x(0);
  if (r.noop) return {x};
  if (!IsFloat(x))
    return {KeepType(at::sqrt(at::sum(x.to(at::kDouble).pow(2), r.axes, r.keep)), x)};
  // linalg_vector_norm: saves input and result, as the analyzer's rule.
  return {at::linalg_vector_norm(x, 2, r.axes, r.keep)};
}
Outs ReduceSumSquare(const OpCall& c) {
  ReduceArgs r = GetReduceArgs(c);
  if (r.noop) return {c.x(0)};
  return {KeepType(at::sum(at::mul(c.x(0), c.x(0)), r.axes, r.keep), c.x(0))};
}
Outs ReduceLogSum(const OpCall& c) {
  ReduceArgs r = GetReduceArgs(c);
  if (r.noop) return {c.x(0)};
  return {at::log(at::sum(c.x(0), r.axes, r.keep))};
}
Outs ReduceLogSumExp(const OpCall& c) {
  ReduceArgs r = GetReduceArgs(c);
  if (r.noop) return {c.x(0)};
  const at::Tensor& x = c.x(0);
  if (!IsFloat(x)) return {KeepType(at::logsumexp(x.to(at::kDouble), r.axes, r.keep), x)};
  return {at::logsumexp(x, r.axes, r.keep)};
}

Outs ArgReduce(const OpCall& c, bool is_max) {
  const at::Tensor& x = c.x(0);
  int64_t axis = NormAxis(c.attr_int("axis", 0), x.dim(), c);
  bool keep = c.attr_int("keepdims", 1) != 0;
  if (c.attr_int("select_last_index", 0) != 0) {
    at::Tensor f = at::flip(x, {axis});
    at::Tensor i = is_max ? at::argmax(f, axis, keep) : at::argmin(f, axis, keep);
    return {at::rsub(i, x.size(axis) - 1)};
  }
  return {is_max ? at::argmax(x, axis, keep) : at::argmin(x, axis, keep)};
}
Outs ArgMax(const OpCall& c) { return ArgReduce(c, true); }
Outs ArgMin(const OpCall& c) { return ArgReduce(c, false); }

Outs CumSum(const OpCall& c) {
  at::Tensor x = c.x(0);
  int64_t axis = NormAxis(static_cast<int64_t>(ToDouble(c.x(1))), x.dim(), c);
  bool reverse = c.attr_int("reverse", 0) != 0, exclusive = c.attr_int("exclusive", 0) != 0;
  if (reverse) x = at::flip(x, {axis});
  at::Tensor y = KeepType(at::cumsum(x, axis), x);
  if (exclusive) y = at::sub(y, x);
  if (reverse) y = at::flip(y, {axis});
  return {y};
}

// ---- shape ops and views ----

Outs Shape(const OpCall& c) {
  const at::Tensor& x = c.x(0);
  int64_t r = x.dim();
  int64_t start = c.attr_int("start", 0), end = c.attr_int("end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, 0, r);
  std::vector<int64_t> dims;
  for (int64_t i = start; i < end; ++i) dims.push_back(x.size(i));
  return {at::tensor(dims, at::TensorOptions().dtype(at::kLong)).to(x.device())};
}
Outs Size(const OpCall& c) {
  return {at::scalar_tensor(c.x(0).numel(),
                            at::TensorOptions().dtype(at::kLong).device(c.x(0).device()))};
}

Outs Reshape(const OpCall& c) {
  const at::Tensor& x = c.x(0);
  std::vector<int64_t> target;
  if (c.has(1))
    target = ToInts(c.in[1]);
  else
    target = c.attr_ints("shape");  // opset < 5
  bool allowzero = c.attr_int("allowzero", 0) != 0;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == 0 && !allowzero) {
      if (static_cast<int64_t>(i) >= x.dim()) c.Fail("Reshape copies a dimension the input lacks");
      target[i] = x.size(static_cast<int64_t>(i));
    }
  }
  return {at::reshape(x, target)};
}

Outs Flatten(const OpCall& c) {
  const at::Tensor& x = c.x(0);
  int64_t r = x.dim();
  int64_t axis = c.attr_int("axis", 1);
  if (axis < 0) axis += r;
  if (axis < 0 || axis > r) c.Fail("Flatten axis out of range");
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < r; ++d) (d < axis ? outer : inner) *= x.size(d);
  return {at::reshape(x, {outer, inner})};
}

Outs Squeeze(const OpCall& c) {
  at::Tensor x = c.x(0);
  std::vector<int64_t> axes = AxesArg(c, 1, "axes");
  if (axes.empty()) {
    for (int64_t d = x.dim() - 1; d >= 0; --d)
      if (x.size(d) == 1) axes.push_back(d);
  }
  for (int64_t& a : axes) a = NormAxis(a, x.dim(), c);
  std::sort(axes.begin(), axes.end(), std::greater<int64_t>());
  for (int64_t a : axes) {
    if (x.size(a) != 1)
      c.Fail("Squeeze of dimension " + std::to_string(a) + " whose size is not 1");
    x = at::squeeze(x, a);
  }
  return {x};
}

Outs Unsqueeze(const OpCall& c) {
  at::Tensor x = c.x(0);
  std::vector<int64_t> axes = AxesArg(c, 1, "axes");
  int64_t out_rank = x.dim() + static_cast<int64_t>(axes.size());
  for (int64_t& a : axes) a = NormAxis(a, out_rank, c);
  std::sort(axes.begin(), axes.end());
  for (int64_t a : axes) x = at::unsqueeze(x, a);
  return {x};
}

Outs Transpose(const OpCall& c) {
  const at::Tensor& x = c.x(0);
  std::vector<int64_t> perm = c.attr_ints("perm");
  if (perm.empty())
    for (int64_t i = x.dim() - 1; i >= 0; --i) perm.push_back(i);
  return {x.permute(perm)};
}

Outs Expand(const OpCall& c) {
  const at::Tensor& x = c.x(0);
  std::vector<int64_t> out = BroadcastShapes(x.sizes(), ToInts(c.x(1)), c);
  return {x.expand(out)};
}

Outs Slice(const OpCall& c) {
  at::Tensor x = c.x(0);
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.opset >= 10 || c.has(1)) {
    starts = ToInts(c.x(1));
    ends = ToInts(c.x(2));
    if (c.has(3)) axes = ToInts(c.in[3]);
    if (c.has(4)) steps = ToInts(c.in[4]);
  } else {
    starts = c.attr_ints("starts");
    ends = c.attr_ints("ends");
    axes = c.attr_ints("axes");
  }
  if (axes.empty()) {
    axes.resize(starts.size());
    std::iota(axes.begin(), axes.end(), 0);
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size()) {
    c.Fail("Slice starts, ends, axes and steps differ in length");
  }
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = NormAxis(axes[i], x.dim(), c);
    int64_t dim = x.size(a), s = steps[i];
    if (s == 0) c.Fail("Slice step is 0");
    int64_t b = starts[i], e = ends[i];
    if (b < 0) b = b < std::numeric_limits<int64_t>::min() / 2 ? -1 - dim : b + dim;
    if (e < 0) e = e < std::numeric_limits<int64_t>::min() / 2 ? -1 - dim : e + dim;
    if (s > 0) {
      b = std::clamp<int64_t>(b, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      if (e < b) e = b;
      x = at::slice(x, a, b, e, s);  // a view
    } else {
      b = std::clamp<int64_t>(b, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      int64_t n = b > e ? (b - e + (-s) - 1) / (-s) : 0;
      at::Tensor idx =
          at::arange(0, n, at::TensorOptions().dtype(at::kLong).device(x.device())) * s + b;
      x = at::index_select(x, a, idx);
    }
  }
  return {x};
}

Outs Split(const OpCall& c) {
  const at::Tensor& x = c.x(0);
  int64_t axis = NormAxis(c.attr_int("axis", 0), x.dim(), c);
  int64_t dim = x.size(axis);
  std::vector<int64_t> split = c.has(1) ? ToInts(c.in[1]) : c.attr_ints("split");
  int64_t n = static_cast<int64_t>(c.num_outputs());
  if (split.empty()) {
    int64_t each = (dim + n - 1) / n;
    for (int64_t i = 0; i < n; ++i)
      split.push_back(std::max<int64_t>(0, std::min(each, dim - each * i)));
  }
  if (static_cast<int64_t>(split.size()) != n)
    c.Fail("Split sizes do not match the number of outputs");
  auto parts = at::split_with_sizes(x, split, axis);
  return Outs(parts.begin(), parts.end());
}

Outs Concat(const OpCall& c) {
  std::vector<at::Tensor> parts;
  int64_t rank = -1;
  for (size_t i = 0; i < c.in.size(); ++i) {
    if (c.has(i)) {
      parts.push_back(c.in[i]);
      rank = std::max<int64_t>(rank, c.in[i].dim());
    }
  }
  if (parts.empty()) c.Fail("Concat of no inputs");
  int64_t axis = NormAxis(c.attr_int("axis", 0), rank, c);
  return {at::cat(parts, axis)};
}

at::Tensor NormalizeIndices(const at::Tensor& idx, int64_t dim) {
  at::Tensor i = idx.scalar_type() == at::kLong ? idx : idx.to(at::kLong);
  if (i.numel() > 0 && at::lt(i, 0).any().item<bool>()) i = at::where(at::lt(i, 0), i + dim, i);
  return i;
}

Outs Gather(const OpCall& c) {
  const at::Tensor& data = c.x(0);
  int64_t axis = NormAxis(c.attr_int("axis", 0), data.dim(), c);
  at::Tensor idx = NormalizeIndices(c.x(1), data.size(axis));
  if (axis == 0 && data.dim() == 2 && idx.dim() >= 1 && IsFloat(data)) {
    return {at::embedding(data, idx)};  // saves the indices, as the analyzer's rule
  }
  std::vector<int64_t> out(data.sizes().begin(), data.sizes().begin() + axis);
  for (int64_t d : idx.sizes()) out.push_back(d);
  for (int64_t d = axis + 1; d < data.dim(); ++d) out.push_back(data.size(d));
  return {at::index_select(data, axis, idx.reshape({-1})).view(out)};
}

Outs GatherElements(const OpCall& c) {
  const at::Tensor& data = c.x(0);
  int64_t axis = NormAxis(c.attr_int("axis", 0), data.dim(), c);
  return {at::gather(data, axis, NormalizeIndices(c.x(1), data.size(axis)))};
}

Outs GatherND(const OpCall& c) {
  const at::Tensor& data = c.x(0);
  at::Tensor idx = c.x(1).to(at::kLong);
  int64_t b = c.attr_int("batch_dims", 0);
  int64_t k = idx.size(-1);
  std::vector<int64_t> batch(data.sizes().begin(), data.sizes().begin() + b);
  int64_t nb = 1;
  for (int64_t d : batch) nb *= d;
  std::vector<int64_t> dshape = {nb};
  for (int64_t d = b; d < data.dim(); ++d) dshape.push_back(data.size(d));
  at::Tensor d2 = data.reshape(dshape);
  std::vector<int64_t> mid(idx.sizes().begin() + b, idx.sizes().end() - 1);
  int64_t nm = 1;
  for (int64_t d : mid) nm *= d;
  at::Tensor i2 = idx.reshape({nb, nm, k});
  c10::List<c10::optional<at::Tensor>> indices;
  indices.push_back(at::arange(nb, i2.options()).view({nb, 1}).expand({nb, nm}));
  for (int64_t j = 0; j < k; ++j) {
    at::Tensor ij = i2.select(2, j);
    ij = at::where(at::lt(ij, 0), ij + data.size(b + j), ij);
    indices.push_back(ij);
  }
  at::Tensor g = at::index(d2, indices);  // [nb, nm, rest...]
  std::vector<int64_t> out = batch;
  out.insert(out.end(), mid.begin(), mid.end());
  for (int64_t d = b + k; d < data.dim(); ++d) out.push_back(data.size(d));
  return {g.reshape(out)};
}

c10::List<c10::optional<at::Tensor>> NdIndices(const at::Tensor& idx, const at::Tensor& data) {
  c10::List<c10::optional<at::Tensor>> indices;
  at::Tensor i = idx.to(at::kLong);
  for (int64_t j = 0; j < i.size(-1); ++j) {
    at::Tensor ij = i.select(-1, j);
    ij = at::where(at::lt(ij, 0), ij + data.size(j), ij);
    indices.push_back(ij);
  }
  return indices;
}

Outs ScatterND(const OpCall& c) {
  const at::Tensor& data = c.x(0);
  std::string red = c.attr_string("reduction", "none");
  auto indices = NdIndices(c.x(1), data);
  if (red == "mul") {  // sequentially, so that duplicate indices multiply
    at::Tensor out = data.clone();
    at::Tensor idx = c.x(1).to(at::kLong);
    int64_t k = idx.size(-1);
    at::Tensor rows = idx.reshape({-1, k});
    std::vector<int64_t> ushape = {rows.size(0)};
    for (int64_t d = k; d < data.dim(); ++d) ushape.push_back(data.size(d));
    at::Tensor upd = c.x(2).reshape(ushape);
    for (int64_t m = 0; m < rows.size(0); ++m) {
      at::Tensor slot = out;
      for (int64_t j = 0; j < k; ++j) {
        int64_t v = rows[m][j].item<int64_t>();
        slot = slot.select(0, v < 0 ? v + data.size(j) : v);
      }
      slot.mul_(upd[m]);
    }
    return {out};
  }
  if (red == "max" || red == "min") {
    // Over the first k axes flattened into one: index_reduce keeps the data where no update
    // lands and reduces duplicates.
    int64_t k = static_cast<int64_t>(indices.size());
    at::Tensor linear = at::zeros_like(indices.get(0).value());
    for (int64_t j = 0; j < k; ++j)
      linear = at::add(at::mul(linear, data.size(j)), indices.get(j).value());
    std::vector<int64_t> flat = {-1}, ushape = {linear.numel()};
    for (int64_t d = k; d < data.dim(); ++d) {
      flat.push_back(data.size(d));
      ushape.push_back(data.size(d));
    }
    at::Tensor out = data.reshape(flat).index_reduce(
        0, linear.reshape({-1}), c.x(2).reshape(ushape), red == "max" ? "amax" : "amin", true);
    return {out.reshape(data.sizes())};
  }
  if (red != "none" && red != "add") c.Fail("ScatterND reduction '" + red + "' is not supported");
  return {at::index_put(data, indices, c.x(2), red == "add")};
}

Outs ScatterElements(const OpCall& c) {
  const at::Tensor& data = c.x(0);
  int64_t axis = NormAxis(c.attr_int("axis", 0), data.dim(), c);
  at::Tensor idx = NormalizeIndices(c.x(1), data.size(axis));
  std::string red = c.attr_string("reduction", "none");
  if (red == "add") return {at::scatter_add(data, axis, idx, c.x(2))};
  if (red == "mul") return {at::scatter(data, axis, idx, c.x(2), "multiply")};
  if (red == "max" || red == "min")
    return {at::scatter_reduce(data, axis, idx, c.x(2), red == "max" ? "amax" : "amin", true)};
  if (red != "none") c.Fail("ScatterElements reduction '" + red + "' is not supported");
  return {at::scatter(data, axis, idx, c.x(2))};
}

Outs Tile(const OpCall& c) { return {c.x(0).repeat(ToInts(c.x(1)))}; }

Outs Pad(const OpCall& c) {
  const at::Tensor& x = c.x(0);
  int64_t r = x.dim();
  std::vector<int64_t> pads = c.has(1) ? ToInts(c.in[1]) : c.attr_ints("pads");
  double value = c.has(2) ? ToDouble(c.in[2]) : c.attr_float("value", 0.0);
  std::vector<int64_t> axes;
  if (c.has(3)) axes = ToInts(c.in[3]);
  if (axes.empty()) {
    axes.resize(r);
    std::iota(axes.begin(), axes.end(), 0);
  }
  size_t k = axes.size();
  if (pads.size() != 2 * k) c.Fail("Pad pads length does not match the axes");
  std::vector<int64_t> begin(r, 0), end(r, 0);
  for (size_t i = 0; i < k; ++i) {
    int64_t a = NormAxis(axes[i], r, c);
    begin[a] = pads[i];
    end[a] = pads[i + k];
  }
  std::string mode = c.attr_string("mode", "constant");
  // ATen's pad list runs from the last dimension backwards.
  int64_t first = r;
  for (int64_t d = 0; d < r; ++d)
    if (begin[d] != 0 || end[d] != 0) {
      first = d;
      break;
    }
  if (first == r) return {mode == "constant" ? x.clone() : x.clone()};
  if (mode == "wrap") {  // opset 19: the axis repeats periodically (negative pads crop)
    at::Tensor y = x;
    for (int64_t d = first; d < r; ++d) {
      if (begin[d] == 0 && end[d] == 0) continue;
      at::Tensor idx = at::remainder(
          at::arange(-begin[d], x.size(d) + end[d], x.options().dtype(at::kLong)), x.size(d));
      y = at::index_select(y, d, idx);
    }
    return {y};
  }
  std::vector<int64_t> list;
  for (int64_t d = r - 1; d >= first; --d) {
    list.push_back(begin[d]);
    list.push_back(end[d]);
  }
  if (mode == "constant") return {at::constant_pad_nd(x, list, value)};
  int64_t padded = r - first;
  if (padded > 3 || r < padded + 1)
    c.Fail("Pad mode '" + mode + "' pads more trailing dimensions than LibTorch supports");
  at::Tensor in = at::isFloatingType(x.scalar_type()) ? x : x.to(at::kDouble);
  bool unbatched = r == padded + 1;  // reflection/replication pads want a batch dim too
  if (unbatched) in = in.unsqueeze(0);
  // Fold leading dims into a batch and a channel dimension.
  std::vector<int64_t> lead(in.sizes().begin(), in.sizes().end() - padded);
  int64_t nlead = 1;
  for (int64_t d : lead) nlead *= d;
  std::vector<int64_t> shape = {1, nlead};
  for (int64_t d = in.dim() - padded; d < in.dim(); ++d) shape.push_back(in.size(d));
  in = in.reshape(shape);
  at::Tensor y;
  if (mode == "reflect") {
    y = padded == 1   ? at::reflection_pad1d(in, list)
        : padded == 2 ? at::reflection_pad2d(in, list)
                      : at::reflection_pad3d(in, list);
  } else if (mode == "edge") {
    y = padded == 1   ? at::replication_pad1d(in, list)
        : padded == 2 ? at::replication_pad2d(in, list)
                      : at::replication_pad3d(in, list);
  } else {
    c.Fail("Pad mode '" + mode + "' is not supported");
  }
  std::vector<int64_t> out(x.sizes().begin(), x.sizes().end());
  for (int64_t d = first; d < r; ++d) out[d] += begin[d] + end[d];
  return {y.reshape(out).to(x.scalar_type())};
}

Outs Trilu(const OpCall& c) {
  int64_t k = c.has(1) ? static_cast<int64_t>(ToDouble(c.in[1])) : 0;
  return {c.attr_int("upper", 1) ? at::triu(c.x(0), k) : at::tril(c.x(0), k)};
}

Outs TopK(const OpCall& c) {
  const at::Tensor& x = c.x(0);
  int64_t k = c.has(1) ? ToInts(c.in[1]).at(0) : c.attr_int("k", 1);
  int64_t axis = NormAxis(c.attr_int("axis", -1), x.dim(), c);
  bool largest = c.attr_int("largest", 1) != 0;
  auto [v, i] = at::topk(x, k, axis, largest, true);
  if (!c.attr_int("sorted", 1)) {
  }  // sorted output is a valid answer either way
  // ONNX orders equal values by index; LibTorch's topk does not. Where the top k hold equal
  // values, or the k-th value also occurs outside them, the indices come from a stable sort
  // (the values are the same either way).
  if (k > 0) {
    at::NoGradGuard no_grad;
    bool ties =
        k > 1 && at::eq(v.narrow(axis, 1, k - 1), v.narrow(axis, 0, k - 1)).any().item<bool>();
    if (!ties && k < x.size(axis)) {
      at::Tensor kth = v.narrow(axis, k - 1, 1);
      ties = at::gt(at::eq(x, kth).sum(axis), at::eq(v, kth).sum(axis)).any().item<bool>();
    }
    if (ties) i = std::get<1>(at::sort(x, true, axis, largest)).narrow(axis, 0, k).contiguous();
  }
  return {v, i};
}

Outs Constant(const OpCall& c) {
  if (const at::Tensor* t = c.attr_tensor("value")) return {t->clone()};
  const Node& n = *c.node;
  if (const Attribute* a = n.attr("value_float")) return {at::scalar_tensor(a->f, at::kFloat)};
  if (const Attribute* a = n.attr("value_int")) return {at::scalar_tensor(a->i, at::kLong)};
  if (const Attribute* a = n.attr("value_floats")) {
    std::vector<float> v(a->floats.begin(), a->floats.end());
    return {at::tensor(v, at::kFloat)};
  }
  if (const Attribute* a = n.attr("value_ints")) return {at::tensor(a->ints, at::kLong)};
  c.Fail(
      "Constant without a supported value attribute (sparse and string constants are not "
      "supported)");
}

Outs ConstantOfShape(const OpCall& c) {
  std::vector<int64_t> shape = ToInts(c.x(0));
  if (const at::Tensor* v = c.attr_tensor("value")) {
    return {at::full(shape, v->reshape({-1})[0].item(), v->options())};
  }
  return {at::zeros(shape, at::kFloat)};
}

Outs Range(const OpCall& c) {
  const at::Tensor& s = c.x(0);
  double start = ToDouble(s), limit = ToDouble(c.x(1)), delta = ToDouble(c.x(2));
  if (delta == 0) c.Fail("Range delta is 0");
  int64_t n = std::max<int64_t>(0, static_cast<int64_t>(std::ceil((limit - start) / delta)));
  if (at::isFloatingType(s.scalar_type())) {
    at::Tensor r = at::arange(n, at::TensorOptions().dtype(at::kDouble)) * delta + start;
    return {r.to(s.scalar_type())};
  }
  int64_t st = static_cast<int64_t>(start), dl = static_cast<int64_t>(delta);
  return {(at::arange(n, at::TensorOptions().dtype(at::kLong)) * dl + st).to(s.scalar_type())};
}

Outs NonZero(const OpCall& c) { return {at::nonzero(c.x(0)).t().contiguous()}; }

Outs OneHot(const OpCall& c) {
  at::Tensor idx = c.x(0).to(at::kLong);
  int64_t depth = static_cast<int64_t>(ToDouble(c.x(1)));
  const at::Tensor& values = c.x(2);
  int64_t axis = NormAxis(c.attr_int("axis", -1), idx.dim() + 1, c);
  idx = at::where(at::lt(idx, 0), idx + depth, idx);
  std::vector<int64_t> shape(idx.dim() + 1, 1);
  shape[axis] = depth;
  at::Tensor range = at::arange(depth, idx.options()).view(shape);
  at::Tensor hot = at::eq(idx.unsqueeze(axis), range);
  at::Tensor v = values.reshape({-1});
  return {at::where(hot, v[1], v[0])};
}

Outs EyeLike(const OpCall& c) {
  const at::Tensor& x = c.x(0);
  at::ScalarType dt = c.has_attr("dtype")
                          ? ScalarTypeOfOnnx(static_cast<int>(c.attr_int("dtype", 1)))
                          : x.scalar_type();
  at::Tensor out = at::zeros(x.sizes(), x.options().dtype(dt));
  int64_t k = c.attr_int("k", 0);
  if ((k >= 0 && k < x.size(1)) || (k < 0 && -k < x.size(0))) out.diagonal(k).fill_(1);
  return {out};
}

Outs DepthToSpace(const OpCall& c) {
  const at::Tensor& x = c.x(0);
  int64_t b = c.attr_int("blocksize", 1);
  int64_t n = x.size(0), ch = x.size(1), h = x.size(2), w = x.size(3);
  at::Tensor t;
  if (c.attr_string("mode", "DCR") == "DCR") {
    t = x.reshape({n, b, b, ch / (b * b), h, w}).permute({0, 3, 4, 1, 5, 2});
  } else {
    t = x.reshape({n, ch / (b * b), b, b, h, w}).permute({0, 1, 4, 2, 5, 3});
  }
  return {t.reshape({n, ch / (b * b), h * b, w * b})};
}

Outs SpaceToDepth(const OpCall& c) {
  const at::Tensor& x = c.x(0);
  int64_t b = c.attr_int("blocksize", 1);
  int64_t n = x.size(0), ch = x.size(1), h = x.size(2), w = x.size(3);
  at::Tensor t =
      c.attr_string("mode", "DCR") == "CRD"  // opset 25+: the inverse of DepthToSpace's CRD
          ? x.reshape({n, ch, h / b, b, w / b, b}).permute({0, 1, 3, 5, 2, 4})
          : x.reshape({n, ch, h / b, b, w / b, b}).permute({0, 3, 5, 1, 2, 4});
  return {t.reshape({n, ch * b * b, h / b, w / b})};
}

Outs Compress(const OpCall& c) {
  at::Tensor x = c.x(0);
  at::Tensor cond = c.x(1).to(at::kBool);
  at::Tensor idx = at::nonzero(cond).reshape({-1});
  if (!c.has_attr("axis")) return {at::index_select(x.reshape({-1}), 0, idx)};
  int64_t axis = NormAxis(c.attr_int("axis", 0), x.dim(), c);
  idx = at::masked_select(idx, at::lt(idx, x.size(axis)));
  return {at::index_select(x, axis, idx)};
}

Outs Det(const OpCall& c) { return {at::linalg_det(c.x(0))}; }

// ---- random ops (the caller seeds the default generator per node) ----

at::ScalarType RandomDType(const OpCall& c, at::ScalarType fallback) {
  return c.has_attr("dtype") ? ScalarTypeOfOnnx(static_cast<int>(c.attr_int("dtype", 1)))
                             : fallback;
}
Outs RandomUniformLike(const OpCall& c) {
  const at::Tensor& x = c.x(0);
  at::Tensor r = at::empty(x.sizes(), x.options().dtype(RandomDType(c, x.scalar_type())));
  return {r.uniform_(c.attr_float("low", 0.0), c.attr_float("high", 1.0))};
}
Outs RandomNormalLike(const OpCall& c) {
  const at::Tensor& x = c.x(0);
  at::Tensor r = at::empty(x.sizes(), x.options().dtype(RandomDType(c, x.scalar_type())));
  return {r.normal_(c.attr_float("mean", 0.0), c.attr_float("scale", 1.0))};
}
Outs RandomUniform(const OpCall& c) {
  at::Tensor r =
      at::empty(c.attr_ints("shape"), at::TensorOptions().dtype(RandomDType(c, at::kFloat)));
  return {r.uniform_(c.attr_float("low", 0.0), c.attr_float("high", 1.0))};
}
Outs RandomNormal(const OpCall& c) {
  at::Tensor r =
      at::empty(c.attr_ints("shape"), at::TensorOptions().dtype(RandomDType(c, at::kFloat)));
  return {r.normal_(c.attr_float("mean", 0.0), c.attr_float("scale", 1.0))};
}
Outs Bernoulli(const OpCall& c) {
  const at::Tensor& x = c.x(0);
  at::Tensor p = IsFloat(x) ? x : x.to(at::kFloat);
  return {at::bernoulli(p).to(RandomDType(c, x.scalar_type()))};
}

}  // namespace

void RegisterTensorKernels(KernelTable& t) {
  t["Add"] = Add;
  t["Sub"] = Sub;
  t["Mul"] = Mul;
  t["Div"] = Div;
  t["Pow"] = Pow;
  t["Mod"] = Mod;
  t["Sum"] = Sum;
  t["Max"] = Max;
  t["Min"] = Min;
  t["Mean"] = Mean;
  t["Equal"] = Equal;
  t["Less"] = Less;
  t["LessOrEqual"] = LessOrEqual;
  t["Greater"] = Greater;
  t["GreaterOrEqual"] = GreaterOrEqual;
  t["And"] = And;
  t["Or"] = Or;
  t["Xor"] = Xor;
  t["Where"] = Where;
  t["Neg"] = Neg;
  t["Abs"] = Abs;
  t["Floor"] = Floor;
  t["Ceil"] = Ceil;
  t["Round"] = Round;
  t["Sign"] = Sign;
  t["Not"] = Not;
  t["IsNaN"] = IsNaN;
  t["IsInf"] = IsInf;
  t["Identity"] = Identity;
  t["Cast"] = Cast;
  t["CastLike"] = CastLike;
  t["ReduceMean"] = ReduceMean;
  t["ReduceSum"] = ReduceSum;
  t["ReduceMax"] = ReduceMax;
  t["ReduceMin"] = ReduceMin;
  t["ReduceProd"] = ReduceProd;
  t["ReduceL1"] = ReduceL1;
  t["ReduceL2"] = ReduceL2;
  t["ReduceSumSquare"] = ReduceSumSquare;
  t["ReduceLogSum"] = ReduceLogSum;
  t["ReduceLogSumExp"] = ReduceLogSumExp;
  t["ArgMax"] = ArgMax;
  t["ArgMin"] = ArgMin;
  t["CumSum"] = CumSum;
  t["Shape"] = Shape;
  t["Size"] = Size;
  t["Reshape"] = Reshape;
  t["Flatten"] = Flatten;
  t["Squeeze"] = Squeeze;
  t["Unsqueeze"] = Unsqueeze;
  t["Transpose"] = Transpose;
  t["Expand"] = Expand;
  t["Slice"] = Slice;
  t["Split"] = Split;
  t["Concat"] = Concat;
  t["Gather"] = Gather;
  t["GatherElements"] = GatherElements;
  t["GatherND"] = GatherND;
  t["ScatterND"] = ScatterND;
  t["ScatterElements"] = ScatterElements;
  t["Scatter"] = ScatterElements;
  t["Tile"] = Tile;
  t["Pad"] = Pad;
  t["Trilu"] = Trilu;
  t["TopK"] = TopK;
  t["Constant"] = Constant;
  t["ConstantOfShape"] = ConstantOfShape;
  t["Range"] = Range;
  t["NonZero"] = NonZero;
  t["OneHot"] = OneHot;
  t["EyeLike"] = EyeLike;
  t["DepthToSpace"] = DepthToSpace;
  t["SpaceToDepth"] = SpaceToDepth;
  t["Compress"] = Compress;
  t["Det"] = Det;
  t["RandomUniformLike"] = RandomUniformLike;
  t["RandomNormalLike"] = RandomNormalLike;
  t["RandomUniform"] = RandomUniform;
  t["RandomNormal"] = RandomNormal;
  t["Bernoulli"] = Bernoulli;
}

const KernelTable& Kernels() {
  static const KernelTable table = [] {
    KernelTable t;
    RegisterTensorKernels(t);
    RegisterNnKernels(t);
    return t;
  }();
  return table;
}

const Kernel* FindKernel(const std::string& op_type) {
  const KernelTable& t = Kernels();
  auto it = t.find(op_type);
  return it == t.end() ? nullptr : &it->second;
}

}  // namespace memplan::exec
