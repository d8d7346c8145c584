#include <onnx/onnx_pb.h>

#include "memplan/training_graph.h"

namespace memplan {

int64_t DTypeSize(DType d) {
  switch (d) {
    case DType::kFloat32:
    case DType::kInt32:
    case DType::kUInt32:
      return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kInt16:
    case DType::kUInt16:
      return 2;
    case DType::kFloat64:
    case DType::kInt64:
    case DType::kUInt64:
      return 8;
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kBool:
      return 1;
    case DType::kString:
    case DType::kUndefined:
      return 0;
  }
  return 0;
}

const char* DTypeName(DType d) {
  switch (d) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFloat64:
      return "float64";
    case DType::kInt8:
      return "int8";
    case DType::kInt16:
      return "int16";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kUInt8:
      return "uint8";
    case DType::kUInt16:
      return "uint16";
    case DType::kUInt32:
      return "uint32";
    case DType::kUInt64:
      return "uint64";
    case DType::kBool:
      return "bool";
    case DType::kString:
      return "string";
    case DType::kUndefined:
      return "undefined";
  }
  return "undefined";
}

bool IsFloating(DType d) {
  return d == DType::kFloat32 || d == DType::kFloat16 || d == DType::kBFloat16 ||
         d == DType::kFloat64;
}

DType DTypeFromOnnx(int t) {
  using onnx::TensorProto;
  switch (t) {
    case TensorProto::FLOAT:
      return DType::kFloat32;
    case TensorProto::FLOAT16:
      return DType::kFloat16;
    case TensorProto::BFLOAT16:
      return DType::kBFloat16;
    case TensorProto::DOUBLE:
      return DType::kFloat64;
    case TensorProto::INT8:
      return DType::kInt8;
    case TensorProto::INT16:
      return DType::kInt16;
    case TensorProto::INT32:
      return DType::kInt32;
    case TensorProto::INT64:
      return DType::kInt64;
    case TensorProto::UINT8:
      return DType::kUInt8;
    case TensorProto::UINT16:
      return DType::kUInt16;
    case TensorProto::UINT32:
      return DType::kUInt32;
    case TensorProto::UINT64:
      return DType::kUInt64;
    case TensorProto::BOOL:
      return DType::kBool;
    case TensorProto::STRING:
      return DType::kString;
    default:
      return DType::kUndefined;
  }
}

int OnnxFromDType(DType d) {
  using onnx::TensorProto;
  switch (d) {
    case DType::kFloat32:
      return TensorProto::FLOAT;
    case DType::kFloat16:
      return TensorProto::FLOAT16;
    case DType::kBFloat16:
      return TensorProto::BFLOAT16;
    case DType::kFloat64:
      return TensorProto::DOUBLE;
    case DType::kInt8:
      return TensorProto::INT8;
    case DType::kInt16:
      return TensorProto::INT16;
    case DType::kInt32:
      return TensorProto::INT32;
    case DType::kInt64:
      return TensorProto::INT64;
    case DType::kUInt8:
      return TensorProto::UINT8;
    case DType::kUInt16:
      return TensorProto::UINT16;
    case DType::kUInt32:
      return TensorProto::UINT32;
    case DType::kUInt64:
      return TensorProto::UINT64;
    case DType::kBool:
      return TensorProto::BOOL;
    case DType::kString:
      return TensorProto::STRING;
    case DType::kUndefined:
      return TensorProto::UNDEFINED;
  }
  return TensorProto::UNDEFINED;
}

const char* TensorCategoryName(TensorCategory c) {
  switch (c) {
    case TensorCategory::kInput:
      return "input";
    case TensorCategory::kParameter:
      return "parameter";
    case TensorCategory::kConstant:
      return "constant";
    case TensorCategory::kActivation:
      return "activation";
    case TensorCategory::kOutput:
      return "output";
  }
  return "activation";
}

const char* LossKindName(LossKind k) {
  switch (k) {
    case LossKind::kCrossEntropy:
      return "cross_entropy";
    case LossKind::kMse:
      return "mse";
    case LossKind::kSum:
      return "sum";
    case LossKind::kModelOutput:
      return "model_output";
  }
  return "cross_entropy";
}

const char* OptimizerName(Optimizer o) {
  switch (o) {
    case Optimizer::kSgd:
      return "sgd";
    case Optimizer::kMomentum:
      return "momentum";
    case Optimizer::kAdam:
      return "adam";
  }
  return "sgd";
}

LossKind ParseLossKind(const std::string& s) {
  if (s == "cross_entropy" || s == "ce") return LossKind::kCrossEntropy;
  if (s == "mse") return LossKind::kMse;
  if (s == "sum") return LossKind::kSum;
  throw MemplanError("unknown loss '" + s + "': use cross_entropy, mse or sum");
}

Optimizer ParseOptimizer(const std::string& s) {
  if (s == "sgd") return Optimizer::kSgd;
  if (s == "momentum") return Optimizer::kMomentum;
  if (s == "adam") return Optimizer::kAdam;
  throw MemplanError("unknown optimizer '" + s + "': use sgd, momentum or adam");
}

const char* GradientLifetimeName(GradientLifetime l) {
  return l == GradientLifetime::kKept ? "kept" : "none";
}

GradientLifetime ParseGradientLifetime(const std::string& s) {
  if (s == "none") return GradientLifetime::kNone;
  if (s == "kept") return GradientLifetime::kKept;
  throw MemplanError("unknown --grads '" + s +
                     "': use none (zero_grad() sets gradients to None, PyTorch's default) "
                     "or kept (zero_grad(set_to_none=False))");
}

int OptimizerStateMultiplier(Optimizer o) {
  switch (o) {
    case Optimizer::kSgd:
      return 0;
    case Optimizer::kMomentum:
      return 1;
    case Optimizer::kAdam:
      return 2;
  }
  return 0;
}

int64_t ConstValue::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace memplan
