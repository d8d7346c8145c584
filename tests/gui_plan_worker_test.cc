// The GUI's re-planning and `memplan plan` answer a budget with the same plan: both call
// PlanForBudget, micro-batch fallback included.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "plan_worker.h"
#include "testing/graph_builder.h"

namespace memplan::gui {
namespace {

// Without the timings, which differ from run to run.
// Solve time differs per run; the CLI also records which machine rates priced its seconds.
nlohmann::json WithoutTimes(nlohmann::json j) {
  j.erase("solve_seconds");
  j.erase("time_model");
  j.erase("predicted_micro_batch_seconds");  // a time, of the time model each side uses
  // The command line also searches the smallest budget; the explorer's re-plans do not.
  for (const char* f :
       {"smallest_budget_bytes", "smallest_budget_strategy", "smallest_budget_micro_batches"})
    j.erase(f);
  return j;
}

TEST(GuiPlanWorker, GivesTheCommandLinesPlanWithMicroBatches) {
  if (!PlannerAvailable()) GTEST_SKIP() << "built without the planner library";
  // x[N,100] -> MatMul w1[100,100] -> Relu -> MatMul w2[100,10] -> cross entropy (as in
  // planner_microbatch_test.cc), gradients kept between steps: at batch 4 the plain step needs
  // 131240 B and no checkpointing goes lower; two micro-batches of 2 need 130440 B (each with
  // the loss and its seed gradient, 4 B each, alive until the backward call returns).
  const std::string model = ::testing::TempDir() + "gui_plan_worker_chain.onnx";
  testing::GraphBuilder b;
  b.Input("x", {-1, 100}).Param("w1", {100, 100}).Param("w2", {100, 10});
  b.Node("MatMul", {"x", "w1"}, {"y1"})
      .Node("Relu", {"y1"}, {"y2"})
      .Node("MatMul", {"y2", "w2"}, {"logits"});
  b.Output("logits").Save(model);

  ModelOptions options;
  options.batch = 4;
  options.grads = GradientLifetime::kKept;
  PlanRequest r;
  r.analysis = LoadItem(model, options).analysis;
  r.model_path = model;
  r.budget_bytes = 131000;
  r.strategy = "optimal";
  const Item item = MakePlanItem(r);
  const nlohmann::json gui = nlohmann::json::parse(item.plan_json);
  EXPECT_EQ(gui["micro_batches"], 2);
  EXPECT_EQ(gui["predicted_peak_bytes"], 130440);
  EXPECT_EQ(item.batch, 4);
  EXPECT_EQ(item.feasible, 1);

  const std::string json = ::testing::TempDir() + "gui_plan_worker_cli.json";
  const std::string cmd = std::string(MEMPLAN_CLI) + " plan '" + model +
                          "' --batch 4 --grads kept --budget 131000B --strategy optimal --json '" +
                          json + "' > /dev/null";
  const int rc = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << cmd;
  std::ifstream in(json);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(WithoutTimes(gui), WithoutTimes(nlohmann::json::parse(text.str())));
}

// A selective plan made in the explorer is the command line's, and its storages are the ones
// the plan drops.
TEST(GuiPlanWorker, GivesTheCommandLinesSelectivePlan) {
  if (!PlannerAvailable()) GTEST_SKIP() << "built without the planner library";
  if (!PlannerStrategies().contains("selective"))
    GTEST_SKIP() << "the planner does not offer `selective` yet";
  // x [64, 32] -> MatMul -> Relu -> Sigmoid -> Tanh -> MatMul -> cross entropy: the saved
  // activations (8 KiB each) outweigh the parameters.
  const std::string model = ::testing::TempDir() + "gui_plan_worker_selective.onnx";
  testing::GraphBuilder b;
  b.Input("x", {-1, 32}).Param("w1", {32, 32}).Param("w2", {32, 10});
  b.Node("MatMul", {"x", "w1"}, {"h0"})
      .Node("Relu", {"h0"}, {"h1"})
      .Node("Sigmoid", {"h1"}, {"h2"});
  b.Node("Tanh", {"h2"}, {"h3"}).Node("MatMul", {"h3", "w2"}, {"logits"});
  b.Output("logits").Save(model);
  ModelOptions options;
  options.batch = 64;
  PlanRequest r;
  r.analysis = LoadItem(model, options).analysis;
  r.model_path = model;
  r.budget_bytes = r.analysis->timeline.peak_bytes / 100 * 90;
  const std::string json = ::testing::TempDir() + "gui_plan_worker_selective.json";
  const std::string cmd = std::string(MEMPLAN_CLI) + " plan '" + model + "' --batch 64 --budget " +
                          std::to_string(r.budget_bytes) + "B --strategy selective --json '" +
                          json + "' > /dev/null";
  const int rc = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << cmd;
  std::ifstream in(json);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json cli = nlohmann::json::parse(text.str());
  r.strategy = "selective";
  // The explorer prices recompute with the command line's rates (memplan gui passes them), so
  // that it chooses the same tensors: the ones the CLI's plan reports in its time model.
  ASSERT_TRUE(cli.contains("time_model") && cli["time_model"].contains("rates"));
  r.machine_rates = cli["time_model"]["rates"].dump();
  const Item item = MakePlanItem(r);
  EXPECT_EQ(item.strategy, "selective");
  ASSERT_FALSE(item.recomputed_ids.empty());
  EXPECT_EQ(CountSelective(item.storages).recomputed(),
            static_cast<int64_t>(item.recomputed_ids.size()));
  for (const StorageDecision& d : item.storages) {
    const bool dropped = std::find(item.recomputed_ids.begin(), item.recomputed_ids.end(),
                                   d.tensor) != item.recomputed_ids.end();
    EXPECT_EQ(d.recomputed, dropped) << d.name;
  }
  EXPECT_EQ(WithoutTimes(nlohmann::json::parse(item.plan_json)), WithoutTimes(cli));
  // The file names the same tensors, which the document layer reads back; replayed on its
  // model (as the loader does), it has the explorer plan's schedule and storages.
  EXPECT_EQ(ItemFromJson(cli, json).recomputed, item.recomputed);
  const Item file = WithPlanSchedule(json, ItemFromJson(cli, json));
  ASSERT_TRUE(file.schedule) << (file.notes.empty() ? "" : file.notes.back());
  EXPECT_EQ(file.recomputed_ids, item.recomputed_ids);
  EXPECT_EQ(file.schedule->steps.size(), item.schedule->steps.size());
  EXPECT_EQ(file.timeline->bytes, item.timeline->bytes);
  ASSERT_EQ(file.storages.size(), item.storages.size());
  for (size_t i = 0; i < file.storages.size(); ++i) {
    EXPECT_EQ(file.storages[i].name, item.storages[i].name);
    EXPECT_EQ(file.storages[i].recomputed, item.storages[i].recomputed);
    EXPECT_EQ(file.storages[i].recompute_spans, item.storages[i].recompute_spans);
  }
  EXPECT_EQ(file.plan_peak_bytes, item.plan_peak_bytes);
  // Without its model the file keeps its numbers and says why its tensors are not shown.
  nlohmann::json moved = cli;
  moved["model"] = ::testing::TempDir() + "gui_plan_worker_no_such_model.onnx";
  const std::string moved_path = ::testing::TempDir() + "gui_plan_worker_moved.json";
  std::ofstream(moved_path) << moved.dump();
  const Item lone = WithPlanSchedule(moved_path, ItemFromJson(moved, moved_path));
  EXPECT_FALSE(lone.schedule);
  EXPECT_EQ(lone.recomputed, item.recomputed);
  ASSERT_FALSE(lone.notes.empty());
  EXPECT_NE(lone.notes.back().find("is not there"), std::string::npos) << lone.notes.back();
}

}  // namespace
}  // namespace memplan::gui
