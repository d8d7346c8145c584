// The executor: trains a TrainingGraph with LibTorch, following a segmentation (a plan's
// `segments`) with recompute, while a meter measures the memory really allocated.
//
// No LibTorch type appears here: users of this header (the command line, tests) compile
// without LibTorch's headers.
//
// Execution semantics are those of planner/include/memplan/plan.h:
//   - forward of segments 0..K-2 without autograd, keeping only tensors a later segment
//     reads (checkpoints); the last segment (with the loss) runs with autograd;
//   - backward of the last segment, then for k = K-2..0: recompute segment k with autograd
//     from its checkpointed inputs, back-propagate the gradients its outputs received;
//   - random ops (dropout, RandomUniformLike, ...) draw from a generator seeded per
//     (seed, step, node), so that recompute reproduces the masks of the first forward and a
//     plan reproduces the plain step exactly;
//   - batch-norm running statistics are updated once per step (never during recompute);
//   - with micro-batches, each micro-batch runs the above and gradients accumulate.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "memplan/cuda_device.h"
#include "memplan/plan.h"
#include "memplan/profiler.h"
#include "memplan/training_graph.h"

namespace memplan {

// What one training step measured.
struct StepStats {
  int64_t step = 0;  // 0-based
  double loss = 0;
  double seconds = 0;               // wall time of the whole step
  double recompute_seconds = 0;     // time spent re-running forward segments
  double comm_seconds = 0;          // data parallelism: time in the collectives (0 on one device)
  int64_t peak_bytes = 0;           // allocator bytes alive at the step's peak
  int64_t reserved_peak_bytes = 0;  // CUDA: caching-allocator reserved peak; CPU: = peak_bytes
  // Offload: the pinned host bytes alive at the step's host peak, and the seconds the compute
  // stream waited for copies (CPU with emulated link rates; 0 on CUDA, where the device waits).
  int64_t host_peak_bytes = 0;
  double stall_seconds = 0;
};

// Bytes alive after one event of the step (for op-by-op comparison with the simulator).
struct TraceEvent {
  std::string phase;  // "setup", "forward", "loss", "backward", "recompute", "optimizer"
  NodeId node = kNone;
  std::string op;           // the autograd function, for backward events
  int64_t bytes_after = 0;  // allocator bytes alive after the event
  int64_t peak_during = 0;  // highest allocator bytes seen during the event
  // Forward, loss and recompute events: the activations (and views of them) the executor
  // holds after the node, sorted. Autograd's saved tensors are not among them.
  std::vector<TensorId> held;
};

// One rank of a data-parallel run (plan.h's "Data parallelism"): what torchrun and Slurm
// scripts put in the environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) and
// the plan's layout. world_size 1: the one-device step.
struct DistributedOptions {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;
  std::string master_addr = "127.0.0.1";  // rank 0's host: it hosts the rendezvous (TCPStore)
  int64_t master_port = 29500;
  // Rendezvous and every collective fail after this long (a peer that exited, an unreachable
  // MASTER_ADDR) instead of hanging.
  double timeout_seconds = 30;
  ParallelLayout layout;  // layout.devices must equal world_size
};

struct RunOptions {
  std::string device = "cpu";  // "cpu", "cuda" or "cuda:K" (needs a CUDA LibTorch)
  int64_t steps = 3;
  uint64_t seed = 0;
  // Initialise parameters deterministically from `seed` instead of reading the model's
  // weights (a memory run needs no real weights). Non-trainable initializers present in the
  // file (shape constants, running statistics) are still read.
  bool random_weights = false;
  double learning_rate = 1e-3;
  // A contiguous partition of the node order (a plan's segments); empty: the plain step.
  std::vector<std::vector<NodeId>> segments;
  // Selective recompute (plan.h): the activation storages (root tensors) dropped after the
  // forward and recomputed when the backward reads them. Needs one segment.
  std::vector<TensorId> recomputed;
  // Offload (plan.h): the storages moved to pinned host memory after their last forward reader
  // and prefetched for the backward, where the plan's schedule says. Needs one segment; combines
  // with `recomputed`. On CPU, "host" is a second counting allocator (RunResult's host peak) and
  // each copy's completion is modelled at `link`'s rates (emulate_link false, or rates of 0:
  // copies complete when they start); on CUDA the copies run on two copy streams.
  std::vector<OffloadChoice> offloaded;
  LinkRates link;
  bool emulate_link = true;
  // Micro-batching (plan.h): the graph is loaded at the micro-batch size; the step runs
  // `micro_batches` of them over one resident batch (slices along the first dimension of
  // every input), accumulating gradients (each loss scaled by 1/micro_batches), then steps
  // the optimizer once.
  int64_t micro_batches = 1;
  // Graph input name -> ONNX TensorProto file (.pb) to train on instead of synthetic data.
  std::map<std::string, std::string> input_files;
  // The serialized model, when the graph was loaded from bytes (tests); otherwise the file
  // g.model_path is read for weights.
  std::string model_bytes;
  int threads = 0;  // intra-op threads; 0 leaves LibTorch's default
  // A device capacity to enforce (0: none). An allocation beyond it fails the step with an
  // out-of-memory MemplanError, as a real device would.
  int64_t memory_limit_bytes = 0;
  bool trace = false;       // record a TraceEvent per executed node (slower)
  int64_t trace_step = -1;  // the step to trace (-1: the last)
  // Profile one step (memplan/profiler.h): time and memory per node and phase. On CPU the
  // counting allocator and a steady clock; on CUDA the CUPTI backend.
  bool profile = false;
  int64_t profile_step = -1;    // the step to profile (-1: the last)
  bool keep_gradients = false;  // copy the parameter gradients of the last step into the result
  // Called after every step (progress lines).
  std::function<void(const StepStats&)> on_step;
  // Data parallelism: this process is one rank. The graph is loaded at the rank's micro-batch
  // (B / (world_size x micro_batches)); synthetic inputs (and --input files) hold the whole
  // batch B, of which the rank keeps its rows.
  DistributedOptions distributed;
};

// One rank's figures in a data-parallel run (every rank's reach every rank at the end).
struct RankStats {
  int64_t rank = 0;
  int64_t measured_peak_bytes = 0;  // the last step's
  int64_t max_peak_bytes = 0;
  int64_t persistent_bytes = 0;
  std::vector<double> step_seconds, comm_seconds, loss;
  std::vector<int64_t> peak_bytes;
};

struct RunResult {
  std::string device;  // e.g. "cpu (LibTorch 2.14.1, 2 threads)"
  std::vector<StepStats> steps;
  int64_t measured_peak_bytes = 0;       // the steady-state step's peak (the last step)
  int64_t measured_host_peak_bytes = 0;  // offload: the last step's pinned host peak
  int64_t max_peak_bytes = 0;            // the highest over all steps
  int64_t persistent_bytes = 0;  // alive between steps (parameters, gradients, state, batch)
  std::vector<TraceEvent> trace;
  std::optional<Profile> profile;  // RunOptions::profile
  // Parameter name -> its gradient after the last step's backward (keep_gradients).
  std::map<std::string, std::vector<float>> gradients;
  // Non-trainable float initializers (batch-norm running statistics) after the run
  // (keep_gradients).
  std::map<std::string, std::vector<float>> buffers;
  // Data parallelism: every rank's figures, in rank order (empty on one device). The steps'
  // `loss` above is then the mean over the ranks; the rest of the fields are this rank's.
  std::vector<RankStats> ranks;
  // Parameter name -> its value after the last step (keep_gradients; the exactness tests).
  std::map<std::string, std::vector<float>> parameters;
};

// The rank this process is, from the environment torchrun and Slurm scripts set: WORLD_SIZE
// (unset: one device, world_size 1), RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT. Throws
// MemplanError naming a variable that is missing or not a number in range. The layout is left
// at its default (the caller sets it from the plan).
DistributedOptions DistributedFromEnvironment();

// Runs `options.steps` training steps. Throws MemplanError on bad input (missing weights,
// an op the executor lacks, a segmentation that does not partition the nodes, out of
// memory) before or during the run; nothing is written anywhere.
RunResult RunTraining(const TrainingGraph& g, const RunOptions& options);

// ONNX op types the executor implements, sorted.
std::vector<std::string> ExecutorOpTypes();
// Throws MemplanError naming every op of `g` the executor lacks (and its first node).
void CheckExecutorSupports(const TrainingGraph& g);
// Throws MemplanError when `segments` is not a contiguous partition of g's nodes.
void CheckSegments(const TrainingGraph& g, const std::vector<std::vector<NodeId>>& segments);

// A description of the LibTorch build: version, CUDA availability.
std::string ExecutorBackendDescription();
bool ExecutorHasCuda();
// Free and total memory of CUDA device `index` (cudaMemGetInfo; it creates the device's context,
// so call it after PYTORCH_CUDA_ALLOC_CONF is set). Throws MemplanError without CUDA, a driver
// or that device.
struct CudaMemoryInfo {
  int64_t free_bytes = 0;
  int64_t total_bytes = 0;
};
CudaMemoryInfo QueryCudaMemory(int index);
// Measures the device file of `device` (cuda or cuda:K) on this machine, as `memplan calibrate`
// writes it: name, compute capability, total memory, and the memory held outside the caching
// allocator once a matmul has run (context, kernels, cuBLAS handles: total - free - reserved),
// with PYTORCH_CUDA_ALLOC_CONF and CUBLAS_WORKSPACE_CONFIG as set. Throws MemplanError without
// CUDA or a visible device.
CudaDevice MeasureCudaDevice(const std::string& device);
// The cuDNN workspaces of g's convolutions on `device` (one entry per ConvGeometry signature; the
// convolutions LibTorch runs without cuDNN are left out): each pass (forward, backward data,
// backward filter) run alone on random tensors of its shapes, once to let LibTorch pick and cache
// cuDNN's plan as a training step's first call does, then again measured: the caching
// allocator's peak above what the pass leaves allocated (512-byte blocks). Throws MemplanError
// without CUDA or a visible device, and naming the node whose measurement failed.
std::map<std::string, ConvWorkspace> MeasureConvWorkspaces(const TrainingGraph& g,
                                                           const std::string& device);

// This CPU as the executor's LibTorch runs it: the analyzer's detection (cpu_device.h: the ISA
// oneDNN uses, LibTorch's intra-op threads as set now) with LibTorch's and oneDNN's versions.
CpuDevice ExecutorCpuDevice();
// LibTorch's intra-op threads from now on (at::set_num_threads), as memplan run --threads sets
// them.
void SetIntraOpThreads(int threads);
// The CPU workspaces of g's ops that calibration measures (WorkspaceSignature: every 2-D float
// convolution oneDNN runs), one entry per signature: the forward run alone on random tensors of
// its shapes and layout, then the backward as autograd calls it (the gradients the node computes),
// each measured by the CPU meter as the peak above the results it returns. Throws MemplanError
// naming the node whose measurement failed.
std::map<std::string, MeasuredWorkspace> MeasureCpuWorkspaces(const TrainingGraph& g);

// One ONNX backend test case (a directory with model.onnx and test_data_set_*/), forward only.
struct ConformanceResult {
  std::string name;
  std::vector<std::string> op_types;     // distinct op types of the model
  std::vector<std::string> missing_ops;  // op types the executor lacks
  bool skipped = false;  // missing ops, or inputs/outputs that are not tensors (reason)
  bool passed = false;
  bool randomized = false;  // outputs depend on an RNG: checked by properties, not values
  std::string message;      // why it failed or was skipped
};
ConformanceResult RunConformanceCase(const std::string& case_dir);

}  // namespace memplan
