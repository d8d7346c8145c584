// Shape resolution: memplan's own rules, checked with ONNX inference switched off.
#include <gtest/gtest.h>

#include "memplan/analyzer.h"
#include "testing/graph_builder.h"

namespace memplan {
namespace {

using testing::GraphBuilder;

LoadOptions RulesOnly(int64_t batch = 1) {
  LoadOptions o;
  o.batch = batch;
  o.onnx_shape_inference = false;
  return o;
}

std::vector<int64_t> ShapeOf(const TrainingGraph& g, const std::string& name) {
  return g.tensor(g.FindTensor(name)).shape;
}

TEST(ShapeRules, ReshapeFromShapeArithmetic) {
  // view(x.size(0), -1) as exporters write it: Shape -> Gather -> Unsqueeze -> Concat.
  GraphBuilder b;
  b.Input("x", {-1, 4, 5, 6}).Param("w", {120, 10}).Ints("zero", {0}).Ints("minus1", {-1});
  b.Node("Shape", {"x"}, {"s"}).Node("Gather", {"s", "zero"}, {"n"}).Attr("axis", int64_t{0});
  b.Node("Concat", {"n", "minus1"}, {"target"}).Attr("axis", int64_t{0});
  b.Node("Reshape", {"x", "target"}, {"flat"})
      .Node("MatMul", {"flat", "w"}, {"logits"})
      .Output("logits");
  TrainingGraph g = b.Load(RulesOnly(/*batch=*/7));
  EXPECT_EQ(ShapeOf(g, "flat"), (std::vector<int64_t>{7, 120}));  // 4*5*6 = 120
  EXPECT_EQ(ShapeOf(g, "logits"), (std::vector<int64_t>{7, 10}));
  ASSERT_TRUE(g.tensor(g.FindTensor("target")).value);
  EXPECT_EQ(g.tensor(g.FindTensor("target")).value->ints, (std::vector<int64_t>{7, -1}));
}

TEST(ShapeRules, ReshapeZeroCopiesDimension) {
  GraphBuilder b;
  b.Input("x", {-1, 6, 4}).Param("w", {2, 3}).Ints("target", {0, 12, -1});
  b.Node("Reshape", {"x", "target"}, {"r"}).Node("MatMul", {"r", "w"}, {"y"}).Output("y");
  TrainingGraph g = b.Load(RulesOnly(3));
  EXPECT_EQ(ShapeOf(g, "r"), (std::vector<int64_t>{3, 12, 2}));  // 6*4 = 24 = 12*2
}

TEST(ShapeRules, BatchNormTrainingOutputs) {
  GraphBuilder b;
  b.Input("x", {-1, 3, 4, 4});
  for (const char* p : {"s", "bias", "m", "v"}) b.Param(p, {3});
  b.Node("BatchNormalization", {"x", "s", "bias", "m", "v"}, {"y", "rm", "rv"})
      .Attr("training_mode", int64_t{1});
  b.Output("y");
  TrainingGraph g = b.Load(RulesOnly(2));
  EXPECT_EQ(ShapeOf(g, "y"), (std::vector<int64_t>{2, 3, 4, 4}));
  EXPECT_EQ(ShapeOf(g, "rm"), (std::vector<int64_t>{3}));
}

TEST(ShapeRules, ConvAndPoolArithmetic) {
  GraphBuilder b;
  b.Input("x", {-1, 3, 224, 224}).Param("w", {64, 3, 7, 7});
  b.Node("Conv", {"x", "w"}, {"c"})
      .Attr("strides", std::vector<int64_t>{2, 2})
      .Attr("pads", std::vector<int64_t>{3, 3, 3, 3});
  b.Node("MaxPool", {"c"}, {"p"})
      .Attr("kernel_shape", std::vector<int64_t>{3, 3})
      .Attr("strides", std::vector<int64_t>{2, 2})
      .Attr("pads", std::vector<int64_t>{1, 1, 1, 1});
  b.Node("MaxPool", {"p"}, {"q"})
      .Attr("kernel_shape", std::vector<int64_t>{3, 3})
      .Attr("strides", std::vector<int64_t>{2, 2})
      .Attr("ceil_mode", int64_t{1});
  b.Output("q");
  TrainingGraph g = b.Load(RulesOnly());
  // (224 + 6 - 7) / 2 + 1 = 112; (112 + 2 - 3) / 2 + 1 = 56; ceil((56 - 3) / 2) + 1 = 28.
  EXPECT_EQ(ShapeOf(g, "c"), (std::vector<int64_t>{1, 64, 112, 112}));
  EXPECT_EQ(ShapeOf(g, "p"), (std::vector<int64_t>{1, 64, 56, 56}));
  EXPECT_EQ(ShapeOf(g, "q"), (std::vector<int64_t>{1, 64, 28, 28}));
}

TEST(ShapeRules, ExpandReportsIncompatibleShapes) {
  GraphBuilder b;
  b.Input("x", {-1, 5, 8}).Ints("start", {0}).Ints("axes0", {0});
  b.Node("Shape", {"x"}, {"s"}).Attr("start", int64_t{1}).Attr("end", int64_t{2});  // [5]
  b.Node("Squeeze", {"s", "axes0"}, {"len"});                                       // 5
  b.Node("Squeeze", {"start", "axes0"}, {"zero"});
  b.Node("Constant", {}, {"one"}).Attr("value_int", int64_t{1});
  b.Node("Range", {"zero", "len", "one"}, {"pos"});  // [0..4]
  b.Node("ConstantOfShape", {"s"}, {"zeros"});       // float [5]
  b.Node("Equal", {"pos", "pos"}, {"all"});
  b.Node("Where", {"all", "zeros", "zeros"}, {"w"});
  b.Node("Shape", {"x"}, {"xs"});
  b.Node("Expand", {"w", "xs"}, {"wide"});  // [5] broadcast to [N, 5, 8]? -> needs last dim 8
  b.Output("wide");
  // [5] vs [N,5,8] does not broadcast: the rule reports the node.
  EXPECT_THROW(b.Load(RulesOnly(2)), MemplanError);
}

TEST(ShapeRules, RangeAndConstantOfShapeValues) {
  GraphBuilder b;
  b.Input("x", {-1, 5, 8}).Ints("axes0", {0}).Param("w", {8, 2});
  b.Node("Shape", {"x"}, {"s"}).Attr("start", int64_t{1}).Attr("end", int64_t{2});
  b.Node("Squeeze", {"s", "axes0"}, {"len"});
  b.Node("Constant", {}, {"zero"}).Attr("value_int", int64_t{0});
  b.Node("Constant", {}, {"one"}).Attr("value_int", int64_t{1});
  b.Node("Range", {"zero", "len", "one"}, {"pos"});
  b.Node("Unsqueeze", {"pos", "axes0"}, {"pos2"});
  b.Node("ConstantOfShape", {"s"}, {"ones"});
  b.Node("Shape", {"pos2"}, {"ps"});
  b.Node("MatMul", {"x", "w"}, {"y"}).Output("y");
  TrainingGraph g = b.Load(RulesOnly(2));
  ASSERT_TRUE(g.tensor(g.FindTensor("pos")).value);
  EXPECT_EQ(g.tensor(g.FindTensor("pos")).value->ints, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(ShapeOf(g, "pos2"), (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(g.tensor(g.FindTensor("ps")).value->ints, (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(ShapeOf(g, "ones"), (std::vector<int64_t>{5}));
}

TEST(ShapeRules, SymbolicDimsBindByName) {
  GraphBuilder b;
  b.Input("ids", {-1, -1}, DType::kInt64).Param("emb", {100, 16}).Param("head", {16, 100});
  b.Node("Gather", {"emb", "ids"}, {"e"})
      .Node("MatMul", {"e", "head"}, {"logits"})
      .Output("logits");
  // Both dims are named "N" by the builder: binding N binds both.
  LoadOptions o = RulesOnly();
  o.dims["N"] = 6;
  TrainingGraph g = b.Load(o);
  EXPECT_EQ(ShapeOf(g, "logits"), (std::vector<int64_t>{6, 6, 100}));
  // Cross entropy over the last axis: one int64 target per token.
  EXPECT_EQ(g.tensor(g.loss_target).shape, (std::vector<int64_t>{6, 6}));
}

// Op facts the executor reads from the rule table, by what each op does.
TEST(OpFacts, RandomOpsAreTheOnesThatDraw) {
  // Sources draw on every call; Dropout only when it trains; arithmetic never.
  for (const char* op :
       {"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Bernoulli"}) {
    EXPECT_EQ(RandomnessOf(op), Randomness::kAlways) << op;
  }
  EXPECT_EQ(RandomnessOf("Dropout"), Randomness::kInTraining);
  for (const char* op : {"Relu", "Add", "MatMul", "Identity", "ConstantOfShape", "NoSuchOp"}) {
    EXPECT_EQ(RandomnessOf(op), Randomness::kNone) << op;
  }
}

TEST(OpFacts, ViewsAndCastsPassInputValues) {
  for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Transpose",
                         "Slice", "Expand", "Split", "Cast", "CastLike"}) {
    EXPECT_TRUE(PassesInputValues(op)) << op;
  }
  // These compute new values (Shape's output is input 0's dims, not its elements).
  for (const char* op : {"Relu", "Add", "Shape", "Gather", "Concat", "NoSuchOp"}) {
    EXPECT_FALSE(PassesInputValues(op)) << op;
  }
}

TEST(OpFacts, IndexInputsAlongAnAxis) {
  // ONNX: Gather(data, indices), GatherElements(data, indices), ScatterElements(data, indices,
  // updates), each indexing along 'axis' of data.
  EXPECT_EQ(AxisIndicesInput("Gather"), 1);
  EXPECT_EQ(AxisIndicesInput("GatherElements"), 1);
  EXPECT_EQ(AxisIndicesInput("ScatterElements"), 1);
  // ScatterND's indices address whole index tuples, not one axis; MatMul has none.
  EXPECT_EQ(AxisIndicesInput("ScatterND"), -1);
  EXPECT_EQ(AxisIndicesInput("MatMul"), -1);
  EXPECT_EQ(AxisIndicesInput("NoSuchOp"), -1);
}

TEST(OpFacts, NormalisationStartsAsTheIdentity) {
  // BatchNormalization(X, scale, B, mean, var): y = scale * (X - mean) / sqrt(var) + B is X
  // with scale 1, B 0, mean 0, var 1 (torch.nn's initial values).
  EXPECT_EQ(InitialFillOf("BatchNormalization", 1), InitialFill::kOne);
  EXPECT_EQ(InitialFillOf("BatchNormalization", 2), InitialFill::kZero);
  EXPECT_EQ(InitialFillOf("BatchNormalization", 3), InitialFill::kZero);
  EXPECT_EQ(InitialFillOf("BatchNormalization", 4), InitialFill::kOne);
  for (const char* op : {"LayerNormalization", "InstanceNormalization"}) {  // (X, scale, B)
    EXPECT_EQ(InitialFillOf(op, 1), InitialFill::kOne) << op;
    EXPECT_EQ(InitialFillOf(op, 2), InitialFill::kZero) << op;
  }
  // Other weights are drawn.
  EXPECT_EQ(InitialFillOf("Conv", 1), InitialFill::kRandom);
  EXPECT_EQ(InitialFillOf("Gemm", 2), InitialFill::kRandom);
  EXPECT_EQ(InitialFillOf("NoSuchOp", 1), InitialFill::kRandom);
}

}  // namespace
}  // namespace memplan
