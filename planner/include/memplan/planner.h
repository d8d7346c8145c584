// The planner: strategies that turn (TrainingGraph, budget) into a Plan (see plan.h for the
// execution semantics every plan follows).
//
// Every strategy but `selective` chooses a segmentation (cut positions in the node order);
// `selective` chooses which activation storages to drop and recompute (plan.h). The plan's
// predicted peak always comes from replaying BuildSegmentedSchedule (or BuildSelectiveSchedule)
// through Simulate, never from a strategy's own arithmetic. Strategies are pure functions: no
// I/O, no globals.
//
// What the strategies optimise, under plan.h's semantics:
//   recompute FLOPs = forward FLOPs of every node before the last cut, so a plan's cost is
//   decided by its last cut alone and the other cuts only shape memory. `optimal` therefore
//   looks for the earliest last cut (in FLOPs) for which some placement of the earlier cuts
//   keeps every phase of the step within the budget.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "memplan/analyzer.h"
#include "memplan/cuda_device.h"
#include "memplan/parse.h"
#include "memplan/plan.h"

namespace memplan {
namespace planner {
struct SelectiveMemo;  // planner_internal.h
}  // namespace planner

// The rates of one machine (a device and the LibTorch that drives it) for the roofline time
// model (RooflineSeconds). The executor measures them (memplan/machine_rates.h) and the
// command line caches them; the defaults here are what a plan reports without a measurement.
struct MachineRates {
  // Dense contraction work (matmul, conv, gemm): FLOPs per second.
  double flops_per_second = 0;
  // Memory bandwidth: bytes read plus written per second by a large out-of-place pointwise op.
  double bytes_per_second = 0;
  // The fixed cost of running one op (dispatch, allocation, autograd bookkeeping).
  double op_overhead_seconds = 0;
  // Per ComputeClass (training_graph.h), the rates its kernels reach, measured on a
  // representative shape of the class; 0 takes the general rate above (kMemory always does,
  // and so does every class of a cache written before classes were measured).
  struct ClassRates {
    double flops_per_second = 0;
    double bytes_per_second = 0;
  };
  std::array<ClassRates, kNumComputeClasses> classes{};
  // New memory: a buffer of at least fresh_threshold_bytes comes straight from the operating
  // system (glibc's malloc maps it anew from 32 MiB up), and the op that first writes it pays a
  // page fault per page, at fresh_bytes_per_second. 0: no such cost (the defaults, a caching
  // allocator, a file written before it was measured).
  double fresh_bytes_per_second = 0;
  int64_t fresh_threshold_bytes = 0;
  // CUDA: the device-host link, copies of pinned memory each way (offload's copies); 0: not
  // measured (DefaultLinkRates then).
  LinkRates link{};
  // The rates that price a node of class `c`.
  double FlopsPerSecond(ComputeClass c) const;
  double BytesPerSecond(ComputeClass c) const;
  // What the rates describe ("cpu (LibTorch 2.9.1, 2 threads)"), and whether they were
  // measured on it (false: DefaultMachineRates).
  std::string device;
  bool measured = false;
};
// Documented guesses, used when nothing was measured (a build without LibTorch):
//   cpu:  100 GFLOP/s, 10 GB/s, 10 us per op (a few cores of a current x86 server);
//   cuda: 50 TFLOP/s, 2 TB/s, 20 us per op (an A100/H100-class GPU; TF32 matmul, HBM).
// `device` is "cpu", "cuda" or "cuda:K"; anything else gets the cpu figures. No class rates.
MachineRates DefaultMachineRates(const std::string& device);
// Documented link rates (plan.h's offload), used unless measured or given (--link-rate):
//   cuda: 25 GB/s each way, pinned memory over PCIe Gen5 x16 (an H100/H200's host link);
//   cpu:  there is no link; offload is emulated at 10 GB/s each way (a memcpy between two
//         buffers of one host's memory), so that plans for a CPU run exercise the same choices.
LinkRates DefaultLinkRates(const std::string& device);

// Class rates go under "classes", one object per measured class by ComputeClassName.
nlohmann::json MachineRatesToJson(const MachineRates& r);
// Throws MemplanError naming the bad field (rates must be finite and > 0, overhead >= 0, class
// rates >= 0, classes named by ComputeClassName). Without "classes" every class takes the
// general rates.
MachineRates MachineRatesFromJson(const nlohmann::json& j);

// Bytes the forward of `n` moves through memory: its inputs read plus its outputs written,
// at the graph's tensor bytes. An op whose outputs are all views of its inputs (Reshape,
// Transpose, Slice, ...) moves nothing.
double NodeBytesMoved(const TrainingGraph& g, const Node& n);
// Whether every output of `n` was folded to a constant at analysis time (shape arithmetic:
// Constant, Shape, ... of known value). The executor computes such nodes once before training
// and never runs them in a step.
bool NodeIsFolded(const TrainingGraph& g, const Node& n);
// The roofline forward time of `n`, at the rates of its class c = ComputeClassOf(n):
//   max(forward FLOPs / FlopsPerSecond(c), bytes moved / BytesPerSecond(c))
//   + fresh bytes / fresh_bytes_per_second + op_overhead_seconds,
// where fresh bytes are those of its new outputs and saved extras (max-pool indices, dropout
// masks) of at least fresh_threshold_bytes each; and 0 for a folded node. Pointwise and
// normalisation ops are memory-bound here where FLOPs alone would call them free.
double RooflineSeconds(const TrainingGraph& g, const Node& n, const MachineRates& rates);

// Forward seconds of node `n` of graph `g`. It takes the graph because a node's time depends
// on its tensors and on the batch the graph was loaded at: micro-batching plans the same model
// at smaller batches with one CostModel.
using NodeSecondsFn = std::function<double(const TrainingGraph& g, const Node& n)>;
// RooflineSeconds at `rates`.
NodeSecondsFn RooflineNodeSeconds(const MachineRates& rates);

// What the planner needs to know about a graph, injectable so that tests can use toy numbers.
// An empty function means the graph's own value.
struct CostModel {
  // Bytes of a tensor (activations, parameters, inputs; gradients take their tensor's bytes).
  std::function<int64_t(const Tensor&)> tensor_bytes;
  // Forward FLOPs of a node: what recomputing it costs.
  std::function<double(const Node&)> node_flops;
  // Forward seconds of a node, as recompute runs it (with autograd). Plans report the predicted
  // recompute seconds from it; the strategies still minimise FLOPs. Called with the graph after
  // tensor_bytes and node_flops were applied. Empty: the roofline at DefaultMachineRates("cpu").
  NodeSecondsFn node_seconds;
};

// A copy of `g` with the cost model's bytes and FLOPs written into it (tensor bytes, node
// forward FLOPs). Plans made with a cost model describe this graph.
TrainingGraph ApplyCostModel(const TrainingGraph& g, const CostModel& cost);

// The cost model's forward seconds of every node of `g`, indexed by NodeId (node_seconds on
// the graph ApplyCostModel makes). What a run's profile reports as NodeProfile::predicted_seconds
// for its forward and recompute scopes (per call, at the graph's batch).
std::vector<double> PredictNodeSeconds(const TrainingGraph& g, const CostModel& cost);

// Forward times measured on a model (the command line reads them from a profile).
struct MeasuredNodeTime {
  std::string name;    // the node's name
  std::string op;      // its op type (a node of the same name and another op is another model's)
  double seconds = 0;  // forward seconds per call, with autograd (as recompute runs it)
};
struct MeasuredTimes {
  std::string source;  // where they come from (a file name), for messages
  int64_t batch = 0;   // the batch each call ran at (the micro-batch size)
  std::vector<MeasuredNodeTime> nodes;
};
// A cost model's node_seconds calibrated by measurement, and what the calibration did.
struct Calibration {
  // A measured node takes its measured seconds at the measured batch. At another batch b (a
  // micro-batch) a node's time is not linear in b: its per-op overhead and its weights' bytes
  // do not shrink, and a new buffer under the fresh-memory threshold costs no page faults. So
  // when the measured batch is the graph's, the measured seconds scale as the node's roofline
  // does: x roofline(b) / roofline(measured batch); measured at another batch, they scale as
  // op_overhead_seconds + the rest x b / measured batch. Any other node takes its roofline
  // seconds at `rates` times median_ratio.
  NodeSecondsFn node_seconds;
  // The median over the measured nodes of measured / roofline seconds (at the graph's batch).
  double median_ratio = 1;
  int measured_nodes = 0;  // nodes of the graph the measurement covers
  int missing_nodes = 0;   // nodes of the graph it lacks (roofline x median_ratio)
  int folded_nodes = 0;    // nodes it lacks because they never run (NodeIsFolded: 0 s)
  // For the summary: the batch scaling, the coverage.
  std::vector<std::string> notes;
};
// Calibrates against `measured` taken on the model of `g` (any batch). Throws MemplanError
// naming measured.source when it is another model's: a node name `g` does not have, or a name
// whose op differs, or no node at all.
Calibration CalibrateNodeSeconds(const TrainingGraph& g, const MeasuredTimes& measured,
                                 const MachineRates& rates);

struct PlanOptions {
  // The memory budget for the whole training step (peak bytes alive). <= 0: no budget
  // (every plan is feasible; `auto` then returns the baseline).
  int64_t budget_bytes = 0;
  // MakePlan's strategy: auto, none, manual, speed, bottleneck, sqrt, sections, optimal, milp,
  // selective. `auto` runs the others (milp on small graphs) and keeps the feasible plan with
  // the least predicted recompute seconds.
  std::string strategy = "auto";
  // `manual`: the tensors to keep; each cuts the node order right after its producer.
  std::vector<std::string> checkpoints;
  // How allocations are accounted (the predicted peak of every plan uses it).
  SimulatorOptions simulator;
  // `optimal` and `sections`: the cut positions the dynamic program considers. Graphs with at
  // most this many distinct positions (neighbours that are interchangeable count once) use
  // every one, and the result is optimal over all segmentations; larger graphs use the
  // bottleneck cuts, the positions where the bytes crossing the cut are a local minimum, and
  // evenly spaced fill up to this many. Very large graphs get fewer (segment_costs.h:
  // CappedCutCandidates keeps candidates x nodes within a few seconds' work, e.g. 50 on a
  // million-node graph); the plan's notes give the number used.
  int max_cut_candidates = 4000;
  // `optimal`: the most checkpoint states (which crossing tensors are already held) the DP
  // keeps per position; beyond it the DP keeps the smallest and the plan notes that it may
  // not be exact. 0: no limit.
  int max_states_per_position = 64;
  // `milp`: CBC's time limit (per solve; an infeasible budget adds a second solve that
  // minimises the peak), and the largest number of cut candidates it is given.
  double milp_time_limit_seconds = 20;
  int milp_max_candidates = 60;
  // `auto`: also run milp on graphs with at most this many nodes (0: never).
  int auto_milp_max_nodes = 0;
  // `auto`, the smallest-peak answer and the sweep also run selective on graphs with at most
  // this many nodes. Its search replays the step a few hundred times, which is seconds on real
  // models (swin_t, 8,064 nodes: under 1 s) and minutes on synthetic graphs of 10^5 nodes and
  // more; `--strategy selective` still runs it on any graph.
  int auto_selective_max_nodes = 50000;
  // `selective`: the resolution of its search. Each point of the search aims the baseline peak
  // / levels below the last (1 B at least), levels being this or, on small graphs, 65536 /
  // nodes if more; a plan may free up to that much more than the budget needs. More levels
  // cost more points (about 3 replays each).
  int selective_levels = 256;
  // `selective`: the replays each point of its search may spend improving on its greedy drops
  // (exchanges, rebuilds, escapes: selective_search.cc). -1: by the graph's size, up to 64 on
  // small graphs and 0 on graphs of thousands of nodes, which then plan in about a second.
  int selective_replays_per_point = -1;
  // `offload` (plan.h): the pinned host memory its offloaded storages may hold at once (<= 0: no
  // limit), and the link they cross (memplan plan --link-rate; DefaultLinkRates).
  int64_t host_budget_bytes = 0;
  LinkRates link = DefaultLinkRates("cpu");
  // `auto` also runs `offload` (the executor does not carry out offload plans yet, so a plan
  // that a run must execute is not offloaded unless asked; the command line sets it with
  // --host-budget).
  bool auto_offload = false;
  // The selective search's trajectories, shared by the plans of one request (PlanForBudget sets
  // it): a budget's trajectory is the start of a lower budget's, so each point is searched once.
  // nullptr: none (every plan searches from the plain step).
  planner::SelectiveMemo* selective_memo = nullptr;
};

// One function per strategy family. Each returns a replayed plan; `feasible` says whether its
// peak fits the budget. They throw MemplanError on bad user input (unknown checkpoint names).
Plan PlanNone(const TrainingGraph& g, const CostModel& cost, const PlanOptions& options);
Plan PlanManual(const TrainingGraph& g, const CostModel& cost, const PlanOptions& options);
// memory_saving_gradients 'speed': cut after the outputs of the expensive ops (contractions:
// at least kExpensiveFlopsPerElement FLOPs per output element: conv, matmul, gemm, einsum).
Plan PlanSpeed(const TrainingGraph& g, const CostModel& cost, const PlanOptions& options);
// memory_saving_gradients 'memory': about sqrt(#activations) evenly spaced bottlenecks.
Plan PlanBottleneck(const TrainingGraph& g, const CostModel& cost, const PlanOptions& options);
// Chen et al.: sqrt(N) segments of the node order, each cut moved to the cheapest nearby
// position (a bottleneck when one is near).
Plan PlanSqrt(const TrainingGraph& g, const CostModel& cost, const PlanOptions& options);
// partialflow: the fewest contiguous sections whose replayed peak fits the budget (exact over
// the same candidate cuts as `optimal`; among the fewest, the least recompute).
Plan PlanSections(const TrainingGraph& g, const CostModel& cost, const PlanOptions& options);
// Least recompute FLOPs subject to peak <= budget, exact over the candidate cut positions
// (see optimal.cc for the precise claim). Without a feasible segmentation: the plan with the
// smallest peak the DP finds, feasible = false.
Plan PlanOptimal(const TrainingGraph& g, const CostModel& cost, const PlanOptions& options);
// The same problem as a mixed-integer program solved by COIN-OR CBC under a time limit
// (a reference for `optimal`). Throws MemplanError when memplan was built without CBC.
Plan PlanMilp(const TrainingGraph& g, const CostModel& cost, const PlanOptions& options);
bool MilpAvailable();
// Selective recompute (plan.h): the activation storages to drop and recompute in the backward,
// chosen for the least predicted recompute seconds (CostModel::node_seconds, counting every
// recompute step of the replayed schedule) with the replayed peak <= budget. A heuristic (see
// selective_search.cc): cheapest seconds per byte freed first, then keeping again the most
// expensive while the replay fits. Its peak is monotone in the budget: a smaller budget never
// gets a plan with a larger peak. Without a fitting plan: the smallest peak its search
// reaches, feasible = false. No segment-border margin (one autograd graph, no new leaves).
// `auto` never picks it: only when named.
Plan PlanSelective(const TrainingGraph& g, const CostModel& cost, const PlanOptions& options);
// Offload (plan.h): keep, recompute or offload each saved activation storage, for the least
// predicted step time (recompute seconds + copy stall, SimulateStreams at options.link) with the
// device peak <= budget_bytes and the host peak <= host_budget_bytes. A heuristic (offload.cc);
// never slower, as predicted, than `selective`'s recompute-only plan for the same budget, which
// it returns when that is faster. Without a fitting plan: the smallest peak it reached,
// feasible = false.
Plan PlanOffload(const TrainingGraph& g, const CostModel& cost, const PlanOptions& options);

// An exact reference for `selective` on graphs of up to a few hundred nodes (selective_exact.cc:
// logic-based Benders on COIN-OR CBC, every candidate drop set replayed): the drop set of least
// predicted recompute seconds whose replayed peak fits options.budget_bytes, or a lower bound on
// it when the time limit ends the search first. Beyond a few hundred nodes it rarely proves
// optimality within minutes. Throws MemplanError when memplan was built without CBC.
struct SelectiveExactOptions {
  double time_limit_seconds = 60;
  int max_iterations = 100000;   // MILP solves
  bool seed_with_search = true;  // `selective`'s plan as the first incumbent (a cutoff)
};
struct SelectiveExactResult {
  Plan plan;  // strategy "selective-exact": the best fitting drop set found, else the plain step
  bool found = false;      // some drop set fits the budget
  bool proven = false;     // plan is optimal (!found: no drop set fits)
  double lower_bound = 0;  // seconds no fitting drop set goes below (== the plan's when proven)
  int iterations = 0;      // MILP solves
  int replays = 0;         // drop sets replayed
  int cuts = 0;            // no-good cuts added
};
SelectiveExactResult PlanSelectiveExact(const TrainingGraph& g, const CostModel& cost,
                                        const PlanOptions& options,
                                        const SelectiveExactOptions& exact = {});
// The reference's relaxation of one drop set (for tests of its validity): bytes per step of
// the plain schedule (never above the replay's at the same non-recompute step), seconds (never
// above the replay's), and whether the set is canonical (every dropped storage no backward op
// saves is read by the producer of another dropped one).
struct SelectiveRelaxation {
  std::vector<int64_t> bytes;
  double seconds = 0;
  bool canonical = false;
};
SelectiveRelaxation RelaxSelective(const TrainingGraph& g, const CostModel& cost,
                                   const std::vector<TensorId>& dropped,
                                   const SimulatorOptions& sim = {});

// The margin a segmented plan keeps under its budget. When the gradient of a checkpoint comes
// back through an op that hands one gradient to several inputs (a residual Add, Concat),
// LibTorch's AccumulateGrad copies it into the checkpoint's .grad because the tensor is
// shared, where the plain step passes it through: measured +12.25 MiB on resnext50_32x4d at
// batch 4 (one [4,256,56,56] gradient). The schedule does not model that copy yet; the
// margin is the largest such gradient. 0 for a graph without such ops.
int64_t SegmentBorderMargin(const TrainingGraph& g);

// Dispatches on options.strategy; `auto` runs every strategy that is cheap enough for the
// graph and returns the feasible plan with the least recompute (ties: the smaller peak), or,
// when none is feasible, the plan with the smallest peak. Its predicted_peak_bytes counts the
// graph's workspace margins (Node::*_workspace_margin_bytes: rules unverified on its CPU kernels)
// as bytes, as every strategy plans them; PlanForBudget reports them apart (Plan::margin_bytes).
Plan MakePlan(const TrainingGraph& g, const CostModel& cost, const PlanOptions& options);
const std::vector<std::string>& StrategyNames();  // including "auto"

// FLOPs per output element from which an op counts as expensive for `speed`.
constexpr double kExpensiveFlopsPerElement = 16;

// Micro-batching (plan.h): `graph_at_batch(b)` loads the model at batch b (injected, so the
// planner does no I/O). With micro_batches = k > 0 the batch is split into k micro-batches
// (k must divide the batch). Each micro-batch graph is planned against the budget less the
// other micro-batches' resident inputs. With k = 0 the planner searches the divisors of the batch
// in increasing order and returns the plan with the fewest micro-batches that fits the budget (the
// strategy's plan at k = 1 when it fits), or, when none fits, the strategy's answer (for auto: the
// smallest-peak plan) at the largest k (or at k = 1 when that peak is smaller). A named strategy's
// plan is never replaced by another strategy's. Feasibility is taken to be monotone in k (a smaller
// micro-batch never needs more memory), so the search bisects the divisors: at most 2 +
// log2(#divisors) plans, whatever the batch. The plan's peak is replayed on the micro-batch graph
// with the rest of the batch resident; its FLOPs are per step (k micro-batches).
using GraphAtBatch = std::function<TrainingGraph(int64_t batch)>;
Plan PlanMicroBatched(const GraphAtBatch& graph_at_batch, int64_t batch, const CostModel& cost,
                      const PlanOptions& options, int64_t micro_batches = 0);
// The plan of the same options that fits the smallest budget (SmallestPeakPlan on each
// micro-batch graph tried, planned against the budget the resident inputs leave): at k
// micro-batches, or with k = 0 the better of the whole batch and the largest divisor (a smaller
// micro-batch never needs more memory). Its budget_bytes and feasible are for options'.
Plan SmallestPeakMicroBatched(const GraphAtBatch& graph_at_batch, int64_t batch,
                              const CostModel& cost, const PlanOptions& options,
                              int64_t micro_batches = 0);
// A peak that no plan of g on one device goes below at g's batch, whatever it keeps,
// recomputes or offloads: the persistent tensors (parameters, constants, the batch) and, at the
// forward node where they are largest, the storages its forward reads and writes and its
// workspace, which the device holds together whenever that node runs. Exact bytes (the CUDA
// caching allocator's rounding only adds). SmallestPeakMicroBatched skips the whole batch when
// the largest micro-batch count already reaches under it.
int64_t PeakLowerBound(const TrainingGraph& g);
// Turns a plan made on the micro-batch graph `micro` into a k-micro-batch plan: the rest of the
// batch's inputs are resident from the setup step; FLOPs are scaled to the whole step.
void ApplyMicroBatches(Plan& p, const TrainingGraph& micro, int64_t micro_batches,
                       const SimulatorOptions& simulator);
// Whether `g` normalises with statistics of the batch (training-mode batch normalisation), so
// that micro-batches change what it computes; below this many samples per micro-batch the plan
// notes a warning.
bool UsesBatchStatistics(const TrainingGraph& g);

// The gradient lifetime a step runs with, given the one asked for (--grads). Micro-batches
// after the first accumulate into the gradients the first one created, and data-parallel
// ranks keep their buckets' gradients between steps (DDP's reducer holds its buckets whatever
// zero_grad does to .grad): both step as with kept gradients, whose peak is theirs.
GradientLifetime SteppedGradients(GradientLifetime asked, int64_t devices, int64_t micro_batches);
constexpr int64_t kFewestSamplesForBatchStatistics = 8;
// The divisors of n >= 1 in increasing order, from its prime factors (fast for any int64).
std::vector<int64_t> Divisors(int64_t n);

// The plan that fits the smallest budget (its peak + margin): with strategy auto, over every
// strategy (the plain step, optimal's minimum over its candidates, sections, the heuristics,
// selective on graphs auto runs it on); with a named strategy, that strategy's own least. Its
// budget_bytes and feasible are for options.budget_bytes.
Plan SmallestPeakPlan(const TrainingGraph& g, const CostModel& cost, const PlanOptions& options);

// The Pareto curve of budget vs recompute vs peak, from the baseline peak down to the
// smallest feasible budget.
struct SweepPoint {
  int64_t budget_bytes = 0;
  std::string strategy;  // the strategy whose plan this is
  int64_t peak_bytes = 0;
  double recompute_flops = 0;
  double recompute_seconds = 0;  // the plan's predicted_recompute_seconds
  double overhead = 0;           // recompute FLOPs / forward FLOPs
  int num_checkpoints = 0;
  int num_sections = 0;
  double solve_seconds = 0;
  int micro_batches = 1;           // PlanForBudget's sweep splits the batch where the options allow
  double micro_batch_seconds = 0;  // the plan's predicted_micro_batch_seconds
  // Offload: the storages the plan offloads and its predicted stall (in the JSON only when > 0).
  int num_offloaded = 0;
  double stall_seconds = 0;
  double overhead_seconds() const {
    return recompute_seconds + micro_batch_seconds + stall_seconds;
  }
};
// A plan as a point of the sweep at `budget_bytes`.
SweepPoint SweepPointOf(const Plan& p, int64_t budget_bytes);
// The points no other point beats on both peak and overhead seconds, in their order.
std::vector<SweepPoint> ParetoFront(std::vector<SweepPoint> all);
struct SweepResult {
  int64_t baseline_peak_bytes = 0;
  // The smallest budget a plan fits (peak + margin): of options.strategy, or of any strategy
  // for auto (SmallestPeakPlan). PlanForBudget replaces it with its own answer for the same
  // options (micro-batches, devices), so that the sweep and the plan say one thing.
  int64_t min_budget_bytes = 0;
  std::string min_budget_strategy;  // and which
  std::vector<SweepPoint> points;   // budgets descending, Pareto-optimal points only
};
// `options.strategy` picks the strategy per budget (auto: the best of them).
SweepResult SweepBudgets(const TrainingGraph& g, const CostModel& cost, const PlanOptions& options,
                         int num_budgets = 12);
nlohmann::json SweepToJson(const SweepResult& s);
// The reverse, for readers of plan files (`memplan plan --sweep` writes it under "sweep"). Every
// field SweepToJson writes is required; throws MemplanError naming the missing or mistyped one
// ("field 'points[2].peak_bytes' is missing").
SweepResult SweepFromJson(const nlohmann::json& j);

// Data parallelism (plan.h's contract): rewrites `p`, a plan made on the rank's graph
// `rank_graph` (loaded at p.batch, after ApplyMicroBatches when micro-batched), into the
// per-rank plan of `layout`: the setup's persistent buffers become the layout's buckets and
// shards, the communication phase and the sharded optimizer are added, and the schedule is
// replayed (timeline, peak, feasibility against p.budget_bytes less p.margin_bytes), the
// collectives' seconds predicted (Plan::predicted_comm_seconds) and p.layout recorded.
// devices = 1 leaves `p` as it is (but for p.layout). Throws MemplanError for devices < 1,
// bucket_bytes < 1, and shard `parameters` with a selective plan (its recompute runs inside the
// backward, where no gather span is defined yet).
void ApplyDataParallel(Plan& p, const TrainingGraph& rank_graph, const ParallelLayout& layout,
                       const SimulatorOptions& sim = {});
// ApplyDataParallel's rewrite of a schedule, without the replay: `s` (a one-device schedule of
// `rank_graph` in `segments`, empty: one; setup first, optimizer last) becomes the rank's. The
// executor carries out the same steps: with shard parameters, each gather is a communication step
// allocating a buffer whose `bucket` names it, each release the step that frees that buffer.
// Returns the all-gathers per bucket and step (empty but with shard parameters).
std::vector<int64_t> AddDataParallelSteps(Schedule& s, const TrainingGraph& rank_graph,
                                          const std::vector<std::vector<NodeId>>& segments,
                                          int64_t micro_batches, const ParallelLayout& layout);

// A rank's persistent bytes for its trained parameters under a layout (plan.h's table, summed
// over the buckets): what the setup step of ApplyDataParallel allocates for them. Parameters
// without a gradient, constants and inputs are not counted.
struct RankPersistent {
  int64_t parameters = 0;
  int64_t gradients = 0;  // shard gradients: the reduced shards (the flat gradients come and go)
  int64_t optimizer_state = 0;
  int64_t total() const { return parameters + gradients + optimizer_state; }
};
RankPersistent RankPersistentBytes(const TrainingGraph& g, const ParallelLayout& layout);

// Seconds of the collectives of one step under `layout` (ParallelLayout's time model) for
// buckets of these padded bytes. 0 for one device. Shard parameters: gathers[b] all-gathers of
// bucket b per step (ApplyDataParallel counts its gather spans; a bucket without a count: 2, one
// in the forward and one in the backward).
double PredictCommSeconds(const std::vector<ParameterBucket>& buckets, const ParallelLayout& layout,
                          const std::vector<int64_t>& gathers = {});

// Shard gradients and parameters: the module unit of trained parameter `pid` (a bucket never
// splits one; plan.h's ParameterBucket): the module scope the exporter keeps in the name of the
// first node reading it ("/layer1/layer1.0/conv1/Conv" -> "/layer1/layer1.0/conv1"; "/Add" -> "",
// the root module's own parameters). A parameter nothing reads, or whose first reader's name has
// no scope, is a unit of its own (a name no scope can equal).
std::string ModuleUnitOf(const TrainingGraph& g, TensorId pid);

// Shard parameters (ZeRO-3, plan.h): the facts the planner's gather spans and the executor's
// gathers both read.
// Per tensor, the index of the bucket holding it, or -1.
std::vector<int> BucketOfTensor(const TrainingGraph& g,
                                const std::vector<ParameterBucket>& buckets);
// The buckets whose parameters `n` reads, directly or through a view of one (its inputs'
// storages), ascending. A folded node (every output a constant) runs nowhere and reads none.
std::vector<int> BucketsReadBy(const TrainingGraph& g, const Node& n,
                               const std::vector<int>& bucket_of);

// The one entry point for "plan this model for this budget", shared by the command line and
// the GUI so that both answer the same budget with the same plan.
struct BudgetPlanOptions {
  // The budget as the user gave it (memplan/parse.h's ParseBudget): a size, or a percentage of
  // the plain step's peak (replayed with plan.simulator). Neither (bytes and percent 0): no
  // budget, or with `sweep` the smallest budget the sweep reaches.
  Budget budget;
  // Strategy, checkpoints, time limit, simulator. Its budget_bytes is ignored: the budget
  // comes from `budget`.
  PlanOptions plan;
  // 0 (auto): plan the whole batch, and when no plan fits, split the batch into the fewest
  // micro-batches that fit (PlanMicroBatched's search). k >= 1: exactly k micro-batches
  // (k must divide the batch; 1 never splits).
  int64_t micro_batches = 0;
  // Also compute the budget sweep (SweepBudgets on the whole batch).
  bool sweep = false;
  // Data parallelism (plan.h): layout.devices = N ranks, each planned on the graph at batch / N
  // (batch / (N k) with k micro-batches; N must divide the batch) and rewritten by
  // ApplyDataParallel. The budget is per device; a percentage is of the one-device plain
  // step's peak at the whole batch. The sweep stays the one-device sweep of the whole batch.
  ParallelLayout layout;
  // Search the smallest budget (BudgetPlan::smallest) even when the plan fits: every strategy
  // once more with nothing fitting, about as long as planning (the command line does; an
  // interactive re-plan may not). When the plan does not fit it is always searched.
  bool search_smallest = true;
  // Planning for a CUDA device: every graph (g and those graph_at_batch loads) must carry its
  // library workspaces (TrainingGraph::library_workspace_bytes); plans then get their reserved
  // peak through the caching allocator model, and with budget_reserved the budget bounds it (the
  // strategies plan the allocated peak against a budget lowered until the reserved one fits).
  // One device only; with devices > 1 the budget bounds the allocated peak.
  std::optional<CudaDevice> cuda;
  // Planning on the CPU: the device the graphs were loaded for (its kernels are the graphs'
  // cpu_kernels), recorded in the plans (Plan::cpu_device); unset: this machine as the analyzer
  // detects it (CpuDeviceOfThisMachine), with the graph's kernels.
  std::optional<CpuDevice> cpu;
  bool budget_reserved = true;
  // With devices > 1: ignore layout.shard and try none, optimizer and gradients, keeping the
  // plan that fits with the least predicted recompute + communication seconds (ties: that
  // order); the plan's notes say what was chosen.
  bool shard_auto = false;
};

struct BudgetPlan {
  int64_t budget_bytes = 0;  // the budget resolved to bytes (0: no budget)
  // The plan: feasible when one fits. When none does, the requested strategy's answer on the
  // whole batch (or at k micro-batches when k was given), with feasible = false.
  Plan plan;
  // The plan that fits the smallest budget under the same options: of the strategy asked for
  // (auto: of any strategy), at the micro-batch counts allowed (SmallestPeakMicroBatched; with
  // devices > 1 per rank, over the shard modes tried). Never needs more than `plan`.
  Plan smallest;
  // Whether `smallest` was searched (always on one device; with devices > 1 only when nothing
  // fits). When not, it is `plan` and smallest_budget_bytes() is only an upper bound.
  bool smallest_searched = false;
  // A named strategy whose plan does not fit: auto's plan under the same options when that
  // fits (for the message "strategy X fits"); empty schedule otherwise.
  Plan alternative;
  // When BudgetPlanOptions::sweep: on one device, what this call answers (the same options,
  // micro-batches included) for budgets from the plain step's peak down to
  // smallest_budget_bytes(), its min_budget_bytes; with devices > 1, the one-device sweep of the
  // whole batch with min_budget_bytes = smallest_budget_bytes().
  SweepResult sweep;
  // The smallest budget that `smallest` fits (its peak plus its margin).
  int64_t smallest_budget_bytes() const { return smallest.budget_needed_bytes(); }
};

// Resolves the budget, plans `g` (loaded at its batch) and falls back to micro-batching as
// BudgetPlanOptions says. `graph_at_batch(b)` loads the same model at batch b (called for
// micro-batching and for the ranks' share of the batch). Its plans predict without the workspace
// margins and keep them in margin_bytes (workspace_margin_bytes, margin_by_op), and record the
// device (BudgetPlanOptions::cuda or cpu). Pure: no I/O beyond what graph_at_batch does. Throws
// MemplanError on bad user input (unknown checkpoint names, a micro-batch or device count that does
// not divide the batch, shard parameters).
BudgetPlan PlanForBudget(const TrainingGraph& g, const GraphAtBatch& graph_at_batch,
                         const CostModel& cost, const BudgetPlanOptions& options);

}  // namespace memplan
