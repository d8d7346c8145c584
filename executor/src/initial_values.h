// The values a run starts from: constants the analyzer evaluated, weights read from the model,
// or deterministic random weights.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "memplan/training_graph.h"
#include "tensor_io.h"

namespace memplan::exec {

at::Tensor FromConstValue(const ConstValue& v);

// A parameter's or constant's first value: read from the model (its file or external data), or
// with `random_weights` (or when the data is missing and `random_weights` allows it) drawn
// deterministically from (seed, name): fan-in uniform for weights, ones for normalization
// scales and running variances, zeros for shifts and means. `random` says which.
at::Tensor InitialValue(const TrainingGraph& g, const Tensor& t, const ModelData& model,
                        bool random_weights, uint64_t seed, bool* random);

}  // namespace memplan::exec
