#include <chrono>
#include <nlohmann/json.hpp>

#include "memplan/analyzer.h"

namespace memplan {

Analysis Analyze(TrainingGraph g) {
  auto start = std::chrono::steady_clock::now();
  Analysis a;
  a.graph = std::move(g);
  a.schedule = BuildTrainingSchedule(a.graph);
  a.timeline = Simulate(a.schedule);
  a.bottlenecks = FindBottlenecks(a.graph);
  a.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return a;
}

nlohmann::json TimelineToJson(const TrainingGraph& g, const Schedule& s, const MemoryTimeline& t) {
  nlohmann::json points = nlohmann::json::array();
  for (size_t i = 0; i < s.steps.size(); ++i) {
    const Step& step = s.steps[i];
    nlohmann::json p = {{"event", s.StepLabel(g, i)},
                        {"phase", PhaseName(step.phase)},
                        {"bytes", t.bytes_during[i]},
                        {"bytes_after", t.bytes_after[i]}};
    if (step.node != kNone) p["node"] = g.nodes[step.node].name;
    points.push_back(std::move(p));
  }
  return points;
}

nlohmann::json AnalysisToJson(const Analysis& a) {
  const TrainingGraph& g = a.graph;
  nlohmann::json breakdown = nlohmann::json::object();
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    breakdown[MemoryCategoryName(static_cast<MemoryCategory>(c))] = a.timeline.breakdown_at_peak[c];
  }
  nlohmann::json bottlenecks = nlohmann::json::array(), bottleneck_detail = nlohmann::json::array();
  for (TensorId t : a.bottlenecks) {
    bottlenecks.push_back(g.tensors[t].name);
    bottleneck_detail.push_back({{"name", g.tensors[t].name},
                                 {"bytes", g.tensors[t].bytes},
                                 {"producer", g.nodes[g.tensors[t].producer].name}});
  }
  nlohmann::json top = nlohmann::json::array();
  for (size_t i = 0; i < a.timeline.alive_at_peak.size() && i < 20; ++i) {
    const Buffer& b = a.schedule.buffers[a.timeline.alive_at_peak[i]];
    top.push_back(
        {{"name", b.name}, {"bytes", b.bytes}, {"category", MemoryCategoryName(b.category)}});
  }
  nlohmann::json dims = nlohmann::json::object();
  for (const auto& [k, v] : g.dims) dims[k] = v;
  return {
      {"kind", "analysis"},
      {"memplan_version", MEMPLAN_VERSION},
      {"model", g.model_path},
      {"batch", g.batch},
      {"dims", dims},
      {"opset", g.opset},
      {"loss", LossKindName(g.loss_kind)},
      {"optimizer", OptimizerName(g.optimizer)},
      {"grads", GradientLifetimeName(g.grads)},
      {"num_nodes", g.nodes.size()},
      {"num_tensors", g.tensors.size()},
      {"num_parameters", g.parameters.size()},
      {"param_bytes", g.param_bytes()},
      {"input_bytes", g.input_bytes()},
      {"peak_bytes", a.timeline.peak_bytes},
      {"peak_event", a.schedule.StepLabel(g, a.timeline.peak_step)},
      {"peak_step", a.timeline.peak_step},
      {"breakdown", breakdown},
      {"forward_flops", g.forward_flops()},
      {"backward_flops", g.backward_flops()},
      {"bottlenecks", bottlenecks},
      {"bottleneck_details", bottleneck_detail},
      {"largest_at_peak", top},
      {"weights_present", g.weights_present},
      {"tensors_shaped_by_onnx", g.tensors_shaped_by_onnx},
      {"tensors_shaped_by_rules", g.tensors_shaped_by_rules},
      {"notes", g.notes},
      {"analysis_seconds", a.seconds},
      {"timeline", TimelineToJson(g, a.schedule, a.timeline)},
  };
}

void WriteJsonFile(const std::string& path, const nlohmann::json& j) {
  WriteFileAtomically(path, j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

}  // namespace memplan
