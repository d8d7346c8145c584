// The table of per-op rules: one OpRule per ONNX op type memplan knows.
#include <algorithm>
#include <unordered_map>

#include "op_rules_internal.h"

namespace memplan {
namespace {

constexpr uint32_t kNoDiff = 0xffffffffu;
constexpr uint32_t Bits(std::initializer_list<int> slots) {
  uint32_t m = 0;
  for (int i : slots) m |= 1u << i;
  return m;
}

std::vector<OpRule> MakeRules() {
  using namespace rules;
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

const std::vector<OpRule>& AllOpRules() {
  static const std::vector<OpRule> rules = MakeRules();
  return rules;
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

std::vector<std::string> SupportedOpTypes() {
  std::vector<std::string> ops;
  for (const OpRule& r : AllOpRules()) ops.push_back(r.op_type);
  std::sort(ops.begin(), ops.end());
  return ops;
}

}  // namespace memplan
