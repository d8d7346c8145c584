// Conversions from ONNX protobuf types to the IR's, for stages that read ONNX files
// themselves (the executor reads weights and test data). Needs the ONNX headers only in the
// caller's .cc file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

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

// Where a tensor's external data lives.
struct ExternalData {
  std::string location;  // as the model writes it
  std::string path;      // the file: base_dir/location
  int64_t offset = 0;
  int64_t length = -1;  // -1: not given (the tensor's size)
};
// Reads the external_data entries of `t`. As ONNX's own loader requires, `location` must name a
// file inside `base_dir`: a relative path without "..", not leading out through a symbolic
// link (unless `allow_outside`, the user's explicit choice). `offset` and `length` must be
// non-negative integers. Throws MemplanError naming `what` (the tensor) and what to do.
ExternalData ResolveExternalData(const onnx::TensorProto& t, const std::string& base_dir,
                                 const std::string& what, bool allow_outside);

}  // namespace memplan
