#include "initial_values.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>

#include "kernels.h"
#include "memplan/hash.h"
#include "memplan/onnx_convert.h"

namespace memplan::exec {

at::Tensor FromConstValue(const ConstValue& v) {
  at::ScalarType st = ScalarTypeOf(v.dtype);
  if (v.is_float()) {
    return at::tensor(v.floats, at::TensorOptions().dtype(at::kDouble)).to(st).reshape(v.shape);
  }
  return at::tensor(v.ints, at::TensorOptions().dtype(at::kLong)).to(st).reshape(v.shape);
}

at::Tensor InitialValue(const TrainingGraph& g, const Tensor& t, const ModelData& model,
                        bool random_weights, uint64_t seed, bool* random) {
  *random = false;
  auto it = model.initializers.find(t.name);
  bool readable = it != model.initializers.end();
  if (readable && IsExternal(*it->second)) {
    readable = std::ifstream(ResolveExternalData(*it->second, model.dir, t.name,
                                                 g.allow_external_data_outside_model_dir)
                                 .path)
                   .good();
  }
  bool is_param = t.category == TensorCategory::kParameter;
  if (readable && !(is_param && random_weights)) {
    return TensorFromProto(*it->second, model.dir, t.name, g.allow_external_data_outside_model_dir);
  }
  if (!random_weights) {
    throw MemplanError(
        g.model_path + ": the weights of '" + t.name +
        "' are not available (external data file missing); run with --random-weights to train with "
        "deterministic random weights");
  }
  // Deterministic initialisation by name: fan-in uniform for weights; normalization scales
  // one, shifts zero; running variances one, means zero.
  *random = true;
  at::ScalarType st = ScalarTypeOf(t.dtype);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(SplitMix64(seed ^ Fnv1aOf(t.name)));
  for (NodeId c : t.consumers) {
    const Node& n = g.nodes[c];
    for (size_t s = 0; s < n.inputs.size(); ++s) {
      if (n.inputs[s] != t.id) continue;
      InitialFill fill = InitialFillOf(n.op_type, s);
      if (fill == InitialFill::kOne) return at::ones(t.shape, at::TensorOptions().dtype(st));
      if (fill == InitialFill::kZero) return at::zeros(t.shape, at::TensorOptions().dtype(st));
    }
  }
  if (!IsFloating(t.dtype)) return at::zeros(t.shape, at::TensorOptions().dtype(st));
  int64_t fan_in = t.shape.size() >= 2 && t.shape[0] > 0 ? t.numel() / t.shape[0]
                                                         : std::max<int64_t>(t.numel(), 1);
  double bound = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(fan_in, 1)));
  return at::empty(t.shape, at::TensorOptions().dtype(at::kFloat))
      .uniform_(-bound, bound, gen)
      .to(st);
}

}  // namespace memplan::exec
