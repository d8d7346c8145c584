// What the pieces of the op rule table share (namespace memplan::rules). Only the files that
// define rules include this; the rest of the analyzer reads the table through op_rules.h.
//
//   const_eval.cc      constant values: evaluating shape arithmetic (Shape, Range, Add, ...)
//   op_shapes.cc       shape rules: elementwise, reshape and view ops, data movement
//   op_shapes_nn.cc    shape rules: conv, pooling, normalization, matmul, reductions, losses
//   op_flops.cc        forward FLOPs
//   op_saves.cc        what backward saves (LibTorch derivatives.yaml, 2.11 to 2.14)
//   op_workspaces.cc   temporary bytes an op holds inside its forward or backward
//   op_validate.cc     checks against the ONNX op definitions
//   op_layout.cc       ATen strides: views, TensorIterator outputs
//   infer_context.cc   InferContext, element counts and shape strings
//   op_rules_table.cc  the table: one OpRule per op type
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "op_rules.h"

namespace memplan::rules {

// ---- const_eval.cc ----

// Values larger than this are not tracked: they are data, not shape arithmetic.
constexpr int64_t kMaxTrackedElements = 1 << 16;

// Index of `flat` (in `out` shape) into a tensor of `shape` broadcast to `out`.
int64_t BroadcastIndex(int64_t flat, const std::vector<int64_t>& out,
                       const std::vector<int64_t>& shape);
// A value of `shape` small enough to evaluate.
bool Trackable(const std::vector<int64_t>& shape);
// A zero value of `dtype` and `shape`; throws InvalidModelError when it is too large.
ConstValue MakeValue(DType dtype, std::vector<int64_t> shape);
// Stores x at flat index i, converted to v's dtype (throws when an integer overflows).
void Put(ConstValue& v, int64_t i, double x);
// Whether each of the first n inputs that is present has a constant value.
bool AllValues(const InferContext& c, size_t n);

// Elementwise ops that evaluate constant inputs (else they only set the shape).
using Unary = double (*)(double);
using Binary = double (*)(double, double);
void InferUnaryImpl(InferContext& c, Unary f);
void InferBinaryImpl(InferContext& c, Binary f, bool to_bool);
template <Unary F>
void InferUnaryEval(InferContext& c) {
  InferUnaryImpl(c, F);
}
template <Binary F, bool ToBool = false>
void InferBinary(InferContext& c) {
  InferBinaryImpl(c, F, ToBool);
}
double FNeg(double x);
double FAbs(double x);
double FFloor(double x);
double FCeil(double x);
double FSqrt(double x);
double FNot(double x);
double FId(double x);
double FAdd(double a, double b);
double FSub(double a, double b);
double FMul(double a, double b);
double FPow(double a, double b);
double FEq(double a, double b);
double FLess(double a, double b);
double FLessEq(double a, double b);
double FGreater(double a, double b);
double FGreaterEq(double a, double b);
double FAnd(double a, double b);
double FOr(double a, double b);
double FMod(double a, double b);

void InferDiv(InferContext& c);
void InferWhere(InferContext& c);
void InferConstant(InferContext& c);
void InferShapeOp(InferContext& c);
void InferSize(InferContext& c);
void InferCast(InferContext& c);
void InferConstantOfShape(InferContext& c);
void InferRange(InferContext& c);

// Whether the executor's attention copies K (K^T transposed back is not contiguous): op_saves.cc.
bool AttentionCopiesK(const Tensor& kt);

// ---- op_shapes.cc ----

// `axis` in [-rank, rank) made non-negative; fails outside it.
int64_t NormAxis(int64_t axis, int64_t rank, const InferContext& c);
// Numpy broadcasting of two shapes; fails when they do not broadcast.
std::vector<int64_t> Broadcast(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                               const InferContext& c);
// Axes from input `input` when present (newer opsets), else from attribute `attr_name`.
std::vector<int64_t> AxesInput(const InferContext& c, const char* attr_name, size_t input);

void InferSameAsInput(InferContext& c);
void InferVariadic(InferContext& c);
void InferCastLike(InferContext& c);
void InferUnsqueeze(InferContext& c);
void InferSqueeze(InferContext& c);
void InferConcat(InferContext& c);
void InferGather(InferContext& c);
void InferSlice(InferContext& c);
void InferReshape(InferContext& c);
void InferFlatten(InferContext& c);
void InferTranspose(InferContext& c);
void InferExpand(InferContext& c);
void InferTile(InferContext& c);
void InferSplit(InferContext& c);
void InferPad(InferContext& c);
void InferGatherElements(InferContext& c);
void InferTrilu(InferContext& c);
void InferGatherND(InferContext& c);

// ---- op_shapes_nn.cc ----

void InferReduce(InferContext& c);
void InferArgReduce(InferContext& c);
void InferConv(InferContext& c);
void InferConvTranspose(InferContext& c);
void InferPool(InferContext& c);
void InferGlobalPool(InferContext& c);
void InferBatchNorm(InferContext& c);
void InferLayerNorm(InferContext& c);
void InferDropout(InferContext& c);
void InferMatMul(InferContext& c);
void InferGemm(InferContext& c);
void InferResize(InferContext& c);
void InferTopK(InferContext& c);
void InferEinsum(InferContext& c);
void InferRandomLike(InferContext& c);
void InferRandom(InferContext& c);
void InferBernoulli(InferContext& c);
void InferNonDiffInt(InferContext& c);
void InferScalarLoss(InferContext& c);
void InferScaledDotProductAttention(InferContext& c);
void InferRmsNorm(InferContext& c);

// ---- op_flops.cc ----

// Each of these is a FlopsFn: a node's forward FLOPs.
using FlopsRule = std::remove_pointer_t<FlopsFn>;
FlopsRule NoFlops, ElementwiseFlops, TranscendentalFlops, NormFlops, SoftmaxFlops, ReduceFlops;
FlopsRule ConvFlops, ConvTransposeFlops, MatMulFlops, GemmFlops, PoolFlops, EinsumFlops;
FlopsRule CrossEntropyFlops, AttentionFlops;

// ---- op_saves.cc ----

// Whether a BatchNormalization node runs in training mode (batch statistics).

// Each of these is a SaveFn: it fills the SaveSpec for a node.
using SaveRule = std::remove_pointer_t<SaveFn>;
SaveRule SavesInputs01, SavesInput0, SavesOutput0, SavesBothInputs, SavesInputAndOutput;
SaveRule SavesOtherOperand, SavesMatMul, SavesGemm, SavesDiv, SavesPow, SavesWhere;
SaveRule SavesGather, SavesGatherND, SavesRmsNorm, SavesSwish, SavesAttention, SavesScatter,
    SavesScatterND, SavesTopK, SavesMaxPool, SavesDropout, SavesDropoutOnCuda;
SaveRule SavesBatchNorm, SavesLayerNorm, SavesInstanceNorm, SavesCrossEntropy;

// ---- op_workspaces.cc ----

// Each of these is a WorkspaceFn: bytes a node holds temporarily.
using WorkspaceRule = std::remove_pointer_t<WorkspaceFn>;
WorkspaceRule LayerNormWorkspace, ConvWorkspace, ConvForwardWorkspace, ErfWorkspace, ClipWorkspace,
    RmsNormWorkspace, RmsNormForwardWorkspace, GatherNDForwardWorkspace, ScatterNDForwardWorkspace,
    AttentionWorkspace, AttentionForwardWorkspace;
WorkspaceRule BatchNormWorkspace, BroadcastGradWorkspace, CrossEntropyWorkspace;
WorkspaceMargin ConvWorkspaceMargin(const Node& n, const std::vector<Tensor>& t,
                                    const CpuKernels& k);

// ---- op_validate.cc ----

void ValidateConv(const InferContext& c);
void ValidateConvTranspose(const InferContext& c);
void ValidatePool(const InferContext& c);
void ValidateFlatten(const InferContext& c);
void ValidateLayerNorm(const InferContext& c);
void ValidateContraction(const InferContext& c);

}  // namespace memplan::rules
