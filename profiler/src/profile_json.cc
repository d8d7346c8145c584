// The profile JSON's one writer and one reader ("kind": "profile"). Memory events are rows
// of a table (there can be hundreds of thousands); slices and per-node totals are objects.
#include <algorithm>
#include <map>

#include "memplan/json_read.h"
#include "memplan/profiler.h"

namespace memplan {
namespace {

using nlohmann::json;
using namespace json_read;

constexpr const char* kEventColumns[] = {"time", "bytes",   "bytes_after", "phase",
                                         "node", "segment", "micro_batch"};

Phase PhaseFrom(const json& v, const std::string& field) {
  const std::string name = String(v, field);
  for (Phase p : {Phase::kSetup, Phase::kForward, Phase::kLoss, Phase::kBackward, Phase::kRecompute,
                  Phase::kOptimizer, Phase::kCommunication}) {
    if (name == PhaseName(p)) return p;
  }
  Bad(field, "is not a phase (setup, forward, loss, backward, recompute, optimizer)");
}

NodeId NodeFrom(const json& v, const std::string& field) {
  const int64_t n = Integer(v, field);
  if (n < -1 || n > INT32_MAX) Bad(field, "is not a node index (-1 for none)");
  return static_cast<NodeId>(n);
}

int32_t Small(const json& v, const std::string& field) {
  const int64_t n = Count(v, field);
  if (n > INT32_MAX) Bad(field, "is too large");
  return static_cast<int32_t>(n);
}

json ScopeToJson(const ProfileScope& s) {
  return {{"phase", PhaseName(s.phase)},
          {"node", s.node},
          {"segment", s.segment},
          {"micro_batch", s.micro_batch}};
}

ProfileScope ScopeFrom(const json& v, const std::string& field) {
  Object(v, field);
  ProfileScope s;
  s.phase = Get(v, field, "phase", PhaseFrom);
  s.node = Get(v, field, "node", NodeFrom);
  s.segment = Get(v, field, "segment", Small);
  s.micro_batch = Get(v, field, "micro_batch", Small);
  return s;
}

ProfileSlice SliceFrom(const json& v, const std::string& field) {
  ProfileSlice s;
  s.scope = ScopeFrom(v, field);
  s.begin = Get(v, field, "begin", Seconds);
  s.end = Get(v, field, "end", Seconds);
  s.depth = Get(v, field, "depth", Small);
  if (s.end < s.begin) Bad(Join(field, "end"), "is before 'begin'");
  return s;
}

NodeProfile NodeFromJson(const json& v, const std::string& field) {
  Object(v, field);
  NodeProfile n;
  n.node = Get(v, field, "node", NodeFrom);
  n.name = Get(v, field, "name", String);
  n.op = Get(v, field, "op", String);
  n.phase = Get(v, field, "phase", PhaseFrom);
  n.segment = Get(v, field, "segment", Small);
  n.calls = Get(v, field, "calls", Count);
  n.seconds = Get(v, field, "seconds", Seconds);
  n.device_seconds = Get(v, field, "device_seconds", Seconds);
  n.predicted_seconds = Get(v, field, "predicted_seconds", Seconds);
  n.allocated_bytes = Get(v, field, "allocated_bytes", Count);
  n.freed_bytes = Get(v, field, "freed_bytes", Count);
  return n;
}

MemoryEvent EventFrom(const json& v, const std::string& field) {
  if (!v.is_array() || v.size() != std::size(kEventColumns)) {
    Bad(field, "is not a row of " + std::to_string(std::size(kEventColumns)) +
                   " values (see 'memory_event_columns')");
  }
  MemoryEvent e;
  e.time = Seconds(v[0], field + "[0]");
  e.bytes = Integer(v[1], field + "[1]");
  e.bytes_after = Count(v[2], field + "[2]");
  e.scope.phase = PhaseFrom(v[3], field + "[3]");
  e.scope.node = NodeFrom(v[4], field + "[4]");
  e.scope.segment = Small(v[5], field + "[5]");
  e.scope.micro_batch = Small(v[6], field + "[6]");
  return e;
}

}  // namespace

json ProfileToJson(const Profile& p) {
  json slices = json::array();
  for (const ProfileSlice& s : p.slices) {
    json o = ScopeToJson(s.scope);
    o["begin"] = s.begin;
    o["end"] = s.end;
    o["depth"] = s.depth;
    slices.push_back(std::move(o));
  }
  json nodes = json::array();
  for (const NodeProfile& n : p.nodes) {
    nodes.push_back({{"node", n.node},
                     {"name", n.name},
                     {"op", n.op},
                     {"phase", PhaseName(n.phase)},
                     {"segment", n.segment},
                     {"calls", n.calls},
                     {"seconds", n.seconds},
                     {"device_seconds", n.device_seconds},
                     {"predicted_seconds", n.predicted_seconds},
                     {"allocated_bytes", n.allocated_bytes},
                     {"freed_bytes", n.freed_bytes}});
  }
  json events = json::array();
  for (const MemoryEvent& e : p.memory_events) {
    events.push_back({e.time, e.bytes, e.bytes_after, PhaseName(e.scope.phase), e.scope.node,
                      e.scope.segment, e.scope.micro_batch});
  }
  std::map<int32_t, double> per_segment;
  for (const NodeProfile& n : p.nodes) {
    if (n.phase == Phase::kRecompute) per_segment[n.segment] += n.seconds;
  }
  json recompute = json::object();
  for (const auto& [seg, s] : per_segment) recompute[std::to_string(seg)] = s;
  return {
      {"kind", "profile"},
      {"memplan_version", MEMPLAN_VERSION},
      {"model", p.model},
      {"structure_fingerprint", p.structure_fingerprint},
      {"device", p.device},
      {"backend", p.backend},
      {"step", p.step},
      {"batch", p.batch},
      {"micro_batches", p.micro_batches},
      {"step_seconds", p.step_seconds},
      {"recompute_seconds", p.RecomputeSeconds()},
      {"recompute_seconds_per_segment", recompute},
      {"predicted_recompute_seconds", p.PredictedRecomputeSeconds()},
      {"start_bytes", p.start_bytes},
      {"peak_bytes", p.peak_bytes},
      {"peak_time", p.peak_time},
      {"peak_scope", ScopeToJson(p.peak_scope)},
      {"cuda_allocated_peak_bytes", p.cuda_allocated_peak_bytes},
      {"cuda_reserved_peak_bytes", p.cuda_reserved_peak_bytes},
      {"dropped_records", p.dropped_records},
      {"warnings", p.warnings},
      {"nodes", nodes},
      {"slices", slices},
      {"memory_event_columns", kEventColumns},
      {"memory_events", events},
  };
}

Profile ProfileFromJson(const json& j) {
  if (!j.is_object()) throw MemplanError("a profile JSON is an object");
  if (Get(j, "", "kind", String) != "profile") Bad("kind", "is not \"profile\"");
  Profile p;
  p.model = Get(j, "", "model", String);
  if (j.contains("structure_fingerprint"))
    p.structure_fingerprint = Get(j, "", "structure_fingerprint", String);
  p.device = Get(j, "", "device", String);
  p.backend = Get(j, "", "backend", String);
  p.step = Get(j, "", "step", Count);
  p.batch = Get(j, "", "batch", Count);
  p.micro_batches = Get(j, "", "micro_batches", Count);
  if (p.micro_batches < 1) Bad("micro_batches", "is less than 1");
  p.step_seconds = Get(j, "", "step_seconds", Seconds);
  p.start_bytes = Get(j, "", "start_bytes", Count);
  p.peak_bytes = Get(j, "", "peak_bytes", Count);
  p.peak_time = Get(j, "", "peak_time", Seconds);
  p.peak_scope = Get(j, "", "peak_scope", ScopeFrom);
  p.cuda_allocated_peak_bytes = Get(j, "", "cuda_allocated_peak_bytes", Count);
  p.cuda_reserved_peak_bytes = Get(j, "", "cuda_reserved_peak_bytes", Count);
  p.dropped_records = Get(j, "", "dropped_records", Count);
  p.warnings = Get(j, "", "warnings", ArrayOf(String));
  p.nodes = Get(j, "", "nodes", ArrayOf(NodeFromJson));
  p.slices = Get(j, "", "slices", ArrayOf(SliceFrom));
  const auto columns = Get(j, "", "memory_event_columns", ArrayOf(String));
  if (!std::equal(columns.begin(), columns.end(), std::begin(kEventColumns),
                  std::end(kEventColumns))) {
    Bad("memory_event_columns",
        "is not [time, bytes, bytes_after, phase, node, segment, micro_batch]");
  }
  p.memory_events = Get(j, "", "memory_events", ArrayOf(EventFrom));
  return p;
}

}  // namespace memplan
