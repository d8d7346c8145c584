// The spatial attributes of ONNX's convolution and pooling ops (Conv, MaxPool, AveragePool,
// LpPool): one torch-free reader that the analyzer (the geometry cuDNN sees) and the
// executor's kernels (the ATen calls they make) share.
#pragma once

#include <cstdint>
#include <vector>

#include "memplan/training_graph.h"

namespace memplan {

// Per spatial dim (as many as the kernel has).
struct SpatialAttrs {
  std::vector<int64_t> kernel;
  std::vector<int64_t> stride;    // 'strides', default 1
  std::vector<int64_t> dilation;  // 'dilations', default 1
  // The zeros added before and after each spatial dim: 'pads' (begins, then ends; default 0),
  // or auto_pad's: SAME_UPPER and SAME_LOWER pad the total that keeps ceil(in / stride)
  // outputs, the odd one after the dim for SAME_UPPER and before it for SAME_LOWER; VALID none.
  std::vector<int64_t> pad_begin, pad_end;
  int64_t group = 1;  // 'group', default 1

  bool symmetric() const { return pad_begin == pad_end; }
};

// The kernel's spatial shape: attribute 'kernel_shape', else the weight's dims after the first
// two (`weight_shape`: empty for pooling). Empty when neither says.
std::vector<int64_t> KernelShapeOf(const Node& n, const std::vector<int64_t>& weight_shape);

// Node n's attributes for `kernel`, auto_pad resolved against `input_shape` (N, C, spatial
// dims...; its rank must be kernel.size() + 2).
SpatialAttrs ReadSpatialAttrs(const Node& n, const std::vector<int64_t>& input_shape,
                              const std::vector<int64_t>& kernel);

}  // namespace memplan
