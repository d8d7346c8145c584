// Chrome trace-event JSON (the "JSON Array/Object Format" that ui.perfetto.dev and
// chrome://tracing open): complete events ("X") for scopes, counters ("C") for memory.
#include <map>
#include <nlohmann/json.hpp>

#include "memplan/profiler.h"

namespace memplan {
namespace {

using nlohmann::json;

constexpr int kPid = 1;
constexpr int kScopeTrack = 1;      // phases and segments, with the node slices nested inside
constexpr int kRecomputeTrack = 2;  // recompute spans, marked on their own track

double Micros(double seconds) { return seconds * 1e6; }

std::string SliceName(const ProfileScope& s, const Profile& p,
                      const std::map<NodeId, const NodeProfile*>& names) {
  if (s.node == kNone) {
    std::string name = PhaseName(s.phase);
    if (s.phase != Phase::kSetup && s.phase != Phase::kOptimizer)
      name += " segment " + std::to_string(s.segment);
    if (p.micro_batches > 1) name += " (micro-batch " + std::to_string(s.micro_batch) + ")";
    return name;
  }
  auto it = names.find(s.node);
  if (it == names.end() || it->second->name.empty()) return "node " + std::to_string(s.node);
  return it->second->op + " " + it->second->name;
}

json Metadata(const char* what, int tid, const std::string& name) {
  json e = {{"name", what}, {"ph", "M"}, {"pid", kPid}, {"args", {{"name", name}}}};
  if (tid > 0) e["tid"] = tid;
  return e;
}

}  // namespace

std::vector<PredictedMemory> PredictedMemoryOf(const Schedule& s, const MemoryTimeline& t,
                                               const std::vector<int32_t>& segment_of_node) {
  std::vector<PredictedMemory> out;
  out.reserve(s.steps.size());
  for (size_t i = 0; i < s.steps.size() && i < t.bytes_after.size(); ++i) {
    const Step& step = s.steps[i];
    ProfileScope scope;
    scope.phase = step.phase;
    scope.node = step.node;
    if (step.node != kNone && static_cast<size_t>(step.node) < segment_of_node.size()) {
      scope.segment = segment_of_node[step.node];
    }
    out.push_back({scope, t.bytes_after[i]});
  }
  return out;
}

json TraceEventsJson(const Profile& p, const std::vector<PredictedMemory>& predicted) {
  std::map<NodeId, const NodeProfile*> names;
  for (const NodeProfile& n : p.nodes) names.emplace(n.node, &n);
  json events = json::array();
  events.push_back(
      Metadata("process_name", 0, "memplan " + p.model + " step " + std::to_string(p.step + 1)));
  events.push_back(Metadata("thread_name", kScopeTrack, "phases and nodes"));
  events.push_back(Metadata("thread_name", kRecomputeTrack, "recompute"));
  for (const ProfileSlice& s : p.slices) {
    json args = {{"phase", PhaseName(s.scope.phase)}, {"segment", s.scope.segment}};
    if (s.scope.node != kNone) args["node"] = s.scope.node;
    if (p.micro_batches > 1) args["micro_batch"] = s.scope.micro_batch;
    json e = {{"name", SliceName(s.scope, p, names)},
              {"cat", PhaseName(s.scope.phase)},
              {"ph", "X"},
              {"ts", Micros(s.begin)},
              {"dur", Micros(s.end - s.begin)},
              {"pid", kPid},
              {"tid", kScopeTrack},
              {"args", args}};
    if (s.scope.phase == Phase::kRecompute && s.scope.node == kNone) {
      json mark = e;
      mark["tid"] = kRecomputeTrack;
      mark["cname"] = "terrible";  // chrome://tracing's red; Perfetto colours by name
      events.push_back(std::move(mark));
    }
    events.push_back(std::move(e));
  }
  events.push_back({{"name", "memory"},
                    {"ph", "C"},
                    {"ts", 0.0},
                    {"pid", kPid},
                    {"args", {{"measured_bytes", p.start_bytes}}}});
  for (const MemoryEvent& e : p.memory_events) {
    events.push_back({{"name", "memory"},
                      {"ph", "C"},
                      {"ts", Micros(e.time)},
                      {"pid", kPid},
                      {"args", {{"measured_bytes", e.bytes_after}}}});
  }
  // Each predicted point sits at the end of the measured slice of the same scope (the k-th
  // point of a scope at its k-th slice), once per micro-batch.
  if (!predicted.empty()) {
    std::map<std::tuple<int, NodeId, int32_t, int32_t>, std::vector<double>> ends;
    for (const ProfileSlice& s : p.slices) {
      ends[{static_cast<int>(s.scope.phase), s.scope.node, s.scope.segment, s.scope.micro_batch}]
          .push_back(s.end);
    }
    std::map<std::tuple<int, NodeId, int32_t, int32_t>, size_t> used;
    std::vector<std::pair<double, int64_t>> points;
    for (int32_t m = 0; m < static_cast<int32_t>(std::max<int64_t>(1, p.micro_batches)); ++m) {
      for (const PredictedMemory& pm : predicted) {
        const bool once = pm.scope.phase == Phase::kSetup || pm.scope.phase == Phase::kOptimizer;
        if (once && m > 0) continue;
        auto key = std::make_tuple(static_cast<int>(pm.scope.phase), pm.scope.node,
                                   pm.scope.segment, once ? 0 : m);
        auto it = ends.find(key);
        if (it == ends.end()) continue;
        size_t& k = used[key];
        if (k >= it->second.size()) continue;
        points.emplace_back(it->second[k++], pm.bytes);
      }
    }
    std::stable_sort(points.begin(), points.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [time, bytes] : points) {
      events.push_back({{"name", "predicted memory"},
                        {"ph", "C"},
                        {"ts", Micros(time)},
                        {"pid", kPid},
                        {"args", {{"predicted_bytes", bytes}}}});
    }
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"memplan_version", MEMPLAN_VERSION},
            {"model", p.model},
            {"device", p.device},
            {"backend", p.backend},
            {"step_seconds", p.step_seconds},
            {"peak_bytes", p.peak_bytes}}}};
}

}  // namespace memplan
