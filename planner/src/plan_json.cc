// Plan (de)serialisation and the model fingerprint.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "memplan/hash.h"
#include "memplan/json_read.h"
#include "memplan/plan.h"
#include "memplan/plan_report.h"
#include "memplan/planner.h"
#include "planner_internal.h"

namespace memplan {

// The graph's nodes, edges and tensor names and dtypes; every tensor's shape, or only the
// initializers' (batch-independent) ones.
std::string GraphFingerprint(const TrainingGraph& g, bool every_shape, Fnv1a h) {
  h.Add(static_cast<int64_t>(g.nodes.size()));
  h.Add(static_cast<int64_t>(g.tensors.size()));
  for (const Node& n : g.nodes) {
    h.Add(n.name);
    h.Add(n.op_type);
    for (TensorId i : n.inputs) h.Add(static_cast<int64_t>(i));
    h.Add(int64_t{-1});
    for (TensorId o : n.outputs) h.Add(static_cast<int64_t>(o));
    h.Add(int64_t{-2});
  }
  for (const Tensor& t : g.tensors) {
    h.Add(t.name);
    h.Add(static_cast<int64_t>(t.dtype));
    const bool initializer = t.producer == kNone && (t.category == TensorCategory::kParameter ||
                                                     t.category == TensorCategory::kConstant);
    if (every_shape || initializer)
      for (int64_t d : t.shape) h.Add(d);
    h.Add(int64_t{-3});
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h.value()));
  return buf;
}

std::string StructureFingerprint(const TrainingGraph& g) {
  return GraphFingerprint(g, false, Fnv1a());
}

std::string ModelFingerprint(const TrainingGraph& g) {
  Fnv1a h;
  h.Add(g.batch);
  return GraphFingerprint(g, true, h);
}

nlohmann::json PlanToJson(const Plan& p, const TrainingGraph& g) {
  return PlanReportToJson(PlanReportOf(p, g));
}

namespace {

using nlohmann::json;

// The data-parallel layout as PlanLayout reads it.
json LayoutToJson(const Plan& p, const TrainingGraph& g) {
  nlohmann::json buckets = nlohmann::json::array();
  for (const ParameterBucket& b : ParameterBuckets(g, p.layout)) {
    nlohmann::json names = nlohmann::json::array();
    for (TensorId t : b.parameters) names.push_back(g.tensors[t].name);
    buckets.push_back(std::move(names));
  }
  nlohmann::json layout = {{"devices", p.layout.devices},
                           {"shard", ShardModeName(p.layout.shard)},
                           {"bucket_bytes", p.layout.bucket_bytes},
                           {"link_bytes_per_second", p.layout.link_bytes_per_second},
                           {"link_latency_seconds", p.layout.link_latency_seconds},
                           {"buckets", std::move(buckets)},
                           {"comm_seconds", p.predicted_comm_seconds}};
  if (p.layout.gradient_shards == GradientLifetime::kNone)
    layout["gradient_shards"] = GradientLifetimeName(p.layout.gradient_shards);
  if (p.layout.shard == ShardMode::kGradients || p.layout.shard == ShardMode::kParameters)
    layout["flat_gradient_at_reduce"] = FlatGradientAtReduce(p.layout);
  if (p.layout.runtime != ShardRuntime::kMemplan) {
    layout["runtime"] = ShardRuntimeName(p.layout.runtime);
    layout["staged_collectives"] = p.layout.staged_collectives;
  }
  return layout;
}

// Each offloaded storage's choice (node names) and where its copies are in the schedule.
json OffloadToJson(const Plan& p, const TrainingGraph& g) {
  json storages = json::array();
  for (const OffloadChoice& c : p.offloaded) {
    json e = {{"tensor", g.tensors[c.tensor].name},
              {"free_after", g.nodes[c.free_after].name},
              {"prefetch_at", c.prefetch_at >= static_cast<NodeId>(g.nodes.size())
                                  ? json(nullptr)
                                  : json(g.nodes[c.prefetch_at].name)}};
    for (size_t i = 0; i < p.schedule.steps.size(); ++i) {
      const Step& step = p.schedule.steps[i];
      if (step.copy_to < 0) continue;
      const bool offload = step.phase == Phase::kOffload;
      const BufferId host = offload ? step.copy_to : step.copy_from;
      if (p.schedule.buffers[host].tensor != c.tensor) continue;
      const char* key = offload ? (step.copy_wait ? "free_step" : "offload_step")
                                : (step.copy_wait ? "ready_step" : "prefetch_step");
      e[key] = static_cast<int64_t>(i);
    }
    storages.push_back(std::move(e));
  }
  return {{"host_budget_bytes", p.host_budget_bytes},
          {"device_to_host_bytes_per_second", p.link.device_to_host_bytes_per_second},
          {"host_to_device_bytes_per_second", p.link.host_to_device_bytes_per_second},
          {"storages", std::move(storages)}};
}

template <class T, class Write>
void WriteOptional(json& j, const char* key, const std::optional<T>& v, Write write) {
  if (v) j[key] = write(*v);
}
const auto Same = [](const auto& v) { return json(v); };

}  // namespace

PlanReport PlanReportOf(const Plan& p, const TrainingGraph& g) {
  PlanReport r;
  r.memplan_version = MEMPLAN_VERSION;
  r.model = p.model_path;
  r.batch = p.batch * p.micro_batches * p.layout.devices;  // the step's batch
  r.micro_batches = p.micro_batches;
  r.micro_batch = p.batch;
  r.fingerprint = p.model_fingerprint;
  r.structure_fingerprint = StructureFingerprint(g);
  r.optimizer = OptimizerName(g.optimizer);
  r.grads = GradientLifetimeName(g.grads);
  std::map<std::string, int64_t> dims(g.dims.begin(), g.dims.end());
  dims.erase(g.batch_dim);  // the batch is the plan's own field
  if (!dims.empty()) r.dims = std::move(dims);
  r.loss = LossKindName(g.loss_kind);
  r.num_nodes = static_cast<int64_t>(g.nodes.size());
  r.strategy = p.strategy;
  r.budget_bytes = p.budget_bytes;
  r.predicted_peak_bytes = p.predicted_peak_bytes;
  r.baseline_peak_bytes = p.baseline_peak_bytes;
  r.recompute_flops = p.recompute_flops;
  r.forward_flops = p.forward_flops;
  r.predicted_recompute_seconds = p.predicted_recompute_seconds;
  r.predicted_micro_batch_seconds = p.predicted_micro_batch_seconds;
  r.overhead = p.overhead();
  r.checkpoints.emplace();
  for (TensorId t : p.checkpoints) r.checkpoints->push_back(g.tensors[t].name);
  r.recomputed.emplace();
  for (TensorId t : p.recomputed) r.recomputed->push_back(g.tensors[t].name);
  if (!p.offloaded.empty() || p.strategy == "offload") {
    r.offloaded.emplace();
    for (const OffloadChoice& c : p.offloaded) r.offloaded->push_back(g.tensors[c.tensor].name);
    r.predicted_host_peak_bytes = p.predicted_host_peak_bytes;
    r.predicted_stall_seconds = p.predicted_stall_seconds;
    r.offload = OffloadToJson(p, g);
  }
  r.sections.emplace();
  if (p.segments.empty()) {
    std::vector<std::string> all;
    for (const Node& n : g.nodes) all.push_back(n.name);
    r.sections->push_back(std::move(all));
  } else {
    for (const std::vector<NodeId>& seg : p.segments) {
      std::vector<std::string> names;
      for (NodeId n : seg) names.push_back(g.nodes[n].name);
      r.sections->push_back(std::move(names));
    }
  }
  r.margin_bytes = p.margin_bytes;
  if (p.workspace_margin_bytes > 0) {
    r.workspace_margin_bytes = p.workspace_margin_bytes;
    r.margin_by_op = p.margin_by_op;
  }
  if (!p.device_fingerprint.empty()) r.device_fingerprint = p.device_fingerprint;
  if (p.cpu_device) r.cpu_device = CpuDeviceSummaryJson(*p.cpu_device);
  if (!p.device_summary.empty()) r.device_summary = p.device_summary;
  r.feasible = p.feasible;
  r.solve_seconds = p.solve_seconds;
  r.breakdown.emplace();
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    (*r.breakdown)[MemoryCategoryName(static_cast<MemoryCategory>(c))] =
        p.timeline.breakdown_at_peak[c];
  }
  r.peak_event = p.schedule.steps.empty() ? "" : p.schedule.StepLabel(g, p.timeline.peak_step);
  r.notes = p.notes;
  r.timeline = TimelinePoints(g, p.schedule, p.timeline);
  if (!p.budget_of.empty()) {
    r.predicted_reserved_peak_bytes = p.predicted_reserved_peak_bytes;
    r.budget_of = p.budget_of;
  }
  if (!p.candidates.empty()) {
    r.candidates.emplace();
    for (const PlanCandidate& c : p.candidates) {
      r.candidates->push_back({c.strategy, c.predicted_peak_bytes, c.margin_bytes, c.sections,
                               c.feasible, c.predicted_recompute_seconds, c.recompute_flops});
    }
  }
  if (p.layout.devices > 1) r.layout = LayoutToJson(p, g);
  return r;
}

json PlanReportToJson(const PlanReport& r) {
  json j = {{"kind", "plan"}};
  WriteOptional(j, "memplan_version", r.memplan_version, Same);
  WriteOptional(j, "model", r.model, Same);
  WriteOptional(j, "batch", r.batch, Same);
  WriteOptional(j, "micro_batches", r.micro_batches, Same);
  WriteOptional(j, "micro_batch", r.micro_batch, Same);
  WriteOptional(j, "fingerprint", r.fingerprint, Same);
  WriteOptional(j, "structure_fingerprint", r.structure_fingerprint, Same);
  WriteOptional(j, "optimizer", r.optimizer, Same);
  WriteOptional(j, "grads", r.grads, Same);
  WriteOptional(j, "loss", r.loss, Same);
  WriteOptional(j, "dims", r.dims, report_json::CountMapToJson);
  WriteOptional(j, "num_nodes", r.num_nodes, Same);
  WriteOptional(j, "strategy", r.strategy, Same);
  WriteOptional(j, "budget_bytes", r.budget_bytes, Same);
  WriteOptional(j, "predicted_peak_bytes", r.predicted_peak_bytes, Same);
  WriteOptional(j, "baseline_peak_bytes", r.baseline_peak_bytes, Same);
  WriteOptional(j, "recompute_flops", r.recompute_flops, Same);
  WriteOptional(j, "forward_flops", r.forward_flops, Same);
  WriteOptional(j, "predicted_recompute_seconds", r.predicted_recompute_seconds, Same);
  WriteOptional(j, "predicted_micro_batch_seconds", r.predicted_micro_batch_seconds, Same);
  WriteOptional(j, "overhead", r.overhead, Same);
  WriteOptional(j, "checkpoints", r.checkpoints, Same);
  WriteOptional(j, "sections", r.sections, Same);
  WriteOptional(j, "recomputed", r.recomputed, Same);
  WriteOptional(j, "offloaded", r.offloaded, Same);
  WriteOptional(j, "predicted_host_peak_bytes", r.predicted_host_peak_bytes, Same);
  WriteOptional(j, "predicted_stall_seconds", r.predicted_stall_seconds, Same);
  WriteOptional(j, "offload", r.offload, Same);
  WriteOptional(j, "margin_bytes", r.margin_bytes, Same);
  WriteOptional(j, "workspace_margin_bytes", r.workspace_margin_bytes, Same);
  WriteOptional(j, "margin_by_op", r.margin_by_op, report_json::CountMapToJson);
  WriteOptional(j, "device_fingerprint", r.device_fingerprint, Same);
  WriteOptional(j, "device_summary", r.device_summary, Same);
  WriteOptional(j, "cpu_device", r.cpu_device, Same);
  WriteOptional(j, "feasible", r.feasible, Same);
  WriteOptional(j, "solve_seconds", r.solve_seconds, Same);
  WriteOptional(j, "breakdown", r.breakdown, report_json::CountMapToJson);
  WriteOptional(j, "peak_event", r.peak_event, Same);
  WriteOptional(j, "notes", r.notes, Same);
  WriteOptional(j, "timeline", r.timeline, TimelinePointsToJson);
  WriteOptional(j, "predicted_reserved_peak_bytes", r.predicted_reserved_peak_bytes, Same);
  WriteOptional(j, "budget_of", r.budget_of, Same);
  WriteOptional(j, "candidates", r.candidates, [](const auto& v) {
    json out = json::array();
    for (const PlanCandidateReport& c : v) {
      out.push_back({{"strategy", c.strategy},
                     {"predicted_peak_bytes", c.predicted_peak_bytes},
                     {"margin_bytes", c.margin_bytes},
                     {"sections", c.sections},
                     {"feasible", c.feasible},
                     {"predicted_recompute_seconds", c.predicted_recompute_seconds},
                     {"recompute_flops", c.recompute_flops}});
    }
    return out;
  });
  WriteOptional(j, "layout", r.layout, Same);
  if (r.device) WriteDevicePrediction(j, *r.device);
  WriteOptional(j, "time_model", r.time_model, [](const PlanTimeModel& t) {
    return json{{"rates", t.rates},
                {"rates_source", t.rates_source},
                {"costs", t.costs ? json(*t.costs) : json(nullptr)}};
  });
  WriteOptional(j, "sweep", r.sweep, SweepToJson);
  WriteOptional(j, "smallest_budget_bytes", r.smallest_budget_bytes, Same);
  WriteOptional(j, "smallest_budget_strategy", r.smallest_budget_strategy, Same);
  WriteOptional(j, "smallest_budget_micro_batches", r.smallest_budget_micro_batches, Same);
  return j;
}

namespace {

PlanCandidateReport CandidateFromJson(const json& v, const std::string& field) {
  using namespace json_read;
  Object(v, field);
  PlanCandidateReport c;
  c.strategy = Get(v, field, "strategy", String);
  c.predicted_peak_bytes = Get(v, field, "predicted_peak_bytes", Count);
  c.margin_bytes = Get(v, field, "margin_bytes", Count);
  c.sections = Get(v, field, "sections", Count);
  c.feasible = Get(v, field, "feasible", Bool);
  c.predicted_recompute_seconds = Get(v, field, "predicted_recompute_seconds", Seconds);
  c.recompute_flops = Get(v, field, "recompute_flops", Real);
  return c;
}

PlanTimeModel TimeModelFromJson(const json& v, const std::string& field) {
  using namespace json_read;
  Object(v, field);
  PlanTimeModel t;
  t.rates = Object(Required(v, field, "rates"), Join(field, "rates"));
  try {
    MachineRatesFromJson(t.rates);
  } catch (const MemplanError& e) {
    Bad(Join(field, "rates"), std::string("is not a machine's rates: ") + e.what());
  }
  t.rates_source = Get(v, field, "rates_source", String);
  const json& costs = Required(v, field, "costs");
  if (!costs.is_null()) t.costs = String(costs, Join(field, "costs"));
  return t;
}

}  // namespace

PlanReport PlanReportFromJson(const json& j, bool require_kind) {
  using namespace json_read;
  Object(j, "");
  if (require_kind || j.contains("kind")) {
    const std::string kind = Get(j, "", "kind", String);
    if (kind != "plan") Bad("kind", "is \"" + kind + "\", not \"plan\"");
  }
  PlanReport r;
  const auto strings = ArrayOf(String);
  ReadOptional(j, "memplan_version", r.memplan_version, String);
  ReadOptional(j, "model", r.model, String);
  ReadOptional(j, "batch", r.batch, Count);
  ReadOptional(j, "micro_batches", r.micro_batches, Count);
  ReadOptional(j, "micro_batch", r.micro_batch, Count);
  ReadOptional(j, "fingerprint", r.fingerprint, String);
  ReadOptional(j, "structure_fingerprint", r.structure_fingerprint, String);
  ReadOptional(j, "optimizer", r.optimizer, String);
  ReadOptional(j, "grads", r.grads, String);
  ReadOptional(j, "loss", r.loss, String);
  ReadOptional(j, "dims", r.dims, report_json::CountMap);
  ReadOptional(j, "num_nodes", r.num_nodes, Count);
  ReadOptional(j, "strategy", r.strategy, String);
  ReadOptional(j, "budget_bytes", r.budget_bytes, Count);
  ReadOptional(j, "predicted_peak_bytes", r.predicted_peak_bytes, Count);
  ReadOptional(j, "baseline_peak_bytes", r.baseline_peak_bytes, Count);
  ReadOptional(j, "recompute_flops", r.recompute_flops, Real);
  ReadOptional(j, "forward_flops", r.forward_flops, Real);
  ReadOptional(j, "predicted_recompute_seconds", r.predicted_recompute_seconds, Seconds);
  ReadOptional(j, "predicted_micro_batch_seconds", r.predicted_micro_batch_seconds, Seconds);
  ReadOptional(j, "overhead", r.overhead, Real);
  ReadOptional(j, "checkpoints", r.checkpoints, strings);
  ReadOptional(j, "sections", r.sections, ArrayOf(strings));
  ReadOptional(j, "recomputed", r.recomputed, strings);
  ReadOptional(j, "offloaded", r.offloaded, strings);
  ReadOptional(j, "predicted_host_peak_bytes", r.predicted_host_peak_bytes, Count);
  ReadOptional(j, "predicted_stall_seconds", r.predicted_stall_seconds, Seconds);
  if (j.contains("offload")) {
    if (!j["offload"].is_object()) Bad("offload", "must be an object");
    r.offload = j["offload"];
  }
  ReadOptional(j, "margin_bytes", r.margin_bytes, Count);
  ReadOptional(j, "workspace_margin_bytes", r.workspace_margin_bytes, Count);
  ReadOptional(j, "margin_by_op", r.margin_by_op, report_json::CountMap);
  ReadOptional(j, "device_fingerprint", r.device_fingerprint, String);
  ReadOptional(j, "device_summary", r.device_summary, String);
  if (j.contains("cpu_device")) {
    if (!j["cpu_device"].is_object()) Bad("cpu_device", "must be an object");
    r.cpu_device = j["cpu_device"];
  }
  ReadOptional(j, "feasible", r.feasible, Bool);
  ReadOptional(j, "solve_seconds", r.solve_seconds, Seconds);
  ReadOptional(j, "breakdown", r.breakdown, report_json::CountMap);
  ReadOptional(j, "peak_event", r.peak_event, String);
  ReadOptional(j, "notes", r.notes, strings);
  ReadOptional(j, "timeline", r.timeline, TimelinePointsFromJson);
  ReadOptional(j, "predicted_reserved_peak_bytes", r.predicted_reserved_peak_bytes, Count);
  ReadOptional(j, "budget_of", r.budget_of, String);
  ReadOptional(j, "candidates", r.candidates, ArrayOf(CandidateFromJson));
  if (j.contains("layout")) {
    PlanLayout(j);  // throws naming what is wrong
    r.layout = j["layout"];
  }
  r.device = ReadDevicePrediction(j);
  ReadOptional(j, "time_model", r.time_model, TimeModelFromJson);
  if (j.contains("sweep")) {
    try {
      r.sweep = SweepFromJson(j["sweep"]);
    } catch (const MemplanError& e) {
      throw MemplanError(std::string("the plan's sweep: ") + e.what());
    }
  }
  ReadOptional(j, "smallest_budget_bytes", r.smallest_budget_bytes, Count);
  ReadOptional(j, "smallest_budget_strategy", r.smallest_budget_strategy, String);
  ReadOptional(j, "smallest_budget_micro_batches", r.smallest_budget_micro_batches, Count);
  return r;
}

LoadOptions LoadOptionsForPlan(const json& plan, LoadOptions options,
                               const PlanLoadOverrides& given) {
  if (given.batch) {
    // The user's batch is the step's: the graph runs at its share per micro-batch and device.
    const int64_t micro_batches = PlanMicroBatches(plan);
    const int64_t devices = PlanLayout(plan).devices;
    int64_t split = 0;
    if (__builtin_mul_overflow(micro_batches, devices, &split) || options.batch % split != 0) {
      throw MemplanError("the plan runs " + std::to_string(micro_batches) +
                         " micro-batches on each of " + std::to_string(devices) +
                         " device(s), which do not divide --batch " +
                         std::to_string(options.batch) + "; re-plan with `memplan plan --batch " +
                         std::to_string(options.batch) + "`");
    }
    options.batch /= split;
  } else {
    options.batch = PlanGraphBatch(plan);
  }
  // The plan's dims, unless the user bound the same name.
  if (auto d = plan.find("dims"); d != plan.end()) {
    for (const auto& [name, value] : report_json::CountMap(*d, "dims"))
      options.dims.emplace(name, value);
  }
  auto named = [&](const char* key) -> std::optional<std::string> {
    auto it = plan.find(key);
    if (it == plan.end() || !it->is_string()) return std::nullopt;
    return it->get<std::string>();
  };
  if (auto o = named("optimizer"); o && !given.optimizer) options.optimizer = ParseOptimizer(*o);
  if (auto g = named("grads"); g && !given.grads) options.grads = ParseGradientLifetime(*g);
  // A model whose output is the loss has no loss kind to set.
  if (auto l = named("loss"); l && !given.loss && *l != "model_output")
    options.loss = ParseLossKind(*l);
  return options;
}

namespace {

const nlohmann::json& Field(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end())
    throw MemplanError(std::string("the plan has no \"") + key +
                       "\" field; is it a memplan plan file?");
  return *it;
}

// A whole number of at least 1 (a JSON integer: 1.5 or "2" is an edited plan).
int64_t PositiveInteger(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = Field(j, key);
  if (!v.is_number_integer() ||
      (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) ||
      v.get<int64_t>() < 1) {
    throw MemplanError(std::string("the plan's \"") + key +
                       "\" must be a whole number of at least 1, not " +
                       v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                       "; re-plan with `memplan plan`");
  }
  return v.get<int64_t>();
}

// A byte count the plan may leave out (0): a JSON integer (a float like 5e23 is an edited plan,
// and converting it to int64_t would overflow).
int64_t OptionalBytes(const nlohmann::json& j, const char* key) {
  if (!j.contains(key)) return 0;
  const nlohmann::json& v = j[key];
  if (!v.is_number_integer() ||
      (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))) {
    throw MemplanError(std::string("the plan's \"") + key +
                       "\" must be a whole number of bytes, not " +
                       v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                       "; re-plan with `memplan plan`");
  }
  return v.get<int64_t>();
}

std::string String(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = Field(j, key);
  if (!v.is_string())
    throw MemplanError(std::string("the plan's \"") + key +
                       "\" must be a string; re-plan with `memplan plan`");
  return v.get<std::string>();
}

}  // namespace

bool IsPlanJson(const nlohmann::json& j) {
  auto it = j.is_object() ? j.find("kind") : j.end();
  return it != j.end() && it->is_string() && it->get<std::string>() == "plan";
}

int64_t PlanMicroBatches(const nlohmann::json& j) {
  return j.is_object() && j.contains("micro_batches") ? PositiveInteger(j, "micro_batches") : 1;
}

ParallelLayout PlanLayout(const nlohmann::json& j) {
  ParallelLayout l;
  if (!j.is_object() || !j.contains("layout")) return l;
  const nlohmann::json& v = j["layout"];
  if (!v.is_object())
    throw MemplanError("the plan's \"layout\" must be an object; re-plan with `memplan plan`");
  l.devices = PositiveInteger(v, "devices");
  const nlohmann::json& shard = Field(v, "shard");
  if (!shard.is_string())
    throw MemplanError("the plan's layout \"shard\" must be a string; re-plan with `memplan plan`");
  l.shard = ParseShardMode(shard.get<std::string>());
  l.bucket_bytes = PositiveInteger(v, "bucket_bytes");
  auto real = [&](const char* key, double fallback, bool positive) {
    if (!v.contains(key)) return fallback;
    const nlohmann::json& x = v[key];
    if (!x.is_number() || !std::isfinite(x.get<double>()) || x.get<double>() < 0 ||
        (positive && x.get<double>() <= 0)) {
      throw MemplanError(std::string("the plan's layout \"") + key + "\" must be a number " +
                         (positive ? "> 0" : ">= 0") + "; re-plan with `memplan plan`");
    }
    return x.get<double>();
  };
  l.link_bytes_per_second = real("link_bytes_per_second", l.link_bytes_per_second, true);
  l.link_latency_seconds = real("link_latency_seconds", l.link_latency_seconds, false);
  // An optional field, a boolean or a string; `expected` says what it may hold, for the error.
  auto field = [&](const char* key, bool boolean, const char* expected) -> const nlohmann::json* {
    if (!v.contains(key)) return nullptr;
    const nlohmann::json& x = v[key];
    if (boolean ? !x.is_boolean() : !x.is_string())
      throw MemplanError(std::string("the plan's layout \"") + key + "\" must be " + expected +
                         "; re-plan with `memplan plan`");
    return &x;
  };
  if (const nlohmann::json* x = field("gradient_shards", false, "\"none\" or \"kept\""))
    l.gradient_shards = ParseGradientLifetime(x->get<std::string>());
  // A plan written before the field was planned with the flat gradient born at the first
  // accumulation.
  l.flat_gradient_at_reduce = false;
  if (const nlohmann::json* x = field("flat_gradient_at_reduce", true, "true or false"))
    l.flat_gradient_at_reduce = x->get<bool>();
  if (const nlohmann::json* x = field("runtime", false, "\"memplan\" or \"fsdp2\""))
    l.runtime = ParseShardRuntime(x->get<std::string>());
  if (const nlohmann::json* x = field("staged_collectives", true, "true or false"))
    l.staged_collectives = x->get<bool>();
  return l;
}

int64_t PlanGraphBatch(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("batch"))
    throw MemplanError("the plan has no \"batch\" field; is it a memplan plan file?");
  const int64_t batch = PositiveInteger(j, "batch");
  const int64_t k = PlanMicroBatches(j);
  const int64_t n = PlanLayout(j).devices;
  int64_t ranks_k = 0;
  if (__builtin_mul_overflow(k, n, &ranks_k))
    throw MemplanError("the plan's micro_batches x devices overflow; re-plan with `memplan plan`");
  const int64_t micro =
      j.contains("micro_batch") ? PositiveInteger(j, "micro_batch") : batch / ranks_k;
  int64_t product = 0;
  if (micro < 1 || __builtin_mul_overflow(micro, ranks_k, &product) || product != batch) {
    throw MemplanError("the plan's batch " + std::to_string(batch) + " is not its " +
                       (n > 1 ? std::to_string(n) + " devices x " : std::string()) +
                       std::to_string(k) + " micro-batches of " + std::to_string(micro) +
                       "; re-plan with `memplan plan`");
  }
  return micro;
}

namespace {
Plan ReplayPlanJson(const nlohmann::json& j, const TrainingGraph& g);
}  // namespace

Plan PlanFromJson(const nlohmann::json& j, const TrainingGraph& g) {
  // Later micro-batches and data-parallel ranks step as with kept gradients (SteppedGradients).
  GradientLifetime stepped = g.grads;
  try {
    stepped = SteppedGradients(g.grads, PlanLayout(j).devices, PlanMicroBatches(j));
  } catch (const std::exception&) {
    // A malformed layout or split: the replay names what is wrong.
  }
  if (stepped == g.grads) return ReplayPlanJson(j, g);
  TrainingGraph kept = g;
  kept.grads = stepped;
  return ReplayPlanJson(j, kept);
}

namespace {
Plan ReplayPlanJson(const nlohmann::json& j, const TrainingGraph& g) {
  if (!IsPlanJson(j)) {
    throw MemplanError(
        "not a memplan plan (expected \"kind\": \"plan\"); make one with `memplan plan`");
  }
  try {
    const std::string model =
        j.contains("model") && j["model"].is_string() ? j["model"].get<std::string>() : "?";
    const std::string strategy = String(j, "strategy");
    const std::vector<std::string>& known = StrategyNames();
    if (strategy == "auto" || std::find(known.begin(), known.end(), strategy) == known.end()) {
      throw MemplanError(
          "the plan's strategy '" + strategy +
          "' is not one memplan makes (none, manual, speed, bottleneck, sqrt, sections, optimal, "
          "milp, selective); re-plan with `memplan plan`");
    }
    Field(j, "batch");
    const ParallelLayout layout = PlanLayout(j);
    const int64_t micro_batches = PlanMicroBatches(j);
    const int64_t batch = PlanGraphBatch(j);
    const int64_t step_batch = batch * micro_batches * layout.devices;
    if (batch != g.batch) {
      std::string made_for =
          micro_batches > 1 || layout.devices > 1
              ? (layout.devices > 1 ? std::to_string(layout.devices) + " devices x "
                                    : std::string()) +
                    std::to_string(micro_batches) + " micro-batches of " + std::to_string(batch) +
                    " (batch " + std::to_string(step_batch) + ")"
              : "batch " + std::to_string(batch);
      // g is loaded at the micro-batch size the run derived from its --batch and the plan's split.
      throw MemplanError("the plan was made for " + made_for + " but this run's batch is " +
                         std::to_string(g.batch * micro_batches * layout.devices) +
                         "; run with --batch " + std::to_string(step_batch) +
                         " or re-plan with `memplan plan --batch " +
                         std::to_string(g.batch * micro_batches * layout.devices) + "`");
    }
    const std::string fingerprint = String(j, "fingerprint");
    const std::string mine = ModelFingerprint(g);
    if (fingerprint != mine) {
      const std::string replan = "; re-plan with `memplan plan " + g.model_path + " --batch " +
                                 std::to_string(step_batch) + "`";
      if (j.contains("structure_fingerprint") &&
          j["structure_fingerprint"] == StructureFingerprint(g)) {
        throw MemplanError(
            "the plan's shapes do not match '" + g.model_path + "' at micro-batch " +
            std::to_string(batch) + " (fingerprint " + fingerprint + " vs " + mine +
            "), though its graph is this model's: the plan was made at another batch and its "
            "\"batch\", \"micro_batches\" and \"micro_batch\" (" +
            std::to_string(step_batch) + ", " + std::to_string(micro_batches) + ", " +
            std::to_string(batch) + ") were edited, or the model's input shapes changed" + replan);
      }
      throw MemplanError(
          (model == g.model_path
               ? "the plan was made for another model (or another version of '" + model + "')"
               : "the plan was made for another model ('" + model + "') than '" + g.model_path +
                     "'") +
          " (fingerprint " + fingerprint + ", the model's is " + mine + ")" + replan);
    }
    const nlohmann::json& sections = Field(j, "sections");
    if (!sections.is_array() || sections.empty())
      throw MemplanError("the plan's \"sections\" must be a non-empty array");
    std::vector<std::vector<NodeId>> segments;
    NodeId next = 0;
    for (size_t k = 0; k < sections.size(); ++k) {
      if (!sections[k].is_array() || sections[k].empty()) {
        throw MemplanError("the plan's section " + std::to_string(k) +
                           " must be a non-empty array of node names");
      }
      std::vector<NodeId> seg;
      for (const nlohmann::json& name : sections[k]) {
        const std::string s = name.get<std::string>();
        if (next >= static_cast<NodeId>(g.nodes.size())) {
          throw MemplanError("the plan names node '" + s +
                             "' after the model's last node; re-plan for this model");
        }
        if (g.nodes[next].name != s) {
          NodeId found = g.FindNode(s);
          throw MemplanError(found == kNone
                                 ? "the plan's section " + std::to_string(k) + " names node '" + s +
                                       "', which the model does not have; re-plan for this model"
                                 : "the plan's section " + std::to_string(k) + " has node '" + s +
                                       "' where the model's order has '" + g.nodes[next].name +
                                       "'; sections must follow the node order");
        }
        seg.push_back(next++);
      }
      segments.push_back(std::move(seg));
    }
    if (next != static_cast<NodeId>(g.nodes.size())) {
      throw MemplanError("the plan's sections cover " + std::to_string(next) + " of the model's " +
                         std::to_string(g.nodes.size()) + " nodes; re-plan for this model");
    }
    if (segments.size() == 1) segments.clear();
    // Selective recompute: the dropped storages by name (absent in plans written before it).
    std::vector<TensorId> recomputed;
    if (j.contains("recomputed")) {
      const nlohmann::json& names = j["recomputed"];
      if (!names.is_array())
        throw MemplanError("the plan's \"recomputed\" must be an array of tensor names");
      std::vector<TensorId> droppable;
      for (const nlohmann::json& name : names) {
        if (!name.is_string())
          throw MemplanError("the plan's \"recomputed\" must be an array of tensor names");
        const std::string s = name.get<std::string>();
        const TensorId t = g.FindTensor(s);
        if (t == kNone) {
          throw MemplanError("the plan recomputes tensor '" + s + "', which '" + g.model_path +
                             "' does not have; re-plan for this model");
        }
        if (droppable.empty()) droppable = DroppableStorages(g);
        if (!std::binary_search(droppable.begin(), droppable.end(), t)) {
          throw MemplanError(
              "the plan recomputes tensor '" + s + "' of '" + g.model_path +
              "', which is not an activation with its own storage that a plan can drop (an input, "
              "a parameter, a constant, a view of another tensor, or an output of the loss); "
              "re-plan with `memplan plan`");
        }
        recomputed.push_back(t);
      }
    }
    if (!recomputed.empty() && segments.size() > 1) {
      throw MemplanError("the plan both recomputes " + std::to_string(recomputed.size()) +
                         " tensors selectively and cuts the model into " +
                         std::to_string(segments.size()) +
                         " sections, which memplan does not combine; re-plan with `memplan plan`");
    }
    // Offload: each storage's choice (absent in plans that offload nothing).
    std::vector<OffloadChoice> offloaded;
    OffloadRequest offload_request;
    if (j.contains("offloaded") || j.contains("offload")) {
      const nlohmann::json& o = Field(j, "offload");
      const nlohmann::json& storages = Field(o, "storages");
      if (!o.is_object() || !storages.is_array())
        throw MemplanError("the plan's \"offload\" must be an object with an array \"storages\"");
      auto node = [&](const nlohmann::json& v, const char* what) {
        if (v.is_null()) return static_cast<NodeId>(g.nodes.size());
        const NodeId n = v.is_string() ? g.FindNode(v.get<std::string>()) : kNone;
        if (n == kNone) {
          throw MemplanError(std::string("the plan's offload names ") + what + " node " +
                             v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                             ", which '" + g.model_path +
                             "' does not have; re-plan for this model");
        }
        return n;
      };
      std::vector<std::string> names;
      for (const nlohmann::json& e : storages) {
        const nlohmann::json& name = Field(e, "tensor");
        const TensorId t = name.is_string() ? g.FindTensor(name.get<std::string>()) : kNone;
        if (t == kNone) {
          throw MemplanError("the plan offloads tensor " +
                             name.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                             ", which '" + g.model_path +
                             "' does not have; re-plan for this model");
        }
        offloaded.push_back({t, node(Field(e, "free_after"), "its free_after"),
                             node(Field(e, "prefetch_at"), "its prefetch_at")});
        names.push_back(g.tensors[t].name);
      }
      if (!j.contains("offloaded") || j["offloaded"] != nlohmann::json(names)) {
        throw MemplanError(
            "the plan's \"offloaded\" does not list the tensors of its \"offload\" storages; "
            "re-plan with `memplan plan`");
      }
      auto rate = [&](const char* key) {
        const nlohmann::json& v = Field(o, key);
        if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>()))
          throw MemplanError(std::string("the plan's offload \"") + key +
                             "\" must be a number > 0; re-plan with `memplan plan`");
        return v.get<double>();
      };
      offload_request.link = {
          .device_to_host_bytes_per_second = rate("device_to_host_bytes_per_second"),
          .host_to_device_bytes_per_second = rate("host_to_device_bytes_per_second")};
      offload_request.host_budget_bytes = OptionalBytes(o, "host_budget_bytes");
    }
    if (!offloaded.empty() && segments.size() > 1) {
      throw MemplanError("the plan both offloads " + std::to_string(offloaded.size()) +
                         " tensors and cuts the model into " + std::to_string(segments.size()) +
                         " sections, which memplan does not combine; re-plan with `memplan plan`");
    }
    const ReplayRequest request{.strategy = strategy,
                                .budget_bytes = OptionalBytes(j, "budget_bytes"),
                                .baseline_peak_bytes = OptionalBytes(j, "baseline_peak_bytes")};
    Plan p = !offloaded.empty() ? ReplayOffload(g, recomputed, offloaded, request, offload_request)
             : recomputed.empty() ? ReplaySegmentation(g, CutsFromSegments(g, segments), request)
                                  : ReplaySelective(g, recomputed, request);
    if (!offloaded.empty()) {
      // The stall is a prediction of the cost model the plan was made with.
      const nlohmann::json& stall = Field(j, "predicted_stall_seconds");
      if (!stall.is_number() || !(stall.get<double>() >= 0))
        throw MemplanError(
            "the plan's \"predicted_stall_seconds\" must be a number of seconds >= 0; re-plan");
      p.predicted_stall_seconds = stall.get<double>();
    }
    // The checkpoints are derived from the sections; a plan naming others was edited by hand.
    if (j.contains("checkpoints")) {
      for (const nlohmann::json& name : j.at("checkpoints")) {
        const std::string s = name.get<std::string>();
        TensorId t = g.FindTensor(s);
        if (t == kNone)
          throw MemplanError("the plan's checkpoint '" + s +
                             "' is not a tensor of the model; re-plan for this model");
        if (std::find(p.checkpoints.begin(), p.checkpoints.end(), t) == p.checkpoints.end()) {
          throw MemplanError("the plan's checkpoint '" + s +
                             "' does not cross a section border of its sections; re-plan");
        }
      }
    }
    ApplyMicroBatches(p, g, micro_batches, {});
    if (layout.devices > 1) {
      // The buckets are derived from the model and the layout; a plan naming others was edited
      // or made for another version of the model.
      const nlohmann::json& written = Field(j["layout"], "buckets");
      const std::vector<ParameterBucket> mine = ParameterBuckets(g, layout);
      bool same = written.is_array() && written.size() == mine.size();
      for (size_t b = 0; same && b < mine.size(); ++b) {
        same = written[b].is_array() && written[b].size() == mine[b].parameters.size();
        for (size_t i = 0; same && i < mine[b].parameters.size(); ++i) {
          same = written[b][i].is_string() &&
                 written[b][i].get<std::string>() == g.tensors[mine[b].parameters[i]].name;
        }
      }
      if (!same) {
        throw MemplanError("the plan's layout buckets are not the buckets of '" + g.model_path +
                           "' at " + std::to_string(layout.bucket_bytes) +
                           " B per bucket; re-plan with `memplan plan`");
      }
      ApplyDataParallel(p, g, layout, {});
    }
    // A prediction of the cost model the plan was made with (absent in older plans: 0).
    if (j.contains("predicted_recompute_seconds")) {
      const nlohmann::json& s = j["predicted_recompute_seconds"];
      if (!s.is_number() || !std::isfinite(s.get<double>()) || s.get<double>() < 0) {
        throw MemplanError(
            "the plan's \"predicted_recompute_seconds\" must be a number of seconds >= 0, not " +
            s.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
            "; re-plan with `memplan plan`");
      }
      p.predicted_recompute_seconds = s.get<double>();
    } else {
      p.predicted_recompute_seconds = 0;
    }
    p.solve_seconds = j.value("solve_seconds", 0.0);
    if (j.contains("notes")) p.notes = j.at("notes").get<std::vector<std::string>>();
    if (j.contains("device_fingerprint") && j["device_fingerprint"].is_string())
      p.device_fingerprint = j["device_fingerprint"].get<std::string>();
    if (j.contains("device_summary") && j["device_summary"].is_string())
      p.device_summary = j["device_summary"].get<std::string>();
    // This machine's margins (the graph's kernels), apart from the prediction.
    planner::SplitWorkspaceMargins(p, g, request.sim);
    return p;
  } catch (const nlohmann::json::exception& e) {
    throw MemplanError(std::string("malformed plan: ") + e.what());
  }
}
}  // namespace

}  // namespace memplan
