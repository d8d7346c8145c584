// End-to-end: the memplan program as a user runs it, on good and bad input.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "testing/cli_runner.h"
#include "testing/corpus.h"
#include "testing/graph_builder.h"

namespace memplan {
namespace {

using testing::GraphBuilder;

using Cli = testing::CliTest;
using testing::ReadFile;

GraphBuilder Tiny() {
  GraphBuilder b;
  b.Input("x", {-1, 8}).Param("w", {8, 4});
  b.Node("MatMul", {"x", "w"}, {"y"}).Output("y");
  return b;
}

TEST_F(Cli, MissingFile) { ExpectUserError("analyze " + dir_ + "/nope.onnx", "nope.onnx"); }

TEST_F(Cli, NotOnnx) {
  std::ofstream(dir_ + "/text.onnx") << "this is not a model\n";
  ExpectUserError("analyze " + dir_ + "/text.onnx", "not a valid ONNX model");
}

TEST_F(Cli, EmptyFile) {
  std::ofstream(dir_ + "/empty.onnx");
  ExpectUserError("analyze " + dir_ + "/empty.onnx", "empty");
}

TEST_F(Cli, TruncatedModel) {
  std::string bytes = ReadFile(testing::CorpusModel("resnet18"));
  ASSERT_GT(bytes.size(), 1000u);
  std::ofstream(dir_ + "/cut.onnx", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  ExpectUserError("analyze " + dir_ + "/cut.onnx", "cut.onnx");
}

TEST_F(Cli, Cycle) {
  GraphBuilder b;
  b.Input("x", {-1, 8}).Param("w", {8, 8});
  b.Node("Add", {"x", "b"}, {"a"}).Node("MatMul", {"a", "w"}, {"b"}).Output("b");
  b.Save(dir_ + "/cycle.onnx");
  ExpectUserError("analyze " + dir_ + "/cycle.onnx", "cycle");
}

TEST_F(Cli, MissingNodeInput) {
  GraphBuilder b;
  b.Input("x", {-1, 8}).Param("w", {8, 8});
  b.Node("MatMul", {"ghost", "w"}, {"y"}).Output("y");
  b.Save(dir_ + "/missing.onnx");
  ExpectUserError("analyze " + dir_ + "/missing.onnx", "'ghost'");
}

TEST_F(Cli, UnknownOp) {
  GraphBuilder b;
  b.Input("x", {-1, 8}).Param("w", {8, 8});
  b.Node("MatMul", {"x", "w"}, {"y"}).Node("FancyNewOp", {"y"}, {"z"}).Output("z");
  b.Save(dir_ + "/unknown.onnx");
  ExpectUserError("analyze " + dir_ + "/unknown.onnx", "FancyNewOp");
}

TEST_F(Cli, DimensionOverflowsInt64Bytes) {
  Tiny().Save(dir_ + "/tiny.onnx");
  ExpectUserError("analyze " + dir_ + "/tiny.onnx --batch 4611686018427387904", "more than 2^63");
}

TEST_F(Cli, ZeroBatch) {
  Tiny().Save(dir_ + "/tiny.onnx");
  ExpectUserError("analyze " + dir_ + "/tiny.onnx --batch 0", "--batch");
}

TEST_F(Cli, UnboundSymbolicDim) {
  GraphBuilder b;
  b.Input("x", {-1, -1}).Param("w", {8, 4});
  b.Node("MatMul", {"x", "w"}, {"y"}).Output("y");
  b.Save(dir_ + "/sym.onnx");
  // Both dims are named N; binding the name fixes both, so this one succeeds...
  EXPECT_EQ(Run("analyze " + dir_ + "/sym.onnx --dim N=8").code, 0);
}

TEST_F(Cli, UnknownOption) { ExpectUserError("analyze x.onnx --frobnicate 3", "--frobnicate"); }

TEST_F(Cli, AnalyzeWritesTheJsonContract) {
  std::string json = dir_ + "/a.json";
  testing::CliResult r =
      Run("analyze " + testing::CorpusModel("resnet18") + " --batch 4 --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("peak"), std::string::npos);
  nlohmann::json j = nlohmann::json::parse(ReadFile(json));
  EXPECT_EQ(j["kind"], "analysis");
  for (const char* key : {"memplan_version", "model", "batch", "num_nodes", "param_bytes",
                          "peak_bytes", "breakdown", "bottlenecks", "timeline"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["batch"], 4);
  // The breakdown sums to the peak, and the timeline's largest point is the peak.
  int64_t sum = 0;
  for (auto& [k, v] : j["breakdown"].items()) sum += v.get<int64_t>();
  EXPECT_EQ(sum, j["peak_bytes"].get<int64_t>());
  int64_t top = 0;
  for (auto& p : j["timeline"]) top = std::max(top, p["bytes"].get<int64_t>());
  EXPECT_EQ(top, j["peak_bytes"].get<int64_t>());
  // resnet18 has 11.7 M parameters: 11,689,512 floats.
  EXPECT_EQ(j["param_bytes"].get<int64_t>(), 11689512LL * 4);
}

TEST_F(Cli, AbsentWeightsStillAnalyze) {
  // Only the graph is copied: the external-data file is missing.
  std::string src = testing::CorpusModel("resnet18");
  std::ofstream(dir_ + "/r.onnx", std::ios::binary) << ReadFile(src);
  testing::CliResult r = Run("analyze " + dir_ + "/r.onnx --batch 2");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("weights are absent"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace memplan
