#include "op_rules.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <unordered_map>

namespace memplan {
namespace {

// Values larger than this are not tracked: they are data, not shape arithmetic.
constexpr int64_t kMaxTrackedElements = 1 << 16;

int64_t NormAxis(int64_t axis, int64_t rank, const InferContext& c) {
  if (axis < -rank || axis >= rank) {
    c.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  }
  return axis < 0 ? axis + rank : axis;
}

std::vector<int64_t> Broadcast(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                               const InferContext& c) {
  size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) {
      c.fail("cannot broadcast shapes " + ShapeString(a) + " and " + ShapeString(b));
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// Index of `flat` (in `out` shape) into a tensor of `shape` broadcast to `out`.
int64_t BroadcastIndex(int64_t flat, const std::vector<int64_t>& out,
                       const std::vector<int64_t>& shape) {
  int64_t idx = 0, stride = 1;
  size_t off = out.size() - shape.size();
  for (int64_t d = static_cast<int64_t>(out.size()) - 1; d >= 0; --d) {
    int64_t coord = flat % out[d];
    flat /= out[d];
    if (d >= static_cast<int64_t>(off)) {
      int64_t s = shape[d - off];
      if (s != 1) idx += coord * stride;
      stride *= s;
    }
  }
  return idx;
}

std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d) strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

// A value of `shape` small enough to evaluate.
bool Trackable(const std::vector<int64_t>& shape) {
  int64_t n = 0;
  return CheckedNumel(shape, &n) && n <= kMaxTrackedElements;
}

ConstValue MakeValue(DType dtype, std::vector<int64_t> shape) {
  if (!Trackable(shape)) throw InvalidModelError("a constant of shape " + ShapeString(shape) + " cannot be evaluated");
  ConstValue v;
  v.dtype = dtype;
  v.shape = std::move(shape);
  if (v.is_float()) v.floats.resize(v.numel()); else v.ints.resize(v.numel());
  return v;
}

void Put(ConstValue& v, int64_t i, double x) {
  if (v.is_float()) v.floats[i] = x;
  else if (v.dtype == DType::kBool) v.ints[i] = x != 0;
  else if (!(x >= -9223372036854775808.0 && x < 9223372036854775808.0)) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", x);
    throw InvalidModelError(std::string("shape arithmetic gives ") + buf + ", which does not fit in " +
                            DTypeName(v.dtype) + " (beyond 2^63); check --batch and --dim");
  } else v.ints[i] = static_cast<int64_t>(x);
}

bool AllValues(const InferContext& c, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (c.has(i) && !c.value(i)) return false;
  }
  return true;
}

// ---- shape rules ----

void InferSameAsInput(InferContext& c) { c.set(0, c.dtype(0), c.shape(0)); }

using Unary = double (*)(double);
template <Unary F>
void InferUnaryEval(InferContext& c) {
  const ConstValue* v = c.value(0);
  if (v && v->numel() <= kMaxTrackedElements) {
    ConstValue out = MakeValue(v->dtype, v->shape);
    for (int64_t i = 0; i < v->numel(); ++i) Put(out, i, F(v->at(i)));
    c.set_value(0, std::move(out));
    return;
  }
  InferSameAsInput(c);
}
double FNeg(double x) { return -x; }
double FAbs(double x) { return std::fabs(x); }
double FFloor(double x) { return std::floor(x); }
double FCeil(double x) { return std::ceil(x); }
double FSqrt(double x) { return std::sqrt(x); }
double FNot(double x) { return x == 0; }
double FId(double x) { return x; }

using Binary = double (*)(double, double);
void InferBinaryImpl(InferContext& c, Binary f, bool to_bool) {
  std::vector<int64_t> out = Broadcast(c.shape(0), c.shape(1), c);
  DType dt = to_bool ? DType::kBool : c.dtype(0);
  const ConstValue* a = c.value(0);
  const ConstValue* b = c.value(1);
  if (a && b && Trackable(out)) {
    ConstValue v = MakeValue(dt, out);
    for (int64_t i = 0; i < Numel(out); ++i) {
      Put(v, i, f(a->at(BroadcastIndex(i, out, a->shape)), b->at(BroadcastIndex(i, out, b->shape))));
    }
    c.set_value(0, std::move(v));
    return;
  }
  c.set(0, dt, out);
}
template <Binary F, bool ToBool = false>
void InferBinary(InferContext& c) { InferBinaryImpl(c, F, ToBool); }
double FAdd(double a, double b) { return a + b; }
double FSub(double a, double b) { return a - b; }
double FMul(double a, double b) { return a * b; }
double FDivFloat(double a, double b) { return a / b; }
double FMax(double a, double b) { return std::max(a, b); }
double FMin(double a, double b) { return std::min(a, b); }
double FPow(double a, double b) { return std::pow(a, b); }
double FEq(double a, double b) { return a == b; }
double FLess(double a, double b) { return a < b; }
double FLessEq(double a, double b) { return a <= b; }
double FGreater(double a, double b) { return a > b; }
double FGreaterEq(double a, double b) { return a >= b; }
double FAnd(double a, double b) { return a != 0 && b != 0; }
double FOr(double a, double b) { return a != 0 || b != 0; }
double FMod(double a, double b) {
  // ONNX Mod with fmod=0 takes the sign of the divisor, as Python does.
  if (b == 0) return 0;
  double r = std::fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

void InferDiv(InferContext& c) {
  if (IsFloating(c.dtype(0))) return InferBinaryImpl(c, FDivFloat, false);
  // Integer division truncates, as ONNX and C++ do.
  return InferBinaryImpl(c, [](double a, double b) { return b == 0 ? 0.0 : std::trunc(a / b); },
                         false);
}

void InferVariadic(InferContext& c) {  // Sum, Max, Min, Mean of N inputs
  std::vector<int64_t> out = c.shape(0);
  for (size_t i = 1; i < c.num_inputs(); ++i) out = Broadcast(out, c.shape(i), c);
  c.set(0, c.dtype(0), out);
}

void InferWhere(InferContext& c) {
  std::vector<int64_t> out = Broadcast(Broadcast(c.shape(0), c.shape(1), c), c.shape(2), c);
  const ConstValue *cond = c.value(0), *x = c.value(1), *y = c.value(2);
  if (cond && x && y && Trackable(out)) {
    ConstValue v = MakeValue(c.dtype(1), out);
    for (int64_t i = 0; i < Numel(out); ++i) {
      bool take_x = cond->at(BroadcastIndex(i, out, cond->shape)) != 0;
      Put(v, i, take_x ? x->at(BroadcastIndex(i, out, x->shape)) : y->at(BroadcastIndex(i, out, y->shape)));
    }
    c.set_value(0, std::move(v));
    return;
  }
  c.set(0, c.dtype(1), out);
}

void InferConstant(InferContext& c) {
  const Node& n = c.node();
  if (const Attribute* a = n.attr("value")) {
    if (!a->tensor) c.fail("constant value is too large or of an unsupported type");
    return c.set_value(0, *a->tensor);
  }
  ConstValue v;
  if (const Attribute* a = n.attr("value_int")) {
    v.dtype = DType::kInt64; v.ints = {a->i};
  } else if (const Attribute* a = n.attr("value_ints")) {
    v.dtype = DType::kInt64; v.ints = a->ints; v.shape = {static_cast<int64_t>(a->ints.size())};
  } else if (const Attribute* a = n.attr("value_float")) {
    v.dtype = DType::kFloat32; v.floats = {a->f};
  } else if (const Attribute* a = n.attr("value_floats")) {
    v.dtype = DType::kFloat32; v.floats = a->floats;
    v.shape = {static_cast<int64_t>(a->floats.size())};
  } else {
    c.fail("Constant without a supported value attribute");
  }
  c.set_value(0, std::move(v));
}

void InferShapeOp(InferContext& c) {
  int64_t r = c.rank(0);
  int64_t start = c.node().attr_int("start", 0), end = c.node().attr_int("end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, 0, r);
  ConstValue v = MakeValue(DType::kInt64, {std::max<int64_t>(end - start, 0)});
  for (int64_t i = start; i < end; ++i) v.ints[i - start] = c.shape(0)[i];
  c.set_value(0, std::move(v));
}

void InferSize(InferContext& c) {
  ConstValue v = MakeValue(DType::kInt64, {});
  v.ints[0] = Numel(c.shape(0));
  c.set_value(0, std::move(v));
}

void InferCast(InferContext& c) {
  DType to = DTypeFromOnnx(static_cast<int>(c.node().attr_int("to", 1)));
  if (to == DType::kUndefined) c.fail("Cast to an unsupported type");
  const ConstValue* v = c.value(0);
  if (v) {
    ConstValue out = MakeValue(to, v->shape);
    for (int64_t i = 0; i < v->numel(); ++i) Put(out, i, v->at(i));
    return c.set_value(0, std::move(out));
  }
  c.set(0, to, c.shape(0));
}

void InferCastLike(InferContext& c) { c.set(0, c.dtype(1), c.shape(0)); }

std::vector<int64_t> AxesInput(const InferContext& c, const char* attr_name, size_t input) {
  if (c.has(input)) return c.need_ints(input);
  return c.node().attr_ints(attr_name);
}

void InferUnsqueeze(InferContext& c) {
  std::vector<int64_t> axes = AxesInput(c, "axes", 1);
  int64_t out_rank = c.rank(0) + static_cast<int64_t>(axes.size());
  for (int64_t& a : axes) a = NormAxis(a, out_rank, c);
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) c.reject("Unsqueeze axes repeat an axis");
  std::vector<int64_t> out;
  size_t k = 0, j = 0;
  for (int64_t d = 0; d < out_rank; ++d) {
    if (k < axes.size() && axes[k] == d) { out.push_back(1); ++k; }
    else out.push_back(c.shape(0)[j++]);
  }
  if (const ConstValue* v = c.value(0)) {
    ConstValue nv = *v;
    nv.shape = out;
    return c.set_value(0, std::move(nv));
  }
  c.set(0, c.dtype(0), out);
}

void InferSqueeze(InferContext& c) {
  std::vector<int64_t> axes = AxesInput(c, "axes", 1);
  std::vector<bool> drop(c.rank(0), false);
  if (axes.empty()) {
    for (int64_t d = 0; d < c.rank(0); ++d) drop[d] = c.shape(0)[d] == 1;
  } else {
    for (int64_t a : axes) {
      int64_t d = NormAxis(a, c.rank(0), c);
      if (c.shape(0)[d] != 1) c.fail("Squeeze axis " + std::to_string(a) + " has size " + std::to_string(c.shape(0)[d]) + ", not 1");
      drop[d] = true;
    }
  }
  std::vector<int64_t> out;
  for (int64_t d = 0; d < c.rank(0); ++d) if (!drop[d]) out.push_back(c.shape(0)[d]);
  if (const ConstValue* v = c.value(0)) {
    ConstValue nv = *v;
    nv.shape = out;
    return c.set_value(0, std::move(nv));
  }
  c.set(0, c.dtype(0), out);
}

void InferConcat(InferContext& c) {
  int64_t r = c.rank(0);
  int64_t axis = NormAxis(c.node().attr_int("axis", 0), r, c);
  std::vector<int64_t> out = c.shape(0);
  out[axis] = 0;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!c.has(i)) continue;
    if (c.rank(i) != r) c.fail("Concat inputs have different ranks");
    for (int64_t d = 0; d < r; ++d) {
      if (d != axis && c.shape(i)[d] != out[d]) {
        c.fail("Concat inputs " + ShapeString(c.shape(0)) + " and " + ShapeString(c.shape(i)) + " differ outside axis " +
               std::to_string(axis));
      }
    }
    if (__builtin_add_overflow(out[axis], c.shape(i)[axis], &out[axis])) c.reject("Concat output size overflows int64");
  }
  if (AllValues(c, c.num_inputs()) && Trackable(out)) {
    // Row-major: for each outer index, append each input's slab along the axis.
    ConstValue v = MakeValue(c.dtype(0), out);
    int64_t outer = Numel(std::vector<int64_t>(out.begin(), out.begin() + axis));
    int64_t k = 0;
    for (int64_t o = 0; o < outer; ++o) {
      for (size_t i = 0; i < c.num_inputs(); ++i) {
        if (!c.has(i)) continue;
        const ConstValue* in = c.value(i);
        int64_t slab = outer ? in->numel() / outer : 0;
        for (int64_t j = 0; j < slab; ++j) Put(v, k++, in->at(o * slab + j));
      }
    }
    return c.set_value(0, std::move(v));
  }
  c.set(0, c.dtype(0), out);
}

void InferGather(InferContext& c) {
  int64_t r = c.rank(0);
  int64_t axis = NormAxis(c.node().attr_int("axis", 0), r, c);
  const std::vector<int64_t>& data = c.shape(0);
  const std::vector<int64_t>& idx = c.shape(1);
  std::vector<int64_t> out(data.begin(), data.begin() + axis);
  out.insert(out.end(), idx.begin(), idx.end());
  out.insert(out.end(), data.begin() + axis + 1, data.end());
  const ConstValue *dv = c.value(0), *iv = c.value(1);
  if (dv && iv && Trackable(out)) {
    int64_t outer = Numel(std::vector<int64_t>(data.begin(), data.begin() + axis));
    int64_t inner = Numel(std::vector<int64_t>(data.begin() + axis + 1, data.end()));
    ConstValue v = MakeValue(c.dtype(0), out);
    int64_t k = 0;
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t j = 0; j < iv->numel(); ++j) {
        int64_t ix = static_cast<int64_t>(iv->at(j));
        if (ix < 0) ix += data[axis];
        if (ix < 0 || ix >= data[axis]) c.fail("Gather index out of range");
        for (int64_t in = 0; in < inner; ++in) Put(v, k++, dv->at((o * data[axis] + ix) * inner + in));
      }
    }
    return c.set_value(0, std::move(v));
  }
  c.set(0, c.dtype(0), out);
}

void InferSlice(InferContext& c) {
  const std::vector<int64_t>& data = c.shape(0);
  int64_t r = c.rank(0);
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.has(1)) {
    starts = c.need_ints(1);
    ends = c.need_ints(2);
    if (c.has(3)) axes = c.need_ints(3);
    if (c.has(4)) steps = c.need_ints(4);
  } else {  // opset < 10: attributes
    starts = c.node().attr_ints("starts");
    ends = c.node().attr_ints("ends");
    axes = c.node().attr_ints("axes");
  }
  if (axes.empty()) { axes.resize(starts.size()); std::iota(axes.begin(), axes.end(), 0); }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size()) {
    c.reject("Slice starts, ends, axes and steps have different lengths");
  }
  std::vector<int64_t> out = data, first(r, 0), step(r, 1);
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = NormAxis(axes[i], r, c);
    int64_t dim = data[a], s = steps[i];
    if (s == 0 || s == INT64_MIN) c.reject("Slice step " + std::to_string(s) + " is invalid");
    int64_t b = starts[i], e = ends[i];
    if (b < 0) b += dim;
    if (e < 0) e += dim;
    if (s > 0) {
      b = std::clamp<int64_t>(b, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      out[a] = e > b ? (e - b - 1) / s + 1 : 0;
    } else if (dim == 0) {
      out[a] = 0;
    } else {
      b = std::clamp<int64_t>(b, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      out[a] = b > e ? (b - e - s - 1) / (-s) : 0;
    }
    first[a] = b;
    step[a] = s;
  }
  if (const ConstValue* v = c.value(0); v && Trackable(out)) {
    ConstValue nv = MakeValue(v->dtype, out);
    std::vector<int64_t> strides = RowMajorStrides(data);
    for (int64_t i = 0; i < Numel(out); ++i) {
      int64_t rem = i, src = 0;
      for (int64_t d = r - 1; d >= 0; --d) {
        int64_t coord = rem % out[d];
        rem /= out[d];
        src += (first[d] + coord * step[d]) * strides[d];
      }
      Put(nv, i, v->at(src));
    }
    return c.set_value(0, std::move(nv));
  }
  c.set(0, c.dtype(0), out);
}

void InferReshape(InferContext& c) {
  std::vector<int64_t> target = c.need_ints(1);
  const std::vector<int64_t>& in = c.shape(0);
  bool allowzero = c.node().attr_int("allowzero", 0) != 0;
  int64_t infer_at = -1, known = 1;
  std::vector<int64_t> out(target.size());
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t t = target[i];
    if (t == 0 && !allowzero) {
      if (i >= in.size()) c.fail("Reshape copies dimension " + std::to_string(i) + " the input lacks");
      t = in[i];
    }
    if (t == -1) {
      if (infer_at >= 0) c.fail("Reshape target has two -1 dimensions");
      infer_at = static_cast<int64_t>(i);
      continue;
    }
    if (t < 0) c.fail("Reshape target " + IntList(target) + " has a negative dimension");
    out[i] = t;
    if (__builtin_mul_overflow(known, t, &known)) c.reject("Reshape target " + IntList(target) + " overflows int64");
  }
  int64_t total = Numel(in);
  if (infer_at >= 0) {
    if (known == 0 || total % known != 0) {
      c.fail("cannot reshape " + ShapeString(in) + " to " + IntList(target));
    }
    out[infer_at] = total / known;
  } else if (known != total) {
    c.fail("cannot reshape " + ShapeString(in) + " (" + std::to_string(total) + " elements) to " +
           ShapeString(out));
  }
  if (const ConstValue* v = c.value(0)) {
    ConstValue nv = *v;
    nv.shape = out;
    return c.set_value(0, std::move(nv));
  }
  c.set(0, c.dtype(0), out);
}

void InferFlatten(InferContext& c) {
  int64_t r = c.rank(0);
  int64_t axis = c.node().attr_int("axis", 1);
  if (axis < -r || axis > r) c.reject("Flatten axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(r));
  if (axis < 0) axis += r;
  const std::vector<int64_t>& in = c.shape(0);
  int64_t outer = Numel(std::vector<int64_t>(in.begin(), in.begin() + axis));
  int64_t inner = Numel(std::vector<int64_t>(in.begin() + axis, in.end()));
  c.set(0, c.dtype(0), {outer, inner});
}

void InferTranspose(InferContext& c) {
  int64_t r = c.rank(0);
  std::vector<int64_t> perm = c.node().attr_ints("perm");
  if (perm.empty()) { perm.resize(r); for (int64_t i = 0; i < r; ++i) perm[i] = r - 1 - i; }
  if (static_cast<int64_t>(perm.size()) != r) c.fail("Transpose perm does not match the rank");
  std::vector<int64_t> out(r);
  for (int64_t i = 0; i < r; ++i) out[i] = c.shape(0)[NormAxis(perm[i], r, c)];
  if (const ConstValue* v = c.value(0); v && Trackable(out)) {
    ConstValue nv = MakeValue(v->dtype, out);
    std::vector<int64_t> strides = RowMajorStrides(c.shape(0));
    for (int64_t i = 0; i < Numel(out); ++i) {
      int64_t rem = i, src = 0;
      for (int64_t d = r - 1; d >= 0; --d) {
        src += (rem % out[d]) * strides[NormAxis(perm[d], r, c)];
        rem /= out[d];
      }
      Put(nv, i, v->at(src));
    }
    return c.set_value(0, std::move(nv));
  }
  c.set(0, c.dtype(0), out);
}

void InferExpand(InferContext& c) {
  std::vector<int64_t> out = Broadcast(c.shape(0), c.need_ints(1), c);
  if (const ConstValue* v = c.value(0); v && Trackable(out)) {
    ConstValue nv = MakeValue(v->dtype, out);
    for (int64_t i = 0; i < Numel(out); ++i) Put(nv, i, v->at(BroadcastIndex(i, out, v->shape)));
    return c.set_value(0, std::move(nv));
  }
  c.set(0, c.dtype(0), out);
}

void InferTile(InferContext& c) {
  std::vector<int64_t> reps = c.need_ints(1), out = c.shape(0);
  if (reps.size() != out.size()) c.fail("Tile repeats do not match the rank");
  for (size_t i = 0; i < out.size(); ++i) {
    if (reps[i] < 0) c.fail("Tile repeats " + IntList(reps) + " has a negative count");
    if (__builtin_mul_overflow(out[i], reps[i], &out[i])) c.reject("Tile output size overflows int64");
  }
  c.set(0, c.dtype(0), out);
}

void InferConstantOfShape(InferContext& c) {
  std::vector<int64_t> shape = c.need_ints(0);
  int64_t numel = 0;
  if (!CheckedNumel(shape, &numel)) c.reject("ConstantOfShape shape " + ShapeString(shape) + " is negative or overflows int64");
  ConstValue fill;
  fill.dtype = DType::kFloat32;
  fill.floats = {0.0};
  if (const Attribute* a = c.node().attr("value"); a && a->tensor) fill = *a->tensor;
  if (numel <= kMaxTrackedElements) {
    ConstValue v = MakeValue(fill.dtype, shape);
    for (int64_t i = 0; i < v.numel(); ++i) Put(v, i, fill.numel() > 0 ? fill.at(0) : 0.0);
    return c.set_value(0, std::move(v));
  }
  c.set(0, fill.dtype, shape);
}

void InferRange(InferContext& c) {
  const ConstValue &s = c.need_scalar(0), &l = c.need_scalar(1), &d = c.need_scalar(2);
  double start = s.at(0), limit = l.at(0), delta = d.at(0);
  if (delta == 0) c.reject("Range delta is 0");
  double count = std::ceil((limit - start) / delta);
  if (!(count < 9.0e18)) c.reject("Range has more than 2^63 elements (or a nan bound)");
  int64_t n = std::max<int64_t>(0, static_cast<int64_t>(count));
  if (n <= kMaxTrackedElements) {
    ConstValue v = MakeValue(c.dtype(0), {n});
    for (int64_t i = 0; i < n; ++i) Put(v, i, start + i * delta);
    return c.set_value(0, std::move(v));
  }
  c.set(0, c.dtype(0), {n});
}

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
    if (reduce[d]) { if (keep) out.push_back(1); }
    else out.push_back(c.shape(0)[d]);
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
  if (c.node().attr_int("keepdims", 1)) out[axis] = 1; else out.erase(out.begin() + axis);
  c.set(0, DType::kInt64, out);
}

std::vector<int64_t> SpatialOut(const InferContext& c, const std::vector<int64_t>& in_spatial,
                                const std::vector<int64_t>& kernel, bool ceil_mode) {
  const Node& n = c.node();
  size_t k = kernel.size();
  std::vector<int64_t> strides = n.attr_ints("strides"), dil = n.attr_ints("dilations"),
                       pads = n.attr_ints("pads");
  strides.resize(k, 1);
  if (strides.size() > k) strides.resize(k);
  dil.resize(k, 1);
  pads.resize(2 * k, 0);
  std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  std::vector<int64_t> out(k);
  for (size_t i = 0; i < k; ++i) {
    int64_t s = std::max<int64_t>(strides[i], 1);
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      out[i] = (in_spatial[i] + s - 1) / s;
      continue;
    }
    int64_t pad = auto_pad == "VALID" ? 0 : pads[i] + pads[i + k];
    int64_t eff = dil[i] * (kernel[i] - 1) + 1;
    int64_t span = in_spatial[i] + pad - eff;
    if (span < 0) c.fail("kernel is larger than the padded input");
    out[i] = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
    // As PyTorch: with ceil mode, the last window must start inside the input or left pad.
    if (ceil_mode && (out[i] - 1) * s >= in_spatial[i] + (auto_pad == "VALID" ? 0 : pads[i])) {
      --out[i];
    }
  }
  return out;
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
  if (x.size() < 3 || w.size() != x.size()) c.fail("ConvTranspose input and weight ranks do not match");
  size_t k = x.size() - 2;
  int64_t group = n.attr_int("group", 1);
  std::vector<int64_t> strides = n.attr_ints("strides"), dil = n.attr_ints("dilations"),
                       pads = n.attr_ints("pads"), outpad = n.attr_ints("output_padding"),
                       out_shape = n.attr_ints("output_shape");
  strides.resize(k, 1); dil.resize(k, 1); pads.resize(2 * k, 0); outpad.resize(k, 0);
  std::vector<int64_t> out = {x[0], w[1] * group};
  for (size_t i = 0; i < k; ++i) {
    if (!out_shape.empty()) { out.push_back(out_shape[out_shape.size() - k + i]); continue; }
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
    c.fail("MatMul inner dimensions differ: " + ShapeString(c.shape(0)) + " x " + ShapeString(c.shape(1)));
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

void InferSplit(InferContext& c) {
  int64_t r = c.rank(0);
  int64_t axis = NormAxis(c.node().attr_int("axis", 0), r, c);
  int64_t dim = c.shape(0)[axis];
  std::vector<int64_t> split = c.has(1) ? c.need_ints(1) : c.node().attr_ints("split");
  size_t n = c.num_outputs();
  if (split.empty()) {
    int64_t each = (dim + static_cast<int64_t>(n) - 1) / static_cast<int64_t>(n);
    for (size_t i = 0; i < n; ++i) split.push_back(std::min(each, dim - each * static_cast<int64_t>(i)));
  }
  if (split.size() != n) c.fail("Split sizes do not match the number of outputs");
  int64_t total = 0;
  for (int64_t part : split) {
    if (part < 0) c.fail("Split sizes " + IntList(split) + " hold a negative size");
    if (__builtin_add_overflow(total, part, &total)) c.reject("Split sizes " + IntList(split) + " overflow int64");
  }
  if (total != dim) c.fail("Split sizes " + IntList(split) + " do not add up to the axis size " + std::to_string(dim));
  for (size_t i = 0; i < n; ++i) {
    std::vector<int64_t> out = c.shape(0);
    out[axis] = split[i];
    if (c.has_output(i)) c.set(i, c.dtype(0), out);
  }
}

void InferPad(InferContext& c) {
  std::vector<int64_t> pads = c.has(1) ? c.need_ints(1) : c.node().attr_ints("pads");
  std::vector<int64_t> out = c.shape(0);
  int64_t r = c.rank(0);
  std::vector<int64_t> axes;
  if (c.has(3)) axes = c.need_ints(3);
  if (axes.empty()) { axes.resize(r); std::iota(axes.begin(), axes.end(), 0); }
  size_t k = axes.size();
  if (pads.size() != 2 * k) c.fail("Pad pads length does not match the axes");
  for (size_t i = 0; i < k; ++i) out[NormAxis(axes[i], r, c)] += pads[i] + pads[i + k];
  c.set(0, c.dtype(0), out);
}

std::vector<int64_t> ScaledShape(const InferContext& c, const std::vector<int64_t>& x, const ConstValue& scales) {
  if (scales.numel() != static_cast<int64_t>(x.size())) {
    c.reject("has " + std::to_string(scales.numel()) + " scales for an input of rank " + std::to_string(x.size()));
  }
  std::vector<int64_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    double d = std::floor(static_cast<double>(x[i]) * scales.at(static_cast<int64_t>(i)));
    if (!(d >= 0 && d < 9.0e18)) c.reject("scale " + std::to_string(scales.at(static_cast<int64_t>(i))) + " gives an invalid size");
    out[i] = static_cast<int64_t>(d);
  }
  return out;
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
    c.reject("TopK k " + std::to_string(out[axis]) + " is not within the axis size " + std::to_string(c.shape(0)[axis]));
  }
  c.set(0, c.dtype(0), out);
  if (c.has_output(1)) c.set(1, DType::kInt64, out);
}

void InferGatherElements(InferContext& c) { c.set(0, c.dtype(0), c.shape(1)); }

void InferTrilu(InferContext& c) { InferSameAsInput(c); }

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
        c.reject("Einsum equation '" + eq + "' gives input " + std::to_string(input) + " " + std::to_string(pos) +
                 " indices, but its rank is " + std::to_string(c.rank(input)));
      }
      ++input; pos = 0;
      continue;
    }
    if (input >= c.num_inputs()) c.reject("Einsum equation '" + eq + "' names more inputs than the node has");
    if (pos >= static_cast<size_t>(c.rank(input))) continue;  // reported at the ',' above
    size[ch] = c.shape(input)[pos++];
  }
  std::vector<int64_t> out;
  for (char ch : rhs) {
    if (ch == ' ') continue;
    auto it = size.find(ch);
    if (it == size.end()) c.reject("Einsum output index '" + std::string(1, ch) + "' is not an input index");
    out.push_back(it->second);
  }
  c.set(0, c.dtype(0), out);
}

void InferRandomLike(InferContext& c) {
  DType dt = c.node().attr("dtype") ? DTypeFromOnnx(static_cast<int>(c.node().attr_int("dtype", 1))) : c.dtype(0);
  c.set(0, dt, c.shape(0));
}

void InferRandom(InferContext& c) {
  c.set(0, DTypeFromOnnx(static_cast<int>(c.node().attr_int("dtype", 1))), c.node().attr_ints("shape"));
}

void InferBernoulli(InferContext& c) {
  DType dt = c.node().attr("dtype") ? DTypeFromOnnx(static_cast<int>(c.node().attr_int("dtype", 1))) : c.dtype(0);
  c.set(0, dt, c.shape(0));
}

void InferNonDiffInt(InferContext& c) {  // NonZero cannot be shaped statically
  c.fail("the output size depends on tensor values (data-dependent shape)");
}

// ---- FLOPs ----

double OutNumel(const Node& n, const std::vector<Tensor>& t) {
  return static_cast<double>(t[n.outputs[0]].numel());
}
double InNumel(const Node& n, const std::vector<Tensor>& t) {
  return static_cast<double>(t[n.inputs[0]].numel());
}
double NoFlops(const Node&, const std::vector<Tensor>&) { return 0; }
double ElementwiseFlops(const Node& n, const std::vector<Tensor>& t) {
  return std::max(OutNumel(n, t), InNumel(n, t));
}
double TranscendentalFlops(const Node& n, const std::vector<Tensor>& t) { return 4 * OutNumel(n, t); }
double NormFlops(const Node& n, const std::vector<Tensor>& t) { return 8 * OutNumel(n, t); }
double SoftmaxFlops(const Node& n, const std::vector<Tensor>& t) { return 5 * OutNumel(n, t); }
double ReduceFlops(const Node& n, const std::vector<Tensor>& t) { return InNumel(n, t); }

double ConvFlops(const Node& n, const std::vector<Tensor>& t) {
  const std::vector<int64_t>& w = t[n.inputs[1]].shape;
  double per_out = static_cast<double>(Numel(w)) / static_cast<double>(w[0]);  // Cin/g x kernel
  double f = 2 * OutNumel(n, t) * per_out;
  if (n.inputs.size() > 2 && n.inputs[2] != kNone) f += OutNumel(n, t);
  return f;
}

double ConvTransposeFlops(const Node& n, const std::vector<Tensor>& t) {
  const std::vector<int64_t>& w = t[n.inputs[1]].shape;  // [Cin, Cout/g, k...]
  double per_in = static_cast<double>(Numel(w)) / static_cast<double>(w[0]);
  return 2 * InNumel(n, t) * per_in;
}

double MatMulFlops(const Node& n, const std::vector<Tensor>& t) {
  const std::vector<int64_t>& a = t[n.inputs[0]].shape;
  return 2 * OutNumel(n, t) * static_cast<double>(a.back());
}

double GemmFlops(const Node& n, const std::vector<Tensor>& t) {
  const std::vector<int64_t>& a = t[n.inputs[0]].shape;
  double k = static_cast<double>(n.attr_int("transA", 0) ? a[0] : a[1]);
  return 2 * OutNumel(n, t) * k + OutNumel(n, t);
}

double PoolFlops(const Node& n, const std::vector<Tensor>& t) {
  return OutNumel(n, t) * static_cast<double>(Numel(n.attr_ints("kernel_shape")));
}

double EinsumFlops(const Node& n, const std::vector<Tensor>& t) {
  // Product of every distinct index's size, twice (multiply-add).
  std::string eq = n.attr_string("equation", "");
  std::string lhs = eq.substr(0, eq.find("->"));
  std::unordered_map<char, int64_t> size;
  size_t input = 0, pos = 0;
  for (char ch : lhs + ",") {
    if (ch == ' ') continue;
    if (ch == ',') { ++input; pos = 0; continue; }
    size[ch] = t[n.inputs[input]].shape[pos++];
  }
  double f = 2;
  for (auto& [ch, s] : size) f *= static_cast<double>(s);
  return f;
}

// ---- what backward saves (LibTorch 1.13 derivatives.yaml) ----

void SavesInputs01(const Node&, const std::vector<Tensor>&, const std::vector<bool>&, SaveSpec& s) {
  s.inputs = {0, 1};  // convolution: input and weight
}
void SavesInput0(const Node&, const std::vector<Tensor>&, const std::vector<bool>&, SaveSpec& s) {
  s.inputs = {0};
}
void SavesOutput0(const Node&, const std::vector<Tensor>&, const std::vector<bool>&, SaveSpec& s) {
  s.outputs = {0};
}
void SavesBothInputs(const Node&, const std::vector<Tensor>&, const std::vector<bool>&, SaveSpec& s) {
  s.inputs = {0, 1};
}
// mul / matmul / mm: the gradient of one operand needs the other.
void SavesOtherOperand(const Node&, const std::vector<Tensor>&, const std::vector<bool>& g,
                       SaveSpec& s) {
  if (g[0]) s.inputs.push_back(1);
  if (g[1]) s.inputs.push_back(0);
}
// at::matmul (LibTorch 1.13 LinearAlgebra.cpp) is composite: autograd saves what the
// mm / bmm it calls receives. Both operands of rank <= 2: mm / mv on the operands. Rank >= 3
// times a matrix: the batch is folded into the rows of tensor1.contiguous().view(-1, k).
// Otherwise each operand is expanded to the broadcast batch and reshaped to [batch, n, m]
// for bmm. Where that reshape (or contiguous()) cannot be a view, the operand is copied
// into a new buffer, and the copy, not the operand, is what backward keeps.
void SavesMatMul(const Node& n, const std::vector<Tensor>& t, const std::vector<bool>& g, SaveSpec& s) {
  const Tensor& a = t[n.inputs[0]];
  const Tensor& b = t[n.inputs[1]];
  const size_t ra = a.shape.size(), rb = b.shape.size();
  auto keep = [&](int i, bool is_view, const std::vector<int64_t>& mm_shape) {
    const Tensor& x = t[n.inputs[i]];
    if (is_view) s.inputs.push_back(i);
    else s.extras.push_back({i == 0 ? "contiguous copy of A" : "contiguous copy of B", x.dtype, mm_shape,
                             Numel(mm_shape) * static_cast<int64_t>(DTypeSize(x.dtype))});
  };
  if ((ra <= 2 && rb <= 2) || ra == 1 || rb == 1) return SavesOtherOperand(n, t, g, s);
  if (rb == 2) {  // fold: mm(tensor1.contiguous().view(-1, k), tensor2)
    if (g[0]) s.inputs.push_back(1);
    if (g[1]) keep(0, IsContiguousLayout(a.shape, StridesOf(a)), {a.numel() / std::max<int64_t>(a.shape.back(), 1), a.shape.back()});
    return;
  }
  std::vector<int64_t> ba(a.shape.begin(), a.shape.end() - 2), bb(b.shape.begin(), b.shape.end() - 2);
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
    for (size_t d = 0; d < x.shape.size(); ++d) est[off + d] = (x.shape[d] == 1 && exp[off + d] != 1) ? 0 : st[d];
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
void SavesPow(const Node& n, const std::vector<Tensor>& t, const std::vector<bool>& g, SaveSpec& s) {
  s.inputs = {0};
  if (g[1]) { s.inputs.push_back(1); s.outputs.push_back(0); }
}
void SavesWhere(const Node&, const std::vector<Tensor>&, const std::vector<bool>&, SaveSpec& s) {
  s.inputs = {0};  // the condition
}
void SavesGather(const Node&, const std::vector<Tensor>& t, const std::vector<bool>&, SaveSpec& s) {
  s.inputs = {1};  // the indices (embedding / index_select backward)
}
void SavesMaxPool(const Node& n, const std::vector<Tensor>& t, const std::vector<bool>&, SaveSpec& s) {
  s.inputs = {0};
  const Tensor& out = t[n.outputs[0]];
  if (n.outputs.size() > 1 && n.outputs[1] != kNone) {
    s.outputs = {1};
  } else {
    s.extras.push_back({"indices", DType::kInt64, out.shape, out.numel() * 8});
  }
}
void SavesInputAndOutput(const Node&, const std::vector<Tensor>&, const std::vector<bool>&, SaveSpec& s) {
  s.inputs = {0};
  s.outputs = {0};
}
bool BatchNormTraining(const Node& n) {
  return n.attr_int("training_mode", 0) != 0 || (n.outputs.size() > 1 && n.attr("training_mode") == nullptr);
}
void SavesBatchNorm(const Node& n, const std::vector<Tensor>& t, const std::vector<bool>&, SaveSpec& s) {
  s.inputs = {0, 1, 3, 4};
  const Tensor& x = t[n.inputs[0]];
  int64_t channels = x.shape.size() > 1 ? x.shape[1] : 1;
  if (BatchNormTraining(n)) {
    s.extras.push_back({"save_mean", DType::kFloat32, {channels}, channels * 4});
    s.extras.push_back({"save_invstd", DType::kFloat32, {channels}, channels * 4});
  }
}
void SavesLayerNorm(const Node& n, const std::vector<Tensor>& t, const std::vector<bool>&, SaveSpec& s) {
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
void SavesInstanceNorm(const Node& n, const std::vector<Tensor>& t, const std::vector<bool>&, SaveSpec& s) {
  s.inputs = {0, 1};
  const Tensor& x = t[n.inputs[0]];
  int64_t nc = x.shape[0] * x.shape[1];
  s.extras.push_back({"save_mean", DType::kFloat32, {nc}, nc * 4});
  s.extras.push_back({"save_invstd", DType::kFloat32, {nc}, nc * 4});
}
bool DropoutActive(const Node& n, const std::vector<Tensor>& t) {
  // Dropout trains only when training_mode (input 2) is a known true and ratio is not 0.
  if (n.inputs.size() > 2 && n.inputs[2] != kNone) {
    const Tensor& mode = t[n.inputs[2]];
    if (!mode.value || mode.value->numel() == 0 || mode.value->at(0) == 0) return false;
  } else if (n.attr("is_test") == nullptr || n.attr_int("is_test", 0) != 0) {
    return false;  // opset >= 12 without training_mode input: inference
  }
  if (n.inputs.size() > 1 && n.inputs[1] != kNone) {
    const Tensor& ratio = t[n.inputs[1]];
    if (ratio.value && ratio.value->numel() > 0 && ratio.value->at(0) == 0) return false;
  }
  return true;
}
void SavesDropout(const Node& n, const std::vector<Tensor>& t, const std::vector<bool>&, SaveSpec& s) {
  if (!DropoutActive(n, t)) return;
  if (n.outputs.size() > 1 && n.outputs[1] != kNone) {
    s.outputs = {1};
  } else {
    const Tensor& x = t[n.inputs[0]];
    s.extras.push_back({"mask", DType::kBool, x.shape, x.numel()});
  }
}
void SavesScatter(const Node&, const std::vector<Tensor>&, const std::vector<bool>&, SaveSpec& s) {
  s.inputs = {1};  // the indices
}
void SavesTopK(const Node&, const std::vector<Tensor>&, const std::vector<bool>&, SaveSpec& s) {
  s.outputs = {1};
}

// The appended losses (cross entropy = log_softmax + nll_loss, as ATen does it).
void InferScalarLoss(InferContext& c) { c.set(0, DType::kFloat32, {}); }
double CrossEntropyFlops(const Node& n, const std::vector<Tensor>& t) { return 5 * InNumel(n, t); }
void SavesCrossEntropy(const Node& n, const std::vector<Tensor>& t, const std::vector<bool>&, SaveSpec& s) {
  const Tensor& x = t[n.inputs[0]];
  s.extras.push_back({"log_probs", x.dtype, x.shape, x.bytes});
}
// nll_loss backward materializes the gradient of the log-probabilities before
// log_softmax backward turns it into the logits' gradient.
int64_t CrossEntropyWorkspace(const Node& n, const std::vector<Tensor>& t) { return t[n.inputs[0]].bytes; }
int64_t StrideProduct(const Node& n) {
  int64_t product = 1;
  for (int64_t s : n.attr_ints("strides")) product *= std::max<int64_t>(s, 1);
  return product;
}
// A 1x1 kernel with a stride: oneDNN subsamples its input (forward) and scatters the input
// gradient back (backward).
bool StridedOneByOne(const Node& n, const std::vector<int64_t>& weight_shape) {
  for (size_t d = 2; d < weight_shape.size(); ++d) {
    if (weight_shape[d] != 1) return false;
  }
  return StrideProduct(n) > 1;
}
// Measured by the executor (LibTorch 2.14 CPU, oneDNN; resnext50_32x4d at batch 2, 4 and 16):
// convolution backward computes the weight gradient in oneDNN's blocked layout and reorders it
// (a weight-sized buffer), and passes grad_output and the input gradient through blocked
// copies (output + input sized); the transient is the larger of the two. A strided 1x1 conv
// also scatters the subsampled input gradient back (input + twice the output, measured).
// LibTorch takes oneDNN's path unless the conv is tiny (batch 1, kernel <= 3x3, no groups,
// input <= 20480 elements). (1.13 also skipped it for 1x1 stride-1 kernels under batch 16;
// 2.14 does not.)
int64_t ConvWorkspace(const Node& n, const std::vector<Tensor>& t) {
  const Tensor& x = t[n.inputs[0]];
  const std::vector<int64_t>& ws = t[n.inputs[1]].shape;
  const bool strided_one_by_one = StridedOneByOne(n, ws);
  int64_t batch = x.shape.empty() ? 1 : x.shape[0];
  bool big_kernel = ws.size() == 4 && ws[2] > 3 && ws[3] > 3;
  bool mkldnn = n.attr_int("group", 1) > 1 || big_kernel || batch > 1 || x.numel() > 20480;
  if (!mkldnn) return 0;
  int64_t w = t[n.inputs[1]].bytes, out = t[n.outputs[0]].bytes;
  int64_t in = x.has_gradient ? x.bytes : 0;
  int64_t bytes = std::max(w, out + in);
  if (strided_one_by_one) bytes = std::max(bytes, in + 2 * out);
  return bytes;
}
// Measured on LibTorch 2.14's CPU convolution (oneDNN), forward with and without autograd:
// the peak inside the op is the output plus max(0, input + weight - output): oneDNN's
// blocked-layout copies of the source and weights, or of the destination, whichever is
// larger (resnext50_32x4d, every conv within 0.02 MiB). A strided 1x1 conv also subsamples
// its input (a per-thread buffer of one image's strided input; counted for every image, an
// upper bound for any thread count).
int64_t ConvForwardWorkspace(const Node& n, const std::vector<Tensor>& t) {
  const Tensor& x = t[n.inputs[0]];
  const Tensor& w = t[n.inputs[1]];
  const int64_t out = t[n.outputs[0]].bytes;
  int64_t bytes = std::max(out, x.bytes + w.bytes);
  if (StridedOneByOne(n, w.shape)) bytes += x.bytes / StrideProduct(n);
  return bytes;
}
// erf backward computes 2/sqrt(pi) * exp(-x^2) * grad out of place: four input-sized
// temporaries are alive at its peak besides the input gradient.
int64_t ErfWorkspace(const Node& n, const std::vector<Tensor>& t) { return 4 * t[n.inputs[0]].bytes; }
// clamp_backward builds two bool masks (x >= min, x <= max).
int64_t ClipWorkspace(const Node& n, const std::vector<Tensor>& t) { return 2 * t[n.inputs[0]].numel(); }
// native_batch_norm_backward (CPU) allocates an input-sized temporary besides grad_input.
int64_t BatchNormWorkspace(const Node& n, const std::vector<Tensor>& t) {
  return BatchNormTraining(n) ? t[n.inputs[0]].bytes : 0;
}

// mul / div backward (LibTorch 1.13): the gradient of each input is computed at the output's
// shape (grad * other, grad / other) and only then reduced to the input's shape (sum_to in
// the engine's validate_outputs, after the backward function returned all its gradients):
// an input smaller than the output (broadcast) needs an output-sized temporary.
int64_t BroadcastGradWorkspace(const Node& n, const std::vector<Tensor>& t) {
  int64_t bytes = 0;
  const Tensor& out = t[n.outputs[0]];
  for (size_t s = 0; s < n.inputs.size() && s < 2; ++s) {
    if (n.inputs[s] == kNone) continue;
    const Tensor& x = t[n.inputs[s]];
    if (x.has_gradient && x.numel() < out.numel()) bytes += out.bytes;
  }
  return bytes;
}

// ---- validation (ONNX's checker and type constraints) ----

std::string Ints(const std::vector<int64_t>& v) { return IntList(v); }

// Every value of attribute `name` lies in [min, kMaxSizeAttribute]; with `count` >= 0 the
// attribute (when given) has that many values.
void CheckIntsAttr(const InferContext& c, const char* name, int64_t min, int64_t count) {
  const Attribute* a = c.node().attr(name);
  if (!a) return;
  if (count >= 0 && static_cast<int64_t>(a->ints.size()) != count) {
    c.reject(std::string(name) + " " + Ints(a->ints) + " has " + std::to_string(a->ints.size()) + " values; the input's " +
             std::to_string(count / (std::string(name) == "pads" ? 2 : 1)) + " spatial axes need " + std::to_string(count));
  }
  for (int64_t v : a->ints) {
    if (v < min || v > kMaxSizeAttribute) {
      c.reject(std::string(name) + " " + Ints(a->ints) + " must hold values from " + std::to_string(min) + " to " +
               std::to_string(kMaxSizeAttribute));
    }
  }
}

// The attributes of a sliding window (conv, pooling) over `spatial` axes (-1: unknown rank).
void CheckWindowAttrs(const InferContext& c, int64_t spatial) {
  CheckIntsAttr(c, "strides", 1, spatial);
  CheckIntsAttr(c, "dilations", 1, spatial);
  CheckIntsAttr(c, "kernel_shape", 1, spatial);
  CheckIntsAttr(c, "pads", 0, spatial < 0 ? -1 : 2 * spatial);
  std::string auto_pad = c.node().attr_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER" && auto_pad != "VALID") {
    c.reject("auto_pad '" + auto_pad + "' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID");
  }
}

// Inputs `slots` share one floating-point type (ONNX's type constraint T of conv and friends).
void CheckFloatOperands(const InferContext& c, std::initializer_list<size_t> slots) {
  DType first = DType::kUndefined;
  size_t first_slot = 0;
  for (size_t i : slots) {
    if (!c.has(i) || c.dtype(i) == DType::kUndefined) continue;
    if (!IsFloating(c.dtype(i))) {
      c.reject("input " + std::to_string(i) + " ('" + c.in(i).name + "') is " + DTypeName(c.dtype(i)) + "; " +
               c.node().op_type + " takes floating-point tensors (cast integer data to float first)");
    }
    if (first == DType::kUndefined) {
      first = c.dtype(i);
      first_slot = i;
    } else if (c.dtype(i) != first) {
      c.reject("input " + std::to_string(i) + " ('" + c.in(i).name + "') is " + DTypeName(c.dtype(i)) + " but input " +
               std::to_string(first_slot) + " ('" + c.in(first_slot).name + "') is " + DTypeName(first) +
               "; they must have one type");
    }
  }
}

int64_t SpatialAxes(const InferContext& c) {
  if (!c.known(0)) return -1;
  if (c.rank(0) < 3) c.reject("input 'X' ('" + c.in(0).name + "') has rank " + std::to_string(c.rank(0)) + "; it needs [N, C, spatial...]");
  return c.rank(0) - 2;
}

int64_t CheckGroup(const InferContext& c) {
  int64_t group = c.node().attr_int("group", 1);
  if (group < 1 || group > kMaxSizeAttribute) {
    c.reject("group " + std::to_string(group) + " must be from 1 to " + std::to_string(kMaxSizeAttribute));
  }
  return group;
}

void ValidateConv(const InferContext& c) {
  CheckFloatOperands(c, {0, 1, 2});
  int64_t group = CheckGroup(c);
  CheckWindowAttrs(c, SpatialAxes(c));
  if (!c.known(1)) return;
  const std::vector<int64_t>& w = c.shape(1);
  if (w.size() < 3) c.reject("weight '" + c.in(1).name + "' has shape " + Ints(w) + "; it needs [M, C/group, kernel...]");
  std::vector<int64_t> kernel(w.begin() + 2, w.end());
  if (c.node().attr("kernel_shape") && c.node().attr_ints("kernel_shape") != kernel) {
    c.reject("kernel_shape " + Ints(c.node().attr_ints("kernel_shape")) + " does not match weight '" + c.in(1).name +
             "' of shape " + Ints(w));
  }
  if (w[0] % group != 0) {
    c.reject("group " + std::to_string(group) + " does not divide the " + std::to_string(w[0]) + " output channels of weight '" +
             c.in(1).name + "' " + Ints(w));
  }
  if (c.known(0)) {
    const std::vector<int64_t>& x = c.shape(0);
    if (w.size() != x.size()) {
      c.reject("weight '" + c.in(1).name + "' " + Ints(w) + " and input '" + c.in(0).name + "' " + Ints(x) + " have different ranks");
    }
    if (x[1] % group != 0) {
      c.reject("group " + std::to_string(group) + " does not divide the " + std::to_string(x[1]) + " channels of input '" +
               c.in(0).name + "' " + Ints(x));
    }
    if (x[1] / group != w[1]) {
      c.reject("input '" + c.in(0).name + "' " + Ints(x) + " has " + std::to_string(x[1]) + " channels, but weight '" +
               c.in(1).name + "' " + Ints(w) + " expects " + std::to_string(w[1]) + " x group " + std::to_string(group));
    }
  }
  if (c.known(2) && c.shape(2) != std::vector<int64_t>{w[0]}) {
    c.reject("bias '" + c.in(2).name + "' has shape " + Ints(c.shape(2)) + "; weight '" + c.in(1).name + "' " + Ints(w) +
             " makes " + std::to_string(w[0]) + " channels, so it needs [" + std::to_string(w[0]) + "]");
  }
}

void ValidateConvTranspose(const InferContext& c) {
  CheckFloatOperands(c, {0, 1, 2});
  int64_t group = CheckGroup(c);
  int64_t spatial = SpatialAxes(c);
  CheckWindowAttrs(c, spatial);
  CheckIntsAttr(c, "output_padding", 0, spatial);
  if (!c.known(1)) return;
  const std::vector<int64_t>& w = c.shape(1);
  if (w.size() < 3) c.reject("weight '" + c.in(1).name + "' has shape " + Ints(w) + "; it needs [C, M/group, kernel...]");
  if (c.known(0)) {
    const std::vector<int64_t>& x = c.shape(0);
    if (w.size() != x.size() || x[1] != w[0] || x[1] % group != 0) {
      c.reject("input '" + c.in(0).name + "' " + Ints(x) + " does not match weight '" + c.in(1).name + "' " + Ints(w) +
               " with group " + std::to_string(group) + " (the input's channels must equal the weight's first dimension)");
    }
  }
  if (c.known(2) && c.shape(2) != std::vector<int64_t>{w[1] * group}) {
    c.reject("bias '" + c.in(2).name + "' has shape " + Ints(c.shape(2)) + "; it needs [" + std::to_string(w[1] * group) + "]");
  }
}

void ValidatePool(const InferContext& c) {
  if (!c.node().attr("kernel_shape")) c.reject("the kernel_shape attribute is required");
  CheckWindowAttrs(c, SpatialAxes(c));
}

void ValidateFlatten(const InferContext& c) {
  if (!c.known(0)) return;
  int64_t r = c.rank(0), axis = c.node().attr_int("axis", 1);
  if (axis < -r || axis > r) {
    c.reject("axis " + std::to_string(axis) + " is out of range for input '" + c.in(0).name + "' of rank " + std::to_string(r) +
             " (use -" + std::to_string(r) + " to " + std::to_string(r) + ")");
  }
}

// MatMul and Gemm: both operands of one type (ONNX's constraint T).
void ValidateContraction(const InferContext& c) {
  if (c.has(0) && c.has(1) && c.dtype(0) != DType::kUndefined && c.dtype(1) != DType::kUndefined &&
      c.dtype(0) != c.dtype(1)) {
    c.reject("input 'A' ('" + c.in(0).name + "') is " + DTypeName(c.dtype(0)) + " but input 'B' ('" + c.in(1).name + "') is " +
             DTypeName(c.dtype(1)) + "; they must have one type");
  }
}

constexpr uint32_t kNoDiff = 0xffffffffu;
constexpr uint32_t Bits(std::initializer_list<int> slots) {
  uint32_t m = 0;
  for (int i : slots) m |= 1u << i;
  return m;
}

std::vector<OpRule> MakeRules() {
  using V = ViewKind;
  auto unary = [](const char* op, InferFn inf, FlopsFn f, SaveFn s) {
    return OpRule{op, inf, f, 1.0, s, 0, V::kNone, false, true};
  };
  auto binary = [](const char* op, InferFn inf, SaveFn s) {
    return OpRule{op, inf, ElementwiseFlops, 1.0, s, 0, V::kNone, false, true};
  };
  auto nondiff = [](const char* op, InferFn inf) {
    return OpRule{op, inf, NoFlops, 0.0, nullptr, kNoDiff, V::kNone, false, false};
  };
  return {
      // Compute-heavy ops.
      {"Conv", InferConv, ConvFlops, 2.0, SavesInputs01, 0, V::kNone, false, true, ConvWorkspace, ValidateConv,
       ConvForwardWorkspace},
      {"ConvTranspose", InferConvTranspose, ConvTransposeFlops, 2.0, SavesInputs01, 0, V::kNone, false, true, nullptr,
       ValidateConvTranspose},
      {"MatMul", InferMatMul, MatMulFlops, 2.0, SavesMatMul, 0, V::kNone, false, true, nullptr, ValidateContraction},
      {"Gemm", InferGemm, GemmFlops, 2.0, SavesGemm, 0, V::kNone, false, true, nullptr, ValidateContraction},
      {"Einsum", InferEinsum, EinsumFlops, 2.0, SavesBothInputs, 0, V::kNone, false, true},
      // Normalization.
      {"BatchNormalization", InferBatchNorm, NormFlops, 1.5, SavesBatchNorm, Bits({3, 4}), V::kNone, false, true,
       BatchNormWorkspace},
      {"LayerNormalization", InferLayerNorm, NormFlops, 1.5, SavesLayerNorm, 0, V::kNone, false, true},
      {"InstanceNormalization", InferSameAsInput, NormFlops, 1.5, SavesInstanceNorm, 0, V::kNone, false, true},
      // Activations.
      unary("Relu", InferSameAsInput, ElementwiseFlops, SavesOutput0),
      unary("LeakyRelu", InferSameAsInput, ElementwiseFlops, SavesInput0),
      unary("Elu", InferSameAsInput, TranscendentalFlops, SavesInput0),
      unary("Selu", InferSameAsInput, TranscendentalFlops, SavesInput0),
      unary("Celu", InferSameAsInput, TranscendentalFlops, SavesInput0),
      unary("Sigmoid", InferSameAsInput, TranscendentalFlops, SavesOutput0),
      unary("HardSigmoid", InferSameAsInput, ElementwiseFlops, SavesInput0),
      unary("HardSwish", InferSameAsInput, ElementwiseFlops, SavesInput0),
      unary("Tanh", InferSameAsInput, TranscendentalFlops, SavesOutput0),
      unary("Softplus", InferSameAsInput, TranscendentalFlops, SavesInput0),
      unary("Softsign", InferSameAsInput, ElementwiseFlops, SavesInput0),
      unary("Mish", InferSameAsInput, TranscendentalFlops, SavesInput0),
      unary("Gelu", InferSameAsInput, TranscendentalFlops, SavesInput0),
      {"Erf", InferSameAsInput, TranscendentalFlops, 1.0, SavesInput0, 0, V::kNone, false, true, ErfWorkspace},
      unary("Exp", InferSameAsInput, TranscendentalFlops, SavesOutput0),
      unary("Log", InferSameAsInput, TranscendentalFlops, SavesInput0),
      unary("Sqrt", InferUnaryEval<FSqrt>, TranscendentalFlops, SavesOutput0),
      unary("Reciprocal", InferSameAsInput, ElementwiseFlops, SavesOutput0),
      unary("Sin", InferSameAsInput, TranscendentalFlops, SavesInput0),
      unary("Cos", InferSameAsInput, TranscendentalFlops, SavesInput0),
      unary("Abs", InferUnaryEval<FAbs>, ElementwiseFlops, SavesInput0),
      unary("Neg", InferUnaryEval<FNeg>, ElementwiseFlops, nullptr),
      // Clip lowers to clamp with scalar bounds: saves self; min/max get no gradient.
      {"Clip", InferSameAsInput, ElementwiseFlops, 1.0, SavesInput0, Bits({1, 2}), V::kNone, false, true, ClipWorkspace},
      {"PRelu", InferBinary<FMul>, ElementwiseFlops, 1.0, SavesBothInputs, 0, V::kNone, false, true},
      {"Softmax", InferSameAsInput, SoftmaxFlops, 1.0, SavesOutput0, 0, V::kNone, false, true},
      {"LogSoftmax", InferSameAsInput, SoftmaxFlops, 1.0, SavesOutput0, 0, V::kNone, false, true},
      {"Dropout", InferDropout, ElementwiseFlops, 1.0, SavesDropout, Bits({1, 2}), V::kNone, false, true},
      // Elementwise arithmetic.
      // add's backward hands the incoming gradient to both inputs (no copy; a broadcast
      // input gets a reduced one, parameter-sized at most).
      {"Add", InferBinary<FAdd>, ElementwiseFlops, 1.0, nullptr, 0, V::kNone, true, true},
      binary("Sub", InferBinary<FSub>, nullptr),
      {"Mul", InferBinary<FMul>, ElementwiseFlops, 1.0, SavesOtherOperand, 0, V::kNone, false, true,
       BroadcastGradWorkspace},
      {"Div", InferDiv, ElementwiseFlops, 1.0, SavesDiv, 0, V::kNone, false, true, BroadcastGradWorkspace},
      binary("Pow", InferBinary<FPow>, SavesPow),
      binary("Max", InferVariadic, SavesBothInputs),
      binary("Min", InferVariadic, SavesBothInputs),
      binary("Sum", InferVariadic, nullptr),
      binary("Mean", InferVariadic, nullptr),
      {"Where", InferWhere, ElementwiseFlops, 1.0, SavesWhere, Bits({0}), V::kNone, false, true},
      // Pooling and reductions.
      {"MaxPool", InferPool, PoolFlops, 1.0, SavesMaxPool, 0, V::kNone, false, true, nullptr, ValidatePool},
      {"AveragePool", InferPool, PoolFlops, 1.0, SavesInput0, 0, V::kNone, false, true, nullptr, ValidatePool},
      // Lowered to mean over the spatial axes, which saves no tensor.
      {"GlobalAveragePool", InferGlobalPool, ReduceFlops, 1.0, nullptr, 0, V::kNone, false, true},
      {"GlobalMaxPool", InferGlobalPool, ReduceFlops, 1.0, SavesInputAndOutput, 0, V::kNone, false, true},
      {"ReduceMean", InferReduce, ReduceFlops, 1.0, nullptr, Bits({1}), V::kNone, false, true},
      {"ReduceSum", InferReduce, ReduceFlops, 1.0, nullptr, Bits({1}), V::kNone, false, true},
      {"ReduceMax", InferReduce, ReduceFlops, 1.0, SavesInputAndOutput, Bits({1}), V::kNone, false, true},
      {"ReduceMin", InferReduce, ReduceFlops, 1.0, SavesInputAndOutput, Bits({1}), V::kNone, false, true},
      {"ReduceProd", InferReduce, ReduceFlops, 1.0, SavesInputAndOutput, Bits({1}), V::kNone, false, true},
      {"ReduceL2", InferReduce, ReduceFlops, 1.0, SavesInputAndOutput, Bits({1}), V::kNone, false, true},
      {"ReduceSumSquare", InferReduce, ReduceFlops, 1.0, SavesInput0, Bits({1}), V::kNone, false, true},
      {"CumSum", InferSameAsInput, ElementwiseFlops, 1.0, nullptr, Bits({1}), V::kNone, false, true},
      // Data movement: copies.
      {"ScatterND", InferSameAsInput, ElementwiseFlops, 1.0, SavesScatter, Bits({1}), V::kNone, false, true},
      {"ScatterElements", InferSameAsInput, ElementwiseFlops, 1.0, SavesScatter, Bits({1}), V::kNone, false, true},
      {"GatherElements", InferGatherElements, ElementwiseFlops, 1.0, SavesGather, Bits({1}), V::kNone, false, true},
      // cat's backward returns narrow() views of the incoming gradient.
      {"Concat", InferConcat, ElementwiseFlops, 1.0, nullptr, 0, V::kNone, true, true},
      {"Gather", InferGather, ElementwiseFlops, 1.0, SavesGather, Bits({1}), V::kNone, false, true},
      {"Tile", InferTile, ElementwiseFlops, 1.0, nullptr, Bits({1}), V::kNone, false, true},
      {"Pad", InferPad, ElementwiseFlops, 1.0, nullptr, Bits({1, 2, 3}), V::kNone, false, true},
      {"Resize", InferResize, ElementwiseFlops, 1.0, nullptr, Bits({1, 2, 3}), V::kNone, false, true},
      {"Upsample", InferResize, ElementwiseFlops, 1.0, nullptr, Bits({1}), V::kNone, false, true},
      {"Cast", InferCast, ElementwiseFlops, 1.0, nullptr, 0, V::kNone, false, true},
      {"CastLike", InferCastLike, ElementwiseFlops, 1.0, nullptr, Bits({1}), V::kNone, false, true},
      {"Trilu", InferTrilu, ElementwiseFlops, 1.0, nullptr, Bits({1}), V::kNone, false, true},
      {"TopK", InferTopK, ReduceFlops, 1.0, SavesTopK, Bits({1}), V::kNone, false, true},
      // Views.
      {"Reshape", InferReshape, NoFlops, 0.0, nullptr, Bits({1}), V::kReshape, true, true},
      {"Flatten", InferFlatten, NoFlops, 0.0, nullptr, 0, V::kReshape, true, true, nullptr, ValidateFlatten},
      {"Squeeze", InferSqueeze, NoFlops, 0.0, nullptr, Bits({1}), V::kView, true, true},
      {"Unsqueeze", InferUnsqueeze, NoFlops, 0.0, nullptr, Bits({1}), V::kView, true, true},
      {"Identity", InferUnaryEval<FId>, NoFlops, 0.0, nullptr, 0, V::kView, true, true},
      {"Transpose", InferTranspose, NoFlops, 0.0, nullptr, 0, V::kStridedView, true, true},
      {"Expand", InferExpand, NoFlops, 0.0, nullptr, Bits({1}), V::kStridedView, false, true},
      {"Slice", InferSlice, NoFlops, 0.0, nullptr, Bits({1, 2, 3, 4}), V::kStridedView, false, true},
      {"Split", InferSplit, NoFlops, 0.0, nullptr, Bits({1}), V::kStridedView, false, true},
      // Losses memplan appends to the model's output.
      {"memplan.CrossEntropyLoss", InferScalarLoss, CrossEntropyFlops, 1.0, SavesCrossEntropy, Bits({1}),
       V::kNone, false, true, CrossEntropyWorkspace},
      {"memplan.MseLoss", InferScalarLoss, ElementwiseFlops, 1.0, SavesBothInputs, Bits({1}), V::kNone, false, true},
      {"memplan.SumLoss", InferScalarLoss, ReduceFlops, 1.0, nullptr, 0, V::kNone, true, true},
      // Shape arithmetic and comparisons: no gradient.
      nondiff("Constant", InferConstant),
      nondiff("Shape", InferShapeOp),
      nondiff("Size", InferSize),
      nondiff("ConstantOfShape", InferConstantOfShape),
      nondiff("Range", InferRange),
      nondiff("Equal", InferBinary<FEq, true>),
      nondiff("Less", InferBinary<FLess, true>),
      nondiff("LessOrEqual", InferBinary<FLessEq, true>),
      nondiff("Greater", InferBinary<FGreater, true>),
      nondiff("GreaterOrEqual", InferBinary<FGreaterEq, true>),
      nondiff("And", InferBinary<FAnd, true>),
      nondiff("Or", InferBinary<FOr, true>),
      nondiff("Not", InferUnaryEval<FNot>),
      nondiff("Mod", InferBinary<FMod>),
      nondiff("Floor", InferUnaryEval<FFloor>),
      nondiff("Ceil", InferUnaryEval<FCeil>),
      nondiff("Round", InferSameAsInput),
      nondiff("Sign", InferSameAsInput),
      nondiff("IsNaN", [](InferContext& c) { c.set(0, DType::kBool, c.shape(0)); }),
      nondiff("IsInf", [](InferContext& c) { c.set(0, DType::kBool, c.shape(0)); }),
      nondiff("ArgMax", InferArgReduce),
      nondiff("ArgMin", InferArgReduce),
      nondiff("NonZero", InferNonDiffInt),
      nondiff("RandomUniformLike", InferRandomLike),
      nondiff("RandomNormalLike", InferRandomLike),
      nondiff("RandomUniform", InferRandom),
      nondiff("RandomNormal", InferRandom),
      nondiff("Bernoulli", InferBernoulli),
  };
}

}  // namespace

const Tensor& InferContext::in(size_t i) const {
  if (!has(i)) fail("input " + std::to_string(i) + " is required but omitted");
  return tensors_[node_.inputs[i]];
}

const ConstValue* InferContext::value(size_t i) const {
  if (!has(i)) return nullptr;
  const Tensor& t = tensors_[node_.inputs[i]];
  return t.value ? &*t.value : nullptr;
}

bool InferContext::known(size_t i) const {
  if (!has(i)) return false;
  const Tensor& t = tensors_[node_.inputs[i]];
  if (t.dtype == DType::kUndefined) return false;
  for (int64_t d : t.shape) if (d < 0) return false;
  return true;
}

const ConstValue& InferContext::need_scalar(size_t i) const {
  const ConstValue& v = need_value(i);
  if (v.numel() != 1 || v.shape.size() > 1) {
    reject("input " + std::to_string(i) + " ('" + in(i).name + "') must be a single value, but it has shape " +
           ShapeString(v.shape));
  }
  return v;
}

std::vector<int64_t> InferContext::need_ints(size_t i) const {
  const ConstValue& v = need_value(i);
  if (v.shape.size() > 1 || v.is_float()) {
    reject("input " + std::to_string(i) + " ('" + in(i).name + "') must be a list of integers, but it is " +
           DTypeName(v.dtype) + ShapeString(v.shape));
  }
  return v.ints;
}

const ConstValue& InferContext::need_value(size_t i) const {
  const ConstValue* v = value(i);
  if (!v) {
    fail("input " + std::to_string(i) + " ('" + in(i).name +
         "') must be known at analysis time but is computed from tensor data");
  }
  return *v;
}

void InferContext::set(size_t out, DType dtype, std::vector<int64_t> shape) {
  if (!has_output(out)) return;
  for (int64_t d : shape) {
    if (d < 0) fail("output " + std::to_string(out) + " would get a negative dimension " + ShapeString(shape));
  }
  int64_t numel = 0;
  if (!CheckedNumel(shape, &numel)) {
    reject("output '" + tensors_[node_.outputs[out]].name + "' would have shape " + ShapeString(shape) +
           ", more than 2^63 elements; check --batch and --dim");
  }
  Tensor& t = tensors_[node_.outputs[out]];
  t.dtype = dtype;
  t.shape = std::move(shape);
}

void InferContext::set_value(size_t out, ConstValue v) {
  if (!has_output(out)) return;
  set(out, v.dtype, v.shape);
  tensors_[node_.outputs[out]].value = std::move(v);
}

void InferContext::fail(const std::string& why) const {
  throw MemplanError(node_.op_type + " node '" + node_.name + "': " + why);
}

void InferContext::reject(const std::string& why) const {
  throw InvalidModelError(node_.op_type + " node '" + node_.name + "': " + why);
}

void ValidateNode(const Node& node, std::vector<Tensor>& tensors) {
  const OpRule* rule = FindOpRule(node.op_type);
  if (!rule || !rule->validate) return;
  InferContext ctx(node, tensors);
  rule->validate(ctx);
}

const std::vector<OpRule>& AllOpRules() {
  static const std::vector<OpRule> rules = MakeRules();
  return rules;
}

bool DropoutIsActive(const Node& n, const std::vector<Tensor>& t) { return DropoutActive(n, t); }

bool IsIdentityInTraining(const Node& n, const std::vector<Tensor>& t) {
  if (n.op_type == "Dropout") return !DropoutActive(n, t);
  if (n.op_type == "Cast") return t[n.inputs[0]].dtype == t[n.outputs[0]].dtype;
  return false;
}

const OpRule* FindOpRule(const std::string& op_type) {
  static const std::unordered_map<std::string, const OpRule*> index = [] {
    std::unordered_map<std::string, const OpRule*> m;
    for (const OpRule& r : AllOpRules()) m[r.op_type] = &r;
    return m;
  }();
  auto it = index.find(op_type);
  return it == index.end() ? nullptr : it->second;
}

std::vector<int> InPlaceOutputs(const Node& node) {
  std::vector<int> out(node.outputs.size(), kNone);
  // Batch norm updates its running statistics in place; ONNX names the results as outputs.
  if (node.op_type == "BatchNormalization" && node.outputs.size() >= 3) {
    out[1] = 3;
    out[2] = 4;
  }
  return out;
}

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool CheckedNumel(const std::vector<int64_t>& shape, int64_t* numel) {
  int64_t n = 1;
  bool zero = false;
  bool overflow = false;
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (d == 0) zero = true;
    if (!overflow && __builtin_mul_overflow(n, d, &n)) overflow = true;
  }
  if (zero) { *numel = 0; return true; }
  if (overflow) return false;
  *numel = n;
  return true;
}

std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& shape) { return RowMajorStrides(shape); }

std::vector<int64_t> StridesOf(const Tensor& t) {
  return t.strides.size() == t.shape.size() ? t.strides : RowMajorStrides(t.shape);
}

// c10 is_contiguous: size-1 dims may have any stride.
bool IsContiguousLayout(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  if (strides.size() != shape.size()) return true;
  int64_t expected = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    if (shape[d] == 0) return true;
    if (shape[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

// Mirrors at::detail::computeStride_impl (LibTorch 1.13 TensorUtils.cpp): old dims are cut
// into chunks that are contiguous among themselves; each chunk must be covered exactly by
// a run of new dims, which then take strides inside the chunk.
bool ViewStrides(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                 const std::vector<int64_t>& new_shape, std::vector<int64_t>* new_strides) {
  std::vector<int64_t> out(new_shape.size(), 1);
  if (shape.empty()) { *new_strides = out; return true; }
  if (Numel(shape) == 0) { *new_strides = RowMajorStrides(new_shape); return true; }
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = strides.back(), tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= shape[d];
    if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return false;
  *new_strides = out;
  return true;
}

bool FollowsInputLayout(const std::string& op_type) {
  static const char* const kOps[] = {"Add", "Sub", "Mul", "Div", "Pow", "Where", "Relu", "LeakyRelu",
                                     "Sigmoid", "Tanh", "Erf", "Exp", "Log", "Sqrt", "Reciprocal", "Neg",
                                     "Abs", "Clip", "Sin", "Cos", "Elu", "Selu", "Celu", "HardSigmoid",
                                     "HardSwish", "Softplus", "Softsign", "Gelu", "Mish"};
  for (const char* o : kOps) if (op_type == o) return true;
  return false;
}

// TensorIteratorBase (LibTorch 1.13): when all inputs are contiguous and of the output's
// shape (fast setup), or all share one dense layout, the output takes it; otherwise
// reorder_dimensions sorts the dims by the inputs' strides (the first input whose strides
// differ decides, broadcast dims are skipped, equal strides put the smaller dim inner) and
// the output is dense in that order.
std::vector<int64_t> TensorIteratorStrides(const std::vector<int64_t>& out_shape,
                                           const std::vector<const Tensor*>& inputs) {
  const int64_t nd = static_cast<int64_t>(out_shape.size());
  std::vector<std::vector<int64_t>> st;  // per input, strides broadcast to out_shape (0: broadcast)
  bool all_contiguous_same_shape = true;
  for (const Tensor* t : inputs) {
    std::vector<int64_t> in = StridesOf(*t);
    if (t->shape != out_shape) all_contiguous_same_shape = false;
    else if (!IsContiguousLayout(t->shape, in)) all_contiguous_same_shape = false;
    std::vector<int64_t> b(nd, 0);
    int64_t off = nd - static_cast<int64_t>(t->shape.size());
    for (int64_t d = 0; d < static_cast<int64_t>(t->shape.size()); ++d) {
      b[off + d] = (t->shape[d] == 1 && out_shape[off + d] != 1) ? 0 : in[d];
    }
    st.push_back(b);
  }
  if (all_contiguous_same_shape || nd <= 1) return RowMajorStrides(out_shape);
  std::vector<int64_t> perm(nd);  // innermost first
  for (int64_t i = 0; i < nd; ++i) perm[i] = nd - 1 - i;
  auto should_swap = [&](int64_t d0, int64_t d1) {
    for (const std::vector<int64_t>& s : st) {
      int64_t s0 = s[d0], s1 = s[d1];
      if (s0 == 0 || s1 == 0) continue;
      if (s0 < s1) return -1;
      if (s0 > s1) return 1;
      if (out_shape[d0] > out_shape[d1]) return 1;
    }
    return 0;
  };
  for (int64_t i = 1; i < nd; ++i) {
    int64_t d1 = i;
    for (int64_t d0 = i - 1; d0 >= 0; --d0) {
      int c = should_swap(perm[d0], perm[d1]);
      if (c > 0) { std::swap(perm[d0], perm[d1]); d1 = d0; }
      else if (c < 0) break;
    }
  }
  std::vector<int64_t> out(nd);
  int64_t running = 1;
  for (int64_t i = 0; i < nd; ++i) { out[perm[i]] = running; running *= out_shape[perm[i]]; }
  return out;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += shape[i] < 0 ? "?" : std::to_string(shape[i]);
  }
  return s + "]";
}

std::string IntList(const std::vector<int64_t>& values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + std::to_string(values[i]);
  return s + "]";
}

std::vector<std::string> SupportedOpTypes() {
  std::vector<std::string> ops;
  for (const OpRule& r : AllOpRules()) ops.push_back(r.op_type);
  std::sort(ops.begin(), ops.end());
  return ops;
}

}  // namespace memplan
