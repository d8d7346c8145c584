// A Plan: how one training step is executed so that it fits a memory budget.
//
// Execution semantics (the planner's memory model and the executor implement exactly this):
//   The graph's nodes (topological order, loss last) are partitioned into contiguous
//   segments. An empty `segments` means one segment: the plain training step.
//   1. Forward: segments 0..K-2 run without autograd; a tensor is kept after its last reader
//      in its own segment only if a later segment reads it (a *checkpoint*: it crosses a
//      segment border). The last segment K-1 (which holds the loss) runs with autograd as in
//      the plain step (its saved tensors are stored, never recomputed).
//   2. Backward of the last segment, then for k = K-2 down to 0: recompute segment k's
//      forward with autograd from its checkpointed inputs (phase kRecompute), then run its
//      backward, feeding in the gradients its outputs received from later segments.
//      A checkpoint is freed after the backward of the earliest segment that reads it;
//      the gradient of a checkpoint lives from the first segment that produces it to the
//      backward of the segment that produced the checkpoint.
// Recompute cost: the forward FLOPs of every node in segments 0..K-2.
//
// Details the memory model fixes where the text above leaves room (BuildSegmentedSchedule,
// that is the analyzer's BuildScheduleFromCuts, implements exactly these, and the executor
// carries out that schedule step by step):
//   - Lifetimes are per storage: a view keeps its base tensor's storage alive.
//   - Forward of segments 0..K-2 (no autograd): a tensor that no later segment reads is freed
//     after its last reader; extras (dropout masks, batch-norm statistics, ...) live only
//     during their op. A checkpoint stays alive from its producer's forward step.
//   - Recompute of segment k follows the plain step's rules restricted to the segment (a
//     tensor lives until its last reader, or until the backward of its first saver); the
//     recomputed tensors that later segments read, and the gradients fed into them, stay
//     alive until segment k's backward has finished (they are the roots of its backward
//     call: torch::autograd::backward(outputs, grads, ...), accumulating parameter
//     gradients into .grad as the plain step does).
//   - Checkpoints and recomputed outputs that segment k frees at its end are freed after its
//     last backward step (after its last recompute step if none of its nodes has one).
//   - The gradient logic per node is the plain step's (GradientFlow), in the same reverse
//     order; only the frees above are deferred.
// The peak of a plan with one segment equals the plain training step's peak exactly.
//
// Selective recompute (`recomputed` non-empty; one segment): the plain step, except that each
// activation storage in `recomputed` (a tensor with its own storage, not produced by the loss
// node) is dropped after the forward and recomputed when the backward needs it:
//   - Forward: runs with autograd as in the plain step, but no backward op saves a dropped
//     storage (or a view of it): it is freed after its last forward reader. A kept storage that
//     recomputation reads lives until its last such read (or its plain end, if later).
//   - Backward, node by node in the plain step's order. Before node m's backward step, each
//     dropped storage that m's backward reads and that is not held is recomputed: its producer
//     runs again without autograd (batch-norm statistics not updated, dropout with the forward's
//     mask), after its own dropped inputs (and views of them), recursively, in producer order.
//     Outputs of a recomputed node that are already held are computed and discarded.
//   - A recomputed storage stays held until the backward step of the last node (in backward
//     order) that saved it; if no backward step still to run saved it (it was only an input of
//     the chain), it is freed after the chain. Two consumers therefore share one recompute while
//     both are still to run; a storage needed again after it was freed is recomputed again.
// Recompute cost: the forward of every recompute step of the schedule (a node can run more
// than once). The executor carries this out with saved-tensor hooks (executor/src/saved_tensors.h).
// Selective recompute does not combine with segments yet; it does with micro-batching.
//
// Offload (`offloaded` non-empty; one segment; combines with `recomputed`): the selective step,
// except that each storage in `offloaded` (an activation storage some backward op saves, not
// produced by the loss node, not recomputed) is moved to pinned host memory between its last
// forward reader and its first backward reader. Two copy streams run beside the compute stream,
// one per direction (a GPU's two copy engines); copies of one direction run one after the other
// in the order started. The schedule spells every copy as two steps without a node
// (BuildSelectiveSchedule in memplan/storage_facts.h fixes their places):
//   - Offload (Phase::kOffload): right after the step of its last forward reader the start step
//     allocates the host buffer and starts the device-to-host copy (autograd still holds the
//     device tensor: the executor packs it into the host buffer with a saved-tensor hook,
//     non_blocking on the copy stream, after recording an event on the compute stream). After
//     the forward step of node OffloadChoice::free_after the wait step makes the compute stream
//     wait for the copy's completion, then frees the device copy.
//   - Prefetch (Phase::kPrefetch): before the backward work (the recompute chain, then the
//     backward step) of node OffloadChoice::prefetch_at, or of the first node in backward order
//     at or below it, the start step allocates the device buffer and starts the host-to-device
//     copy. Right before the first step of the backward that reads the storage (the backward
//     step of a node saving it, or a recompute step reading it) the wait step makes the compute
//     stream wait for the copy, then frees the host buffer. The prefetched storage then lives
//     as a kept one would: until the backward step of its first saver (or its last recompute
//     read, if later).
// Memory: the device peak (Simulate) counts the device copy until its offload wait step and the
// prefetched copy from its prefetch start step; the host peak (MemoryTimeline::host_peak_bytes)
// counts each host buffer from its offload start to its prefetch wait. Time: SimulateStreams over
// ScheduleStepSeconds; a wait step whose copy has not ended stalls the step (Plan's
// predicted_stall_seconds).
// Data parallelism (Plan::layout with devices = N > 1): N ranks, one process per device, each
// run the step above (with its segments or selective recompute, and its micro-batches) on
// their share of the batch, and communicate after the backward pass (shard gradients: during
// it). The per-rank schedule is the one-device schedule of the rank's graph rewritten by
// ApplyDataParallel (planner.h); the executor (executor/src/distributed.cc) carries out exactly
// this:
//   - Batch: the step's batch B is divided by N x micro_batches; rank r trains on rows
//     [r B/N, (r+1) B/N) of every input and of the loss target and holds only those rows
//     (its micro-batches are views of them). The rank's graph is loaded at B / (N x micro_batches)
//     (Plan::batch), so Plan::batch x micro_batches x devices = B.
//   - The step's loss is the mean of the ranks' losses (for mean-reduced losses, the full
//     batch's mean); the gradients are summed over the ranks and divided by N.
//   - Buckets: the parameters with a gradient, in g.parameters order, are grouped greedily:
//     a parameter joins the current bucket while the bucket holds less than bucket_bytes, else
//     starts a new one (a parameter is never split; one larger than bucket_bytes is a bucket of
//     its own). A bucket's element count is padded up to a multiple of N (padding is zero and
//     never trained); rank r owns the r-th N-th of every bucket: its shard. ParameterBuckets()
//     computes them; the planner and the executor both call it.
//   - Persistent memory per rank, per bucket b of padded bytes P_b and shard S_b = P_b / N
//     (mult: 0 for SGD, 1 momentum, 2 Adam), allocated in the setup step:
//         shard       parameters  gradients                       optimizer state
//         none        P_b         P_b                             mult x P_b
//         optimizer   P_b         P_b                             mult x S_b
//         gradients   P_b         S_b (the reduced shard)         mult x S_b
//         parameters  S_b         S_b                             mult x S_b
//     Parameters (and, for none and optimizer, gradients) are one flat buffer per bucket with
//     every parameter a view of it. Parameters without a gradient, constants, and the rank's
//     rows of the batch are as in the one-device step.
//   - gradients (ZeRO-2): bucket b's full flat gradient (P_b, zeroed) is allocated by the first
//     backward step (of the step, across micro-batches) that produces a gradient for one of its
//     parameters, before that gradient is accumulated into it (the accumulation's temporary is
//     the one-device step's), and reduced as soon as it is complete, as DDP and ZeRO-2 do: in the
//     last micro-batch, right after the backward step in which the last of its parameters'
//     gradients is accumulated (with segments: in the last backward call that reads one of
//     them), bucket b's communication step reduce-scatters it into the rank's shard and frees it.
//     In the schedule (one micro-batch) the bucket's steps are the backward steps that allocate
//     the temporary accumulated into one of its parameters (a kTemporary buffer of that
//     parameter) or whose node reads one of them (an op that hands the gradient on as a view,
//     Transpose of a weight, allocates no temporary): the flat gradient is allocated in the
//     first, the communication step follows the last. The first is split in two as LibTorch runs
//     it: the op (its allocations; it frees its workspace and the incoming gradients it frees),
//     then, for the same node, the accumulation step: the flat gradient allocated while the
//     parameters' gradient temporaries are alive, which it then frees. (The executor allocates
//     it in a tensor pre-hook on the parameter, when autograd hands the gradient to its
//     AccumulateGrad: the op's backward has returned and freed its workspaces, a convolution's
//     columns. Allocating it beside the op's workspace predicted resnet18's peak 1.7% high.)
//     The flat gradient's buffer carries its bucket (Buffer::bucket, category kGradient), so a
//     communication step names the bucket it reduces. The executor runs each such step where
//     the schedule puts it: in the post hook of AccumulateGrad (on the autograd engine's
//     thread) of the last parameter of the backward step before it, the step's parameters
//     being those whose gradient temporary it frees (or whose gradient a view op hands on);
//     every rank runs the same graph in the same order, so the collectives match. A bucket no
//     gradient reaches is reduced (of zeros) in the communication phase after the backward.
//     With micro_batches > 1 the schedule, which models one micro-batch, allocates every flat
//     gradient in the setup step and reduces them in the communication phase after the
//     backward, and the executor does the same (every micro-batch runs its whole backward with
//     them all alive).
//   - Communication phase (Phase::kCommunication), after the backward of the last micro-batch
//     and before the optimizer, one step per bucket in bucket order (shard gradients: only the
//     buckets not reduced in the backward, see above):
//         none, optimizer: all-reduce (sum) of the bucket's flat gradient in place, then / N
//         (after the backward: the gradients are persistent, so the memory is the same);
//         gradients: reduce-scatter (sum) of the flat gradient into the rank's gradient
//         shard, / N, then the flat gradient is freed.
//     No collective allocates through LibTorch's allocator: with Gloo the reduce-scatter is an
//     in-place all-reduce of the flat gradient followed by a copy of the rank's part into its
//     shard, since ProcessGroupGloo's reduce_scatter_single copies its input into a temporary
//     of P_b (+ 12 bytes, measured) and all_gather_single allocates one of P_b. Gloo's own
//     scratch buffers are malloc'd and not counted (nor are NCCL's on CUDA).
//     The collectives block their thread: shard gradients' reductions inside the backward
//     delay it rather than overlap with it (yet).
//   - Optimizer: none: per parameter, as in the one-device step. optimizer and gradients:
//     bucket by bucket, the rank updates its shard of the parameters from its gradient shard
//     and its state (Adam's one temporary is S_b), then all-gathers the bucket's parameters
//     from every rank's shard into the flat parameter buffer (a temporary of S_b: the rank's
//     updated shard is copied out first, since the all-gather writes the buffer it reads).
//     With Gloo the all-gather is the flat buffer zeroed, the copy written back into the rank's
//     part and an in-place all-reduce (x + 0 is x exactly): the same S_b temporary, none else.
//     In the schedule: the one-device optimizer step (it frees the gradients nobody consumed;
//     without Adam's per-parameter temporary), then per bucket two kOptimizer steps, the update
//     (allocates and frees Adam's S_b temporary; nothing for SGD and momentum) and the
//     all-gather (allocates and frees the S_b copy). The phase's peak is therefore persistent
//     + the largest S_b.
//   - Schedule buffers (ApplyDataParallel): the setup step's per-parameter parameter, gradient
//     and optimizer-state buffers of the trained parameters are replaced by per-bucket buffers
//     named "bucket B parameters", "bucket B gradients" (P_b; shard gradients: "bucket B
//     gradient shard", S_b, and "bucket B flat gradients", P_b, allocated as above) and
//     "bucket B <optimizer> state", with categories kParameter, kGradient, kOptimizerState and
//     no tensor; the all-reduce has no buffer of its own (it works in place).
//   - parameters (ZeRO-3, FSDP's FULL_SHARD): the rank keeps only its shards between steps:
//     "bucket B parameter shard" (S_b), the gradient shard (S_b) and the optimizer state
//     (mult x S_b). A bucket's flat parameters (P_b, "bucket B gathered parameters") exist only
//     inside gather spans. A pass is the forward of one segment (with the loss), the recompute of
//     one segment, or one segment's backward call; a node reads a bucket when one of its inputs'
//     storages is a parameter of it (BucketsReadBy; a view of a weight reads its bucket). In each
//     pass, the bucket is all-gathered (a kCommunication step allocating P_b, a buffer whose
//     `bucket` is B) right before the first step that reads it: in a forward or recompute pass,
//     before the node runs; in a backward call, before the first backward step whose node reads
//     it. A forward or recompute pass releases it with the step of its last reader in the
//     segment; a backward call releases it once the last of its parameters' gradients of that
//     call has been accumulated (a kCommunication step after that step). The executor carries
//     out these steps as the schedule lists them (AddDataParallelSteps): in a backward call, a
//     pre-hook on each node's outputs' autograd functions (which the engine runs before the
//     node's backward, in the schedule's order) does the releases and gathers up to that node's
//     step; AccumulateGrad's post hook of the last parameter of a backward step (as for the
//     reduce-scatters above) those up to the next step with a node, so that a bucket a Gemm's
//     bias completes is released before its transposed weight accumulates; the call's end the
//     releases left. Released means the memory is returned
//     while autograd's saved references to the parameters stay: the executor swaps the flat
//     storage's data for none and back (FSDP frees storages the same way), and writes a gather
//     through a tensor of its own version counter, so autograd sees no in-place change.
//     Gradients are as shard gradients (the flat gradient allocated lazily, reduce-scattered as
//     soon as complete), except that by default, with one micro-batch, the flat gradient is born
//     in FSDP2's order (ParallelLayout::flat_gradient_at_reduce): each parameter keeps its own
//     .grad until the bucket is complete and released, then the bucket's communication step
//     allocates the flat gradient, copies the gradients in and frees them (the executor in
//     ReduceScatterBucket, run from the same post hook). The optimizer updates the shards (Adam's
//     S_b temporary) and gathers nothing: the next forward does. With Gloo an all-gather is the
//     in-place all-reduce above into the gathered buffer, with no temporary (the rank's shard is
//     persistent). A selective plan does not combine with it yet (its recompute runs inside the
//     backward); planning one is a clear error.
//   - FSDP2's buffers (ParallelLayout::runtime kFsdp2: what fully_shard allocates beyond the
//     above, from torch/distributed/fsdp/_fully_shard, torch 2.14, and measured under its
//     c10 allocator). A gather first all-gathers into a flat output O_b (P_b), then copies out
//     into the unsharded parameters (the gathered buffer above, P_b). In a forward or recompute
//     pass, O_b outlives the copy-out until the next bucket's gather has been copied out (FSDP2's
//     all_gather_state), and the pass's last O_b until the pass ends. In a backward call, O_b is
//     freed at its copy-out, which for a prefetched bucket comes right before its first backward
//     step. In the schedule: the gather step allocates the gathered buffer (standing for O_b
//     while the collective runs); a copy-out step follows, in a forward or recompute pass
//     allocating "bucket B all-gather output" and freeing the previous one, in a backward call a
//     P_b temporary (the unsharded copy made while O_b is alive). A bucket's reduce-scatter
//     (post-backward, after its release) first frees the previous bucket's reduce-scatter input,
//     which FSDP2 holds until then (reduce_scatter_states; the last one until the backward
//     ends), then allocates the flat gradient (its input) while the parameters' gradients are
//     alive and frees them, then allocates the reduce-scatter output (S_b: the new gradient
//     shard, or with kept shards a temporary added into it). With staged_collectives each
//     collective also allocates and frees a P_b staging copy (the gather step; the
//     reduce-scatter's output step).
#pragma once

#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "memplan/analyzer.h"
#include "memplan/storage_facts.h"

namespace memplan {

// How a step is spread over devices (the data-parallel contract at the top of this file).
enum class ShardMode { kNone, kOptimizer, kGradients, kParameters };
const char* ShardModeName(ShardMode m);  // "none", "optimizer", "gradients", "parameters"
// Throws MemplanError naming the value and the accepted ones.
ShardMode ParseShardMode(const std::string& name);
enum class ShardRuntime { kMemplan, kFsdp2 };
const char* ShardRuntimeName(ShardRuntime r);  // "memplan", "fsdp2"
// Throws MemplanError naming the value and the accepted ones.
ShardRuntime ParseShardRuntime(const std::string& name);

struct ParallelLayout {
  int64_t devices = 1;  // N ranks; 1: the one-device step (no layout in the plan JSON)
  ShardMode shard = ShardMode::kNone;
  int64_t bucket_bytes = 25 << 20;  // DDP's default bucket size
  // The time model of the collectives (Plan::predicted_comm_seconds), per bucket of P_b bytes:
  //   all-reduce (ring): 2 (N-1)/N x P_b / link_bytes_per_second + link_latency_seconds;
  //   reduce-scatter and all-gather: (N-1)/N x P_b / link_bytes_per_second + link_latency_seconds.
  // The defaults are a guess for Gloo over loopback TCP between processes of one host (5 GB/s,
  // 50 us per collective); give the measured link's figures (memplan plan --link-bandwidth).
  double link_bytes_per_second = 5e9;
  double link_latency_seconds = 50e-6;
  // Shard gradients and parameters: the rank's gradient shards between steps. kKept: from the
  // setup on. kNone (PyTorch 2's zero_grad() setting FSDP2's sharded .grad to None): each is
  // born at its bucket's reduce-scatter and freed after the optimizer step. The rank's graph
  // steps with kept gradients either way (SteppedGradients); the JSON writes "gradient_shards"
  // only when it is none.
  GradientLifetime gradient_shards = GradientLifetime::kKept;
  // Shard gradients and parameters with one micro-batch: when a bucket's flat gradient is born
  // (FlatGradientAtReduce resolves it; unset: the mode's default). false: at the bucket's first
  // accumulation, each parameter's gradient accumulated into it (the executor points the
  // parameters' .grad into it before AccumulateGrad). true (FSDP2's order,
  // FSDPParamGroup.post_backward): each parameter's first gradient temporary becomes its
  // gradient (AccumulateGrad takes it; a later one is added into it and freed) and lives until
  // its bucket is complete; shard parameters releases the bucket's gathered parameters; then the
  // bucket's communication step allocates the flat gradient, copies the gradients in, frees
  // them, reduce-scatters and frees the flat gradient. Default: true for shard parameters (the
  // release comes before the flat gradient: fc_heavy and alexnet, one 144 MiB layer, 4 ranks,
  // FSDP2's units, predict 458.2 and 460.1 MiB per rank instead of 566.2 and 568.1; never above
  // the other order on the corpus), false for shard gradients (nothing is released before the
  // reduce-scatter, so the gradients held until then sit beside the flat gradient: fc_heavy on 2
  // ranks +72 MiB, +11.8%). Micro-batches keep every flat gradient from the setup either way.
  // The plan JSON's layout writes the resolved value ("flat_gradient_at_reduce"); a file without
  // it was planned with false.
  std::optional<bool> flat_gradient_at_reduce;
  // Whose runtime the per-rank peak is predicted for (shard parameters, one micro-batch; see
  // "FSDP2's buffers" above). kMemplan: memplan's executor, whose collectives work in place.
  // kFsdp2: PyTorch's fully_shard at its defaults, with its own communication buffers. A
  // prediction only: memplan's executor refuses such a plan (it runs kMemplan).
  ShardRuntime runtime = ShardRuntime::kMemplan;
  // kFsdp2: each all-gather and reduce-scatter stages through a temporary as large as the whole
  // gathered (reduced) tensor, as ProcessGroupGloo's all_gather_into_tensor and
  // reduce_scatter_tensor do (measured; NCCL has none). The CLI sets it for --device cpu.
  bool staged_collectives = false;
};
// Whether `layout` runs FSDP2's gradient order (ParallelLayout::flat_gradient_at_reduce): its
// explicit choice, else true for shard parameters; false for other modes, which have no lazy
// flat gradient.
bool FlatGradientAtReduce(const ParallelLayout& layout);

// One bucket of the flat parameter space. Shard none and optimizer (DDP): consecutive trained
// parameters in g.parameters order, a bucket closed once it holds bucket_bytes. Shard gradients
// and parameters (FSDP2's units): whole module units (ModuleUnitOf, planner.h) in the order the
// forward first reads them, consecutive units grouped while they fit bucket_bytes; a unit larger
// than that is a bucket of its own (bucket_bytes 1: one bucket per module, fully_shard on each).
struct ParameterBucket {
  std::vector<TensorId> parameters;  // unit by unit; within a unit in g.parameters order
  std::vector<int64_t> offsets;      // element offset of each parameter in the flat bucket
  int64_t elements = 0;              // padded to a multiple of the device count
  int64_t bytes = 0;                 // elements x the parameters' element size
  int64_t shard_elements() const;    // elements / devices (set by ParameterBuckets)
  int64_t devices = 1;
};
// The buckets of g's trained parameters (has_gradient) for a layout. Throws MemplanError if the
// trained parameters do not share one dtype.
std::vector<ParameterBucket> ParameterBuckets(const TrainingGraph& g, const ParallelLayout& layout);

// One strategy `auto` tried, as it priced it (Plan::candidates).
struct PlanCandidate {
  std::string strategy;
  int64_t predicted_peak_bytes = 0;
  int64_t margin_bytes = 0;
  int sections = 1;
  bool feasible = false;  // predicted_peak_bytes + margin_bytes <= the budget
  double predicted_recompute_seconds = 0;
  double recompute_flops = 0;
};

// Micro-batching (gradient accumulation): with micro_batches = k > 1 the batch is split into
// k equal micro-batches that run one after the other, each with the segmentation above on the
// graph loaded at batch / k; parameter gradients accumulate across them (each micro-batch's
// loss is scaled by 1/k, so the gradients are the full batch's mean) and the optimizer steps
// once. The whole batch stays resident (micro-batches are views of it). Batch-norm statistics
// are per micro-batch, as with any gradient accumulation.
struct Plan {
  // none, manual, speed, bottleneck, sqrt, sections, optimal, milp, selective
  std::string strategy;
  std::string model_path;
  int64_t batch = 1;          // the batch of the graph the plan runs (the micro-batch size)
  int64_t micro_batches = 1;  // how many micro-batches make one step (batch x micro_batches)
  // Data parallelism: the step's batch is batch x micro_batches x layout.devices, and every
  // byte figure below is per rank.
  ParallelLayout layout;
  // The collectives' predicted seconds per step (ParallelLayout's time model over the buckets:
  // one all-reduce each for shard none; all-reduce and all-gather for optimizer; reduce-scatter
  // and all-gather for gradients). 0 with one device.
  double predicted_comm_seconds = 0;
  std::string model_fingerprint;  // identifies the graph the plan was made for
  int64_t budget_bytes = 0;
  std::vector<std::vector<NodeId>> segments;  // contiguous partition of the node order
  std::vector<TensorId> checkpoints;          // tensors crossing segment borders (derived)
  // Selective recompute: the activation storages dropped after the forward and recomputed in
  // the backward (root tensors, ascending). Empty for segmented plans.
  std::vector<TensorId> recomputed;
  // Offload (see above): the storages moved to pinned host memory, ascending by tensor, with
  // where each is freed and prefetched. Empty unless planned by `offload`.
  std::vector<OffloadChoice> offloaded;
  int64_t host_budget_bytes = 0;          // the pinned host memory allowed; <= 0: none
  int64_t predicted_host_peak_bytes = 0;  // timeline.host_peak_bytes
  LinkRates link;                         // the link rates the stall was predicted at
  // SimulateStreams' stall: what the step waits for copies that its compute does not hide.
  double predicted_stall_seconds = 0;
  Schedule schedule;                 // the replayed schedule
  MemoryTimeline timeline;           // Simulate(schedule)
  int64_t predicted_peak_bytes = 0;  // timeline.peak_bytes
  // Peak of the plain training step (PlanForBudget with devices > 1: of the one-device plain
  // step at the whole batch, which a percentage budget is of).
  int64_t baseline_peak_bytes = 0;
  double recompute_flops = 0;
  double forward_flops = 0;
  // The cost model's seconds for the same recompute (CostModel::node_seconds summed over
  // segments 0..K-2, or over a selective plan's recompute steps, times the micro-batches): a
  // prediction the segment strategies do not optimise; `selective` minimises it.
  double predicted_recompute_seconds = 0;
  // What splitting the batch costs beside recompute: k micro-batches run every op k times at
  // batch / k, and an op's fixed cost and its weights' traffic do not shrink with the batch. The
  // cost model's step seconds (forward + backward, the backward priced at twice the forward) at
  // k x (batch / k) less at the whole batch; 0 without micro-batches.
  double predicted_micro_batch_seconds = 0;
  // What the model cannot yet replay exactly, kept free under the budget (see
  // SegmentBorderMargin): a plan with several segments is feasible when
  // predicted_peak_bytes + margin_bytes <= budget_bytes.
  int64_t margin_bytes = 0;
  // The part of margin_bytes kept for workspaces whose rules are unverified on the device (CPU
  // kernels: cpu_device.h; cuDNN: cuda_device.h), by op type (the largest margin of one node of
  // that type: a workspace is a transient of its own step). `memplan calibrate` removes them.
  int64_t workspace_margin_bytes = 0;
  std::map<std::string, int64_t> margin_by_op;
  // The device the plan was made for (CpuDevice::fingerprint() / summary(), or the CUDA device's
  // name): `memplan run` refuses a plan made for another one. Empty: not recorded (older plans).
  std::string device_fingerprint;
  std::string device_summary;
  // On the CPU: the device itself (PlanReportOf writes its "cpu_device" summary).
  std::optional<CpuDevice> cpu_device;
  bool feasible = false;  // predicted_peak_bytes + margin_bytes <= budget_bytes (see budget_of)
  // Planned for a CUDA device (PlanForBudget with BudgetPlanOptions::cuda): the caching
  // allocator's reserved peak for the schedule (cuda_device.h), and which of the two peaks the
  // budget bounds: "reserved" (the default there: `feasible` is then predicted_reserved_peak_bytes
  // + margin_bytes <= budget_bytes) or "allocated". Empty on the CPU.
  int64_t predicted_reserved_peak_bytes = 0;
  std::string budget_of;
  double solve_seconds = 0;
  std::vector<std::string> notes;
  // `auto`: every strategy it tried at the plan's batch, in the order tried (empty otherwise).
  std::vector<PlanCandidate> candidates;

  // What `auto` minimises among plans that fit: recompute, micro-batching and communication.
  double predicted_overhead_seconds() const {
    return predicted_recompute_seconds + predicted_micro_batch_seconds + predicted_comm_seconds +
           predicted_stall_seconds;
  }
  // The peak the budget bounds, plus the margin: what a budget must be for the plan to fit.
  int64_t budget_needed_bytes() const {
    return (budget_of == "reserved" ? predicted_reserved_peak_bytes : predicted_peak_bytes) +
           margin_bytes;
  }
  int num_sections() const { return segments.empty() ? 1 : static_cast<int>(segments.size()); }
  double overhead() const { return forward_flops > 0 ? recompute_flops / forward_flops : 0; }
};

// The schedule of the execution semantics above for a given segmentation.
Schedule BuildSegmentedSchedule(const TrainingGraph& g,
                                const std::vector<std::vector<NodeId>>& segments);

// Tensors crossing segment borders (produced in one segment, read by a later one),
// excluding persistent tensors (inputs, parameters, constants) and views of them.
std::vector<TensorId> SegmentCheckpoints(const TrainingGraph& g,
                                         const std::vector<std::vector<NodeId>>& segments);

// Segments <-> cut positions. A cut at position c (1 <= c <= the loss node's index) starts a
// new segment at node c. Throws MemplanError when the segments are not a contiguous partition
// of the node order in order, or the loss is not in the last segment.
std::vector<std::vector<NodeId>> SegmentsFromCuts(const TrainingGraph& g,
                                                  const std::vector<NodeId>& cuts);
std::vector<NodeId> CutsFromSegments(const TrainingGraph& g,
                                     const std::vector<std::vector<NodeId>>& segments);

// Forward FLOPs recomputed by a segmentation: every node before the last cut.
double RecomputeFlops(const TrainingGraph& g, const std::vector<NodeId>& cuts);

// The same for seconds: the sum of node_seconds[n] (indexed by NodeId) before the last cut.
double RecomputeSeconds(const std::vector<double>& node_seconds, const std::vector<NodeId>& cuts);

// The activation storages a selective plan may drop: tensors with their own storage that some
// backward op saves (directly or through a view), not produced by the loss node.
std::vector<TensorId> RecomputableTensors(const TrainingGraph& g);

// Every storage `recomputed` may name: the activation storages not produced by the loss node
// (ascending). That is RecomputableTensors and the storages no backward op saves: dropping one
// of those changes nothing in the forward (it dies after its last reader anyway) but makes a
// recompute that reads it recompute it too, where a kept one would live until that read (the
// `selective` planner drops a Linear's MatMul output with its bias Add's, for instance).
std::vector<TensorId> DroppableStorages(const TrainingGraph& g);

// What a replay records beside the plan's choice (cuts, or storages to recompute): the Plan's
// strategy name, the budget it is checked against and the unplanned peak it is compared with.
struct ReplayRequest {
  std::string strategy{};
  int64_t budget_bytes = 0;         // <= 0: none (every plan is feasible)
  int64_t baseline_peak_bytes = 0;  // the unplanned step's peak
  SimulatorOptions sim{};
};

// Replays selective recompute of `recomputed` (see above): schedule, timeline, FLOPs of every
// recompute step, feasibility. Throws MemplanError naming a tensor that cannot be recomputed.
Plan ReplaySelective(const TrainingGraph& g, const std::vector<TensorId>& recomputed,
                     const ReplayRequest& r = {});

// What an offload replay needs beside ReplayRequest: the host budget (<= 0: none), the link, and
// the cost model's forward seconds per node (indexed by NodeId) for the recompute seconds and the
// stall (empty: neither is predicted, both stay 0).
struct OffloadRequest {
  int64_t host_budget_bytes = 0;
  LinkRates link{};
  std::vector<double> node_seconds{};
};
// Replays recompute of `recomputed` and offload of `offloaded` (see above): schedule, device and
// host timelines, FLOPs, recompute and stall seconds, feasibility against both budgets. Throws
// MemplanError naming a tensor that cannot be recomputed or offloaded.
Plan ReplayOffload(const TrainingGraph& g, const std::vector<TensorId>& recomputed,
                   const std::vector<OffloadChoice>& offloaded, const ReplayRequest& r,
                   const OffloadRequest& o);

// The compute stream's seconds per step of a schedule (SimulateStreams' input): a forward, loss
// or recompute step takes node_seconds[node], a backward step kBackwardTimesForward times that,
// every other step (setup, optimizer, communication, copies) none.
constexpr double kBackwardTimesForward = 2;
std::vector<double> ScheduleStepSeconds(const std::vector<double>& node_seconds, const Schedule& s);

// Forward FLOPs, and the same in seconds (node_seconds indexed by NodeId), of every recompute
// step of a schedule.
double ScheduleRecomputeFlops(const TrainingGraph& g, const Schedule& s);
double ScheduleRecomputeSeconds(const std::vector<double>& node_seconds, const Schedule& s);

// A stable hash of the graph's structure and shapes (node ops, tensor shapes, batch).
std::string ModelFingerprint(const TrainingGraph& g);
// The same without the activations' shapes: one value for the model at every batch.
std::string StructureFingerprint(const TrainingGraph& g);

// Replays a segmentation: schedule, timeline, checkpoints, FLOPs, feasibility. The one way
// every strategy (and PlanFromJson) fills a Plan. The predicted recompute seconds are the
// caller's (the planner's Context fills them from its cost model, PlanFromJson from the file).
Plan ReplaySegmentation(const TrainingGraph& g, const std::vector<NodeId>& cuts,
                        const ReplayRequest& r = {});

nlohmann::json PlanToJson(const Plan& p, const TrainingGraph& g);
// Whether `j` says it is a plan ("kind": "plan").
bool IsPlanJson(const nlohmann::json& j);
// The batch a plan's graph must be loaded with (its micro-batch size) and its micro-batch
// count, read from plan JSON before loading the model. Throw MemplanError unless they are
// whole numbers of at least 1 and batch = micro_batches x micro_batch.
// With a "layout" (devices N > 1) the step's batch is micro_batch x micro_batches x N.
int64_t PlanGraphBatch(const nlohmann::json& j);
int64_t PlanMicroBatches(const nlohmann::json& j);
// The plan's data-parallel layout ("layout": devices, shard, bucket_bytes, link figures); a plan
// without one (written before data parallelism, or for one device) is devices = 1. Throws
// MemplanError naming a bad field.
ParallelLayout PlanLayout(const nlohmann::json& j);

// Validates that the plan was made for `g` (fingerprint, batch, node names); throws
// MemplanError naming what does not match and what to do. predicted_recompute_seconds is the
// file's (0 when a plan written before it lacks the field).
Plan PlanFromJson(const nlohmann::json& j, const TrainingGraph& g);

}  // namespace memplan
