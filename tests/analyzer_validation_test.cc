// Invalid models: each is refused with a MemplanError naming the node or tensor at fault, as
// ONNX's checker would refuse it, before any shape rule or ONNX's own inference runs on it
// (never a crash, a hang or a wrong answer).
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>

#include "memplan/analyzer.h"
#include "testing/graph_builder.h"

namespace memplan {
namespace {

using testing::GraphBuilder;
using Edit = std::function<void(onnx::ModelProto&)>;

// The builder's model with `edit` applied to its protobuf.
std::string Edited(const GraphBuilder& b, const Edit& edit) {
  onnx::ModelProto m;
  m.ParseFromString(b.Bytes());
  edit(m);
  return m.SerializeAsString();
}

// The load's error message, or "loaded" when it succeeds.
std::string LoadError(const std::string& bytes, LoadOptions o = {}) {
  try {
    LoadTrainingGraphFromBytes(bytes, "m.onnx", o);
  } catch (const MemplanError& e) {
    return e.what();
  }
  return "loaded";
}
std::string LoadError(const GraphBuilder& b, LoadOptions o = {}) { return LoadError(b.Bytes(), o); }

// A Constant node (first in the graph) holding an int64 tensor of `dims` and `values`.
Edit AddInt64Constant(const std::string& name, std::vector<int64_t> dims,
                      std::vector<int64_t> values) {
  return [=](onnx::ModelProto& m) {
    onnx::NodeProto n;
    n.set_op_type("Constant");
    n.set_name(name + "_node");
    n.add_output(name);
    auto* a = n.add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(onnx::TensorProto::INT64);
    for (int64_t d : dims) a->mutable_t()->add_dims(d);
    for (int64_t v : values) a->mutable_t()->add_int64_data(v);
    auto* nodes = m.mutable_graph()->mutable_node();
    nodes->Add(std::move(n));
    std::rotate(nodes->begin(), nodes->end() - 1, nodes->end());
  };
}

onnx::TensorProto* Initializer(onnx::ModelProto& m, const std::string& name) {
  for (auto& t : *m.mutable_graph()->mutable_initializer()) {
    if (t.name() == name) return &t;
  }
  ADD_FAILURE() << "no initializer " << name;
  return nullptr;
}

// x [N, 8] -> MatMul w [8, 4] -> y: a trainable graph other nodes can be added to.
GraphBuilder Trainable() {
  GraphBuilder b;
  b.Input("x", {-1, 8}).Param("w", {8, 4});
  b.Node("MatMul", {"x", "w"}, {"y"});
  return b;
}

// x [N, 4, 8, 8] -> Conv w [6, 4, 3, 3] -> y, with the attributes `attrs`.
GraphBuilder ConvModel(std::vector<std::pair<std::string, testing::AttrValue>> attrs,
                       std::vector<int64_t> x = {-1, 4, 8, 8},
                       std::vector<int64_t> w = {6, 4, 3, 3}) {
  GraphBuilder b;
  b.Input("x", x).Param("w", w);
  b.Node("Conv", {"x", "w"}, {"y"});
  for (auto& [k, v] : attrs) b.Attr(k, v);
  return b.Output("y");
}

// ---- graph structure ----

// A node must produce its first output (found by fuzzing: a Where with no outputs reached the
// FLOPs rule, which reads output 0).
TEST(Validation, NodeWithoutOutputsIsRejected) {
  GraphBuilder b = Trainable();
  b.Node("Relu", {"y"}, {}).Output("y");
  std::string e = LoadError(b.Bytes());
  EXPECT_NE(e.find("node 'Relu_1' (Relu) has no first output"), std::string::npos) << e;
}

TEST(Validation, LayerNormAxisOutOfRangeIsRejected) {
  // y is [N, 4]: axis -3 names no dim (found by fuzzing: the saved-statistics rule read
  // before the start of the shape).
  GraphBuilder b = Trainable();
  b.Param("g", {4})
      .Node("LayerNormalization", {"y", "g"}, {"z"})
      .Attr("axis", int64_t{-3})
      .Output("z");
  std::string e = LoadError(b);
  EXPECT_NE(e.find("axis -3 is out of range for input 'y' of rank 2"), std::string::npos) << e;
}

TEST(Validation, RmsNormScaleThatDoesNotBroadcastIsRejected) {
  GraphBuilder b = Trainable();  // y is [N, 4]
  b.Param("g", {3}).Node("RMSNormalization", {"y", "g"}, {"z"}).Output("z");
  std::string e = LoadError(b);
  EXPECT_NE(e.find("RMSNormalization scale [3] does not broadcast to the normalised axes [4]"),
            std::string::npos)
      << e;
}

TEST(Validation, GatherNDIndexTuplesLongerThanTheDataRankAreRejected) {
  GraphBuilder b = Trainable();  // y is [N, 4]
  b.Ints("idx", {0, 1, 2}).Node("GatherND", {"y", "idx"}, {"z"}).Output("z");
  std::string e = LoadError(b);
  EXPECT_NE(e.find("GatherND indices' last dimension 3 must be in [1, 2]"), std::string::npos) << e;
}

// ---- constants of the wrong rank or size in shape arithmetic ----

TEST(Validation, EmptyConstantAsRangeLimitIsRejected) {
  GraphBuilder b = Trainable();
  b.Ints("start", {0})
      .Ints("delta", {1})
      .Node("Range", {"start", "limit", "delta"}, {"r"})
      .Output("y");
  std::string e = LoadError(Edited(b, AddInt64Constant("limit", {0}, {})));
  EXPECT_NE(e.find("Range node"), std::string::npos) << e;
  EXPECT_NE(e.find("'limit') must be a single value, but it has shape [0]"), std::string::npos)
      << e;
}

TEST(Validation, RankThreeConstantAsUnsqueezeAxesIsRejected) {
  GraphBuilder b = Trainable();
  b.Node("Unsqueeze", {"y", "axes"}, {"u"}).Output("u");
  std::string e = LoadError(Edited(b, AddInt64Constant("axes", {1, 1, 1}, {0})));
  EXPECT_NE(e.find("Unsqueeze node"), std::string::npos) << e;
  EXPECT_NE(e.find("must be a list of integers, but it is int64[1, 1, 1]"), std::string::npos) << e;
}

TEST(Validation, RepeatedUnsqueezeAxesAreRejected) {
  GraphBuilder b = Trainable();
  b.Ints("axes", {0, 0}).Node("Unsqueeze", {"y", "axes"}, {"u"}).Output("u");
  std::string e = LoadError(b);
  EXPECT_NE(e.find("Unsqueeze axes repeat an axis"), std::string::npos) << e;
}

TEST(Validation, ConcatOfScalarConstantsIsRejected) {
  GraphBuilder b = Trainable();
  b.Node("Concat", {"s", "s"}, {"c"}).Attr("axis", int64_t{0}).Output("y");
  std::string e = LoadError(Edited(b, AddInt64Constant("s", {}, {3})));
  EXPECT_NE(e.find("Concat node"), std::string::npos) << e;
  EXPECT_NE(e.find("axis 0 is out of range for rank 0"), std::string::npos) << e;
}

TEST(Validation, GatherFromAScalarConstantIsRejected) {
  GraphBuilder b = Trainable();
  b.Ints("idx", {0}).Node("Gather", {"s", "idx"}, {"g"}).Output("y");
  std::string e = LoadError(Edited(b, AddInt64Constant("s", {}, {3})));
  EXPECT_NE(e.find("Gather node"), std::string::npos) << e;
  EXPECT_NE(e.find("out of range for rank 0"), std::string::npos) << e;
}

// ---- Conv: attributes (checked before ONNX's inference, which would divide by them) ----

TEST(Validation, ConvStridesOfZeroAreRejected) {
  std::string e = LoadError(ConvModel({{"strides", std::vector<int64_t>{0, 0}}}));
  EXPECT_NE(e.find("Conv node 'Conv_0': strides [0, 0] must hold values from 1"), std::string::npos)
      << e;
}

TEST(Validation, ConvNegativePadsAreRejected) {
  std::string e = LoadError(ConvModel({{"pads", std::vector<int64_t>{-1, 0, 0, 0}}}));
  EXPECT_NE(e.find("pads [-1, 0, 0, 0] must hold values from 0"), std::string::npos) << e;
}

TEST(Validation, ConvDilationOfZeroIsRejected) {
  std::string e = LoadError(ConvModel({{"dilations", std::vector<int64_t>{1, 0}}}));
  EXPECT_NE(e.find("dilations [1, 0] must hold values from 1"), std::string::npos) << e;
}

TEST(Validation, ConvHugeStrideIsRejected) {
  std::string e = LoadError(ConvModel({{"strides", std::vector<int64_t>{int64_t{1} << 40, 1}}}));
  EXPECT_NE(e.find("strides [1099511627776, 1] must hold values from 1 to 2147483647"),
            std::string::npos)
      << e;
}

TEST(Validation, ConvGroupOfZeroIsRejected) {
  std::string e = LoadError(ConvModel({{"group", int64_t{0}}}));
  EXPECT_NE(e.find("Conv node 'Conv_0': group 0 must be from 1"), std::string::npos) << e;
}

TEST(Validation, ConvHugeGroupIsRejected) {
  std::string e = LoadError(ConvModel({{"group", int64_t{1} << 40}}));
  EXPECT_NE(e.find("group 1099511627776 must be from 1 to 2147483647"), std::string::npos) << e;
}

TEST(Validation, ConvGroupThatDoesNotDivideTheChannelsIsRejected) {
  // 4 input channels in 3 groups; the weight's 6 output channels would divide.
  std::string e = LoadError(ConvModel({{"group", int64_t{3}}}, {-1, 4, 8, 8}, {6, 1, 3, 3}));
  EXPECT_NE(e.find("group 3 does not divide the 4 channels of input 'x'"), std::string::npos) << e;
}

TEST(Validation, ConvInputChannelsMustMatchTheWeight) {
  std::string e = LoadError(ConvModel({}, /*x=*/{-1, 7, 8, 8}, /*w=*/{6, 3, 3, 3}));
  EXPECT_NE(
      e.find(
          "input 'x' [1, 7, 8, 8] has 7 channels, but weight 'w' [6, 3, 3, 3] expects 3 x group 1"),
      std::string::npos)
      << e;
}

TEST(Validation, ConvBiasMustHaveOneValuePerOutputChannel) {
  GraphBuilder b;
  b.Input("x", {-1, 4, 8, 8}).Param("w", {6, 4, 3, 3}).Param("b", {5});
  b.Node("Conv", {"x", "w", "b"}, {"y"}).Output("y");
  std::string e = LoadError(b);
  EXPECT_NE(
      e.find("bias 'b' has shape [5]; weight 'w' [6, 4, 3, 3] makes 6 channels, so it needs [6]"),
      std::string::npos)
      << e;
}

TEST(Validation, ConvOfAnIntegerImageIsRejected) {
  GraphBuilder b;
  b.Input("x", {-1, 4, 8, 8}, DType::kInt64).Param("w", {6, 4, 3, 3});
  b.Node("Conv", {"x", "w"}, {"y"}).Output("y");
  std::string e = LoadError(b);
  EXPECT_NE(e.find("input 0 ('x') is int64; Conv takes floating-point tensors"), std::string::npos)
      << e;
}

TEST(Validation, FlattenAxisBeyondTheRankIsRejected) {
  for (int64_t axis : {7, 100, -100}) {
    GraphBuilder b;
    b.Input("x", {-1, 4, 2}).Param("w", {8, 3});
    b.Node("Flatten", {"x"}, {"f"})
        .Attr("axis", axis)
        .Node("MatMul", {"f", "w"}, {"y"})
        .Output("y");
    std::string e = LoadError(b);
    EXPECT_NE(e.find("Flatten node 'Flatten_0': axis " + std::to_string(axis) +
                     " is out of range for input 'x' of rank 3 (use -3 to 3)"),
              std::string::npos)
        << e;
  }
}

// ---- the model's declarations ----

TEST(Validation, StringTypedWeightsAreRejected) {
  std::string e = LoadError(Edited(ConvModel({}), [](onnx::ModelProto& m) {
    onnx::TensorProto* w = Initializer(m, "w");
    w->set_data_type(onnx::TensorProto::STRING);
    w->clear_raw_data();
  }));
  EXPECT_NE(e.find("initializer 'w' holds strings"), std::string::npos) << e;
}

TEST(Validation, InitializerOfUnknownDataTypeIsRejected) {
  for (int type : {0, 99}) {
    std::string e = LoadError(Edited(
        ConvModel({}), [type](onnx::ModelProto& m) { Initializer(m, "w")->set_data_type(type); }));
    EXPECT_NE(e.find("initializer 'w' has ONNX data_type " + std::to_string(type) +
                     ", which is not a tensor element type"),
              std::string::npos)
        << e;
  }
}

TEST(Validation, InitializerWithANegativeDimensionIsRejected) {
  std::string e = LoadError(
      Edited(ConvModel({}), [](onnx::ModelProto& m) { Initializer(m, "w")->set_dims(0, -6); }));
  EXPECT_NE(e.find("initializer 'w' has a negative dimension in [-6, 4, 3, 3]"), std::string::npos)
      << e;
}

TEST(Validation, DuplicateInitializersWithDifferentShapesAreRejected) {
  std::string e = LoadError(Edited(ConvModel({}), [](onnx::ModelProto& m) {
    onnx::TensorProto copy = *Initializer(m, "w");
    copy.set_dims(0, 2);
    *m.mutable_graph()->add_initializer() = copy;
  }));
  EXPECT_NE(
      e.find(
          "initializer 'w' is defined twice with different shapes ([6, 4, 3, 3] and [2, 4, 3, 3])"),
      std::string::npos)
      << e;
}

TEST(Validation, InputOfUnknownElementTypeIsRejected) {
  std::string e = LoadError(Edited(ConvModel({}), [](onnx::ModelProto& m) {
    m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(99);
  }));
  EXPECT_NE(e.find("graph input 'x' has element type 99 (unknown)"), std::string::npos) << e;
}

TEST(Validation, GraphOutputThatIsAnInitializerIsRejected) {
  GraphBuilder b = ConvModel({});
  b.Output("w");
  std::string e = LoadError(b);
  EXPECT_NE(e.find("graph output 'w' is an initializer"), std::string::npos) << e;
}

TEST(Validation, NegativeOpsetIsRejected) {
  std::string e = LoadError(Edited(
      ConvModel({}), [](onnx::ModelProto& m) { m.mutable_opset_import(0)->set_version(-1); }));
  EXPECT_NE(e.find("imports ONNX opset -1, which does not exist"), std::string::npos) << e;
}

TEST(Validation, UnknownDimNameIsAnErrorNamingTheModelsDims) {
  LoadOptions o;
  o.dims["nosuch"] = 4;
  std::string e = LoadError(ConvModel({}), o);
  EXPECT_NE(e.find("--dim nosuch=4: m.onnx has no symbolic dimension named 'nosuch'; its inputs' "
                   "symbolic dimensions are: N"),
            std::string::npos)
      << e;
}

// ---- byte arithmetic ----

TEST(Validation, StepBeyondTheByteLimitNamesTheLargestTensor) {
  // x [2^40, 1024, 1024] float32 is 2^62 bytes on its own.
  GraphBuilder b;
  b.Input("x", {-1, 1024, 1024}).Param("w", {1024, 4});
  b.Node("MatMul", {"x", "w"}, {"y"}).Output("y");
  LoadOptions o;
  o.batch = int64_t{1} << 40;
  std::string e = LoadError(b, o);
  EXPECT_NE(e.find("the largest is 'x' of shape [1099511627776, 1024, 1024]"), std::string::npos)
      << e;
}

TEST(Validation, ShapeArithmeticOverflowIsNotANegativeDimension) {
  // view(2 * x.size(0), -1) at batch 2^63 - 1: 2 * batch does not fit in int64.
  GraphBuilder b;
  b.Input("x", {-1, 8}).Param("w", {4, 4}).Ints("zero", {0}).Ints("two", {2}).Ints("minus1", {-1});
  b.Node("Shape", {"x"}, {"s"})
      .Node("Gather", {"s", "zero"}, {"n"})
      .Node("Mul", {"n", "two"}, {"n2"});
  b.Node("Concat", {"n2", "minus1"}, {"target"}).Attr("axis", int64_t{0});
  b.Node("Reshape", {"x", "target"}, {"r"}).Node("MatMul", {"r", "w"}, {"y"}).Output("y");
  LoadOptions o;
  o.batch = INT64_MAX;
  std::string e = LoadError(b, o);
  EXPECT_EQ(e.find("negative dimension"), std::string::npos) << e;
  EXPECT_NE(e.find("m.onnx: "), std::string::npos) << e;
  EXPECT_NE(e.find("2^63"), std::string::npos) << e;
}

TEST(Validation, NulAndInvalidUtf8InNamesArePrintableInMessages) {
  GraphBuilder b;
  b.Input("x", {-1, 8}).Param("w", {8, 4});
  b.Node("MatMul", {std::string("gh\0st\xff", 6), "w"}, {"y"}).Output("y");
  std::string e = LoadError(b);
  EXPECT_NE(e.find("'gh\\x00st\xef\xbf\xbd'"), std::string::npos) << e;
}

// ---- external data ----

class ExternalData : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/memplan-ext-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    ::mkdir((dir_ + "/model").c_str(), 0755);
    std::ofstream(dir_ + "/outside.bin", std::ios::binary) << std::string(8 * 4 * 4, '\0');
    std::ofstream(dir_ + "/model/w.bin", std::ios::binary) << std::string(8 * 4 * 4, '\0');
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }

  // Trainable()'s model in dir_/model, its weight 'w' [8, 4] kept in external data `entries`.
  std::string Save(const std::vector<std::pair<std::string, std::string>>& entries) {
    std::string bytes = Edited(Trainable().Output("y"), [&](onnx::ModelProto& m) {
      onnx::TensorProto* w = Initializer(m, "w");
      w->clear_raw_data();
      w->set_data_location(onnx::TensorProto::EXTERNAL);
      for (const auto& [k, v] : entries) {
        auto* e = w->add_external_data();
        e->set_key(k);
        e->set_value(v);
      }
    });
    std::string path = dir_ + "/model/m.onnx";
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  std::string Error(const std::string& path, LoadOptions o = {}) {
    try {
      LoadTrainingGraph(path, o);
    } catch (const MemplanError& e) {
      return e.what();
    }
    return "loaded";
  }

  std::string dir_;
};

TEST_F(ExternalData, FileInsideTheModelFolderLoads) {
  EXPECT_EQ(Error(Save({{"location", "w.bin"}})), "loaded");
}

TEST_F(ExternalData, OffsetThatIsNotANumberNamesTheInitializer) {
  std::string e = Error(Save({{"location", "w.bin"}, {"offset", "abc"}}));
  EXPECT_NE(e.find("external data offset of 'w' expects a whole number"), std::string::npos) << e;
}

TEST_F(ExternalData, LengthBeyondInt64NamesTheInitializer) {
  std::string e = Error(Save({{"location", "w.bin"}, {"length", "99999999999999999999"}}));
  EXPECT_NE(e.find("external data length of 'w' '99999999999999999999' is out of range"),
            std::string::npos)
      << e;
}

TEST_F(ExternalData, LocationWithDotDotIsRefused) {
  std::string e = Error(Save({{"location", "../../../usr/bin/python3"}}));
  EXPECT_NE(
      e.find(
          "tensor 'w' reads its data from '../../../usr/bin/python3', outside the model's folder"),
      std::string::npos)
      << e;
  EXPECT_NE(e.find("--allow-external-data-outside-model-dir"), std::string::npos) << e;
}

TEST_F(ExternalData, AbsoluteLocationIsRefused) {
  std::string e = Error(Save({{"location", dir_ + "/outside.bin"}}));
  EXPECT_NE(e.find("outside the model's folder"), std::string::npos) << e;
}

TEST_F(ExternalData, SymbolicLinkLeadingOutIsRefused) {
  ASSERT_EQ(::symlink((dir_ + "/outside.bin").c_str(), (dir_ + "/model/link.bin").c_str()), 0);
  std::string e = Error(Save({{"location", "link.bin"}}));
  EXPECT_NE(e.find("tensor 'w' reads its data from 'link.bin', outside the model's folder"),
            std::string::npos)
      << e;
}

TEST_F(ExternalData, TheUsersFlagAllowsAFileOutside) {
  LoadOptions o;
  o.allow_external_data_outside_model_dir = true;
  TrainingGraph g = LoadTrainingGraph(Save({{"location", "../outside.bin"}}), o);
  EXPECT_TRUE(g.weights_present);
  EXPECT_TRUE(g.allow_external_data_outside_model_dir);
}

}  // namespace
}  // namespace memplan
