// Conversions from ONNX protobuf types to the IR's, for stages that read ONNX files
// themselves (the executor reads weights and test data). Needs the ONNX headers only in the
// caller's .cc file.
#pragma once

#include <optional>

#include "memplan/training_graph.h"

namespace onnx {
class AttributeProto;
class TensorProto;
}  // namespace onnx

namespace memplan {

// An ONNX attribute as the IR keeps it (tensor attributes keep their value when small).
Attribute AttributeFromOnnx(const onnx::AttributeProto& a);

// The value of an embedded tensor of at most 65,536 elements; nullopt for external or larger
// data and unsupported types.
std::optional<ConstValue> ConstValueFromTensorProto(const onnx::TensorProto& t);

}  // namespace memplan
