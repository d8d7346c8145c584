// The op kernels: each ONNX op lowered to the ATen ops whose autograd the analyzer's
// per-op rules describe (analyzer/src/op_rules_table.cc). Private to the executor.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "memplan/training_graph.h"

namespace memplan::exec {

// One call of an op: the node (attributes), its input values, and the run's mode.
struct OpCall {
  const Node* node = nullptr;
  std::vector<at::Tensor> in;  // undefined where an optional input is omitted
  int64_t opset = 17;
  const std::map<std::string, at::Tensor>* tensor_attrs = nullptr;  // TENSOR attributes
  // Batch norm updates its running statistics (false while recomputing a segment).
  bool update_running_stats = true;
  // Dropout draws its mask row by row along the batch axis, row r of the whole batch from a
  // generator seeded by (random_seed, r): a micro-batch holding rows [row_offset,
  // row_offset + batch_rows) draws exactly the full batch's values there, so micro-batched
  // plans keep the unplanned step's math. The same seed on recompute reproduces the mask.
  uint64_t random_seed = 0;
  // Whether a Dropout trains, decided by the analyzer's rule (DropoutIsActive) for a training
  // graph; unset (an ONNX test case) the kernel reads its training_mode input.
  std::optional<bool> training_mode;
  int64_t batch_row_offset = 0;
  int64_t batch_rows = 0;  // rows of the batch axis this call holds (0: unknown)

  size_t num_outputs() const { return node->outputs.size(); }
  bool want(size_t i) const { return i < node->outputs.size() && node->outputs[i] != kNone; }
  bool has(size_t i) const { return i < in.size() && in[i].defined(); }
  const at::Tensor& x(size_t i) const;  // throws when omitted
  int64_t attr_int(const char* name, int64_t fallback) const {
    return node->attr_int(name, fallback);
  }
  double attr_float(const char* name, double fallback) const {
    return node->attr_float(name, fallback);
  }
  std::vector<int64_t> attr_ints(const char* name) const { return node->attr_ints(name); }
  std::string attr_string(const char* name, const std::string& fb) const {
    return node->attr_string(name, fb);
  }
  bool has_attr(const char* name) const { return node->attr(name) != nullptr; }
  const at::Tensor* attr_tensor(const char* name) const;
  [[noreturn]] void Fail(const std::string& why) const;
};

using Kernel = std::vector<at::Tensor> (*)(const OpCall&);
using KernelTable = std::map<std::string, Kernel>;

void RegisterNnKernels(KernelTable& table);
void RegisterTensorKernels(KernelTable& table);
const KernelTable& Kernels();
const Kernel* FindKernel(const std::string& op_type);

// ---- helpers shared by the kernel files ----
std::vector<int64_t> ToInts(const at::Tensor& t);
double ToDouble(const at::Tensor& t);
int64_t NormAxis(int64_t axis, int64_t rank, const OpCall& c);
// Axes from input `slot` (newer opsets) or attribute `name` (older ones).
std::vector<int64_t> AxesArg(const OpCall& c, size_t slot, const char* name);
at::ScalarType ScalarTypeOf(DType d);  // unsigned 16/32/64 are held in wider signed types
at::ScalarType ScalarTypeOfOnnx(int onnx_elem_type);
bool DropoutActive(const OpCall& c);
uint64_t SplitMix64(uint64_t x);  // the executor's one seed mixer
// mean over `dims` whose autograd saves no tensor (see kernels_tensor.cc).
at::Tensor MeanSavingNothing(const at::Tensor& x, at::IntArrayRef dims, bool keepdim);

}  // namespace memplan::exec
