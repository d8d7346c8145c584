#include "memplan/spatial_attrs.h"

#include <algorithm>
#include <string>

namespace memplan {

std::vector<int64_t> KernelShapeOf(const Node& n, const std::vector<int64_t>& weight_shape) {
  std::vector<int64_t> k = n.attr_ints("kernel_shape");
  if (k.empty() && weight_shape.size() > 2) k.assign(weight_shape.begin() + 2, weight_shape.end());
  return k;
}

SpatialAttrs ReadSpatialAttrs(const Node& n, const std::vector<int64_t>& input_shape,
                              const std::vector<int64_t>& kernel) {
  const size_t k = kernel.size();
  SpatialAttrs a;
  a.kernel = kernel;
  a.group = n.attr_int("group", 1);
  a.stride = n.attr_ints("strides");
  a.dilation = n.attr_ints("dilations");
  std::vector<int64_t> pads = n.attr_ints("pads");
  a.stride.resize(k, 1);
  a.dilation.resize(k, 1);
  pads.resize(2 * k, 0);
  const std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  a.pad_begin.assign(k, 0);
  a.pad_end.assign(k, 0);
  for (size_t i = 0; i < k && i + 2 < input_shape.size(); ++i) {
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const int64_t in = input_shape[i + 2], s = std::max<int64_t>(a.stride[i], 1);
      const int64_t out = (in + s - 1) / s;
      const int64_t total =
          std::max<int64_t>(0, (out - 1) * s + (kernel[i] - 1) * a.dilation[i] + 1 - in);
      const int64_t small = total / 2, big = total - small;
      a.pad_begin[i] = auto_pad == "SAME_UPPER" ? small : big;
      a.pad_end[i] = auto_pad == "SAME_UPPER" ? big : small;
    } else if (auto_pad != "VALID") {
      a.pad_begin[i] = pads[i];
      a.pad_end[i] = pads[i + k];
    }
  }
  return a;
}

}  // namespace memplan
