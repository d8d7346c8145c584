// The training-graph IR: what one training step of an ONNX model computes and keeps.
//
// A TrainingGraph is plain data. Tensors and nodes are indexed by TensorId / NodeId (their
// position in `tensors` / `nodes`); nodes are in a topological order. Every tensor has a
// concrete shape and dtype once loading succeeded. The per-op rules (FLOPs, what the backward
// pass saves, which outputs are views) are already applied to every node.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "memplan/cpu_device.h"

namespace memplan {

using TensorId = int32_t;
using NodeId = int32_t;
constexpr int32_t kNone = -1;

// A user-facing error: the message names the file, node or tensor and what to do.
// Names read from files may hold any bytes: control characters (NUL included) and bytes
// that are not UTF-8 are made printable (PrintableText in memplan/parse.h).
class MemplanError : public std::runtime_error {
 public:
  explicit MemplanError(const std::string& what);
};

enum class DType : int8_t {
  kUndefined,
  kFloat32,
  kFloat16,
  kBFloat16,
  kFloat64,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kUInt8,
  kUInt16,
  kUInt32,
  kUInt64,
  kBool,
  kString,
};
int64_t DTypeSize(DType dtype);
const char* DTypeName(DType dtype);
bool IsFloating(DType dtype);
DType DTypeFromOnnx(int onnx_elem_type);
int OnnxFromDType(DType dtype);

// A small tensor whose value is known at analysis time (shape arithmetic, Constant nodes).
// Integer and bool types keep `ints`, floating types keep `floats`.
struct ConstValue {
  DType dtype = DType::kUndefined;
  std::vector<int64_t> shape;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  bool is_float() const { return IsFloating(dtype); }
  int64_t numel() const;
  double at(int64_t i) const { return is_float() ? floats[i] : static_cast<double>(ints[i]); }
};

struct Attribute {
  enum class Kind { kInt, kFloat, kString, kInts, kFloats, kStrings, kTensor, kGraph };
  Kind kind = Kind::kInt;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  std::optional<ConstValue> tensor;  // set when the tensor is small enough to evaluate
};

// What a tensor is, for the memory breakdown. Gradients and optimizer state are not graph
// tensors; they appear as schedule buffers (see analyzer.h).
enum class TensorCategory { kInput, kParameter, kConstant, kActivation, kOutput };
const char* TensorCategoryName(TensorCategory c);

struct Tensor {
  TensorId id = kNone;
  std::string name;
  DType dtype = DType::kUndefined;
  std::vector<int64_t> shape;
  int64_t bytes = 0;  // numel x element size
  TensorCategory category = TensorCategory::kActivation;
  NodeId producer = kNone;
  std::vector<NodeId> consumers;  // in topological order, repeated if used twice by a node
  // The tensor whose storage this one shares (itself unless it is a view).
  TensorId storage = kNone;
  bool contiguous = true;  // false when `strides` is not row-major (transposed, expanded, sliced)
  // Element strides within its storage, as ATen would lay it out (views keep their input's
  // layout, TensorIterator ops follow their inputs' layout); empty: row-major contiguous.
  std::vector<int64_t> strides;
  bool requires_grad = false;       // depends on a parameter through differentiable ops
  bool has_gradient = false;        // requires_grad and the loss depends on it
  std::optional<ConstValue> value;  // known at analysis time (small shape tensors)

  int64_t numel() const;
  bool is_view() const { return storage != id; }
  // Alive for the whole run (inputs, parameters, constants): never an activation to free.
  bool is_persistent() const {
    return category == TensorCategory::kInput || category == TensorCategory::kParameter ||
           category == TensorCategory::kConstant;
  }
};

// A buffer the forward op allocates only for the backward pass (max-pool indices, dropout
// mask, batch-norm saved mean / inverse std, the loss's log-probabilities).
struct SavedExtra {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  int64_t bytes = 0;
};

struct Node {
  NodeId id = kNone;
  std::string name;
  std::string op_type;
  std::string domain;
  std::vector<TensorId> inputs;  // kNone where an optional input is omitted
  std::vector<TensorId> outputs;
  std::map<std::string, Attribute> attributes;

  // Filled by the op rules.
  double forward_flops = 0;
  double backward_flops = 0;
  std::vector<TensorId> saved_for_backward;  // inputs / outputs the backward op reads
  std::vector<SavedExtra> saved_extras;
  int64_t forward_workspace_bytes = 0;  // temporaries the forward op allocates and frees
  bool gradient_passes_through =
      false;  // backward hands the incoming gradient to its inputs (Add, views)
  // Bit i: input i is read through a view the kernel makes (Gemm's transposed weight), so a
  // parameter there accumulates its gradient after the node's directly read parameters.
  uint32_t inputs_read_through_view = 0;
  int64_t backward_workspace_bytes = 0;  // temporaries the backward op allocates and frees
  // The part of each workspace above that is a margin, not a prediction: the rule was not
  // verified on the graph's CPU kernels (cpu_device.h) and no calibration measured the op.
  // Planners count it (budgets hold); reports separate it (margin_bytes).
  int64_t forward_workspace_margin_bytes = 0;
  int64_t backward_workspace_margin_bytes = 0;
  bool has_backward = false;  // some input requires grad and some output has a gradient

  const Attribute* attr(const std::string& key) const;
  int64_t attr_int(const std::string& key, int64_t fallback) const;
  double attr_float(const std::string& key, double fallback) const;
  std::vector<int64_t> attr_ints(const std::string& key) const;
  std::string attr_string(const std::string& key, const std::string& fallback) const;
};

enum class LossKind { kCrossEntropy, kMse, kSum, kModelOutput };
enum class Optimizer { kSgd, kMomentum, kAdam };
const char* LossKindName(LossKind k);
const char* OptimizerName(Optimizer o);
LossKind ParseLossKind(const std::string& s);    // throws MemplanError
Optimizer ParseOptimizer(const std::string& s);  // throws MemplanError
// Optimizer state bytes per parameter byte: SGD 0, momentum 1, Adam 2.
int OptimizerStateMultiplier(Optimizer o);
// What the training loop does with parameter gradients between steps.
//   kNone: optimizer.zero_grad()'s default since PyTorch 2.0 (set_to_none=True). No gradient
//     exists during the forward pass; a parameter's first backward contribution becomes its
//     .grad (AccumulateGrad steals it: no extra buffer); gradients die after the optimizer step.
//   kKept: zero_grad(set_to_none=False). Gradients live from one step to the next and every
//     contribution is a temporary added into them in place.
enum class GradientLifetime { kNone, kKept };
const char* GradientLifetimeName(GradientLifetime l);          // "none", "kept"
GradientLifetime ParseGradientLifetime(const std::string& s);  // throws MemplanError

struct TrainingGraph {
  std::string model_path;
  std::string graph_name;
  int64_t opset = 0;
  int64_t batch = 1;
  std::map<std::string, int64_t> dims;  // every symbolic dimension and the value bound to it
  // The name of the symbolic dim that is the batch (the first input's first one; "" when it has
  // no name). `batch` is its value, from --batch or from a --dim binding of this name.
  std::string batch_dim;
  // Planning for a CUDA device: the CUDA libraries' workspaces a step keeps through the caching
  // allocator (cuBLAS and cuBLASLt, taken at the first matmul and kept; cuda_device.h). Every
  // schedule's setup step allocates them (MemoryCategory::kWorkspace). 0 on the CPU.
  int64_t library_workspace_bytes = 0;
  // The CPU kernels the workspace rules were applied for (LoadOptions::cpu_kernels).
  CpuKernels cpu_kernels;

  std::vector<Tensor> tensors;
  std::vector<Node> nodes;  // topological order; the appended loss node is last

  std::vector<TensorId> inputs;      // data inputs of the model (not initializers)
  std::vector<TensorId> parameters;  // trainable: floating initializers that feed compute
  std::vector<TensorId> outputs;     // the model's outputs
  TensorId loss = kNone;             // the scalar the backward pass starts from
  TensorId loss_target = kNone;      // the loss's extra input (class ids / regression target)
  LossKind loss_kind = LossKind::kCrossEntropy;
  Optimizer optimizer = Optimizer::kSgd;
  GradientLifetime grads = GradientLifetime::kNone;

  bool weights_present = true;  // external-data files exist (weights are never read)
  // The user allowed external data outside the model's folder (LoadOptions); readers of the
  // weights pass it to ResolveExternalData (memplan/onnx_convert.h).
  bool allow_external_data_outside_model_dir = false;
  int tensors_shaped_by_onnx = 0;   // concrete after ONNX shape inference alone
  int tensors_shaped_by_rules = 0;  // left to memplan's own rules
  // Tensors where ONNX inference and memplan's rule disagree (ONNX's answer is used).
  std::vector<std::string> shape_disagreements;
  std::vector<std::string> notes;  // things the user should know about the load

  const Tensor& tensor(TensorId id) const { return tensors.at(id); }
  const Node& node(NodeId id) const { return nodes.at(id); }
  TensorId FindTensor(const std::string& name) const;  // kNone if absent
  NodeId FindNode(const std::string& name) const;
  int64_t param_bytes() const;
  int64_t input_bytes() const;  // data inputs and the loss target
  double forward_flops() const;
  double backward_flops() const;
};

struct LoadOptions {
  int64_t batch = 1;                    // binds the first symbolic dim of every graph input
  std::map<std::string, int64_t> dims;  // binds named symbolic dims (wins over batch)
  // The same options at another batch: `batch`, and the --dim binding of g's batch dim (if any)
  // dropped so that it does not win over it (micro-batching, data-parallel ranks).
  LoadOptions AtBatch(const TrainingGraph& g, int64_t new_batch) const;
  LossKind loss = LossKind::kCrossEntropy;
  Optimizer optimizer = Optimizer::kSgd;
  GradientLifetime grads = GradientLifetime::kNone;
  // Also run the ONNX library's shape inference (opset <= 17) and take its answers where a
  // rule has none. Off by default: memplan's rules resolve every shape on their own, and
  // libonnx 1.12 crashes on malformed files (found by fuzzing), so it serves only as a test
  // oracle on trusted models.
  bool onnx_shape_inference = false;
  // Accept external data files outside the model's folder (ONNX's loader refuses them, as a
  // model from elsewhere could otherwise read any file).
  bool allow_external_data_outside_model_dir = false;
  // Fuse composite subgraphs back into the op the source model runs (erf-GELU written as
  // Div, Erf, Add, Mul, Mul becomes Gelu), as the training program that exported it runs them.
  bool fuse_composite_ops = true;
  // The CPU kernels whose workspaces the rules give (cpu_device.h); unset: this machine's
  // (CpuKernelsOfThisMachine). A device file sets them to plan for another machine.
  std::optional<CpuKernels> cpu_kernels;
  // Workspaces `memplan calibrate` measured on the device, by WorkspaceSignature: such ops take
  // the measurement, with no margin (CpuDevice::workspaces).
  std::map<std::string, MeasuredWorkspace> cpu_workspaces;
};

// The options that predict for CPU device `d`: its kernels and its measured workspaces.
void SetCpuDevice(LoadOptions& options, const CpuDevice& d);
// The op signature calibration measures and looks up: op type, dtype, input and weight shapes,
// strides, pads, dilations, group, which gradients the backward computes, and the input layout
// ("Conv float32 x[4,64,56,56] w[64,64,3,3] s[1,1] p[1,1,1,1] d[1,1] g1 grads[x,w] nchw").
// "" for ops calibration does not measure.
std::string WorkspaceSignature(const Node& n, const std::vector<Tensor>& t);
// Margins by op type: the largest forward or backward margin of a node of that type (a
// workspace is a transient of its own step, so one of them is held at a time), for reports.
std::map<std::string, int64_t> WorkspaceMarginsByOp(const TrainingGraph& g);

// Loads an ONNX model (never reads external weight data), resolves every tensor's shape,
// applies the per-op rules and appends the loss. Throws MemplanError naming the file and
// the node or tensor at fault.
TrainingGraph LoadTrainingGraph(const std::string& path, const LoadOptions& options = {});

// Protobuf parses at most 2 GiB - 1 bytes (a message's size is an int): a larger .onnx file
// cannot be read at all, and a model that big must keep its weights as external data.
constexpr int64_t kMaxOnnxFileBytes = 2147483647;
// Throws MemplanError, naming `path` and saying to store the weights as external data, when
// `size` exceeds kMaxOnnxFileBytes. LoadTrainingGraph checks the file's size before reading it.
void CheckOnnxFileSize(const std::string& path, int64_t size);

// The same from serialized ModelProto bytes (tests build models in memory).
TrainingGraph LoadTrainingGraphFromBytes(const std::string& bytes, const std::string& name,
                                         const LoadOptions& options = {});

// Whether a Dropout node drops anything in training, by ONNX's Dropout across its opsets:
//   opset 12 and later: the training_mode input (2) holds true; omitted, it is false;
//   opsets 7 to 11: never (the graph has no training switch; ONNX's reference implementation
//     and ONNX Runtime run these as inference);
//   opsets 1 to 6: the is_test attribute is 0. (Its default is 0, but without the opset a
//     node cannot tell a Dropout-6 that omits it from a Dropout-7: omitted, it reads as
//     inference.)
// and the ratio (input 1 from opset 12, else attribute 'ratio'; default 0.5) is not 0. `ratio`
// and `training_mode` are those inputs' values, nullptr where unknown: an unknown mode is
// inference, an unknown ratio is not 0. The one rule the analyzer and the executor follow (an
// inactive Dropout is the identity; its mask, if wanted, is a fresh all-true tensor).
bool DropoutIsActive(const Node& n, const ConstValue* ratio, const ConstValue* training_mode);
// The same with the values known at analysis time (Tensor::value).
bool DropoutIsActive(const Node& n, const std::vector<Tensor>& t);

// Whether a BatchNormalization node runs in training mode (batch statistics, running
// statistics updated, save_mean / save_invstd saved): training_mode set, or the running-
// statistics outputs wanted without it (opset < 14). The op fact the analyzer (what backward
// saves) and the executor (which kernel runs) both follow.
bool BatchNormIsTraining(const Node& n);

// Op facts from the rule table that the executor reads as well as the analyzer. An op without
// a rule has none of them (kNone, false, -1, kRandom).
//
// Whether the op draws random numbers: always (RandomUniform, Bernoulli, ...), or only when it
// trains (Dropout, see DropoutIsActive). The executor seeds such a node per step so that a
// recompute or a micro-batch draws the forward's values.
enum class Randomness { kNone, kAlways, kInTraining };
Randomness RandomnessOf(const std::string& op_type);
// Whether the values of input 0 reach the op's outputs unchanged but for their layout or
// dtype: views (Reshape, Transpose, Slice, Split, ...) and casts.
bool PassesInputValues(const std::string& op_type);
// The input that holds indices into input 0 along the node's attribute 'axis' (Gather,
// GatherElements, ScatterElements), or -1: such indices lie in [0, input 0's dim 'axis').
int AxisIndicesInput(const std::string& op_type);
// Whether the node runs as the identity in training (an inactive Dropout, a Cast to its own
// dtype): output 0 is input 0 itself (an alias), other wanted outputs are new tensors, and no
// autograd node exists, so the input's gradient is the output's gradient and nothing is saved.
bool IsIdentityInTraining(const Node& n, const std::vector<Tensor>& t);
// The input that output `output` of an op of this type is, updated in place (batch norm's
// running mean and variance: outputs 1 and 2 are inputs 3 and 4), or -1: a new tensor.
int InPlaceInputOf(const std::string& op_type, size_t output);
// What a freshly initialised model holds in input `input` of a node of this type, as torch.nn
// initialises it: one (normalisation scales, running variances), zero (shifts, running means),
// or random values (every other weight).
enum class InitialFill { kRandom, kOne, kZero };
InitialFill InitialFillOf(const std::string& op_type, size_t input);

// Which kind of kernel runs a node's forward, for a time model that prices each kind at its
// own measured rate: the same FLOPs take very different times in a blocked matmul, a direct
// convolution, a depthwise one or a window scan.
//   kMemory: pointwise, data movement, reductions, softmax, layer norm (bound by bandwidth);
//   kMatmul: MatMul, Gemm, Einsum;
//   kConv: Conv, ConvTranspose;
//   kDepthwiseConv: a Conv whose group count equals its input channels (> 1);
//   kNormalization: batch and instance norm with batch statistics (a reduction per channel
//     across the batch and the map, then the normalisation);
//   kPooling: MaxPool, AveragePool (a window scan per output);
//   kRandom: an op that draws random numbers in this node (an active Dropout, RandomUniform,
//     Bernoulli, ...): the generator's rate per element.
// An op without a rule is kMemory.
enum class ComputeClass {
  kMemory,
  kMatmul,
  kConv,
  kDepthwiseConv,
  kNormalization,
  kPooling,
  kRandom
};
constexpr int kNumComputeClasses = 7;
ComputeClass ComputeClassOf(const Node& n, const std::vector<Tensor>& t);
const char* ComputeClassName(ComputeClass c);  // "memory", "matmul", "conv", "depthwise_conv", ...

// The nodes `pick` selects, grouped by op type, as error messages name them:
// "op A (node 'a1' and 2 more); op B (node 'b1')". Empty when none is picked.
std::string DescribeNodesByOp(const TrainingGraph& g, const std::function<bool(const Node&)>& pick);

// Op types the rule table knows, sorted.
std::vector<std::string> SupportedOpTypes();

}  // namespace memplan
