#include <chrono>
#include <nlohmann/json.hpp>

#include "memplan/analysis_report.h"
#include "memplan/analyzer.h"
#include "memplan/cuda_device.h"
#include "memplan/json_read.h"

namespace memplan {

Analysis Analyze(TrainingGraph g) {
  auto start = std::chrono::steady_clock::now();
  Analysis a;
  a.graph = std::move(g);
  a.schedule = BuildTrainingSchedule(a.graph);
  // The prediction without the margins; the margins apart, as what a budget keeps free.
  a.timeline = Simulate(a.schedule, {.count_margins = false});
  a.margin_by_op = WorkspaceMarginsByOp(a.graph);
  if (!a.margin_by_op.empty())
    a.margin_bytes = Simulate(a.schedule).peak_bytes - a.timeline.peak_bytes;
  a.bottlenecks = FindBottlenecks(a.graph);
  a.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return a;
}

std::vector<TimelinePoint> TimelinePoints(const TrainingGraph& g, const Schedule& s,
                                          const MemoryTimeline& t) {
  std::vector<TimelinePoint> points;
  points.reserve(s.steps.size());
  for (size_t i = 0; i < s.steps.size(); ++i) {
    const Step& step = s.steps[i];
    points.push_back({s.StepLabel(g, i), PhaseName(step.phase), t.bytes_during[i], t.bytes_after[i],
                      step.node != kNone ? g.nodes[step.node].name : ""});
    if (i < t.host_bytes_during.size()) points.back().host_bytes = t.host_bytes_during[i];
  }
  return points;
}

nlohmann::json TimelineToJson(const TrainingGraph& g, const Schedule& s, const MemoryTimeline& t) {
  return TimelinePointsToJson(TimelinePoints(g, s, t));
}

nlohmann::json TimelinePointsToJson(const std::vector<TimelinePoint>& points) {
  nlohmann::json out = nlohmann::json::array();
  for (const TimelinePoint& p : points) {
    nlohmann::json j = {
        {"event", p.event}, {"phase", p.phase}, {"bytes", p.bytes}, {"bytes_after", p.bytes_after}};
    if (!p.node.empty()) j["node"] = p.node;
    if (p.host_bytes >= 0) j["host_bytes"] = p.host_bytes;
    out.push_back(std::move(j));
  }
  return out;
}

namespace {

using nlohmann::json;
using namespace json_read;

TimelinePoint TimelinePointFromJson(const json& v, const std::string& field) {
  Object(v, field);
  TimelinePoint p;
  p.bytes = Get(v, field, "bytes", Count);
  p.bytes_after = Get(v, field, "bytes_after", Count);
  p.event = Get(v, field, "event", String);
  p.phase = Get(v, field, "phase", String);
  if (v.contains("node")) p.node = String(v["node"], Join(field, "node"));
  if (v.contains("host_bytes")) p.host_bytes = Get(v, field, "host_bytes", Count);
  return p;
}

BottleneckDetail BottleneckDetailFromJson(const json& v, const std::string& field) {
  Object(v, field);
  return {Get(v, field, "name", String), Get(v, field, "bytes", Count),
          Get(v, field, "producer", String)};
}

BufferAtPeak BufferAtPeakFromJson(const json& v, const std::string& field) {
  Object(v, field);
  return {Get(v, field, "name", String), Get(v, field, "bytes", Count),
          Get(v, field, "category", String)};
}

template <class T, class Write>
void WriteOptional(json& j, const char* key, const std::optional<T>& v, Write write) {
  if (v) j[key] = write(*v);
}
const auto Same = [](const auto& v) { return json(v); };

}  // namespace

std::vector<TimelinePoint> TimelinePointsFromJson(const json& points, const std::string& field) {
  return Array(points, field, TimelinePointFromJson);
}

namespace report_json {
std::map<std::string, int64_t> CountMap(const json& v, const std::string& field) {
  Object(v, field);
  std::map<std::string, int64_t> out;
  for (const auto& [k, x] : v.items()) out[k] = Count(x, field + "." + k);
  return out;
}
json CountMapToJson(const std::map<std::string, int64_t>& m) {
  json o = json::object();
  for (const auto& [k, v] : m) o[k] = v;
  return o;
}
}  // namespace report_json

DevicePrediction DevicePredictionOf(const DeviceMemory& m, const CudaDevice& d) {
  DevicePrediction p;
  p.device = d.device;
  p.device_name = d.name;
  p.device_source = d.source;
  p.allocator_mode = m.allocator_mode;
  p.workspace_bytes = m.workspace_bytes;
  p.context_bytes = m.context_bytes;
  p.context_measured = m.context_measured;
  p.reserved_peak_bytes = m.reserved_peak_bytes;
  p.workspace_margin_bytes = m.workspace_margin_bytes;
  p.card_peak_bytes = m.card_peak_bytes();
  return p;
}

void WriteDevicePrediction(json& j, const DevicePrediction& d) {
  j["device"] = d.device;
  j["device_name"] = d.device_name;
  j["device_source"] = d.device_source;
  j["allocator_mode"] = d.allocator_mode;
  j["workspace_bytes"] = d.workspace_bytes;
  j["context_bytes"] = d.context_bytes;
  j["context_measured"] = d.context_measured;
  WriteOptional(j, "reserved_peak_bytes", d.reserved_peak_bytes, Same);
  j["workspace_margin_bytes"] = d.workspace_margin_bytes;
  j["card_peak_bytes"] = d.card_peak_bytes;
}

std::optional<DevicePrediction> ReadDevicePrediction(const json& j) {
  auto it = j.find("device");
  if (it == j.end()) return std::nullopt;
  DevicePrediction d;
  d.device = String(*it, "device");
  if (d.device.rfind("cuda", 0) != 0) return std::nullopt;
  // Files written before a field was added lack it: its default.
  auto read = [&](const char* key, auto& out, auto reader) {
    if (j.contains(key)) out = reader(j[key], key);
  };
  read("device_name", d.device_name, String);
  read("device_source", d.device_source, String);
  read("allocator_mode", d.allocator_mode, String);
  read("workspace_bytes", d.workspace_bytes, Count);
  read("context_bytes", d.context_bytes, Count);
  read("context_measured", d.context_measured, Bool);
  ReadOptional(j, "reserved_peak_bytes", d.reserved_peak_bytes, Count);
  read("workspace_margin_bytes", d.workspace_margin_bytes, Count);
  read("card_peak_bytes", d.card_peak_bytes, Count);
  return d;
}

AnalysisReport AnalysisReportOf(const Analysis& a) {
  const TrainingGraph& g = a.graph;
  AnalysisReport r;
  r.memplan_version = MEMPLAN_VERSION;
  r.model = g.model_path;
  r.batch = g.batch;
  r.dims = std::map<std::string, int64_t>(g.dims.begin(), g.dims.end());
  r.opset = g.opset;
  r.loss = LossKindName(g.loss_kind);
  r.optimizer = OptimizerName(g.optimizer);
  r.grads = GradientLifetimeName(g.grads);
  r.num_nodes = static_cast<int64_t>(g.nodes.size());
  r.num_tensors = static_cast<int64_t>(g.tensors.size());
  r.num_parameters = static_cast<int64_t>(g.parameters.size());
  r.param_bytes = g.param_bytes();
  r.input_bytes = g.input_bytes();
  r.peak_bytes = a.timeline.peak_bytes;
  r.peak_event = a.schedule.StepLabel(g, a.timeline.peak_step);
  r.peak_step = a.timeline.peak_step;
  r.breakdown.emplace();
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    (*r.breakdown)[MemoryCategoryName(static_cast<MemoryCategory>(c))] =
        a.timeline.breakdown_at_peak[c];
  }
  r.forward_flops = g.forward_flops();
  r.backward_flops = g.backward_flops();
  r.bottlenecks.emplace();
  r.bottleneck_details.emplace();
  for (TensorId t : a.bottlenecks) {
    r.bottlenecks->push_back(g.tensors[t].name);
    r.bottleneck_details->push_back(
        {g.tensors[t].name, g.tensors[t].bytes, g.nodes[g.tensors[t].producer].name});
  }
  r.largest_at_peak.emplace();
  for (size_t i = 0; i < a.timeline.alive_at_peak.size() && i < 20; ++i) {
    const Buffer& b = a.schedule.buffers[a.timeline.alive_at_peak[i]];
    r.largest_at_peak->push_back({b.name, b.bytes, MemoryCategoryName(b.category)});
  }
  r.weights_present = g.weights_present;
  r.tensors_shaped_by_onnx = g.tensors_shaped_by_onnx;
  r.tensors_shaped_by_rules = g.tensors_shaped_by_rules;
  r.notes = g.notes;
  r.analysis_seconds = a.seconds;
  r.timeline = TimelinePoints(g, a.schedule, a.timeline);
  if (a.margin_bytes > 0) {
    r.margin_bytes = a.margin_bytes;
    r.margin_by_op = a.margin_by_op;
  }
  return r;
}

json AnalysisReportToJson(const AnalysisReport& r) {
  json j = {{"kind", "analysis"}};
  WriteOptional(j, "memplan_version", r.memplan_version, Same);
  WriteOptional(j, "model", r.model, Same);
  WriteOptional(j, "batch", r.batch, Same);
  WriteOptional(j, "dims", r.dims, report_json::CountMapToJson);
  WriteOptional(j, "opset", r.opset, Same);
  WriteOptional(j, "loss", r.loss, Same);
  WriteOptional(j, "optimizer", r.optimizer, Same);
  WriteOptional(j, "grads", r.grads, Same);
  WriteOptional(j, "num_nodes", r.num_nodes, Same);
  WriteOptional(j, "num_tensors", r.num_tensors, Same);
  WriteOptional(j, "num_parameters", r.num_parameters, Same);
  WriteOptional(j, "param_bytes", r.param_bytes, Same);
  WriteOptional(j, "input_bytes", r.input_bytes, Same);
  WriteOptional(j, "peak_bytes", r.peak_bytes, Same);
  WriteOptional(j, "peak_event", r.peak_event, Same);
  WriteOptional(j, "peak_step", r.peak_step, Same);
  WriteOptional(j, "breakdown", r.breakdown, report_json::CountMapToJson);
  WriteOptional(j, "forward_flops", r.forward_flops, Same);
  WriteOptional(j, "backward_flops", r.backward_flops, Same);
  WriteOptional(j, "bottlenecks", r.bottlenecks, Same);
  WriteOptional(j, "bottleneck_details", r.bottleneck_details, [](const auto& v) {
    json out = json::array();
    for (const BottleneckDetail& b : v)
      out.push_back({{"name", b.name}, {"bytes", b.bytes}, {"producer", b.producer}});
    return out;
  });
  WriteOptional(j, "largest_at_peak", r.largest_at_peak, [](const auto& v) {
    json out = json::array();
    for (const BufferAtPeak& b : v)
      out.push_back({{"name", b.name}, {"bytes", b.bytes}, {"category", b.category}});
    return out;
  });
  WriteOptional(j, "weights_present", r.weights_present, Same);
  WriteOptional(j, "tensors_shaped_by_onnx", r.tensors_shaped_by_onnx, Same);
  WriteOptional(j, "tensors_shaped_by_rules", r.tensors_shaped_by_rules, Same);
  WriteOptional(j, "notes", r.notes, Same);
  WriteOptional(j, "analysis_seconds", r.analysis_seconds, Same);
  WriteOptional(j, "timeline", r.timeline, TimelinePointsToJson);
  if (r.device) WriteDevicePrediction(j, *r.device);
  WriteOptional(j, "allocated_peak_bytes", r.allocated_peak_bytes, Same);
  WriteOptional(j, "margin_bytes", r.margin_bytes, Same);
  WriteOptional(j, "margin_by_op", r.margin_by_op, report_json::CountMapToJson);
  WriteOptional(j, "cpu_device", r.cpu_device, Same);
  return j;
}

AnalysisReport AnalysisReportFromJson(const json& j) {
  Object(j, "");
  const std::string kind = Get(j, "", "kind", String);
  if (kind != "analysis") Bad("kind", "is \"" + kind + "\", not \"analysis\"");
  AnalysisReport r;
  const auto strings = ArrayOf(String);
  ReadOptional(j, "memplan_version", r.memplan_version, String);
  ReadOptional(j, "model", r.model, String);
  ReadOptional(j, "batch", r.batch, Count);
  ReadOptional(j, "dims", r.dims, report_json::CountMap);
  ReadOptional(j, "opset", r.opset, Count);
  ReadOptional(j, "loss", r.loss, String);
  ReadOptional(j, "optimizer", r.optimizer, String);
  ReadOptional(j, "grads", r.grads, String);
  ReadOptional(j, "num_nodes", r.num_nodes, Count);
  ReadOptional(j, "num_tensors", r.num_tensors, Count);
  ReadOptional(j, "num_parameters", r.num_parameters, Count);
  ReadOptional(j, "param_bytes", r.param_bytes, Count);
  ReadOptional(j, "input_bytes", r.input_bytes, Count);
  ReadOptional(j, "peak_bytes", r.peak_bytes, Count);
  ReadOptional(j, "peak_event", r.peak_event, String);
  ReadOptional(j, "peak_step", r.peak_step, Count);
  ReadOptional(j, "breakdown", r.breakdown, report_json::CountMap);
  ReadOptional(j, "forward_flops", r.forward_flops, Real);
  ReadOptional(j, "backward_flops", r.backward_flops, Real);
  ReadOptional(j, "bottlenecks", r.bottlenecks, strings);
  ReadOptional(j, "bottleneck_details", r.bottleneck_details, ArrayOf(BottleneckDetailFromJson));
  ReadOptional(j, "largest_at_peak", r.largest_at_peak, ArrayOf(BufferAtPeakFromJson));
  ReadOptional(j, "weights_present", r.weights_present, Bool);
  ReadOptional(j, "tensors_shaped_by_onnx", r.tensors_shaped_by_onnx, Count);
  ReadOptional(j, "tensors_shaped_by_rules", r.tensors_shaped_by_rules, Count);
  ReadOptional(j, "notes", r.notes, strings);
  ReadOptional(j, "analysis_seconds", r.analysis_seconds, Seconds);
  ReadOptional(j, "timeline", r.timeline, TimelinePointsFromJson);
  r.device = ReadDevicePrediction(j);
  ReadOptional(j, "allocated_peak_bytes", r.allocated_peak_bytes, Count);
  ReadOptional(j, "margin_bytes", r.margin_bytes, Count);
  ReadOptional(j, "margin_by_op", r.margin_by_op, report_json::CountMap);
  if (j.contains("cpu_device")) {
    if (!j["cpu_device"].is_object()) Bad("cpu_device", "must be an object");
    r.cpu_device = j["cpu_device"];
  }
  return r;
}

nlohmann::json AnalysisToJson(const Analysis& a) {
  return AnalysisReportToJson(AnalysisReportOf(a));
}

void WriteJsonFile(const std::string& path, const nlohmann::json& j) {
  WriteFileAtomically(path, j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

}  // namespace memplan
