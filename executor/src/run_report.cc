// The run JSON's one writer and one reader. No LibTorch here: the GUI links this.
#include "memplan/run_report.h"

#include <cmath>
#include <limits>

#include "memplan/json_read.h"

namespace memplan {
namespace {

using nlohmann::json;
using namespace json_read;

// nlohmann writes a non-finite double as null.
double Loss(const json& v, const std::string& field) {
  return v.is_null() ? std::numeric_limits<double>::quiet_NaN() : Real(v, field);
}

template <class T, class Write>
void WriteOptional(json& j, const char* key, const std::optional<T>& v, Write write) {
  if (v) j[key] = write(*v);
}
auto Same = [](const auto& v) { return json(v); };

RunTraceEvent TraceEvent(const json& v, const std::string& field) {
  Object(v, field);
  RunTraceEvent e;
  e.phase = Get(v, field, "phase", String);
  e.node = Get(v, field, "node", String);
  e.op = Get(v, field, "op", String);
  e.bytes_after = Get(v, field, "bytes_after", Count);
  e.peak_during = Get(v, field, "peak_during", Count);
  return e;
}

json TraceEventToJson(const RunTraceEvent& e) {
  return {{"phase", e.phase},
          {"node", e.node},
          {"op", e.op},
          {"bytes_after", e.bytes_after},
          {"peak_during", e.peak_during}};
}

// The plan run: an object with the fields every plan summary has; the rest is the plan's.
json PlanSummary(const json& v, const std::string& field) {
  Object(v, field);
  Get(v, field, "strategy", String);
  Get(v, field, "checkpoints", ArrayOf(String));
  Get(v, field, "sections", ArrayOf(ArrayOf(String)));
  return v;
}

RunRank Rank(const json& v, const std::string& field) {
  Object(v, field);
  RunRank r;
  r.rank = Get(v, field, "rank", Count);
  r.measured_peak_bytes = Get(v, field, "measured_peak_bytes", Count);
  r.predicted_peak_bytes = Get(v, field, "predicted_peak_bytes", Count);
  r.step_seconds = Get(v, field, "step_seconds", ArrayOf(Seconds));
  r.comm_seconds = Get(v, field, "comm_seconds", ArrayOf(Seconds));
  if (r.comm_seconds.size() != r.step_seconds.size()) {
    Bad(Join(field, "comm_seconds"), "has " + std::to_string(r.comm_seconds.size()) +
                                         " entries but 'step_seconds' has " +
                                         std::to_string(r.step_seconds.size()));
  }
  return r;
}

json RankToJson(const RunRank& r) {
  return {{"rank", r.rank},
          {"measured_peak_bytes", r.measured_peak_bytes},
          {"predicted_peak_bytes", r.predicted_peak_bytes},
          {"step_seconds", r.step_seconds},
          {"comm_seconds", r.comm_seconds}};
}

template <class T>
void CheckPerStep(const std::optional<std::vector<T>>& v, const char* key, size_t steps) {
  if (v && v->size() != steps) {
    Bad(key, "has " + std::to_string(v->size()) + " entries but 'step_seconds' has " +
                 std::to_string(steps));
  }
}

}  // namespace

std::vector<RunTimelinePoint> RunTimelineFromJson(const json& points) {
  return TimelinePointsFromJson(points, "timeline");
}

json RunReportToJson(const RunReport& r) {
  json j = {
      {"kind", "run"},
      {"memplan_version", r.memplan_version},
      {"device", r.device},
      {"steps", r.steps},
      {"measured_peak_bytes", r.measured_peak_bytes},
      {"predicted_peak_bytes", r.predicted_peak_bytes},
      {"step_seconds", r.step_seconds},
      {"recompute_seconds", r.recompute_seconds},
      {"loss", r.loss},
      {"plan", r.plan},
  };
  WriteOptional(j, "model", r.model, Same);
  WriteOptional(j, "batch", r.batch, Same);
  WriteOptional(j, "micro_batches", r.micro_batches, Same);
  WriteOptional(j, "optimizer", r.optimizer, Same);
  WriteOptional(j, "grads", r.grads, Same);
  WriteOptional(j, "loss_kind", r.loss_kind, Same);
  WriteOptional(j, "seed", r.seed, Same);
  WriteOptional(j, "random_weights", r.random_weights, Same);
  WriteOptional(j, "max_measured_peak_bytes", r.max_measured_peak_bytes, Same);
  WriteOptional(j, "prediction_error", r.prediction_error, Same);
  WriteOptional(j, "persistent_bytes", r.persistent_bytes, Same);
  WriteOptional(j, "peak_bytes", r.peak_bytes, Same);
  WriteOptional(j, "reserved_peak_bytes", r.reserved_peak_bytes, Same);
  WriteOptional(j, "allocator_mode", r.allocator_mode, Same);
  WriteOptional(j, "predicted_reserved_peak_bytes", r.predicted_reserved_peak_bytes, Same);
  WriteOptional(j, "workspace_bytes", r.workspace_bytes, Same);
  WriteOptional(j, "measured_host_peak_bytes", r.measured_host_peak_bytes, Same);
  WriteOptional(j, "predicted_host_peak_bytes", r.predicted_host_peak_bytes, Same);
  WriteOptional(j, "stall_seconds", r.stall_seconds, Same);
  auto all = [](auto write) {
    return [write](const auto& v) {
      json out = json::array();
      for (const auto& e : v) out.push_back(write(e));
      return out;
    };
  };
  WriteOptional(j, "predicted_timeline", r.predicted_timeline, TimelinePointsToJson);
  WriteOptional(j, "measured_trace", r.measured_trace, all(TraceEventToJson));
  WriteOptional(j, "devices", r.devices, Same);
  WriteOptional(j, "shard", r.shard, Same);
  WriteOptional(j, "ranks", r.ranks, all(RankToJson));
  return j;
}

RunReport RunReportFromJson(const json& j) {
  if (!j.is_object()) throw MemplanError("a run JSON is an object");
  if (Get(j, "", "kind", String) != "run") Bad("kind", "is not \"run\"");
  RunReport r;
  r.memplan_version = Get(j, "", "memplan_version", String);
  r.device = Get(j, "", "device", String);
  r.steps = Get(j, "", "steps", Count);
  r.measured_peak_bytes = Get(j, "", "measured_peak_bytes", Count);
  r.predicted_peak_bytes = Get(j, "", "predicted_peak_bytes", Count);
  r.step_seconds = Get(j, "", "step_seconds", ArrayOf(Seconds));
  r.recompute_seconds = Get(j, "", "recompute_seconds", ArrayOf(Seconds));
  r.loss = Get(j, "", "loss", ArrayOf(Loss));
  r.plan = Get(j, "", "plan", PlanSummary);

  ReadOptional(j, "model", r.model, String);
  ReadOptional(j, "batch", r.batch, Count);
  ReadOptional(j, "micro_batches", r.micro_batches, [](const json& v, const std::string& f) {
    const int64_t k = JsonInt64(v, f);
    if (k < 1) Bad(f, "is less than 1");
    return k;
  });
  ReadOptional(j, "optimizer", r.optimizer, String);
  ReadOptional(j, "grads", r.grads, String);
  ReadOptional(j, "loss_kind", r.loss_kind, String);
  ReadOptional(j, "seed", r.seed, [](const json& v, const std::string& f) {
    return static_cast<uint64_t>(Count(v, f));
  });
  ReadOptional(j, "random_weights", r.random_weights, Bool);
  ReadOptional(j, "max_measured_peak_bytes", r.max_measured_peak_bytes, Count);
  ReadOptional(j, "prediction_error", r.prediction_error, Real);
  ReadOptional(j, "persistent_bytes", r.persistent_bytes, Count);
  ReadOptional(j, "peak_bytes", r.peak_bytes, ArrayOf(Count));
  ReadOptional(j, "reserved_peak_bytes", r.reserved_peak_bytes, ArrayOf(Count));
  ReadOptional(j, "allocator_mode", r.allocator_mode, String);
  ReadOptional(j, "predicted_reserved_peak_bytes", r.predicted_reserved_peak_bytes, Count);
  ReadOptional(j, "workspace_bytes", r.workspace_bytes, Count);
  ReadOptional(j, "measured_host_peak_bytes", r.measured_host_peak_bytes, Count);
  ReadOptional(j, "predicted_host_peak_bytes", r.predicted_host_peak_bytes, Count);
  ReadOptional(j, "stall_seconds", r.stall_seconds, ArrayOf(Seconds));
  ReadOptional(j, "predicted_timeline", r.predicted_timeline, TimelinePointsFromJson);
  ReadOptional(j, "measured_trace", r.measured_trace, ArrayOf(TraceEvent));
  ReadOptional(j, "devices", r.devices, [](const json& v, const std::string& f) {
    const int64_t n = JsonInt64(v, f);
    if (n < 1) Bad(f, "is less than 1");
    return n;
  });
  ReadOptional(j, "shard", r.shard, String);
  ReadOptional(j, "ranks", r.ranks, ArrayOf(Rank));

  const size_t n = r.step_seconds.size();
  CheckPerStep(std::optional(r.recompute_seconds), "recompute_seconds", n);
  CheckPerStep(std::optional(r.loss), "loss", n);
  CheckPerStep(r.peak_bytes, "peak_bytes", n);
  CheckPerStep(r.reserved_peak_bytes, "reserved_peak_bytes", n);
  CheckPerStep(r.stall_seconds, "stall_seconds", n);
  if (r.ranks) {
    for (size_t k = 0; k < r.ranks->size(); ++k) {
      const RunRank& rank = (*r.ranks)[k];
      const std::string f = "ranks[" + std::to_string(k) + "]";
      if (rank.rank != static_cast<int64_t>(k))
        Bad(f + ".rank", "is not " + std::to_string(k) + " (ranks are listed in order)");
      if (rank.step_seconds.size() != n) {
        Bad(f + ".step_seconds", "has " + std::to_string(rank.step_seconds.size()) +
                                     " entries but 'step_seconds' has " + std::to_string(n));
      }
    }
    if (r.devices && *r.devices != static_cast<int64_t>(r.ranks->size())) {
      Bad("ranks", "lists " + std::to_string(r.ranks->size()) + " ranks but 'devices' is " +
                       std::to_string(*r.devices));
    }
  }
  return r;
}

void to_json(json& j, const RunReport& r) { j = RunReportToJson(r); }
void from_json(const json& j, RunReport& r) { r = RunReportFromJson(j); }

}  // namespace memplan
