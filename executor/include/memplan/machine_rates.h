// The machine's rates for the planner's roofline time model (memplan/planner.h's MachineRates),
// measured with the LibTorch the executor runs. The command line caches them per key.
#pragma once

#include <string>

#include "memplan/planner.h"

namespace memplan {

// What identifies a measurement: the host name, the device ("cpu", "cuda:0") with its thread
// count (CPU) or its name (GPU), and the LibTorch version. Throws MemplanError for a device
// this build cannot use.
std::string MachineRatesKey(const std::string& device);

// A micro-benchmark on `device` ("cpu", "cuda" or "cuda:K"), a second or two:
//   flops_per_second: the best of at::matmul on square float32 matrices of 256, 512 and 1024
//     (2 n^3 FLOPs each);
//   bytes_per_second: at::add of two 16 MiB float32 tensors into a new one (48 MiB moved), as
//     the executor runs a pointwise op (a fresh output from its allocator);
//   op_overhead_seconds: at::add on one-element tensors that require grad, with autograd on,
//     as recompute runs its ops;
//   classes: per ComputeClass, the rate of its ATen op on a mid-size shape, with autograd on
//     (matmul [512, 768] x [768, 768]; conv 3x3 64 channels on 4 x 56 x 56 for FLOPs, 1x1 32 to
//     16 channels on 4 x 112 x 112 for bytes; depthwise 3x3 96 channels on 4 x 56 x 56; batch
//     norm with batch statistics on 8 x 64 x 56 x 56; max-pool 3x3 stride 2 with indices on
//     4 x 64 x 112 x 112; a dropout's bernoulli mask and masked scale on 1M elements);
//   fresh_bytes_per_second (CPU): a copy into a new 64 MiB tensor against one into an existing
//     tensor (the page faults of memory glibc maps anew, from 32 MiB up: fresh_threshold_bytes).
// Each figure is the fastest of five timed repetitions after a warm-up (other processes on the
// machine only slow a repetition down). Throws MemplanError
// when the device cannot be used.
MachineRates MeasureMachineRates(const std::string& device);

}  // namespace memplan
