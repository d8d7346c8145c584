// What `memplan plan --json` writes ("kind": "plan", DESIGN.md's contract) as a value type, with
// its one writer and one reader (beside PlanToJson in plan_json.cc). PlanToJson writes the
// report of a plan (PlanReportOf); the command line adds the CUDA prediction, the time model,
// the sweep and the smallest budget to it. The GUI reads plan files with PlanReportFromJson
// only; `memplan run --plan` and the GUI replay a plan with PlanFromJson (plan.h), which checks
// it against the model.
//
// As AnalysisReport (analysis_report.h): every field but "kind" is optional when read, so that
// files of older versions open; a field of the wrong type throws MemplanError naming it; writing
// what was read gives the same JSON.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "memplan/analysis_report.h"
#include "memplan/planner.h"
#include "memplan/training_graph.h"

namespace memplan {

struct Plan;

// One strategy `auto` tried ("candidates").
struct PlanCandidateReport {
  std::string strategy;
  int64_t predicted_peak_bytes = 0;
  int64_t margin_bytes = 0;
  int64_t sections = 1;
  bool feasible = false;
  double predicted_recompute_seconds = 0;
  double recompute_flops = 0;

  bool operator==(const PlanCandidateReport&) const = default;
};

// How the plan's seconds were predicted ("time_model", written by `memplan plan`).
struct PlanTimeModel {
  nlohmann::json rates;  // MachineRatesToJson; read back by MachineRatesFromJson
  std::string rates_source;
  std::optional<std::string> costs;  // the --costs profile; null without

  bool operator==(const PlanTimeModel&) const = default;
};

struct PlanReport {
  std::optional<std::string> memplan_version;
  std::optional<std::string> model;
  std::optional<int64_t> batch;            // the step's: micro_batch x micro_batches x devices
  std::optional<int64_t> micro_batches;    // at least 1
  std::optional<int64_t> micro_batch;      // the batch the plan's graph is loaded at
  std::optional<std::string> fingerprint;  // ModelFingerprint of that graph
  std::optional<std::string> structure_fingerprint;
  std::optional<std::string> optimizer;  // OptimizerName
  std::optional<std::string> grads;      // GradientLifetimeName of the plan's graph
  std::optional<std::string> loss;       // LossKindName
  // The symbolic dims bound by --dim other than the batch's (sequence length, image size...):
  // a run loads the model with them.
  std::optional<std::map<std::string, int64_t>> dims;
  std::optional<int64_t> num_nodes;
  std::optional<std::string> strategy;
  std::optional<int64_t> budget_bytes;
  std::optional<int64_t> predicted_peak_bytes;
  std::optional<int64_t> baseline_peak_bytes;
  std::optional<double> recompute_flops;
  std::optional<double> forward_flops;
  std::optional<double> predicted_recompute_seconds;
  std::optional<double> predicted_micro_batch_seconds;
  std::optional<double> overhead;                                 // Plan::overhead()
  std::optional<std::vector<std::string>> checkpoints;            // tensor names
  std::optional<std::vector<std::vector<std::string>>> sections;  // node names per section
  std::optional<std::vector<std::string>> recomputed;             // tensor names
  // Offload (plan.h), only in plans that offload: the storages' tensor names, the host peak,
  // the copies' stall, and "offload": {host_budget_bytes, device_to_host_bytes_per_second,
  // host_to_device_bytes_per_second, storages: [{tensor, free_after, prefetch_at (node names),
  // offload_step, free_step, prefetch_step, ready_step (indices into the schedule: the start and
  // wait steps of each copy)}]}.
  std::optional<std::vector<std::string>> offloaded;
  std::optional<int64_t> predicted_host_peak_bytes;
  std::optional<double> predicted_stall_seconds;
  std::optional<nlohmann::json> offload;
  std::optional<int64_t> margin_bytes;
  // Plan::workspace_margin_bytes and margin_by_op (only where a margin was kept).
  std::optional<int64_t> workspace_margin_bytes;
  std::optional<std::map<std::string, int64_t>> margin_by_op;
  // The device the plan was made for (Plan::device_fingerprint, device_summary); on the CPU,
  // `memplan plan` adds "cpu_device" (CpuDeviceSummaryJson).
  std::optional<std::string> device_fingerprint;
  std::optional<std::string> device_summary;
  std::optional<nlohmann::json> cpu_device;
  std::optional<bool> feasible;
  std::optional<double> solve_seconds;
  std::optional<std::map<std::string, int64_t>> breakdown;  // bytes by MemoryCategoryName
  std::optional<std::string> peak_event;
  std::optional<std::vector<std::string>> notes;
  std::optional<std::vector<TimelinePoint>> timeline;
  // On CUDA (PlanOptions' budget_of set).
  std::optional<int64_t> predicted_reserved_peak_bytes;
  std::optional<std::string> budget_of;
  std::optional<std::vector<PlanCandidateReport>> candidates;  // `auto`
  // Data parallelism (devices > 1), as PlanLayout reads it (plan.h): devices, shard,
  // bucket_bytes, link figures, the buckets' parameter names, comm_seconds.
  std::optional<nlohmann::json> layout;
  // Added by `memplan plan`.
  std::optional<DevicePrediction> device;  // --device cuda (no reserved_peak_bytes)
  std::optional<PlanTimeModel> time_model;
  std::optional<SweepResult> sweep;  // --sweep (SweepToJson's schema)
  std::optional<int64_t> smallest_budget_bytes;
  std::optional<std::string> smallest_budget_strategy;
  std::optional<int64_t> smallest_budget_micro_batches;
};

// The report of `p`, made on `g` (the graph at p.batch).
PlanReport PlanReportOf(const Plan& p, const TrainingGraph& g);
nlohmann::json PlanReportToJson(const PlanReport& r);
// "kind" must be "plan". The layout is checked by PlanLayout, the time model's rates by
// MachineRatesFromJson and the sweep by SweepFromJson. The plan a run file holds (its "plan":
// PlanToJson's without the timeline, or the plain step's {"strategy": "none", ...}) may lack
// "kind": read it with require_kind false.
PlanReport PlanReportFromJson(const nlohmann::json& j, bool require_kind = true);

// The options a plan's graph is loaded with, as `memplan run --plan` and the GUI load it:
// `options` (the user's; its batch the whole step's when `given.batch`) with the plan's
// micro-batch, dims, optimizer, gradients and loss where the user did not name them. Throws
// MemplanError when the plan's split (micro-batches x devices) does not divide the user's batch.
struct PlanLoadOverrides {
  bool batch = false;
  bool optimizer = false;
  bool grads = false;
  bool loss = false;
};
LoadOptions LoadOptionsForPlan(const nlohmann::json& plan, LoadOptions options,
                               const PlanLoadOverrides& given = {});

}  // namespace memplan
