#include <map>
#include <set>

#include "loader_internal.h"
#include "op_rules.h"

namespace memplan {

void RejectUnknownOps(const TrainingGraph& g) {
  std::string unknown =
      DescribeNodesByOp(g, [](const Node& n) { return FindOpRule(n.op_type) == nullptr; });
  if (unknown.empty()) return;
  throw MemplanError(g.model_path + ": memplan has no rule for " + unknown +
                     ". Supported ops are listed by `memplan ops`; re-export the model with "
                     "supported ops or add a rule.");
}

void ResolveShapes(TrainingGraph& g) {
  RejectUnknownOps(g);
  for (const Tensor& t : g.tensors) {
    if ((t.category == TensorCategory::kInput || t.category == TensorCategory::kConstant) &&
        !ShapeKnown(t)) {
      throw MemplanError(g.model_path + ": input '" + t.name +
                         "' has no concrete shape or type; bind its dims with --batch/--dim");
    }
  }
  // A weight's values change every step: they are data, not constants, so no rule folds an op
  // that reads one (Transpose(w) folded to a constant would leave w untrained). Folding is for
  // shape arithmetic on integer and constant data.
  const std::vector<bool> weights = TrainableInitializers(g);
  for (size_t t = 0; t < weights.size(); ++t) {
    if (weights[t]) g.tensors[t].value.reset();
  }
  for (const Node& n : g.nodes) {
    const OpRule* rule = FindOpRule(n.op_type);
    std::vector<Tensor> hints;
    for (TensorId o : n.outputs) {
      if (o == kNone) {
        hints.emplace_back();
        continue;
      }
      hints.push_back(g.tensors[o]);
      g.tensors[o].dtype = DType::kUndefined;
      g.tensors[o].shape = {-1};
    }
    std::string rule_error;
    try {
      ValidateNode(n, g.tensors);
      InferContext ctx(n, g.tensors);
      rule->infer(ctx);
    } catch (const InvalidModelError& e) {
      throw MemplanError(g.model_path + ": " + e.what());
    } catch (const MemplanError& e) {
      rule_error = e.what();
    }
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (n.outputs[i] == kNone) continue;
      Tensor& t = g.tensors[n.outputs[i]];
      const Tensor& hint = hints[i];
      if (ShapeKnown(hint)) {
        ++g.tensors_shaped_by_onnx;
        if (ShapeKnown(t) && (t.shape != hint.shape || t.dtype != hint.dtype)) {
          g.shape_disagreements.push_back(
              t.name + " (" + n.op_type + " node '" + n.name + "'): ONNX " + DTypeName(hint.dtype) +
              ShapeString(hint.shape) + ", memplan " + DTypeName(t.dtype) + ShapeString(t.shape));
          t.value.reset();
        }
        t.dtype = hint.dtype;
        t.shape = hint.shape;
      } else if (ShapeKnown(t)) {
        ++g.tensors_shaped_by_rules;
      } else {
        throw MemplanError(
            g.model_path + ": cannot resolve the shape of tensor '" + t.name + "' produced by " +
            n.op_type + " node '" + n.name + "'" + (rule_error.empty() ? "" : ": " + rule_error) +
            ". If it depends on a symbolic dimension, bind it with --dim NAME=VALUE.");
      }
    }
  }
}

}  // namespace memplan
