// What `memplan run --json` writes ("kind": "run", DESIGN.md's contract) as a value type, with
// its one (de)serialisation. The command line fills a RunReport from the executor's RunResult;
// the GUI and any other reader parse run files with RunReportFromJson only.
//
// Torch-free and Qt-free: built as memplan_run_report in every configuration, so that the GUI
// (built without LibTorch) and the fuzz targets link it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "memplan/analysis_report.h"

namespace memplan {

// One step of the predicted timeline: the analyzer's (analysis_report.h).
using RunTimelinePoint = TimelinePoint;

// One measured event of the traced step (the executor's TraceEvent, with the node's name).
struct RunTraceEvent {
  std::string phase;        // "setup", "forward", "loss", "backward", "recompute", "optimizer"
  std::string node;         // "" for events without a node (backward, optimizer)
  std::string op;           // the autograd function of backward events, else ""
  int64_t bytes_after = 0;  // allocator bytes alive after the event
  int64_t peak_during = 0;  // highest allocator bytes seen during the event

  bool operator==(const RunTraceEvent&) const = default;
};

// One rank of a data-parallel run ("ranks" in the run JSON).
struct RunRank {
  int64_t rank = 0;
  int64_t measured_peak_bytes = 0;   // the rank's last step
  int64_t predicted_peak_bytes = 0;  // the per-rank plan's (ApplyDataParallel)
  std::vector<double> step_seconds;  // per step
  std::vector<double> comm_seconds;  // per step: time in the collectives

  bool operator==(const RunRank&) const = default;
};

// A run as the JSON holds it. Required fields are DESIGN.md's contract for runs ("kind",
// "memplan_version", "device", "steps", "measured_peak_bytes", "predicted_peak_bytes",
// "step_seconds", "recompute_seconds", "loss", "plan"); the others are std::optional: the
// command line sets all of them, and an unset one is not written.
struct RunReport {
  std::string memplan_version;
  std::string device;                // e.g. "cpu (LibTorch 2.5.1, 2 threads)"
  int64_t steps = 0;                 // training steps run
  int64_t measured_peak_bytes = 0;   // the last (steady-state) step's measured peak
  int64_t predicted_peak_bytes = 0;  // the simulator's peak of the schedule run
  // Per step, in order (equal lengths). A loss that is not finite is written as null (as
  // nlohmann writes any non-finite double) and read back as NaN.
  std::vector<double> step_seconds;
  std::vector<double> recompute_seconds;
  std::vector<double> loss;
  // The plan run, in the plan file's own schema (PlanToJson without "timeline"), or
  // {"strategy": "none", "sections": [], "checkpoints": []} for the plain step. Read back,
  // it is an object with a string "strategy", "checkpoints" (tensor names) and "sections"
  // (arrays of node names); its other fields are the plan's and read by the plan's reader.
  nlohmann::json plan;

  std::optional<std::string> model;
  std::optional<int64_t> batch;          // the whole batch: micro_batches x the graph's batch
  std::optional<int64_t> micro_batches;  // at least 1
  std::optional<std::string> optimizer;  // OptimizerName
  std::optional<std::string>
      grads;  // GradientLifetimeName: how the run treated gradients between steps
  std::optional<std::string> loss_kind;  // LossKindName
  std::optional<uint64_t> seed;
  std::optional<bool> random_weights;
  std::optional<int64_t> max_measured_peak_bytes;  // the highest step peak
  // (predicted - measured) / measured; 0 when either peak is 0.
  std::optional<double> prediction_error;
  std::optional<int64_t> persistent_bytes;         // alive between steps
  std::optional<std::vector<int64_t>> peak_bytes;  // per step
  std::optional<std::vector<int64_t>>
      reserved_peak_bytes;  // per step (CUDA reserved; CPU: = peak_bytes)
  // CUDA runs: the caching allocator's mode ("default" or "expandable_segments", from
  // PYTORCH_CUDA_ALLOC_CONF as the run set it), the reserved peak the model predicted for the
  // schedule run, and the cuBLAS/cuBLASLt workspaces the prediction includes.
  std::optional<std::string> allocator_mode;
  std::optional<int64_t> predicted_reserved_peak_bytes;
  std::optional<int64_t> workspace_bytes;
  // Offload runs: the last step's pinned host peak, the plan's, and per step the seconds the
  // compute stream waited for copies (CPU: the emulated link's; CUDA: 0, the device waits).
  std::optional<int64_t> measured_host_peak_bytes;
  std::optional<int64_t> predicted_host_peak_bytes;
  std::optional<std::vector<double>> stall_seconds;
  std::optional<std::vector<RunTimelinePoint>> predicted_timeline;
  std::optional<std::vector<RunTraceEvent>> measured_trace;  // runs with --trace
  // Data-parallel runs (written by rank 0): the device count (WORLD_SIZE), the shard mode
  // (ShardModeName) and every rank's figures in rank order; `loss` is then the mean over the
  // ranks, `batch` the whole batch and the top-level peaks rank 0's.
  std::optional<int64_t> devices;
  std::optional<std::string> shard;
  std::optional<std::vector<RunRank>> ranks;

  bool operator==(const RunReport&) const = default;
};

// The JSON `memplan run --json` writes.
nlohmann::json RunReportToJson(const RunReport& r);
// Reads a run JSON strictly: "kind" must be "run"; a required field missing, any field of the
// wrong type, a negative byte count or step count, or per-step arrays of unequal lengths throw
// MemplanError naming the field (e.g. "field 'predicted_timeline[3].bytes' is not a number").
RunReport RunReportFromJson(const nlohmann::json& j);
// A timeline as the analyzer's TimelineToJson writes it, as points (the same strictness).
std::vector<RunTimelinePoint> RunTimelineFromJson(const nlohmann::json& points);

// nlohmann's ADL hooks (j = report; report = j.get<RunReport>()).
void to_json(nlohmann::json& j, const RunReport& r);
void from_json(const nlohmann::json& j, RunReport& r);

}  // namespace memplan
