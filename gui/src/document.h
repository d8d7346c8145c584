// The dashboard's document layer: turns analyzer results and memplan's JSON files into the
// values the GUI displays. Qt-free, so that tests (and any other front end) can use it.
//
// It does no memory arithmetic of its own: totals, peaks and per-category series come from
// the analyzer's simulator (Simulate) or from the JSON the analyzer and planner wrote, and
// recompute overheads from the planner (Plan::overhead(), its "overhead" fields). "Alive at
// step" lists and lifetimes only read which buffers a schedule allocates and frees when
// (BufferSpans, AliveDuring). A selective plan's kept and recomputed bytes are its storages'
// own sizes added up: what it holds or drops, never a peak.
// Profiles are read by the profiler's one reader (ProfileFromJson); their per-phase and
// recompute times are Profile's own sums, and the measured overlay only places the profile's
// recorded bytes on the predicted steps.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "memplan/analyzer.h"
#include "memplan/cuda_device.h"
#include "memplan/profiler.h"
#include "memplan/training_graph.h"

namespace memplan {
struct SweepResult;
}

namespace memplan::gui {

enum class SourceKind { kModel, kAnalysis, kPlan, kRun, kProfile };
const char* SourceKindName(SourceKind k);

using CategoryBytes = std::array<int64_t, kNumMemoryCategories>;

// One copy of an offload plan on its copy stream (StreamTimeline::Copy, SimulateStreams'), for
// the link's occupancy: its direction, the storage, when its stream moves it, and where that
// falls on the step axis (a fraction into the step whose compute time it is).
struct LinkCopy {
  bool to_host = false;  // device to host (the offload); else host to device (the prefetch)
  std::string name;      // the storage's tensor
  int64_t bytes = 0;
  size_t start_step = 0;
  int64_t wait_step = -1;
  double begin_seconds = 0, end_seconds = 0;
  double begin_step = 0, end_step = 0;
};
// The copies of a stream replay of `s` on the step axis: a time in step i's compute (from the
// end of step i-1 to step_end[i]) falls at i plus the fraction of it passed.
std::vector<LinkCopy> LinkOccupancy(const TrainingGraph& g, const Schedule& s,
                                    const StreamTimeline& t);

// Bytes alive over a schedule, one entry per step (the simulator's "during" value: after the
// step's allocations, before its frees).
struct TimelineData {
  std::string label;
  std::vector<int64_t> bytes;
  std::vector<Phase> phases;
  std::vector<std::string> events;  // "forward /conv1/Conv (Conv)"
  std::vector<std::string> nodes;   // node name or ""
  // Per step and category; empty when the source has no per-category data (JSON files).
  std::vector<CategoryBytes> by_category;
  int64_t peak_bytes = 0;
  int64_t peak_step = 0;
  // Predictions for a CUDA device: the caching allocator model's reserved bytes per step
  // (SimulateReserved's reserved_during); empty elsewhere.
  std::vector<int64_t> reserved;
  int64_t reserved_peak_bytes = -1;
  // Offload plans: pinned host bytes per step (MemoryTimeline::host_bytes_during, or the plan
  // JSON's "host_bytes"; empty without host memory), and the copies on the link (empty when the
  // item has no schedule to replay the streams of).
  std::vector<int64_t> host_bytes;
  std::vector<LinkCopy> copies;

  size_t size() const { return bytes.size(); }
  bool has_categories() const { return !by_category.empty(); }
};

// A point of a plan sweep (peak vs recompute overhead), when a plan JSON carries one.
struct ParetoPoint {
  std::string strategy;
  int64_t budget_bytes = -1;
  int64_t peak_bytes = -1;
  double recompute_flops = 0;
  double overhead = 0;            // recompute_flops / forward_flops, as the planner reports it
  double recompute_seconds = -1;  // the plan's predicted_recompute_seconds; -1: not given
  bool feasible = true;
  // The sweep the point belongs to: the strategy it was asked for (the explorer sweeps the
  // chosen strategy and, when the planner offers it, `selective`); empty: a file's sweep.
  std::string series;
};
// The planner's sweep (from SweepBudgets, or a plan file's through SweepFromJson) as points of
// the series `series`.
std::vector<ParetoPoint> ParetoPoints(const SweepResult& sweep, const std::string& series);

// One strategy's result at a budget, for the plan explorer's comparison table.
struct StrategyRow {
  std::string strategy;
  int64_t peak_bytes = -1;
  double overhead = -1;
  int64_t checkpoints = -1;
  int64_t sections = -1;
  bool feasible = false;
  double solve_seconds = -1;
  int64_t recomputed = -1;        // storages a selective plan drops and recomputes
  double recompute_seconds = -1;  // the plan's predicted_recompute_seconds
};

// A selective plan's decision for one activation storage (plan.h, Plan::recomputed): kept from
// the forward, or dropped after its last forward reader and recomputed when the backward needs
// it. The spans are the analyzer's (BufferSpans) of the storage's buffers in the plan's
// schedule: its forward buffer, and each "(recomputed)" buffer holding the same tensor.
struct StorageDecision {
  TensorId tensor = kNone;
  std::string name;
  int64_t bytes = 0;        // its forward buffer's size in the schedule
  bool saved = false;       // a backward op saves it (or a view of it): a saved activation
  bool recomputed = false;  // dropped after the forward, recomputed in the backward
  bool offloaded = false;   // moved to pinned host memory and back (an offload plan)
  int32_t forward_begin = 0, forward_end = 0;                // steps, inclusive
  std::vector<std::pair<int32_t, int32_t>> recompute_spans;  // each recompute, until it is freed
  int recompute_count() const { return static_cast<int>(recompute_spans.size()); }
};

// Every saved activation of a selective plan (kept or dropped) and every other storage it
// drops, in TensorId order. `g` is the graph the schedule `s` runs; which storages a backward
// op saves is the analyzer's (GraphFacts), when each buffer lives is BufferSpans'. Storages
// of the loss node (never recomputed) are left out.
std::vector<StorageDecision> SelectiveStorages(const TrainingGraph& g, const Schedule& s,
                                               const std::vector<TensorId>& recomputed);

// The summary's counts of a selective plan, as `memplan plan` prints them: saved activations
// kept and recomputed, the storages no backward op saves that it drops (so that the recomputes
// reading them recompute them too), and the sizes of each added up (the storages' own bytes:
// what is held or dropped, not a peak).
struct SelectiveCounts {
  int64_t saved = 0, saved_bytes = 0;
  int64_t kept = 0, kept_bytes = 0;
  int64_t recomputed_saved = 0, recomputed_saved_bytes = 0;
  int64_t recomputed_unsaved = 0, recomputed_unsaved_bytes = 0;
  int64_t offloaded = 0, offloaded_bytes = 0;  // saved activations an offload plan moves to host
  int64_t recomputes = 0;  // recompute spans in all: a storage can be recomputed more than once
  int64_t recomputed() const { return recomputed_saved + recomputed_unsaved; }
};
SelectiveCounts CountSelective(const std::vector<StorageDecision>& storages);

// Everything the dashboard shows about one opened file. Unknown numbers are -1.
struct Item {
  SourceKind kind = SourceKind::kAnalysis;
  std::string path;
  std::string title;  // short name for lists and legends

  std::string model;
  int64_t batch = -1;
  std::string optimizer;
  // The rest of the training settings the file was made with (models: analysed with). Empty
  // or -1: the file does not say.
  std::string loss;   // LossKindName
  std::string grads;  // GradientLifetimeName: gradients between steps ("none" or "kept")
  std::map<std::string, int64_t> dims;
  int64_t micro_batches = -1;
  // The model's structure (StructureFingerprint): a plan's own, a run's plan's, or, for
  // models, computed from the graph. Says whether a plan was made for this model.
  std::string structure_fingerprint;
  int64_t num_nodes = -1;
  int64_t param_bytes = -1;
  double forward_flops = -1;

  int64_t baseline_peak_bytes = -1;  // the plain training step's peak
  std::string peak_event;
  bool has_breakdown = false;
  CategoryBytes breakdown{};  // at the peak of `timeline`

  // Plans (and the plan a run executed).
  std::string strategy;
  int64_t budget_bytes = -1;
  int64_t plan_peak_bytes = -1;
  double recompute_flops = -1;
  double overhead = -1;  // recompute_flops / forward_flops
  int feasible = -1;     // -1 unknown, 0, 1
  double solve_seconds = -1;
  std::vector<std::string> checkpoints;
  int64_t num_sections = -1;
  std::vector<ParetoPoint> sweep;
  std::vector<StrategyRow> strategies;
  double predicted_recompute_seconds = -1;  // the cost model's seconds for the recompute
  // Data parallelism (the plan's layout): every byte figure of a plan or run with devices > 1
  // is per rank. -1 / empty: one device.
  int64_t devices = -1;
  std::string shard;  // "none", "optimizer", "gradients"
  int64_t bucket_count = -1;
  double predicted_comm_seconds = -1;  // the plan's predicted communication per step
  // Data-parallel runs: every rank's measured and predicted peak and its last step's seconds.
  struct RankFigures {
    int64_t rank = 0;
    int64_t measured_peak_bytes = -1;
    int64_t predicted_peak_bytes = -1;
    double step_seconds = -1;
    double comm_seconds = -1;
  };
  std::vector<RankFigures> ranks;
  // Selective plans: the storages dropped after the forward and recomputed in the backward, by
  // name (the plan JSON's "recomputed"); for plans made here also by id, with every saved
  // activation's decision (SelectiveStorages).
  std::vector<std::string> recomputed;
  std::vector<TensorId> recomputed_ids;
  std::vector<StorageDecision> storages;
  // Offload plans (the plan JSON's "offloaded", "predicted_host_peak_bytes", "offload"...): the
  // storages moved to pinned host memory, by name; their bytes (their host buffers', when the
  // item has a schedule), the host peak and budget, the link's rates, and the stall.
  bool offload = false;  // the plan offloads or was planned by `offload`
  std::vector<std::string> offloaded;
  int64_t offloaded_bytes = -1;
  int64_t predicted_host_peak_bytes = -1;
  int64_t host_budget_bytes = -1;  // <= 0 in the file: no limit
  double predicted_stall_seconds = -1;
  double device_to_host_bytes_per_second = -1, host_to_device_bytes_per_second = -1;

  // Predictions for a CUDA device (`--device cuda`; models opened beside a CUDA run): the
  // caching allocator model's reserved peak beside the allocated one (baseline_peak_bytes,
  // plan_peak_bytes), what a plan's budget bounds, the allocator mode and the cuBLAS
  // workspaces in the prediction, and the context outside the allocator. Unknown: -1 / empty.
  std::string predicted_for;  // "cuda" (or "cuda:K") when the prediction is for a GPU
  int64_t predicted_reserved_peak_bytes = -1;
  std::string budget_of;  // "reserved" or "allocated"
  std::string allocator_mode;
  int64_t workspace_bytes = -1;
  int64_t context_bytes = -1;

  // Runs and profiles.
  std::string device;
  int64_t steps = -1;
  int64_t measured_peak_bytes = -1;
  int64_t run_predicted_peak_bytes = -1;
  double step_seconds = -1;
  double recompute_seconds = -1;
  std::vector<double> losses;
  // Memory by kind, as the run or profile measured it (-1: not measured). On a CPU only the
  // allocator's bytes (allocated). On a GPU: the caching allocator's allocated and reserved
  // (its segments) peaks, and, for CUPTI profiles, the device memory CUPTI saw cudaMalloc
  // hold (the profile's own peak_bytes and memory events). measured_peak_bytes is the
  // allocated one, the quantity the analyzer and planner predict.
  int64_t measured_reserved_peak_bytes = -1;
  int64_t device_memory_peak_bytes = -1;

  // Profiles ("kind": "profile"): the measured step as the profiler wrote it. The fields above
  // repeat its headline numbers (device, step_seconds, measured_peak_bytes = peak_bytes,
  // recompute_seconds = RecomputeSeconds()).
  std::shared_ptr<const Profile> profile;

  std::vector<std::string> bottlenecks;
  std::vector<std::string> notes;

  // The predicted timeline (analysis, plan, or the plan a run executed) and, for runs that
  // carry a trace, the measured one.
  std::shared_ptr<const TimelineData> timeline;
  std::shared_ptr<const TimelineData> measured;

  // Models (and plans made in the GUI): the schedule behind `timeline`, for replays (alive
  // tensors, lifetimes), with the tensors to highlight. Null for JSON files.
  std::shared_ptr<const Schedule> schedule;
  std::vector<TensorId> bottleneck_ids;
  std::vector<TensorId> checkpoint_ids;
  std::shared_ptr<const Analysis> analysis;  // models only
  // Plans made in the GUI: the planner's JSON of the plan, for "Save plan".
  std::string plan_json;
};

// How a model is analyzed when opened: the window's training settings.
struct ModelOptions {
  int64_t batch = 1;
  Optimizer optimizer = Optimizer::kSgd;
  LossKind loss = LossKind::kCrossEntropy;
  GradientLifetime grads = GradientLifetime::kNone;
  std::map<std::string, int64_t> dims{};
  // "" (the CPU) or "cuda": predict for a CUDA device (the cuBLAS workspaces, the caching
  // allocator's reserved bytes), with the environment's allocator settings as `memplan
  // analyze --device cuda` reads them.
  std::string device;
  // On CUDA: the caching allocator's mode the opened run or plan recorded ("default" or
  // "expandable_segments"); empty: PYTORCH_CUDA_ALLOC_CONF as `memplan run` would set it.
  std::string allocator_mode;
  bool operator==(const ModelOptions&) const = default;
};

// The CUDA device a window with `options` predicts for (CudaDeviceFromEnvironment, with the
// recorded allocator mode when there is one). Throws MemplanError as that does.
CudaDevice DeviceFor(const ModelOptions& options);

// The training settings a file was made with (plan, run, profile, analysis JSON), as the
// window adopts them; nullopt when it records no batch. Settings the file leaves out keep
// `defaults`' values.
std::optional<ModelOptions> SettingsOf(const Item& item, const ModelOptions& defaults = {});
// Why `item` does not belong in a window with `settings` and the model `model` (may be null):
// "batch 1, not 32", "optimizer adam, not sgd", "loss mse, not cross_entropy", "made for
// another model (structure ..., the model's ...)", "of another model (gpt.onnx, not
// resnet50.onnx)"; a profile's model is checked step by step where it is drawn
// (MeasuredOnSteps), not by name. Empty: it matches. Only what the item records is checked.
std::vector<std::string> SettingsMismatch(const Item& item, const ModelOptions& settings,
                                          const Item* model);
std::string SettingsText(const ModelOptions& settings);  // "batch 32 · sgd · cross_entropy"

// Opens a model (.onnx) or a memplan JSON file (analysis, plan, run, profile), deciding by
// content. Throws MemplanError whose message names the file and what is wrong.
Item LoadItem(const std::string& path, const ModelOptions& options = {});
Item ItemFromAnalysis(Analysis analysis, const std::string& path);
Item ItemFromJson(const nlohmann::json& j, const std::string& path);
Item ItemFromProfile(Profile profile, const std::string& path);

// The time a profile measured for a node: its kernels' time when the CUPTI backend recorded
// it (NodeProfile::device_seconds), else the host wall time (NodeProfile::seconds).
bool HasDeviceTimes(const Profile& p);
double MeasuredSeconds(const Profile& p, const NodeProfile& n);

// A profile's measured memory on the steps of a predicted timeline, so that it overlays the
// prediction step for step. Each predicted step names its phase and node; the profile's
// slices of the same scope (phase, node, micro-batch: a node runs in one segment, so the
// segment follows from the node; the k-th step of a (phase, node) is micro-batch k) give the
// measured value: the highest bytes alive during those slices (alive at their start, and after
// each memory event of the scope inside them; on CUPTI, after each event of the scope), the
// measured counterpart of the prediction's "during" bytes.
// Nothing is added up: every value is one of the profile's recorded byte counts. A step whose
// scope the profile lacks (another model or plan) repeats the previous value and is not
// counted in `matched_steps`.
struct MeasuredOverlay {
  std::shared_ptr<const TimelineData> timeline;  // null when no step matched
  size_t matched_steps = 0;
  size_t steps = 0;
};
MeasuredOverlay MeasuredOnSteps(const TimelineData& predicted, const Profile& profile,
                                const std::string& label);

// A timeline's predicted reserved bytes (TimelineData::reserved) as a timeline of their own,
// with its steps' phases and events; empty when it has none.
std::shared_ptr<const TimelineData> ReservedSeries(const TimelineData& t);

// A timeline from a schedule and its simulation, with per-category bytes replayed from the
// schedule's buffers.
TimelineData TimelineFromSchedule(const TrainingGraph& g, const Schedule& s,
                                  const MemoryTimeline& t, const std::string& label);

// Per step: bytes alive by category after the step's allocations: Simulate's bytes_during of
// the schedule restricted to each category's buffers.
std::vector<CategoryBytes> ReplayByCategory(const Schedule& s,
                                            AllocatorPolicy policy = AllocatorPolicy::kExact);

struct AliveBuffer {
  BufferId buffer = kNone;
  std::string name;
  MemoryCategory category = MemoryCategory::kActivation;
  int64_t bytes = 0;
};
// Buffers alive during `step` (its allocations done, its frees not yet), largest first.
std::vector<AliveBuffer> AliveAt(const Schedule& s, size_t step,
                                 AllocatorPolicy policy = AllocatorPolicy::kExact);

// One bar of the lifetimes (Gantt) view: a buffer alive from step `begin` to `end` inclusive.
struct LifetimeSpan {
  BufferId buffer = kNone;
  std::string name;
  MemoryCategory category = MemoryCategory::kActivation;
  int64_t bytes = 0;
  int32_t begin = 0;
  int32_t end = 0;
  bool recomputed = false;  // allocated by a recompute step
  bool bottleneck = false;  // holds a bottleneck tensor of the graph
  bool checkpoint = false;  // holds a tensor the plan keeps across segments
  // The row it is drawn in (a buffer id): its own buffer, except that the recomputed buffers
  // of a storage a selective plan drops share the row of its forward buffer.
  BufferId row = kNone;
  bool dropped = false;     // a span of a storage a selective plan drops: forward or recomputed
  int recompute_count = 0;  // dropped storages: how many times the backward recomputes it
  bool kept = false;        // the forward span of a saved activation a selective plan keeps
  // Offload (plan.h): a span of a storage an offload plan moves to pinned host memory, which
  // shares the row of its device buffer: the device span (allocation to the offload's wait),
  // the host span (`host`: the host buffer, from the offload's start to the prefetch's wait;
  // pinned host memory, never device memory), and the prefetched device span (`prefetched`:
  // from the prefetch's start until it is freed).
  bool offloaded = false;
  bool host = false;
  bool prefetched = false;
};
// What the lifetimes mark, by tensor.
struct LifetimeMarks {
  std::vector<TensorId> bottlenecks;
  std::vector<TensorId> checkpoints;
  // A selective plan's dropped storages (Plan::recomputed) and the saved activations it keeps.
  std::vector<TensorId> recomputed;
  std::vector<TensorId> kept;
};
struct LifetimeOptions {
  size_t max_buffers = 40;
  bool include_persistent = false;  // parameters, gradients, optimizer state, inputs, constants
  int32_t first_step = 0;           // only buffers alive somewhere in [first_step, last_step]
  int32_t last_step = -1;           // -1: the last step
};
// The largest rows' spans (every span of each chosen row), ordered by first step. A row is a
// buffer, or a dropped storage: its forward buffer with its recomputed buffers (same tensor), or
// an offloaded storage (a tensor with a host buffer in the schedule): its device buffer with its
// host buffer and its prefetched buffer.
std::vector<LifetimeSpan> Lifetimes(const Schedule& s, const LifetimeMarks& marks,
                                    const LifetimeOptions& options = {});
std::vector<LifetimeSpan> Lifetimes(const Schedule& s, const std::vector<TensorId>& bottlenecks,
                                    const std::vector<TensorId>& checkpoints,
                                    const LifetimeOptions& options = {});

// Indices of the points to draw so that at most about `max_points` remain: per bucket the
// first, the minimum and the maximum, in order; the global maximum is always kept.
std::vector<size_t> DownsampleIndices(const std::vector<int64_t>& values, size_t max_points);

// "1.48 GiB", or "—" for unknown (negative) values.
std::string BytesText(int64_t bytes);
std::string PercentText(double fraction);

}  // namespace memplan::gui
