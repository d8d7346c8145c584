// ATen's layout facts: strides of views and of TensorIterator outputs.
#include <algorithm>

#include "op_rules.h"

namespace memplan {

std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

std::vector<int64_t> StridesOf(const Tensor& t) {
  return t.strides.size() == t.shape.size() ? t.strides : ContiguousStrides(t.shape);
}

// c10 is_contiguous: size-1 dims may have any stride.
bool IsContiguousLayout(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  if (strides.size() != shape.size()) return true;
  int64_t expected = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    if (shape[d] == 0) return true;
    if (shape[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

bool IsChannelsLastLayout(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  if (shape.size() != 4 || strides.size() != 4 || strides[1] == 0) return false;
  int64_t min = 0;
  for (int d : {1, 3, 2, 0}) {
    if (shape[d] == 0 || strides[d] < min) return false;
    if (d == 0 && min == strides[1]) return false;  // ambiguous N111 / N11W: NCHW
    min = strides[d];
    if (shape[d] > 1) min *= shape[d];
  }
  return true;
}

// Mirrors at::detail::computeStride_impl (LibTorch TensorUtils.cpp): old dims are cut
// into chunks that are contiguous among themselves; each chunk must be covered exactly by
// a run of new dims, which then take strides inside the chunk.
bool ViewStrides(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                 const std::vector<int64_t>& new_shape, std::vector<int64_t>* new_strides) {
  std::vector<int64_t> out(new_shape.size(), 1);
  if (shape.empty()) {
    *new_strides = out;
    return true;
  }
  if (Numel(shape) == 0) {
    *new_strides = ContiguousStrides(new_shape);
    return true;
  }
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = strides.back(), tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= shape[d];
    if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return false;
  *new_strides = out;
  return true;
}

bool FollowsInputLayout(const std::string& op_type) {
  static const char* const kOps[] = {"Add", "Sub", "Mul", "Div", "Pow", "Where", "Relu",
                                     "LeakyRelu", "Sigmoid", "Tanh", "Erf", "Exp", "Log", "Sqrt",
                                     "Reciprocal", "Neg", "Abs", "Clip", "Sin", "Cos", "Elu",
                                     "Selu", "Celu", "HardSigmoid", "HardSwish", "Softplus",
                                     "Softsign", "Gelu", "Mish", "Swish", "RMSNormalization",
                                     // oneDNN's convolution writes channels-last output for a
                                     // channels-last input (mkldnn_conv_use_channels_last); the
                                     // input's distinct strides decide, never the weight's.
                                     "Conv",
                                     // Flash attention's output takes the query's layout (its
                                     // other inputs are not considered: training_graph.cc).
                                     "memplan.ScaledDotProductAttention"};
  for (const char* o : kOps)
    if (op_type == o) return true;
  return false;
}

// TensorIteratorBase (LibTorch): when all inputs are contiguous and of the output's
// shape (fast setup), or all share one dense layout, the output takes it; otherwise
// reorder_dimensions sorts the dims by the inputs' strides (the first input whose strides
// differ decides, broadcast dims are skipped, equal strides put the smaller dim inner) and
// the output is dense in that order.
std::vector<int64_t> TensorIteratorStrides(const std::vector<int64_t>& out_shape,
                                           const std::vector<const Tensor*>& inputs) {
  const int64_t nd = static_cast<int64_t>(out_shape.size());
  std::vector<std::vector<int64_t>> st;  // per input, strides broadcast to out_shape (0: broadcast)
  bool all_contiguous_same_shape = true;
  for (const Tensor* t : inputs) {
    std::vector<int64_t> in = StridesOf(*t);
    if (t->shape != out_shape)
      all_contiguous_same_shape = false;
    else if (!IsContiguousLayout(t->shape, in))
      all_contiguous_same_shape = false;
    std::vector<int64_t> b(nd, 0);
    int64_t off = nd - static_cast<int64_t>(t->shape.size());
    for (int64_t d = 0; d < static_cast<int64_t>(t->shape.size()); ++d) {
      b[off + d] = (t->shape[d] == 1 && out_shape[off + d] != 1) ? 0 : in[d];
    }
    st.push_back(b);
  }
  if (all_contiguous_same_shape || nd <= 1) return ContiguousStrides(out_shape);
  std::vector<int64_t> perm(nd);  // innermost first
  for (int64_t i = 0; i < nd; ++i) perm[i] = nd - 1 - i;
  auto should_swap = [&](int64_t d0, int64_t d1) {
    for (const std::vector<int64_t>& s : st) {
      int64_t s0 = s[d0], s1 = s[d1];
      if (s0 == 0 || s1 == 0) continue;
      if (s0 < s1) return -1;
      if (s0 > s1) return 1;
      if (out_shape[d0] > out_shape[d1]) return 1;
    }
    return 0;
  };
  for (int64_t i = 1; i < nd; ++i) {
    int64_t d1 = i;
    for (int64_t d0 = i - 1; d0 >= 0; --d0) {
      int c = should_swap(perm[d0], perm[d1]);
      if (c > 0) {
        std::swap(perm[d0], perm[d1]);
        d1 = d0;
      } else if (c < 0)
        break;
    }
  }
  std::vector<int64_t> out(nd);
  int64_t running = 1;
  for (int64_t i = 0; i < nd; ++i) {
    out[perm[i]] = running;
    running *= out_shape[perm[i]];
  }
  return out;
}

}  // namespace memplan
