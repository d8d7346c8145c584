// Checks of a node against its op's ONNX definition: ONNX's checker and type constraints.
#include "op_rules_internal.h"

namespace memplan {
namespace rules {
namespace {

// Every value of attribute `name` lies in [min, kMaxSizeAttribute]; with `count` >= 0 the
// attribute (when given) has that many values.
void CheckIntsAttr(const InferContext& c, const char* name, int64_t min, int64_t count) {
  const Attribute* a = c.node().attr(name);
  if (!a) return;
  if (count >= 0 && static_cast<int64_t>(a->ints.size()) != count) {
    c.reject(std::string(name) + " " + IntList(a->ints) + " has " + std::to_string(a->ints.size()) +
             " values; the input's " +
             std::to_string(count / (std::string(name) == "pads" ? 2 : 1)) + " spatial axes need " +
             std::to_string(count));
  }
  for (int64_t v : a->ints) {
    if (v < min || v > kMaxSizeAttribute) {
      c.reject(std::string(name) + " " + IntList(a->ints) + " must hold values from " +
               std::to_string(min) + " to " + std::to_string(kMaxSizeAttribute));
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
  if (auto_pad != "NOTSET" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER" &&
      auto_pad != "VALID") {
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
      c.reject("input " + std::to_string(i) + " ('" + c.in(i).name + "') is " +
               DTypeName(c.dtype(i)) + "; " + c.node().op_type +
               " takes floating-point tensors (cast integer data to float first)");
    }
    if (first == DType::kUndefined) {
      first = c.dtype(i);
      first_slot = i;
    } else if (c.dtype(i) != first) {
      c.reject("input " + std::to_string(i) + " ('" + c.in(i).name + "') is " +
               DTypeName(c.dtype(i)) + " but input " + std::to_string(first_slot) + " ('" +
               c.in(first_slot).name + "') is " + DTypeName(first) + "; they must have one type");
    }
  }
}

int64_t SpatialAxes(const InferContext& c) {
  if (!c.known(0)) return -1;
  if (c.rank(0) < 3)
    c.reject("input 'X' ('" + c.in(0).name + "') has rank " + std::to_string(c.rank(0)) +
             "; it needs [N, C, spatial...]");
  return c.rank(0) - 2;
}

int64_t CheckGroup(const InferContext& c) {
  int64_t group = c.node().attr_int("group", 1);
  if (group < 1 || group > kMaxSizeAttribute) {
    c.reject("group " + std::to_string(group) + " must be from 1 to " +
             std::to_string(kMaxSizeAttribute));
  }
  return group;
}

}  // namespace

void ValidateConv(const InferContext& c) {
  CheckFloatOperands(c, {0, 1, 2});
  int64_t group = CheckGroup(c);
  CheckWindowAttrs(c, SpatialAxes(c));
  if (!c.known(1)) return;
  const std::vector<int64_t>& w = c.shape(1);
  if (w.size() < 3)
    c.reject("weight '" + c.in(1).name + "' has shape " + IntList(w) +
             "; it needs [M, C/group, kernel...]");
  std::vector<int64_t> kernel(w.begin() + 2, w.end());
  if (c.node().attr("kernel_shape") && c.node().attr_ints("kernel_shape") != kernel) {
    c.reject("kernel_shape " + IntList(c.node().attr_ints("kernel_shape")) +
             " does not match weight '" + c.in(1).name + "' of shape " + IntList(w));
  }
  if (w[0] % group != 0) {
    c.reject("group " + std::to_string(group) + " does not divide the " + std::to_string(w[0]) +
             " output channels of weight '" + c.in(1).name + "' " + IntList(w));
  }
  if (c.known(0)) {
    const std::vector<int64_t>& x = c.shape(0);
    if (w.size() != x.size()) {
      c.reject("weight '" + c.in(1).name + "' " + IntList(w) + " and input '" + c.in(0).name +
               "' " + IntList(x) + " have different ranks");
    }
    if (x[1] % group != 0) {
      c.reject("group " + std::to_string(group) + " does not divide the " + std::to_string(x[1]) +
               " channels of input '" + c.in(0).name + "' " + IntList(x));
    }
    if (x[1] / group != w[1]) {
      c.reject("input '" + c.in(0).name + "' " + IntList(x) + " has " + std::to_string(x[1]) +
               " channels, but weight '" + c.in(1).name + "' " + IntList(w) + " expects " +
               std::to_string(w[1]) + " x group " + std::to_string(group));
    }
  }
  if (c.known(2) && c.shape(2) != std::vector<int64_t>{w[0]}) {
    c.reject("bias '" + c.in(2).name + "' has shape " + IntList(c.shape(2)) + "; weight '" +
             c.in(1).name + "' " + IntList(w) + " makes " + std::to_string(w[0]) +
             " channels, so it needs [" + std::to_string(w[0]) + "]");
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
  if (w.size() < 3)
    c.reject("weight '" + c.in(1).name + "' has shape " + IntList(w) +
             "; it needs [C, M/group, kernel...]");
  if (c.known(0)) {
    const std::vector<int64_t>& x = c.shape(0);
    if (w.size() != x.size() || x[1] != w[0] || x[1] % group != 0) {
      c.reject("input '" + c.in(0).name + "' " + IntList(x) + " does not match weight '" +
               c.in(1).name + "' " + IntList(w) + " with group " + std::to_string(group) +
               " (the input's channels must equal the weight's first dimension)");
    }
  }
  if (c.known(2) && c.shape(2) != std::vector<int64_t>{w[1] * group}) {
    c.reject("bias '" + c.in(2).name + "' has shape " + IntList(c.shape(2)) + "; it needs [" +
             std::to_string(w[1] * group) + "]");
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
    c.reject("axis " + std::to_string(axis) + " is out of range for input '" + c.in(0).name +
             "' of rank " + std::to_string(r) + " (use -" + std::to_string(r) + " to " +
             std::to_string(r) + ")");
  }
}

// LayerNormalization normalizes the dims from `axis` on: it must name one of them.
void ValidateLayerNorm(const InferContext& c) {
  if (!c.known(0)) return;
  int64_t r = c.rank(0), axis = c.node().attr_int("axis", -1);
  if (axis < -r || axis >= r) {
    c.reject("axis " + std::to_string(axis) + " is out of range for input '" + c.in(0).name +
             "' of rank " + std::to_string(r) + " (use -" + std::to_string(r) + " to " +
             std::to_string(r - 1) + ")");
  }
}

// MatMul and Gemm: both operands of one type (ONNX's constraint T).
void ValidateContraction(const InferContext& c) {
  if (c.has(0) && c.has(1) && c.dtype(0) != DType::kUndefined && c.dtype(1) != DType::kUndefined &&
      c.dtype(0) != c.dtype(1)) {
    c.reject("input 'A' ('" + c.in(0).name + "') is " + DTypeName(c.dtype(0)) +
             " but input 'B' ('" + c.in(1).name + "') is " + DTypeName(c.dtype(1)) +
             "; they must have one type");
  }
}

}  // namespace rules

void ValidateNode(const Node& node, std::vector<Tensor>& tensors) {
  const OpRule* rule = FindOpRule(node.op_type);
  if (!rule || !rule->validate) return;
  InferContext ctx(node, tensors);
  rule->validate(ctx);
}

}  // namespace memplan
