#include "gui_test_profile.h"

#include "testing/graph_builder.h"

namespace memplan::gui::fixtures {

namespace {

memplan::testing::GraphBuilder ToyBuilder() {
  memplan::testing::GraphBuilder b;
  b.Input("x", {-1, 16}).Param("w1", {16, 16}).Param("w2", {16, 4});
  b.Node("MatMul", {"x", "w1"}, {"h"});
  b.Node("Relu", {"h"}, {"r"});
  b.Node("MatMul", {"r", "w2"}, {"y"});
  b.Output("y");
  return b;
}

LoadOptions ToyOptions(int64_t batch) {
  LoadOptions o;
  o.batch = batch;
  o.loss = LossKind::kSum;
  return o;
}

NodeProfile Node(NodeId id, const char* name, const char* op, Phase phase, int32_t segment,
                 double seconds, double predicted) {
  NodeProfile n;
  n.node = id;
  n.name = name;
  n.op = op;
  n.phase = phase;
  n.segment = segment;
  n.calls = 1;
  n.seconds = seconds;
  n.predicted_seconds = predicted;
  return n;
}

}  // namespace

TrainingGraph ToyGraph(int64_t batch) { return ToyBuilder().Load(ToyOptions(batch)); }

void SaveToyModel(const std::string& path) { ToyBuilder().Save(path); }

Profile ProfileOfSchedule(const Analysis& a, int64_t workspace_bytes) {
  const Schedule& s = a.schedule;
  Profile p;
  p.model = a.graph.model_path.empty() ? "toy.onnx" : a.graph.model_path;
  p.device = "cpu";
  p.backend = "cpu";
  p.step = 2;
  p.batch = a.graph.batch;
  p.start_bytes = 0;
  double t = 0;
  int64_t alive = 0;
  size_t open_phase = SIZE_MAX;  // index of the open phase slice
  Phase open_as = Phase::kSetup;
  for (size_t i = 0; i < s.steps.size(); ++i) {
    const Step& step = s.steps[i];
    const bool phase_level = step.node == kNone;
    if (open_phase != SIZE_MAX && (phase_level || step.phase != open_as)) {
      p.slices[open_phase].end = t;
      open_phase = SIZE_MAX;
    }
    if (!phase_level && open_phase == SIZE_MAX) {
      open_phase = p.slices.size();
      open_as = step.phase;
      p.slices.push_back({t, t, {step.phase, kNone, 0, 0}, 0});
      t += 1e-5;  // the phase's own work before its first node
    }
    const ProfileScope scope{step.phase, step.node, 0, 0};
    const double begin = t, end = t + (i + 1) * 1e-3;
    for (BufferId b : step.allocs) {
      alive += s.buffers[b].bytes;
      p.memory_events.push_back({begin, s.buffers[b].bytes, alive, scope});
    }
    if (workspace_bytes > 0 && step.node != kNone && a.graph.nodes[step.node].op_type == "Relu" &&
        step.phase == Phase::kForward) {
      const double mid = (begin + end) / 2;
      p.memory_events.push_back({mid, workspace_bytes, alive + workspace_bytes, scope});
      p.memory_events.push_back({mid, -workspace_bytes, alive, scope});
    }
    for (BufferId b : step.frees) {
      alive -= s.buffers[b].bytes;
      p.memory_events.push_back({end, -s.buffers[b].bytes, alive, scope});
    }
    p.slices.push_back({begin, end, scope, phase_level ? 0 : 1});
    t = end + 1e-5;
  }
  if (open_phase != SIZE_MAX) p.slices[open_phase].end = t;
  p.step_seconds = t;
  AggregateProfile(p);
  NameProfileNodes(a.graph, p);
  for (NodeProfile& n : p.nodes) {
    if (n.node != kNone) n.predicted_seconds = 0.8 * n.seconds;
  }
  return p;
}

Profile HandMadeProfile() {
  Profile p;
  p.model = "/models/toy.onnx";
  p.device = "cpu";
  p.backend = "cpu";
  p.step = 2;
  p.batch = 8;
  p.step_seconds = 0.030;
  p.start_bytes = 1 << 20;
  p.peak_bytes = 3 << 20;
  p.peak_time = 0.012;
  p.peak_scope = {Phase::kBackward, 2, 1, 0};
  p.nodes = {
      Node(0, "mm1", "MatMul", Phase::kForward, 0, 0.004, 0.005),
      Node(1, "relu", "Relu", Phase::kForward, 0, 0.001, 0),
      Node(2, "mm2", "MatMul", Phase::kForward, 1, 0.006, 0.003),
      Node(kNone, "", "", Phase::kBackward, 1, 0.0005, 0),
      Node(2, "mm2", "MatMul", Phase::kBackward, 1, 0.008, 0.008),
      Node(0, "mm1", "MatMul", Phase::kRecompute, 0, 0.003, 0.0025),
      Node(1, "relu", "Relu", Phase::kRecompute, 0, 0.001, 0.0005),
      Node(kNone, "", "", Phase::kOptimizer, 0, 0.002, 0),
  };
  return p;
}

}  // namespace memplan::gui::fixtures
