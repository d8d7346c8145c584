// Shape resolution: memplan's own rules, checked with ONNX inference switched off.
#include <gtest/gtest.h>

#include "memplan/analyzer.h"
#include "memplan/spatial_attrs.h"
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

// A node as a rule sees it: `inputs` tensor ids (kNone: omitted) and integer attributes.
Node MakeNode(const std::string& op, std::vector<TensorId> inputs,
              std::map<std::string, Attribute> attributes = {}) {
  Node n;
  n.op_type = op;
  n.inputs = std::move(inputs);
  n.outputs = {0};
  n.attributes = std::move(attributes);
  return n;
}
Attribute IntAttr(int64_t v) {
  Attribute a;
  a.kind = Attribute::Kind::kInt;
  a.i = v;
  return a;
}
Attribute FloatAttr(double v) {
  Attribute a;
  a.kind = Attribute::Kind::kFloat;
  a.f = v;
  return a;
}
Attribute IntsAttr(std::vector<int64_t> v) {
  Attribute a;
  a.kind = Attribute::Kind::kInts;
  a.ints = std::move(v);
  return a;
}
Attribute StringAttr(const std::string& v) {
  Attribute a;
  a.kind = Attribute::Kind::kString;
  a.s = v;
  return a;
}
ConstValue Scalar(DType dtype, double v) {
  ConstValue c;
  c.dtype = dtype;
  if (IsFloating(dtype)) {
    c.floats = {v};
  } else {
    c.ints = {static_cast<int64_t>(v)};
  }
  return c;
}

// ONNX's Dropout: opset 12 and 13 take ratio and training_mode as inputs 1 and 2, training_mode
// false when omitted; opsets 7 and 10 have a 'ratio' attribute and no training switch (their
// mode is the runtime's; ONNX's reference runs them as inference); opsets 1 to 6 train unless
// the attribute is_test is set.
TEST(OpFacts, DropoutTrainsOnlyWhenItsOpsetSaysSo) {
  const ConstValue yes = Scalar(DType::kBool, 1), no = Scalar(DType::kBool, 0);
  const ConstValue half = Scalar(DType::kFloat32, 0.5), zero = Scalar(DType::kFloat32, 0);
  // Opsets 12, 13: Dropout(data, ratio, training_mode).
  const Node d13 = MakeNode("Dropout", {0, 1, 2});
  EXPECT_TRUE(DropoutIsActive(d13, &half, &yes));
  EXPECT_TRUE(DropoutIsActive(d13, nullptr, &yes));    // a ratio not known: not 0
  EXPECT_FALSE(DropoutIsActive(d13, &half, &no));      // training_mode false
  EXPECT_FALSE(DropoutIsActive(d13, &zero, &yes));     // ratio 0 drops nothing
  EXPECT_FALSE(DropoutIsActive(d13, &half, nullptr));  // a mode not known: inference
  EXPECT_FALSE(DropoutIsActive(MakeNode("Dropout", {0}), nullptr, nullptr));  // mode omitted
  EXPECT_FALSE(DropoutIsActive(MakeNode("Dropout", {0, 1}), &half, nullptr));
  // Opsets 7, 10: Dropout(data) with attribute ratio; no training switch.
  EXPECT_FALSE(
      DropoutIsActive(MakeNode("Dropout", {0}, {{"ratio", FloatAttr(0.5)}}), nullptr, nullptr));
  // Opsets 1 to 6: is_test 0 trains, unless the ratio is 0.
  EXPECT_TRUE(
      DropoutIsActive(MakeNode("Dropout", {0}, {{"is_test", IntAttr(0)}}), nullptr, nullptr));
  EXPECT_FALSE(
      DropoutIsActive(MakeNode("Dropout", {0}, {{"is_test", IntAttr(1)}}), nullptr, nullptr));
  EXPECT_FALSE(
      DropoutIsActive(MakeNode("Dropout", {0}, {{"is_test", IntAttr(0)}, {"ratio", FloatAttr(0)}}),
                      nullptr, nullptr));
}

// The rule as loading applies it: an inactive Dropout is the identity (output 0 is its input,
// nothing is saved); an active one saves what torch.nn.Dropout saves on the CPU, its float noise
// (4 bytes per element: torch.nn.functional.dropout's one saved tensor is float32 of the input's
// shape, listed with saved_tensors_hooks on LibTorch 2.14's CPU).
TEST(OpFacts, OnlyAnActiveDropoutSavesItsNoise) {
  auto load = [](int64_t opset, bool with_mode, int64_t mode, double ratio) {
    GraphBuilder b;
    b.Opset(opset).Input("x", {-1, 100}).Param("w", {100, 10});
    b.Node("MatMul", {"x", "w"}, {"h"});
    if (with_mode) {
      b.Node("Constant", {}, {"ratio"}).Attr("value_float", ratio);
      b.Node("Constant", {}, {"train"}).Attr("value_int", mode);
      b.Node("Dropout", {"h", "ratio", "train"}, {"d"});
    } else {
      b.Node("Dropout", {"h"}, {"d"}).Attr("ratio", ratio);
    }
    return b.Output("d").Load(RulesOnly(/*batch=*/2));
  };
  struct Case {
    const char* what;
    int64_t opset;
    bool with_mode;
    int64_t mode;
    double ratio;
    bool active;
  };
  for (const Case& c : {Case{"opset 13, training", 13, true, 1, 0.5, true},
                        Case{"opset 13, training_mode false", 13, true, 0, 0.5, false},
                        Case{"opset 13, ratio 0", 13, true, 1, 0.0, false},
                        Case{"opset 10", 10, false, 0, 0.5, false}}) {
    const TrainingGraph g = load(c.opset, c.with_mode, c.mode, c.ratio);
    const Node& dropout = g.node(g.tensor(g.FindTensor("d")).producer);
    EXPECT_EQ(IsIdentityInTraining(dropout, g.tensors), !c.active) << c.what;
    EXPECT_EQ(g.tensor(g.FindTensor("d")).is_view(), !c.active) << c.what;
    ASSERT_EQ(dropout.saved_extras.size(), c.active ? 1u : 0u) << c.what;
    if (c.active) {
      EXPECT_EQ(dropout.saved_extras[0].bytes, 2 * 10 * 4) << c.what;  // [2,10] floats
    }
    EXPECT_EQ(dropout.outputs.size(), 1u) << c.what;  // no mask asked for
  }
}

// A mask the graph reads is ONNX's bool output: made, and kept for the backward in the noise's
// place. A mask output that nothing reads (exports name it all the same) is not made: PyTorch's
// dropout returns none.
TEST(OpFacts, ADropoutMaskIsMadeOnlyWhenRead) {
  auto load = [](bool mask_read) {
    GraphBuilder b;
    b.Input("x", {-1, 100}).Param("w", {100, 10});
    b.Node("MatMul", {"x", "w"}, {"h"});
    b.Node("Constant", {}, {"ratio"}).Attr("value_float", 0.5);
    b.Node("Constant", {}, {"train"}).Attr("value_int", int64_t{1});
    b.Node("Dropout", {"h", "ratio", "train"}, {"d", "mask"});
    b.Output("d");
    if (mask_read) b.Output("mask");
    return b.Load(RulesOnly(/*batch=*/2));
  };
  const TrainingGraph read = load(true), unread = load(false);
  const Node& with_mask = read.node(read.tensor(read.FindTensor("d")).producer);
  const Node& without = unread.node(unread.tensor(unread.FindTensor("d")).producer);
  ASSERT_EQ(with_mask.outputs.size(), 2u);
  EXPECT_EQ(with_mask.saved_extras.size(), 0u);
  EXPECT_EQ(with_mask.saved_for_backward, std::vector<TensorId>{with_mask.outputs[1]});
  EXPECT_EQ(read.tensor(with_mask.outputs[1]).bytes, 2 * 10);  // [2,10] bools
  EXPECT_EQ(without.outputs.size() < 2 || without.outputs[1] == kNone, true);
  EXPECT_TRUE(without.saved_for_backward.empty());
  ASSERT_EQ(without.saved_extras.size(), 1u);
  EXPECT_EQ(without.saved_extras[0].bytes, 2 * 10 * 4);
}

TEST(OpFacts, ACastToItsOwnTypeIsTheIdentity) {
  GraphBuilder b;
  b.Input("x", {-1, 4}).Param("w", {4, 4});
  b.Node("MatMul", {"x", "w"}, {"h"});
  b.Node("Cast", {"h"}, {"same"}).Attr("to", int64_t{1});      // float32 to float32
  b.Node("Cast", {"same"}, {"wide"}).Attr("to", int64_t{11});  // float32 to float64
  b.Node("Cast", {"wide"}, {"y"}).Attr("to", int64_t{1});
  const TrainingGraph g = b.Output("y").Load(RulesOnly());
  const Tensor &same = g.tensor(g.FindTensor("same")), &wide = g.tensor(g.FindTensor("wide"));
  EXPECT_TRUE(IsIdentityInTraining(g.node(same.producer), g.tensors));
  EXPECT_EQ(same.storage, g.FindTensor("h"));
  EXPECT_FALSE(IsIdentityInTraining(g.node(wide.producer), g.tensors));
  EXPECT_FALSE(wide.is_view());
  EXPECT_FALSE(IsIdentityInTraining(g.node(g.tensor(g.FindTensor("h")).producer), g.tensors));
}

// ONNX's BatchNormalization returns the running mean and variance (inputs 3 and 4) updated:
// outputs 1 and 2. Opsets before 14 add the saved mean and variance (outputs 3 and 4): new.
TEST(OpFacts, BatchNormUpdatesItsRunningStatisticsInPlace) {
  EXPECT_EQ(InPlaceInputOf("BatchNormalization", 0), -1);
  EXPECT_EQ(InPlaceInputOf("BatchNormalization", 1), 3);
  EXPECT_EQ(InPlaceInputOf("BatchNormalization", 2), 4);
  EXPECT_EQ(InPlaceInputOf("BatchNormalization", 3), -1);
  EXPECT_EQ(InPlaceInputOf("BatchNormalization", 4), -1);
  for (const char* op : {"LayerNormalization", "Dropout", "Relu", "NoSuchOp"}) {
    EXPECT_EQ(InPlaceInputOf(op, 1), -1) << op;
  }
}

// Conv and pooling attributes by ONNX's definitions (one reader for the analyzer and executor).
TEST(SpatialAttrs, DefaultsAreUnitStridesAndNoPads) {
  const SpatialAttrs a = ReadSpatialAttrs(MakeNode("Conv", {0, 1}), {1, 3, 8, 8}, {3, 3});
  EXPECT_EQ(a.stride, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(a.dilation, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(a.pad_begin, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(a.pad_end, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(a.group, 1);
  EXPECT_TRUE(a.symmetric());
}

TEST(SpatialAttrs, PadsListBeginsThenEnds) {
  const Node n = MakeNode("Conv", {0, 1},
                          {{"pads", IntsAttr({1, 2, 3, 4})},
                           {"strides", IntsAttr({2, 3})},
                           {"dilations", IntsAttr({1, 2})},
                           {"group", IntAttr(4)}});
  const SpatialAttrs a = ReadSpatialAttrs(n, {1, 8, 10, 10}, {3, 3});
  EXPECT_EQ(a.pad_begin, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(a.pad_end, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(a.stride, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.dilation, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(a.group, 4);
  EXPECT_FALSE(a.symmetric());
}

TEST(SpatialAttrs, AutoPadSameKeepsCeilOfInputOverStride) {
  // Input 4, kernel 3, stride 2: ceil(4 / 2) = 2 outputs need (2 - 1) * 2 + 3 = 5 rows: 1 pad,
  // after the input for SAME_UPPER, before it for SAME_LOWER. Input 5: (3 - 1) * 2 + 3 - 5 = 2,
  // one each side.
  auto read = [](const std::string& mode, int64_t in) {
    const Node n =
        MakeNode("Conv", {0, 1}, {{"auto_pad", StringAttr(mode)}, {"strides", IntsAttr({2})}});
    return ReadSpatialAttrs(n, {1, 1, in}, {3});
  };
  EXPECT_EQ(read("SAME_UPPER", 4).pad_begin, (std::vector<int64_t>{0}));
  EXPECT_EQ(read("SAME_UPPER", 4).pad_end, (std::vector<int64_t>{1}));
  EXPECT_EQ(read("SAME_LOWER", 4).pad_begin, (std::vector<int64_t>{1}));
  EXPECT_EQ(read("SAME_LOWER", 4).pad_end, (std::vector<int64_t>{0}));
  EXPECT_EQ(read("SAME_UPPER", 5).pad_begin, (std::vector<int64_t>{1}));
  EXPECT_EQ(read("SAME_UPPER", 5).pad_end, (std::vector<int64_t>{1}));
  // Dilation 2 spans 5 rows with a kernel of 3: input 4 at stride 1 needs 3 + 5 - 4 = 4 pads.
  const Node dilated = MakeNode(
      "Conv", {0, 1}, {{"auto_pad", StringAttr("SAME_UPPER")}, {"dilations", IntsAttr({2})}});
  EXPECT_EQ(ReadSpatialAttrs(dilated, {1, 1, 4}, {3}).pad_begin, (std::vector<int64_t>{2}));
  // VALID pads nothing, whatever 'pads' says.
  const Node valid =
      MakeNode("Conv", {0, 1}, {{"auto_pad", StringAttr("VALID")}, {"pads", IntsAttr({1, 1})}});
  EXPECT_EQ(ReadSpatialAttrs(valid, {1, 1, 4}, {3}).pad_begin, (std::vector<int64_t>{0}));
}

TEST(SpatialAttrs, KernelShapeFromTheAttributeOrTheWeight) {
  EXPECT_EQ(KernelShapeOf(MakeNode("Conv", {0, 1}), {8, 3, 5, 7}), (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(KernelShapeOf(MakeNode("MaxPool", {0}, {{"kernel_shape", IntsAttr({2, 2})}}), {}),
            (std::vector<int64_t>{2, 2}));
  EXPECT_TRUE(KernelShapeOf(MakeNode("MaxPool", {0}), {}).empty());
}

}  // namespace
}  // namespace memplan
