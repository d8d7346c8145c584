// The table of per-op rules: one OpRule per ONNX op type memplan knows.
#include <algorithm>
#include <unordered_map>

#include "op_rules_internal.h"

namespace memplan {
namespace {

using rules::NoFlops;

constexpr uint32_t kNoDiff = 0xffffffffu;
constexpr uint32_t Bits(std::initializer_list<int> slots) {
  uint32_t m = 0;
  for (int i : slots) m |= 1u << i;
  return m;
}

// Shape arithmetic, comparisons and random sources: no FLOPs, no gradient through any input.
OpRule NoGradient(const char* op_type, InferFn infer) {
  return {.op_type = op_type,
          .infer = infer,
          .flops = NoFlops,
          .backward_factor = 0.0,
          .nondiff_inputs = kNoDiff,
          .differentiable = false};
}

OpRule RandomSource(const char* op_type, InferFn infer) {
  OpRule r = NoGradient(op_type, infer);
  r.random = Randomness::kAlways;
  return r;
}

bool DropoutIsIdentity(const Node& n, const std::vector<Tensor>& t) {
  return !DropoutIsActive(n, t);
}

bool CastIsIdentity(const Node& n, const std::vector<Tensor>& t) {
  return t[n.inputs[0]].dtype == t[n.outputs[0]].dtype;
}

// The executor's Gemm multiplies by a.t() and b.t() (TBackward0 views).
uint32_t GemmTransposedInputs(const Node& n) {
  return (n.attr_int("transA", 0) != 0 ? 1u : 0u) | (n.attr_int("transB", 0) != 0 ? 2u : 0u);
}

// Fields left out take OpRule's defaults: backward FLOPs equal to forward, saves nothing,
// every input differentiable, a new output, no workspaces, no checks beyond the shape rule.
std::vector<OpRule> MakeRules() {
  using namespace rules;
  using V = ViewKind;
  return {
      // Compute-heavy ops.
      {.op_type = "Conv",
       .infer = InferConv,
       .flops = ConvFlops,
       .backward_factor = 2.0,
       .saves = SavesInputs01,
       .copies_broadcast_grad = true,
       .copies_strided_grad = true,
       .backward_workspace = ConvWorkspace,
       .validate = ValidateConv,
       .forward_workspace = ConvForwardWorkspace,
       .workspace_margin = ConvWorkspaceMargin,
       .compute = ComputeClass::kConv},
      {.op_type = "ConvTranspose",
       .infer = InferConvTranspose,
       .flops = ConvTransposeFlops,
       .backward_factor = 2.0,
       .saves = SavesInputs01,
       .copies_broadcast_grad = true,
       .validate = ValidateConvTranspose,
       .compute = ComputeClass::kConv},
      {.op_type = "MatMul",
       .infer = InferMatMul,
       .flops = MatMulFlops,
       .backward_factor = 2.0,
       .saves = SavesMatMul,
       .copies_broadcast_grad = true,
       .validate = ValidateContraction,
       .compute = ComputeClass::kMatmul},
      {.op_type = "Gemm",
       .infer = InferGemm,
       .flops = GemmFlops,
       .backward_factor = 2.0,
       .saves = SavesGemm,
       .copies_broadcast_grad = true,
       .inputs_read_through_view = GemmTransposedInputs,
       .validate = ValidateContraction,
       .compute = ComputeClass::kMatmul},
      {.op_type = "Einsum",
       .infer = InferEinsum,
       .flops = EinsumFlops,
       .backward_factor = 2.0,
       .saves = SavesBothInputs,
       .compute = ComputeClass::kMatmul},
      // Normalization.
      // Inputs: X, scale, bias, running mean, running variance.
      {.op_type = "BatchNormalization",
       .infer = InferBatchNorm,
       .flops = NormFlops,
       .backward_factor = 1.5,
       .saves = SavesBatchNorm,
       .nondiff_inputs = Bits({3, 4}),
       .backward_workspace = BatchNormWorkspace,
       .init_one_inputs = Bits({1, 4}),
       .init_zero_inputs = Bits({2, 3}),
       .in_place_inputs = {kNone, 3, 4, kNone},
       .compute = ComputeClass::kNormalization},
      {.op_type = "LayerNormalization",
       .infer = InferLayerNorm,
       .flops = NormFlops,
       .backward_factor = 1.5,
       .saves = SavesLayerNorm,
       .copies_broadcast_grad = true,
       .backward_workspace = LayerNormWorkspace,
       .validate = ValidateLayerNorm,
       .forward_workspace = LayerNormWorkspace,
       .init_one_inputs = Bits({1}),
       .init_zero_inputs = Bits({2})},
      // Inputs: X, scale (opset 23). The executor runs at::rms_norm.
      {.op_type = "RMSNormalization",
       .infer = InferRmsNorm,
       .flops = NormFlops,
       .backward_factor = 1.5,
       .saves = SavesRmsNorm,
       .backward_workspace = RmsNormWorkspace,
       .forward_workspace = RmsNormForwardWorkspace,
       .init_one_inputs = Bits({1}),
       .compute = ComputeClass::kNormalization},
      {.op_type = "InstanceNormalization",
       .infer = InferSameAsInput,
       .flops = NormFlops,
       .backward_factor = 1.5,
       .saves = SavesInstanceNorm,
       .init_one_inputs = Bits({1}),
       .init_zero_inputs = Bits({2}),
       .compute = ComputeClass::kNormalization},
      // Activations.
      {.op_type = "Relu",
       .infer = InferSameAsInput,
       .flops = ElementwiseFlops,
       .saves = SavesOutput0},
      {.op_type = "LeakyRelu",
       .infer = InferSameAsInput,
       .flops = ElementwiseFlops,
       .saves = SavesInput0},
      {.op_type = "Elu",
       .infer = InferSameAsInput,
       .flops = TranscendentalFlops,
       .saves = SavesInput0},
      {.op_type = "Selu",
       .infer = InferSameAsInput,
       .flops = TranscendentalFlops,
       .saves = SavesInput0},
      {.op_type = "Celu",
       .infer = InferSameAsInput,
       .flops = TranscendentalFlops,
       .saves = SavesInput0},
      {.op_type = "Sigmoid",
       .infer = InferSameAsInput,
       .flops = TranscendentalFlops,
       .saves = SavesOutput0},
      {.op_type = "HardSigmoid",
       .infer = InferSameAsInput,
       .flops = ElementwiseFlops,
       .saves = SavesInput0},
      {.op_type = "HardSwish",
       .infer = InferSameAsInput,
       .flops = ElementwiseFlops,
       .saves = SavesInput0},
      {.op_type = "Tanh",
       .infer = InferSameAsInput,
       .flops = TranscendentalFlops,
       .saves = SavesOutput0},
      {.op_type = "Softplus",
       .infer = InferSameAsInput,
       .flops = TranscendentalFlops,
       .saves = SavesInput0},
      {.op_type = "Softsign",
       .infer = InferSameAsInput,
       .flops = ElementwiseFlops,
       .saves = SavesInput0},
      {.op_type = "Mish",
       .infer = InferSameAsInput,
       .flops = TranscendentalFlops,
       .saves = SavesInput0},
      {.op_type = "Gelu",
       .infer = InferSameAsInput,
       .flops = TranscendentalFlops,
       .saves = SavesInput0,
       .copies_broadcast_grad = true},
      // ONNX's Swish (opset 24) is x * sigmoid(alpha x): SiLU at alpha 1.
      {.op_type = "Swish",
       .infer = InferSameAsInput,
       .flops = TranscendentalFlops,
       .saves = SavesSwish},
      {.op_type = "Erf",
       .infer = InferSameAsInput,
       .flops = TranscendentalFlops,
       .saves = SavesInput0,
       .backward_workspace = ErfWorkspace},
      {.op_type = "Exp",
       .infer = InferSameAsInput,
       .flops = TranscendentalFlops,
       .saves = SavesOutput0},
      {.op_type = "Log",
       .infer = InferSameAsInput,
       .flops = TranscendentalFlops,
       .saves = SavesInput0},
      {.op_type = "Sqrt",
       .infer = InferUnaryEval<FSqrt>,
       .flops = TranscendentalFlops,
       .saves = SavesOutput0},
      {.op_type = "Reciprocal",
       .infer = InferSameAsInput,
       .flops = ElementwiseFlops,
       .saves = SavesOutput0},
      {.op_type = "Sin",
       .infer = InferSameAsInput,
       .flops = TranscendentalFlops,
       .saves = SavesInput0},
      {.op_type = "Cos",
       .infer = InferSameAsInput,
       .flops = TranscendentalFlops,
       .saves = SavesInput0},
      {.op_type = "Abs",
       .infer = InferUnaryEval<FAbs>,
       .flops = ElementwiseFlops,
       .saves = SavesInput0},
      {.op_type = "Neg", .infer = InferUnaryEval<FNeg>, .flops = ElementwiseFlops},
      // Clip lowers to clamp with scalar bounds: saves self; min/max get no gradient.
      {.op_type = "Clip",
       .infer = InferSameAsInput,
       .flops = ElementwiseFlops,
       .saves = SavesInput0,
       .nondiff_inputs = Bits({1, 2}),
       .backward_workspace = ClipWorkspace},
      {.op_type = "PRelu",
       .infer = InferBinary<FMul>,
       .flops = ElementwiseFlops,
       .saves = SavesBothInputs},
      {.op_type = "Softmax",
       .infer = InferSameAsInput,
       .flops = SoftmaxFlops,
       .saves = SavesOutput0,
       .copies_broadcast_grad = true},
      {.op_type = "LogSoftmax",
       .infer = InferSameAsInput,
       .flops = SoftmaxFlops,
       .saves = SavesOutput0,
       .copies_broadcast_grad = true},
      {.op_type = "Dropout",
       .infer = InferDropout,
       .flops = ElementwiseFlops,
       .saves = SavesDropout,
       .saves_on_cuda = SavesDropoutOnCuda,
       .outputs_made_when_read = Bits({1}),
       .nondiff_inputs = Bits({1, 2}),
       .random = Randomness::kInTraining,
       .identity_in_training = DropoutIsIdentity},
      // Elementwise arithmetic.
      // add's backward hands the incoming gradient to both inputs (no copy; a broadcast
      // input gets a reduced one, parameter-sized at most).
      {.op_type = "Add",
       .infer = InferBinary<FAdd>,
       .flops = ElementwiseFlops,
       .grad_is_view = true,
       .grad_reduces_broadcast_inputs = true},
      {.op_type = "Sub", .infer = InferBinary<FSub>, .flops = ElementwiseFlops},
      {.op_type = "Mul",
       .infer = InferBinary<FMul>,
       .flops = ElementwiseFlops,
       .saves = SavesOtherOperand,
       .backward_workspace = BroadcastGradWorkspace},
      {.op_type = "Div",
       .infer = InferDiv,
       .flops = ElementwiseFlops,
       .saves = SavesDiv,
       .backward_workspace = BroadcastGradWorkspace},
      {.op_type = "Pow", .infer = InferBinary<FPow>, .flops = ElementwiseFlops, .saves = SavesPow},
      {.op_type = "Max",
       .infer = InferVariadic,
       .flops = ElementwiseFlops,
       .saves = SavesBothInputs},
      {.op_type = "Min",
       .infer = InferVariadic,
       .flops = ElementwiseFlops,
       .saves = SavesBothInputs},
      {.op_type = "Sum", .infer = InferVariadic, .flops = ElementwiseFlops},
      {.op_type = "Mean", .infer = InferVariadic, .flops = ElementwiseFlops},
      {.op_type = "Where",
       .infer = InferWhere,
       .flops = ElementwiseFlops,
       .saves = SavesWhere,
       .nondiff_inputs = Bits({0})},
      // Pooling and reductions.
      {.op_type = "MaxPool",
       .infer = InferPool,
       .flops = PoolFlops,
       .saves = SavesMaxPool,
       .copies_broadcast_grad = true,
       .validate = ValidatePool,
       .compute = ComputeClass::kPooling},
      {.op_type = "AveragePool",
       .infer = InferPool,
       .flops = PoolFlops,
       .saves = SavesInput0,
       .copies_broadcast_grad = true,
       .validate = ValidatePool,
       .compute = ComputeClass::kPooling},
      // Lowered to mean over the spatial axes, which saves no tensor.
      {.op_type = "GlobalAveragePool", .infer = InferGlobalPool, .flops = ReduceFlops},
      {.op_type = "GlobalMaxPool",
       .infer = InferGlobalPool,
       .flops = ReduceFlops,
       .saves = SavesInputAndOutput},
      // The executor's mean is sum then an in-place scale (MeanSavingNothing): backward scales the
      // reduced gradient and expands it back, a broadcast view as sum's.
      {.op_type = "ReduceMean",
       .infer = InferReduce,
       .flops = ReduceFlops,
       .nondiff_inputs = Bits({1}),
       .grad_is_view = true,
       .grad_is_broadcast = true},
      // sum's backward expands the incoming gradient back to the input's shape: a view.
      {.op_type = "ReduceSum",
       .infer = InferReduce,
       .flops = ReduceFlops,
       .nondiff_inputs = Bits({1}),
       .grad_is_view = true,
       .grad_is_broadcast = true},
      {.op_type = "ReduceMax",
       .infer = InferReduce,
       .flops = ReduceFlops,
       .saves = SavesInputAndOutput,
       .nondiff_inputs = Bits({1})},
      {.op_type = "ReduceMin",
       .infer = InferReduce,
       .flops = ReduceFlops,
       .saves = SavesInputAndOutput,
       .nondiff_inputs = Bits({1})},
      {.op_type = "ReduceProd",
       .infer = InferReduce,
       .flops = ReduceFlops,
       .saves = SavesInputAndOutput,
       .nondiff_inputs = Bits({1})},
      {.op_type = "ReduceL2",
       .infer = InferReduce,
       .flops = ReduceFlops,
       .saves = SavesInputAndOutput,
       .nondiff_inputs = Bits({1})},
      {.op_type = "ReduceSumSquare",
       .infer = InferReduce,
       .flops = ReduceFlops,
       .saves = SavesInput0,
       .nondiff_inputs = Bits({1})},
      {.op_type = "CumSum",
       .infer = InferSameAsInput,
       .flops = ElementwiseFlops,
       .nondiff_inputs = Bits({1})},
      // Data movement: copies.
      {.op_type = "ScatterND",
       .infer = InferSameAsInput,
       .flops = ElementwiseFlops,
       .saves = SavesScatterND,
       .nondiff_inputs = Bits({1}),
       .forward_workspace = ScatterNDForwardWorkspace},
      {.op_type = "ScatterElements",
       .infer = InferSameAsInput,
       .flops = ElementwiseFlops,
       .saves = SavesScatter,
       .nondiff_inputs = Bits({1}),
       .axis_indices_input = 1},
      {.op_type = "GatherElements",
       .infer = InferGatherElements,
       .flops = ElementwiseFlops,
       .saves = SavesGather,
       .nondiff_inputs = Bits({1}),
       .axis_indices_input = 1},
      {.op_type = "GatherND",
       .infer = InferGatherND,
       .flops = ElementwiseFlops,
       .saves = SavesGatherND,
       .nondiff_inputs = Bits({1}),
       .forward_workspace = GatherNDForwardWorkspace},
      // cat's backward returns narrow() views of the incoming gradient.
      {.op_type = "Concat", .infer = InferConcat, .flops = ElementwiseFlops, .grad_is_view = true},
      {.op_type = "Gather",
       .infer = InferGather,
       .flops = ElementwiseFlops,
       .saves = SavesGather,
       .nondiff_inputs = Bits({1}),
       .axis_indices_input = 1},
      {.op_type = "Tile",
       .infer = InferTile,
       .flops = ElementwiseFlops,
       .nondiff_inputs = Bits({1})},
      {.op_type = "Pad",
       .infer = InferPad,
       .flops = ElementwiseFlops,
       .nondiff_inputs = Bits({1, 2, 3})},
      {.op_type = "Resize",
       .infer = InferResize,
       .flops = ElementwiseFlops,
       .nondiff_inputs = Bits({1, 2, 3})},
      {.op_type = "Upsample",
       .infer = InferResize,
       .flops = ElementwiseFlops,
       .nondiff_inputs = Bits({1})},
      {.op_type = "Cast",
       .infer = InferCast,
       .flops = ElementwiseFlops,
       .casts = true,
       .identity_in_training = CastIsIdentity},
      {.op_type = "CastLike",
       .infer = InferCastLike,
       .flops = ElementwiseFlops,
       .nondiff_inputs = Bits({1}),
       .casts = true},
      {.op_type = "Trilu",
       .infer = InferTrilu,
       .flops = ElementwiseFlops,
       .nondiff_inputs = Bits({1})},
      {.op_type = "TopK",
       .infer = InferTopK,
       .flops = ReduceFlops,
       .saves = SavesTopK,
       .nondiff_inputs = Bits({1})},
      // Views.
      {.op_type = "Reshape",
       .infer = InferReshape,
       .flops = NoFlops,
       .backward_factor = 0.0,
       .nondiff_inputs = Bits({1}),
       .view = V::kReshape,
       .grad_is_view = true},
      {.op_type = "Flatten",
       .infer = InferFlatten,
       .flops = NoFlops,
       .backward_factor = 0.0,
       .view = V::kReshape,
       .grad_is_view = true,
       .validate = ValidateFlatten},
      {.op_type = "Squeeze",
       .infer = InferSqueeze,
       .flops = NoFlops,
       .backward_factor = 0.0,
       .nondiff_inputs = Bits({1}),
       .view = V::kView,
       .grad_is_view = true},
      {.op_type = "Unsqueeze",
       .infer = InferUnsqueeze,
       .flops = NoFlops,
       .backward_factor = 0.0,
       .nondiff_inputs = Bits({1}),
       .view = V::kView,
       .grad_is_view = true},
      {.op_type = "Identity",
       .infer = InferUnaryEval<FId>,
       .flops = NoFlops,
       .backward_factor = 0.0,
       .view = V::kView,
       .grad_is_view = true},
      {.op_type = "Transpose",
       .infer = InferTranspose,
       .flops = NoFlops,
       .backward_factor = 0.0,
       .view = V::kStridedView,
       .grad_is_view = true},
      {.op_type = "Expand",
       .infer = InferExpand,
       .flops = NoFlops,
       .backward_factor = 0.0,
       .nondiff_inputs = Bits({1}),
       .view = V::kStridedView,
       .grad_is_view_at_same_size = true},
      {.op_type = "Slice",
       .infer = InferSlice,
       .flops = NoFlops,
       .backward_factor = 0.0,
       .nondiff_inputs = Bits({1, 2, 3, 4}),
       .view = V::kStridedView},
      {.op_type = "Split",
       .infer = InferSplit,
       .flops = NoFlops,
       .backward_factor = 0.0,
       .nondiff_inputs = Bits({1}),
       .view = V::kStridedView},
      // Attention fused back into what PyTorch runs (fusion.cc). Inputs: Q, K^T, V, an additive
      // mask (no gradient).
      {.op_type = "memplan.ScaledDotProductAttention",
       .infer = InferScaledDotProductAttention,
       .flops = AttentionFlops,
       .backward_factor = 2.5,
       .saves = SavesAttention,
       .nondiff_inputs = Bits({3}),
       .backward_workspace = AttentionWorkspace,
       .forward_workspace = AttentionForwardWorkspace,
       .compute = ComputeClass::kMatmul},
      // Losses memplan appends to the model's output.
      {.op_type = "memplan.CrossEntropyLoss",
       .infer = InferScalarLoss,
       .flops = CrossEntropyFlops,
       .saves = SavesCrossEntropy,
       .nondiff_inputs = Bits({1}),
       .backward_workspace = CrossEntropyWorkspace},
      {.op_type = "memplan.MseLoss",
       .infer = InferScalarLoss,
       .flops = ElementwiseFlops,
       .saves = SavesBothInputs,
       .nondiff_inputs = Bits({1})},
      {.op_type = "memplan.SumLoss",
       .infer = InferScalarLoss,
       .flops = ReduceFlops,
       .grad_is_view = true,
       .grad_is_broadcast = true},
      // Shape arithmetic and comparisons: no gradient.
      NoGradient("Constant", InferConstant),
      NoGradient("Shape", InferShapeOp),
      NoGradient("Size", InferSize),
      NoGradient("ConstantOfShape", InferConstantOfShape),
      NoGradient("Range", InferRange),
      NoGradient("Equal", InferBinary<FEq, true>),
      NoGradient("Less", InferBinary<FLess, true>),
      NoGradient("LessOrEqual", InferBinary<FLessEq, true>),
      NoGradient("Greater", InferBinary<FGreater, true>),
      NoGradient("GreaterOrEqual", InferBinary<FGreaterEq, true>),
      NoGradient("And", InferBinary<FAnd, true>),
      NoGradient("Or", InferBinary<FOr, true>),
      NoGradient("Not", InferUnaryEval<FNot>),
      NoGradient("Mod", InferBinary<FMod>),
      NoGradient("Floor", InferUnaryEval<FFloor>),
      NoGradient("Ceil", InferUnaryEval<FCeil>),
      NoGradient("Round", InferSameAsInput),
      NoGradient("Sign", InferSameAsInput),
      NoGradient("IsNaN", [](InferContext& c) { c.set(0, DType::kBool, c.shape(0)); }),
      NoGradient("IsInf", [](InferContext& c) { c.set(0, DType::kBool, c.shape(0)); }),
      NoGradient("ArgMax", InferArgReduce),
      NoGradient("ArgMin", InferArgReduce),
      NoGradient("NonZero", InferNonDiffInt),
      RandomSource("RandomUniformLike", InferRandomLike),
      RandomSource("RandomNormalLike", InferRandomLike),
      RandomSource("RandomUniform", InferRandom),
      RandomSource("RandomNormal", InferRandom),
      RandomSource("Bernoulli", InferBernoulli),
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

Randomness RandomnessOf(const std::string& op_type) {
  const OpRule* r = FindOpRule(op_type);
  return r ? r->random : Randomness::kNone;
}

bool PassesInputValues(const std::string& op_type) {
  const OpRule* r = FindOpRule(op_type);
  return r && (r->view != ViewKind::kNone || r->casts);
}

int AxisIndicesInput(const std::string& op_type) {
  const OpRule* r = FindOpRule(op_type);
  return r ? r->axis_indices_input : -1;
}

bool DropoutIsActive(const Node& n, const ConstValue* ratio, const ConstValue* training_mode) {
  if (n.inputs.size() > 2 && n.inputs[2] != kNone) {  // opset 12 and later
    if (!training_mode || training_mode->numel() == 0 || training_mode->at(0) == 0) return false;
  } else if (n.attr("is_test") == nullptr || n.attr_int("is_test", 0) != 0) {
    return false;  // opset 7 and later without training_mode (is_test is opsets 1 to 6's)
  }
  if (n.inputs.size() > 1 && n.inputs[1] != kNone) {
    return !(ratio && ratio->numel() > 0 && ratio->at(0) == 0);
  }
  return n.attr_float("ratio", 0.5) != 0;
}

bool DropoutIsActive(const Node& n, const std::vector<Tensor>& t) {
  auto value = [&](size_t slot) -> const ConstValue* {
    if (slot >= n.inputs.size() || n.inputs[slot] == kNone) return nullptr;
    const std::optional<ConstValue>& v = t[n.inputs[slot]].value;
    return v ? &*v : nullptr;
  };
  return DropoutIsActive(n, value(1), value(2));
}

bool IsIdentityInTraining(const OpRule& r, const Node& n, const std::vector<Tensor>& t) {
  return r.identity_in_training && r.identity_in_training(n, t);
}

bool IsIdentityInTraining(const Node& n, const std::vector<Tensor>& t) {
  const OpRule* r = FindOpRule(n.op_type);
  return r && IsIdentityInTraining(*r, n, t);
}

int InPlaceInputOf(const std::string& op_type, size_t output) {
  const OpRule* r = FindOpRule(op_type);
  return r && output < r->in_place_inputs.size() ? r->in_place_inputs[output] : kNone;
}

InitialFill InitialFillOf(const std::string& op_type, size_t input) {
  const OpRule* r = FindOpRule(op_type);
  if (!r || input >= 32) return InitialFill::kRandom;
  if (r->init_one_inputs >> input & 1u) return InitialFill::kOne;
  if (r->init_zero_inputs >> input & 1u) return InitialFill::kZero;
  return InitialFill::kRandom;
}

ComputeClass ComputeClassOf(const Node& n, const std::vector<Tensor>& t) {
  const OpRule* r = FindOpRule(n.op_type);
  if (!r) return ComputeClass::kMemory;
  // kInTraining is Dropout's fact: it draws only while active.
  if (r->random == Randomness::kAlways ||
      (r->random == Randomness::kInTraining && DropoutIsActive(n, t))) {
    return ComputeClass::kRandom;
  }
  if (r->compute == ComputeClass::kConv) {
    // Depthwise: one input channel per group, a direct scan far below the dense rate.
    const int64_t group = n.attr_int("group", 1);
    const bool known = !n.inputs.empty() && n.inputs[0] != kNone && t[n.inputs[0]].shape.size() > 1;
    if (group > 1 && known && t[n.inputs[0]].shape[1] == group) return ComputeClass::kDepthwiseConv;
  }
  // Without batch statistics a batch norm is a per-channel affine map: pointwise.
  if (r->compute == ComputeClass::kNormalization && n.op_type == "BatchNormalization" &&
      !BatchNormIsTraining(n)) {
    return ComputeClass::kMemory;
  }
  return r->compute;
}

const char* ComputeClassName(ComputeClass c) {
  switch (c) {
    case ComputeClass::kMemory:
      return "memory";
    case ComputeClass::kMatmul:
      return "matmul";
    case ComputeClass::kConv:
      return "conv";
    case ComputeClass::kDepthwiseConv:
      return "depthwise_conv";
    case ComputeClass::kNormalization:
      return "normalization";
    case ComputeClass::kPooling:
      return "pooling";
    case ComputeClass::kRandom:
      return "random";
  }
  return "memory";
}

std::vector<std::string> SupportedOpTypes() {
  std::vector<std::string> ops;
  for (const OpRule& r : AllOpRules()) ops.push_back(r.op_type);
  std::sort(ops.begin(), ops.end());
  return ops;
}

}  // namespace memplan
