// Stages of LoadTrainingGraph, exposed to the analyzer's own files and tests.
#pragma once

#include <optional>
#include <string>

#include "memplan/onnx_convert.h"
#include "memplan/training_graph.h"

namespace onnx {
class TensorProto;
}

namespace memplan {

// Parses the model, binds symbolic dims, runs ONNX shape inference (its answers are kept as
// hints on the tensors), and orders the nodes topologically.
TrainingGraph ParseOnnxModel(const std::string& bytes, const std::string& file,
                             const LoadOptions& opt);

// Gives every tensor a concrete shape and dtype: ONNX's answer where it has one, otherwise
// memplan's per-op rule (which also evaluates shape arithmetic on known values).
// Throws MemplanError naming the tensor and node that stay unknown.
void ResolveShapes(TrainingGraph& g);
// Throws naming every node whose op has no rule (before anything else reads the nodes).
void RejectUnknownOps(const TrainingGraph& g);

// Replaces composite subgraphs an exporter spelled out by the one op the source model runs
// (erf/tanh GELU -> Gelu, layer norm -> LayerNormalization), so that memplan saves for
// backward what PyTorch saves. Runs after
// ResolveShapes (it reads known constants and shapes); returns the number fused.
int FuseCompositeOps(TrainingGraph& g);

// Classifies tensors, appends the loss, propagates requires_grad / has_gradient, and applies
// the per-op rules (FLOPs, saved tensors, views). Throws for ops without a rule.
void FinishTrainingGraph(TrainingGraph& g, const LoadOptions& opt);

bool ShapeKnown(const Tensor& t);

// Per tensor: whether it is a trainable parameter, a floating initializer of more than one
// element (a scalar is a constant the exporter hoisted), not a graph output, that a
// differentiable input of an op with a gradient reads. Its values change every step, so they are
// never folded.
std::vector<bool> TrainableInitializers(const TrainingGraph& g);

}  // namespace memplan
