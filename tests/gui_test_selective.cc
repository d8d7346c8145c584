#include "gui_test_selective.h"

#include "testing/graph_builder.h"

namespace memplan::gui::fixtures {

TrainingGraph SelectiveGraph() {
  memplan::testing::GraphBuilder b;
  b.Input("x", {-1, 25}).Param("w", {25});
  b.Node("Mul", {"x", "w"}, {"h0"});
  b.Node("Relu", {"h0"}, {"a"});
  b.Node("Sigmoid", {"h0"}, {"b"});
  b.Node("Add", {"a", "b"}, {"c"});
  b.Node("Relu", {"c"}, {"d"});
  b.Output("d");
  LoadOptions o;
  o.batch = 1;
  o.loss = LossKind::kSum;
  return b.Load(o);
}

Plan SelectivePlan(const TrainingGraph& g) {
  return ReplaySelective(g, {g.FindTensor("h0"), g.FindTensor("a"), g.FindTensor("b")},
                         {.strategy = "selective", .budget_bytes = 2000});
}

std::shared_ptr<Item> SelectiveItem() {
  const TrainingGraph g = SelectiveGraph();
  const Plan p = SelectivePlan(g);
  auto item = std::make_shared<Item>();
  item->kind = SourceKind::kPlan;
  item->title = "selective";
  item->model = "selective.onnx";
  item->batch = 1;
  item->strategy = p.strategy;
  item->budget_bytes = p.budget_bytes;
  item->plan_peak_bytes = p.predicted_peak_bytes;
  item->recompute_flops = p.recompute_flops;
  item->overhead = p.overhead();
  item->feasible = p.feasible ? 1 : 0;
  item->timeline = std::make_shared<TimelineData>(
      TimelineFromSchedule(g, p.schedule, p.timeline, "plan selective"));
  item->schedule = std::make_shared<Schedule>(p.schedule);
  for (TensorId t : p.recomputed) item->recomputed.push_back(g.tensors[t].name);
  item->recomputed_ids = p.recomputed;
  item->storages = SelectiveStorages(g, p.schedule, p.recomputed);
  return item;
}

}  // namespace memplan::gui::fixtures
