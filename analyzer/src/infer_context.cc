// InferContext, which shape rules read and write, and the shape helpers everyone shares.
#include <string>

#include "op_rules.h"

namespace memplan {

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
  for (int64_t d : t.shape)
    if (d < 0) return false;
  return true;
}

const ConstValue& InferContext::need_scalar(size_t i) const {
  const ConstValue& v = need_value(i);
  if (v.numel() != 1 || v.shape.size() > 1) {
    reject("input " + std::to_string(i) + " ('" + in(i).name +
           "') must be a single value, but it has shape " + ShapeString(v.shape));
  }
  return v;
}

std::vector<int64_t> InferContext::need_ints(size_t i) const {
  const ConstValue& v = need_value(i);
  if (v.shape.size() > 1 || v.is_float()) {
    reject("input " + std::to_string(i) + " ('" + in(i).name +
           "') must be a list of integers, but it is " + DTypeName(v.dtype) + ShapeString(v.shape));
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
    if (d < 0)
      fail("output " + std::to_string(out) + " would get a negative dimension " +
           ShapeString(shape));
  }
  int64_t numel = 0;
  if (!CheckedNumel(shape, &numel)) {
    reject("output '" + tensors_[node_.outputs[out]].name + "' would have shape " +
           ShapeString(shape) + ", more than 2^63 elements; check --batch and --dim");
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
  if (zero) {
    *numel = 0;
    return true;
  }
  if (overflow) return false;
  *numel = n;
  return true;
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

}  // namespace memplan
