// The one table of per-op rules: shape fallback (with constant evaluation for shape
// arithmetic), FLOPs, what the backward pass saves, and which outputs are views.
// This is what the rest of the analyzer reads; the rules themselves live in op_*.cc, listed in
// op_rules_internal.h.
//
// Saved-for-backward mirrors LibTorch autograd (2.11 to 2.14) for the ATen op the executor
// lowers each ONNX op to (tools/autograd/derivatives.yaml); that is what makes predictions match
// runs.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "memplan/training_graph.h"

namespace memplan {

// The model breaks its op's definition (an attribute out of range, channels that do not
// match, a shape computation that overflows): unlike a rule that cannot work out a shape,
// which falls back to ONNX's answer, this always fails the load.
class InvalidModelError : public MemplanError {
 public:
  using MemplanError::MemplanError;
};

// Attribute values beyond this are refused: LibTorch and oneDNN take 32-bit sizes here.
constexpr int64_t kMaxSizeAttribute = 2147483647;

// What a shape rule reads and writes. Input shapes are concrete when a rule runs.
class InferContext {
 public:
  InferContext(const Node& node, std::vector<Tensor>& tensors) : node_(node), tensors_(tensors) {}
  const Node& node() const { return node_; }
  size_t num_inputs() const { return node_.inputs.size(); }
  bool has(size_t i) const { return i < node_.inputs.size() && node_.inputs[i] != kNone; }
  const Tensor& in(size_t i) const;
  const std::vector<int64_t>& shape(size_t i) const { return in(i).shape; }
  DType dtype(size_t i) const { return in(i).dtype; }
  int64_t rank(size_t i) const { return static_cast<int64_t>(in(i).shape.size()); }
  // Whether input i is present with a concrete shape and dtype.
  bool known(size_t i) const;
  const ConstValue* value(size_t i) const;
  // Throws: the rule cannot proceed without a constant input (names node and input).
  const ConstValue& need_value(size_t i) const;
  // A constant input that must be one value (Range's start, TopK's k), or a list of integers
  // (shapes, axes, pads): a constant of another rank, size or type is an invalid model.
  const ConstValue& need_scalar(size_t i) const;
  std::vector<int64_t> need_ints(size_t i) const;
  size_t num_outputs() const { return node_.outputs.size(); }
  bool has_output(size_t i) const { return i < node_.outputs.size() && node_.outputs[i] != kNone; }
  void set(size_t out, DType dtype, std::vector<int64_t> shape);
  void set_value(size_t out, ConstValue v);  // also sets shape and dtype
  // The rule cannot work out the shape (ONNX's answer is used when it has one).
  [[noreturn]] void fail(const std::string& why) const;
  // The node breaks its op's definition: throws InvalidModelError naming the node.
  [[noreturn]] void reject(const std::string& why) const;

 private:
  const Node& node_;
  std::vector<Tensor>& tensors_;
};

// Which inputs and outputs the backward op reads, and the extra buffers it needs.
struct SaveSpec {
  std::vector<int> inputs;
  std::vector<int> outputs;
  std::vector<SavedExtra> extras;
};

// How output 0 relates to input 0's storage.
enum class ViewKind {
  kNone,         // a new tensor
  kView,         // always a view, keeps contiguity (squeeze, unsqueeze, identity)
  kReshape,      // at::reshape: a view when computeStride finds strides for it, else a copy
  kStridedView,  // a view with its own strides (transpose, expand, slice, split)
};

using InferFn = void (*)(InferContext&);
using FlopsFn = double (*)(const Node&, const std::vector<Tensor>&);
using SaveFn = void (*)(const Node&, const std::vector<Tensor>&,
                        const std::vector<bool>& input_needs_grad, SaveSpec&);
// Workspaces depend on the CPU kernels (oneDNN's ISA, LibTorch's threads): cpu_device.h.
using WorkspaceFn = int64_t (*)(const Node&, const std::vector<Tensor>&, const CpuKernels&);
// What a workspace rule may fall short by on kernels it was not verified on (0 where verified).
struct WorkspaceMargin {
  int64_t forward_bytes = 0;
  int64_t backward_bytes = 0;
};
using MarginFn = WorkspaceMargin (*)(const Node&, const std::vector<Tensor>&, const CpuKernels&);
using InputMaskFn = uint32_t (*)(const Node&);  // bit i: input i
using NodeFactFn = bool (*)(const Node&, const std::vector<Tensor>&);
// Checks a node against its op's definition, as ONNX's checker and its type constraints do:
// attribute values, input ranks, channel counts, dtypes. Checks what the known inputs allow
// (InferContext::known); calls reject() on a violation. Runs before ONNX's shape inference
// (only graph inputs and initializers are known then) and again before the shape rule.
using ValidateFn = void (*)(const InferContext&);

// One op type's rule. The table (op_rules_table.cc) names the fields it sets; the others keep
// these defaults.
struct OpRule {
  const char* op_type = nullptr;
  InferFn infer = nullptr;       // required
  FlopsFn flops = nullptr;       // required
  double backward_factor = 1.0;  // backward FLOPs / forward FLOPs
  SaveFn saves = nullptr;        // nullptr: saves nothing
  // What the op's CUDA kernel saves where it differs from the CPU's (PrepareGraphForCuda).
  SaveFn saves_on_cuda = nullptr;
  // Bit o: the kernel makes output o only when something reads it (Dropout's mask: PyTorch's
  // dropout returns none). An export names such an output all the same; the loader drops it.
  uint32_t outputs_made_when_read = 0;
  uint32_t nondiff_inputs = 0;  // bit i set: input i never receives a gradient
  ViewKind view = ViewKind::kNone;
  bool grad_is_view = false;  // backward hands back a view of the incoming gradient
  // Backward hands back the incoming gradient expanded to the input's shape (sum's backward):
  // a broadcast view, stride 0 along the reduced axes. Implies grad_is_view.
  bool grad_is_broadcast = false;
  // Backward reduces the gradient of an input the forward broadcast (add's sum_to): that input
  // gets a new tensor, not a broadcast view, even where the incoming gradient is one.
  bool grad_reduces_broadcast_inputs = false;
  // Backward reduces the incoming gradient to the input's shape (expand's sum_to), which is a
  // no-op handing on the incoming gradient itself when the input has the output's size.
  bool grad_is_view_at_same_size = false;
  // Backward makes a contiguous copy of an incoming gradient that is a broadcast view (the BLAS,
  // oneDNN and vectorised kernels of mm, addmm, convolution, gelu, softmax, layer norm and
  // pooling backward need real strides): a temporary of the output's size during the backward.
  // Measured with LibTorch's counting allocator; elementwise (TensorIterator) backward ops,
  // batch and instance norm, einsum and the reductions read it as it is.
  bool copies_broadcast_grad = false;
  // Backward makes a contiguous copy of an incoming gradient that is a strided (permuted) view:
  // convolution's, measured with LibTorch's counting allocator.
  bool copies_strided_grad = false;
  // The kernel hands these inputs to its ATen op through a view it makes (Gemm's transA and
  // transB: t()). A parameter there gets its gradient through that view's backward, so its
  // AccumulateGrad runs after those of the op's directly read parameters (which autograd runs
  // first); data-parallel buckets complete in that order.
  InputMaskFn inputs_read_through_view = nullptr;
  bool differentiable = true;  // false: outputs never require grad (shape ops, comparisons)
  WorkspaceFn backward_workspace = nullptr;  // bytes the backward op holds temporarily
  ValidateFn validate = nullptr;             // nullptr: nothing beyond the shape rule's checks
  // Bytes the forward op holds temporarily (in every mode: with autograd, without it while a
  // plan's early segments run, and when recomputing).
  WorkspaceFn forward_workspace = nullptr;
  // The margins kept beside the workspaces above where their rules are unverified (nullptr: the
  // rules hold on every CPU).
  MarginFn workspace_margin = nullptr;
  // Facts the executor reads too (training_graph.h's RandomnessOf, PassesInputValues,
  // AxisIndicesInput, InitialFillOf, IsIdentityInTraining, InPlaceInputOf).
  Randomness random = Randomness::kNone;
  // Output 0 is input 0 converted element by element to another dtype (its values pass through
  // as views' do).
  bool casts = false;
  // Whether the node runs as the identity in training (an inactive Dropout, a Cast to its own
  // dtype): output 0 is input 0 itself, other wanted outputs are new tensors, and no autograd
  // node exists, so input 0's gradient is output 0's gradient and nothing is saved.
  // training_graph.h's IsIdentityInTraining. nullptr: never.
  NodeFactFn identity_in_training = nullptr;
  int axis_indices_input = -1;    // input holding indices into input 0 along attribute 'axis'
  uint32_t init_one_inputs = 0;   // bit i set: a fresh model holds input i at one (a scale, a
                                  // running variance), as torch.nn initialises it
  uint32_t init_zero_inputs = 0;  // bit i set: ... at zero (a shift, a running mean)
  // Outputs that are inputs updated in place (batch norm's running statistics): output o is
  // input in_place_inputs[o], or kNone (-1). training_graph.h's InPlaceInputOf.
  std::array<int8_t, 4> in_place_inputs = {-1, -1, -1, -1};
  // The kernel kind that prices the forward (training_graph.h's ComputeClassOf, which also
  // decides per node: depthwise convolutions, batch norm without batch statistics, random ops).
  ComputeClass compute = ComputeClass::kMemory;
};

// Sets n's saved_for_backward and saved_extras from `saves` (the rule's, or its saves_on_cuda):
// nothing when n has no backward or runs as the identity.
void ApplySaves(Node& n, const std::vector<Tensor>& t, const OpRule& r, SaveFn saves);

// Runs the node's ValidateFn (if its op has a rule and the rule one).
void ValidateNode(const Node& node, std::vector<Tensor>& tensors);

// The rule's identity_in_training for node n (false when the rule has none).
bool IsIdentityInTraining(const OpRule& r, const Node& n, const std::vector<Tensor>& t);

// nullptr when the op has no rule.
const OpRule* FindOpRule(const std::string& op_type);
const std::vector<OpRule>& AllOpRules();

int64_t Numel(const std::vector<int64_t>& shape);
// The element count, or false when a dimension is negative or the count overflows int64.
bool CheckedNumel(const std::vector<int64_t>& shape, int64_t* numel);

// Row-major strides of `shape`; a tensor's strides (its own, or these when it has none).
std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& shape);
std::vector<int64_t> StridesOf(const Tensor& t);
bool IsContiguousLayout(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides);
// c10 is_channels_last_strides_2d (4-D): what suggest_memory_format() calls ChannelsLast.
bool IsChannelsLastLayout(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides);
// ATen's computeStride (TensorUtils.cpp): the strides of `new_shape` as a view of a tensor of
// `shape` and `strides`, or false when no view can express it (reshape then copies).
bool ViewStrides(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                 const std::vector<int64_t>& new_shape, std::vector<int64_t>* new_strides);
// Whether ops of this type produce their output through TensorIterator, whose output
// follows the layout (stride order) of non-contiguous inputs.
bool FollowsInputLayout(const std::string& op_type);
// Strides TensorIterator gives a new output of `out_shape` computed from `inputs`.
std::vector<int64_t> TensorIteratorStrides(const std::vector<int64_t>& out_shape,
                                           const std::vector<const Tensor*>& inputs);
std::string ShapeString(const std::vector<int64_t>& shape);  // negative (unknown) dims as '?'
std::string IntList(const std::vector<int64_t>& values);     // "[-1, 0, 2]"

}  // namespace memplan
