// Constant evaluation: shape arithmetic (Shape, Gather, Concat, Range, Add, ...) computed on
// the small integer tensors that decide later shapes. Larger values are not tracked.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "op_rules_internal.h"

namespace memplan::rules {
namespace {

double FDivFloat(double a, double b) { return a / b; }

}  // namespace

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

bool Trackable(const std::vector<int64_t>& shape) {
  int64_t n = 0;
  return CheckedNumel(shape, &n) && n <= kMaxTrackedElements;
}

ConstValue MakeValue(DType dtype, std::vector<int64_t> shape) {
  if (!Trackable(shape))
    throw InvalidModelError("a constant of shape " + ShapeString(shape) + " cannot be evaluated");
  ConstValue v;
  v.dtype = dtype;
  v.shape = std::move(shape);
  if (v.is_float())
    v.floats.resize(v.numel());
  else
    v.ints.resize(v.numel());
  return v;
}

void Put(ConstValue& v, int64_t i, double x) {
  if (v.is_float())
    v.floats[i] = x;
  else if (v.dtype == DType::kBool)
    v.ints[i] = x != 0;
  else if (!(x >= -9223372036854775808.0 && x < 9223372036854775808.0)) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", x);
    throw InvalidModelError(std::string("shape arithmetic gives ") + buf +
                            ", which does not fit in " + DTypeName(v.dtype) +
                            " (beyond 2^63); check --batch and --dim");
  } else
    v.ints[i] = static_cast<int64_t>(x);
}

bool AllValues(const InferContext& c, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (c.has(i) && !c.value(i)) return false;
  }
  return true;
}

void InferUnaryImpl(InferContext& c, Unary f) {
  const ConstValue* v = c.value(0);
  if (v && v->numel() <= kMaxTrackedElements) {
    ConstValue out = MakeValue(v->dtype, v->shape);
    for (int64_t i = 0; i < v->numel(); ++i) Put(out, i, f(v->at(i)));
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

void InferBinaryImpl(InferContext& c, Binary f, bool to_bool) {
  std::vector<int64_t> out = Broadcast(c.shape(0), c.shape(1), c);
  DType dt = to_bool ? DType::kBool : c.dtype(0);
  const ConstValue* a = c.value(0);
  const ConstValue* b = c.value(1);
  if (a && b && Trackable(out)) {
    ConstValue v = MakeValue(dt, out);
    for (int64_t i = 0; i < Numel(out); ++i) {
      Put(v, i,
          f(a->at(BroadcastIndex(i, out, a->shape)), b->at(BroadcastIndex(i, out, b->shape))));
    }
    c.set_value(0, std::move(v));
    return;
  }
  c.set(0, dt, out);
}
double FAdd(double a, double b) { return a + b; }
double FSub(double a, double b) { return a - b; }
double FMul(double a, double b) { return a * b; }
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
  return InferBinaryImpl(
      c, [](double a, double b) { return b == 0 ? 0.0 : std::trunc(a / b); }, false);
}

void InferWhere(InferContext& c) {
  std::vector<int64_t> out = Broadcast(Broadcast(c.shape(0), c.shape(1), c), c.shape(2), c);
  const ConstValue *cond = c.value(0), *x = c.value(1), *y = c.value(2);
  if (cond && x && y && Trackable(out)) {
    ConstValue v = MakeValue(c.dtype(1), out);
    for (int64_t i = 0; i < Numel(out); ++i) {
      bool take_x = cond->at(BroadcastIndex(i, out, cond->shape)) != 0;
      Put(v, i,
          take_x ? x->at(BroadcastIndex(i, out, x->shape))
                 : y->at(BroadcastIndex(i, out, y->shape)));
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
    v.dtype = DType::kInt64;
    v.ints = {a->i};
  } else if (const Attribute* a = n.attr("value_ints")) {
    v.dtype = DType::kInt64;
    v.ints = a->ints;
    v.shape = {static_cast<int64_t>(a->ints.size())};
  } else if (const Attribute* a = n.attr("value_float")) {
    v.dtype = DType::kFloat32;
    v.floats = {a->f};
  } else if (const Attribute* a = n.attr("value_floats")) {
    v.dtype = DType::kFloat32;
    v.floats = a->floats;
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

void InferConstantOfShape(InferContext& c) {
  std::vector<int64_t> shape = c.need_ints(0);
  int64_t numel = 0;
  if (!CheckedNumel(shape, &numel))
    c.reject("ConstantOfShape shape " + ShapeString(shape) + " is negative or overflows int64");
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

}  // namespace memplan::rules
