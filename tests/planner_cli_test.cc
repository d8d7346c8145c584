// `memplan plan` as a user runs it: exit codes (0 fits, 1 bad input, 2 nothing fits), the
// summary, the JSON, and no file on errors.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "testing/cli_runner.h"
#include "testing/graph_builder.h"

namespace memplan {
namespace {

using testing::CliResult;
using testing::FileExists;
using testing::ReadFile;

class PlannerCli : public testing::CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    model_ = dir_ + "/chain.onnx";
    // x [N, 256] -> Mul(w) -> 12 Relus; the default cross-entropy loss reads the last Relu's
    // [N, 256] output as 256 class logits.
    testing::GraphBuilder b;
    b.Input("x", {-1, 256}).Param("w", {256}).Node("Mul", {"x", "w"}, {"h0"});
    for (int i = 1; i <= 12; ++i)
      b.Node("Relu", {"h" + std::to_string(i - 1)}, {"h" + std::to_string(i)});
    b.Output("h12");
    b.Save(model_);
  }
  CliResult Run(const std::string& args) { return CliTest::Run("plan " + args); }

  std::string model_;
};

TEST_F(PlannerCli, PlanFitsWritesJsonAndPrintsTheSummary) {
  std::string json = dir_ + "/plan.json";
  CliResult r = Run(model_ + " --batch 8 --budget 70% --strategy optimal --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* s :
       {"baseline", "plan peak", "budget", "overhead", "checkpoints", "sections", "solve time"}) {
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  }
  nlohmann::json j = nlohmann::json::parse(ReadFile(json));
  EXPECT_EQ(j["kind"], "plan");
  EXPECT_EQ(j["strategy"], "optimal");
  EXPECT_EQ(j["batch"], 8);
  EXPECT_TRUE(j["feasible"].get<bool>());
  EXPECT_LE(j["predicted_peak_bytes"].get<int64_t>(), j["budget_bytes"].get<int64_t>());
  EXPECT_GT(j["sections"].size(), 1u);
}

TEST_F(PlannerCli, NothingFitsExitsTwoAndNamesTheSmallestBudget) {
  std::string json = dir_ + "/plan.json";
  CliResult r = Run(model_ + " --batch 8 --budget 1KiB --json " + json);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("smallest peak any strategy reaches"), std::string::npos) << r.err;
  nlohmann::json j = nlohmann::json::parse(ReadFile(json));  // complete, and says so
  EXPECT_FALSE(j["feasible"].get<bool>());
  EXPECT_GT(j["smallest_budget_bytes"].get<int64_t>(), 1024);
}

TEST_F(PlannerCli, ManualCheckpoints) {
  CliResult r = Run(model_ + " --budget 1GiB --checkpoints h4,h8");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("manual"), std::string::npos);
  EXPECT_NE(r.out.find("checkpoints  2   sections 3"), std::string::npos) << r.out;
}

TEST_F(PlannerCli, BadInputIsExitOneWithoutAFile) {
  std::string json = dir_ + "/plan.json";
  struct Case {
    std::string args, expect;
  };
  for (const Case& c : std::vector<Case>{
           {model_ + " --budget 1GiB --checkpoints h4,nope", "nope"},
           {model_ + " --budget lots", "lots"},
           {model_ + " --budget 1GiB --strategy fastest", "fastest"},
           {model_, "--budget"},
           {dir_ + "/missing.onnx --budget 1GiB", "missing.onnx"},
           {model_ + " --budget 1GiB --strategy speed --checkpoints h4", "--checkpoints"},
       }) {
    CliResult r = Run(c.args + " --json " + json);
    EXPECT_EQ(r.code, 1) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_FALSE(FileExists(json)) << c.args;
  }
}

TEST_F(PlannerCli, SweepPrintsAParetoTableAndPutsItInTheJson) {
  std::string json = dir_ + "/plan.json";
  CliResult r = Run(model_ + " --batch 8 --sweep --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("budget sweep"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("smallest feasible budget"), std::string::npos) << r.out;
  nlohmann::json j = nlohmann::json::parse(ReadFile(json));
  ASSERT_TRUE(j.contains("sweep"));
  const nlohmann::json& points = j["sweep"]["points"];
  ASSERT_GE(points.size(), 2u);
  EXPECT_EQ(points.front()["budget_bytes"], j["sweep"]["baseline_peak_bytes"]);
  EXPECT_EQ(points.back()["peak_bytes"], j["sweep"]["min_budget_bytes"]);
  EXPECT_TRUE(j["feasible"].get<bool>());  // without --budget: the plan at the smallest budget
}

TEST_F(PlannerCli, MicroBatchesSplitTheBatch) {
  std::string json = dir_ + "/micro.json";
  CliResult r = Run(model_ + " --batch 8 --budget 1GiB --micro-batches 4 --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("micro-batch  4 x 2"), std::string::npos) << r.out;
  nlohmann::json j = nlohmann::json::parse(ReadFile(json));
  EXPECT_EQ(j["batch"], 8);
  EXPECT_EQ(j["micro_batches"], 4);
  EXPECT_EQ(j["micro_batch"], 2);
  // A count that does not divide the batch is a user error, with no file.
  std::string bad = dir_ + "/bad.json";
  r = Run(model_ + " --batch 8 --budget 1GiB --micro-batches 3 --json " + bad);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("does not divide"), std::string::npos) << r.err;
  EXPECT_FALSE(FileExists(bad));
}

}  // namespace
}  // namespace memplan
