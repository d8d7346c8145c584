// The GUI's re-planning and `memplan plan` answer a budget with the same plan: both call
// PlanForBudget, micro-batch fallback included.
#include <gtest/gtest.h>
#include <sys/wait.h>

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
  return j;
}

TEST(GuiPlanWorker, GivesTheCommandLinesPlanWithMicroBatches) {
  if (!PlannerAvailable()) GTEST_SKIP() << "built without the planner library";
  // x[N,100] -> MatMul w1[100,100] -> Relu -> MatMul w2[100,10] -> cross entropy (as in
  // planner_microbatch_test.cc): at batch 4 the plain step needs 131232 B and no checkpointing
  // goes lower; two micro-batches of 2 need 130432 B.
  const std::string model = ::testing::TempDir() + "gui_plan_worker_chain.onnx";
  testing::GraphBuilder b;
  b.Input("x", {-1, 100}).Param("w1", {100, 100}).Param("w2", {100, 10});
  b.Node("MatMul", {"x", "w1"}, {"y1"}).Node("Relu", {"y1"}, {"y2"}).Node("MatMul", {"y2", "w2"}, {"logits"});
  b.Output("logits").Save(model);

  ModelOptions options;
  options.batch = 4;
  PlanRequest r;
  r.analysis = LoadItem(model, options).analysis;
  r.model_path = model;
  r.budget_bytes = 131000;
  r.strategy = "optimal";
  const Item item = MakePlanItem(r);
  const nlohmann::json gui = nlohmann::json::parse(item.plan_json);
  EXPECT_EQ(gui["micro_batches"], 2);
  EXPECT_EQ(gui["predicted_peak_bytes"], 130432);
  EXPECT_EQ(item.batch, 4);
  EXPECT_EQ(item.feasible, 1);

  const std::string json = ::testing::TempDir() + "gui_plan_worker_cli.json";
  const std::string cmd = std::string(MEMPLAN_CLI) + " plan '" + model +
                          "' --batch 4 --budget 131000B --strategy optimal --json '" + json + "' > /dev/null";
  const int rc = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << cmd;
  std::ifstream in(json);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(WithoutTimes(gui), WithoutTimes(nlohmann::json::parse(text.str())));
}

}  // namespace
}  // namespace memplan::gui
