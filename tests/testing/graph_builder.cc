#include "testing/graph_builder.h"

#include <onnx/onnx_pb.h>

#include <fstream>
#include <limits>

namespace memplan::testing {

GraphBuilder& GraphBuilder::Input(const std::string& name, std::vector<int64_t> shape,
                                  DType dtype) {
  inputs_.push_back({name, std::move(shape), dtype});
  return *this;
}

GraphBuilder& GraphBuilder::Param(const std::string& name, std::vector<int64_t> shape) {
  inits_.push_back({name, std::move(shape), DType::kFloat32, {}});
  return *this;
}

GraphBuilder& GraphBuilder::Ints(const std::string& name, std::vector<int64_t> values) {
  inits_.push_back({name, {static_cast<int64_t>(values.size())}, DType::kInt64, std::move(values)});
  return *this;
}

GraphBuilder& GraphBuilder::Node(const std::string& op, std::vector<std::string> inputs,
                                 std::vector<std::string> outputs) {
  nodes_.push_back(
      {op, op + "_" + std::to_string(nodes_.size()), std::move(inputs), std::move(outputs), {}});
  return *this;
}

GraphBuilder& GraphBuilder::Attr(const std::string& name, AttrValue value) {
  nodes_.back().attrs.emplace_back(name, std::move(value));
  return *this;
}

GraphBuilder& GraphBuilder::Output(const std::string& name) {
  outputs_.push_back(name);
  return *this;
}

std::string GraphBuilder::Bytes() const {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* opset = m.add_opset_import();
  opset->set_domain("");
  opset->set_version(opset_);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("test");
  for (const InputSpec& in : inputs_) {
    auto* vi = g->add_input();
    vi->set_name(in.name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(OnnxFromDType(in.dtype));
    auto* shape = tt->mutable_shape();
    for (int64_t d : in.shape) {
      auto* dim = shape->add_dim();
      if (d < 0)
        dim->set_dim_param("N");
      else
        dim->set_dim_value(d);
    }
  }
  for (const InitSpec& init : inits_) {
    auto* t = g->add_initializer();
    t->set_name(init.name);
    t->set_data_type(OnnxFromDType(init.dtype));
    int64_t n = 1;
    for (int64_t d : init.shape) {
      t->add_dims(d);
      n *= d;
    }
    if (init.dtype == DType::kInt64) {
      for (int64_t v : init.ints) t->add_int64_data(v);
    } else {
      t->set_raw_data(std::string(static_cast<size_t>(n) * 4, '\0'));
    }
  }
  for (const NodeSpec& ns : nodes_) {
    auto* n = g->add_node();
    n->set_op_type(ns.op);
    n->set_name(ns.name);
    for (const auto& i : ns.inputs) n->add_input(i);
    for (const auto& o : ns.outputs) n->add_output(o);
    for (const auto& [name, value] : ns.attrs) {
      auto* a = n->add_attribute();
      a->set_name(name);
      if (auto* i = std::get_if<int64_t>(&value)) {
        a->set_type(onnx::AttributeProto::INT);
        a->set_i(*i);
      } else if (auto* f = std::get_if<double>(&value)) {
        a->set_type(onnx::AttributeProto::FLOAT);
        a->set_f(static_cast<float>(*f));
      } else if (auto* s = std::get_if<std::string>(&value)) {
        a->set_type(onnx::AttributeProto::STRING);
        a->set_s(*s);
      } else if (auto* is = std::get_if<std::vector<int64_t>>(&value)) {
        a->set_type(onnx::AttributeProto::INTS);
        for (int64_t x : *is) a->add_ints(x);
      } else if (auto* fs = std::get_if<std::vector<double>>(&value)) {
        a->set_type(onnx::AttributeProto::FLOATS);
        for (double x : *fs) a->add_floats(static_cast<float>(x));
      }
    }
  }
  for (const std::string& o : outputs_) {
    auto* vi = g->add_output();
    vi->set_name(o);
  }
  return m.SerializeAsString();
}

TrainingGraph GraphBuilder::Load(const LoadOptions& options) const {
  return LoadTrainingGraphFromBytes(Bytes(), "test.onnx", options);
}

void GraphBuilder::Save(const std::string& path) const {
  std::ofstream out(path, std::ios::binary);
  out << Bytes();
}

std::vector<std::vector<NodeId>> EqualSegments(const TrainingGraph& g, int k) {
  std::vector<std::vector<NodeId>> segments;
  NodeId n = static_cast<NodeId>(g.nodes.size());
  for (int s = 0; s < k; ++s) {
    std::vector<NodeId> seg;
    for (NodeId i = n * s / k; i < n * (s + 1) / k; ++i) seg.push_back(i);
    segments.push_back(seg);
  }
  return segments;
}

GraphBuilder& AppendErfGelu(GraphBuilder& b, const std::string& x, const std::string& y,
                            double divisor) {
  b.Node("Constant", {}, {"gelu_divisor"}).Attr("value_float", divisor);
  b.Node("Div", {x, "gelu_divisor"}, {"gelu_d"});
  b.Node("Erf", {"gelu_d"}, {"gelu_e"});
  b.Node("Constant", {}, {"gelu_one"}).Attr("value_float", 1.0);
  b.Node("Add", {"gelu_e", "gelu_one"}, {"gelu_a"});
  b.Node("Mul", {x, "gelu_a"}, {"gelu_m"});
  b.Node("Constant", {}, {"gelu_half"}).Attr("value_float", 0.5);
  return b.Node("Mul", {"gelu_m", "gelu_half"}, {y});
}

GraphBuilder& AppendTanhGelu(GraphBuilder& b, const std::string& x, const std::string& y) {
  b.Node("Mul", {x, x}, {"tanh_gelu_sq"}).Node("Mul", {x, "tanh_gelu_sq"}, {"tanh_gelu_cube"});
  b.Node("Constant", {}, {"tanh_gelu_c"}).Attr("value_float", 0.044715);
  b.Node("Mul", {"tanh_gelu_c", "tanh_gelu_cube"}, {"tanh_gelu_t"})
      .Node("Add", {x, "tanh_gelu_t"}, {"tanh_gelu_s"});
  b.Node("Constant", {}, {"tanh_gelu_k"}).Attr("value_float", 0.7978845608028654);
  b.Node("Mul", {"tanh_gelu_k", "tanh_gelu_s"}, {"tanh_gelu_in"})
      .Node("Tanh", {"tanh_gelu_in"}, {"tanh_gelu_th"});
  b.Node("Constant", {}, {"tanh_gelu_one"}).Attr("value_float", 1.0);
  b.Node("Add", {"tanh_gelu_one", "tanh_gelu_th"}, {"tanh_gelu_a"})
      .Node("Mul", {x, "tanh_gelu_a"}, {"tanh_gelu_m"});
  b.Node("Constant", {}, {"tanh_gelu_half"}).Attr("value_float", 0.5);
  return b.Node("Mul", {"tanh_gelu_half", "tanh_gelu_m"}, {y});
}

GraphBuilder& AppendLayerNormOps(GraphBuilder& b, const std::string& x, const std::string& y,
                                 const std::string& scale, const std::string& bias) {
  const std::vector<int64_t> last{-1};
  b.Node("ReduceMean", {x}, {"ln_mean"}).Attr("axes", last).Node("Sub", {x, "ln_mean"}, {"ln_d"});
  b.Node("Constant", {}, {"ln_two"})
      .Attr("value_float", 2.0)
      .Node("Pow", {"ln_d", "ln_two"}, {"ln_sq"});
  b.Node("ReduceMean", {"ln_sq"}, {"ln_var"}).Attr("axes", last);
  b.Node("Constant", {}, {"ln_eps"})
      .Attr("value_float", 1e-5)
      .Node("Add", {"ln_var", "ln_eps"}, {"ln_ve"});
  b.Node("Sqrt", {"ln_ve"}, {"ln_s"}).Node("Div", {"ln_d", "ln_s"}, {"ln_n"});
  return b.Node("Mul", {"ln_n", scale}, {"ln_scaled"}).Node("Add", {"ln_scaled", bias}, {y});
}

GraphBuilder& AppendRmsNormOps(GraphBuilder& b, const std::string& x, const std::string& y,
                               const std::string& scale) {
  b.Node("Constant", {}, {"rms_two"})
      .Attr("value_float", 2.0)
      .Node("Pow", {x, "rms_two"}, {"rms_sq"});
  b.Node("ReduceMean", {"rms_sq"}, {"rms_mean"}).Attr("axes", std::vector<int64_t>{-1});
  b.Node("Constant", {}, {"rms_eps"})
      .Attr("value_float", 1e-6)
      .Node("Add", {"rms_mean", "rms_eps"}, {"rms_ve"});
  b.Node("Sqrt", {"rms_ve"}, {"rms_s"}).Node("Reciprocal", {"rms_s"}, {"rms_r"});
  return b.Node("Mul", {x, "rms_r"}, {"rms_n"}).Node("Mul", {scale, "rms_n"}, {y});
}

GraphBuilder& AppendSiluOps(GraphBuilder& b, const std::string& x, const std::string& y) {
  return b.Node("Sigmoid", {x}, {"silu_s"}).Node("Mul", {x, "silu_s"}, {y});
}

GraphBuilder AttentionBlock() {
  GraphBuilder b;
  b.Input("x", {-1, 16, 2, 4}).Param("wq", {4, 4}).Param("wk", {4, 4}).Param("wv", {4, 4});
  b.Node("MatMul", {"x", "wq"}, {"q_rows"})
      .Node("MatMul", {"x", "wk"}, {"k_rows"})
      .Node("MatMul", {"x", "wv"}, {"v_rows"});
  // Heads before rows, as views: [N,16,2,4] -> [N,2,16,4] (K^T: [N,2,4,16]).
  b.Node("Transpose", {"q_rows"}, {"q"}).Attr("perm", std::vector<int64_t>{0, 2, 1, 3});
  b.Node("Transpose", {"k_rows"}, {"kt"}).Attr("perm", std::vector<int64_t>{0, 2, 3, 1});
  b.Node("Transpose", {"v_rows"}, {"v"}).Attr("perm", std::vector<int64_t>{0, 2, 1, 3});
  b.Node("MatMul", {"q", "kt"}, {"s"});
  b.Node("Constant", {}, {"scale"}).Attr("value_float", 0.5).Node("Mul", {"s", "scale"}, {"ss"});
  // A causal mask, 0 on and below the diagonal and -inf above it, as the exporter builds it.
  std::vector<double> mask(16 * 16, 0.0);
  for (int i = 0; i < 16; ++i) {
    for (int j = i + 1; j < 16; ++j) mask[i * 16 + j] = -std::numeric_limits<double>::infinity();
  }
  b.Node("Constant", {}, {"mask_flat"}).Attr("value_floats", mask).Ints("mask_shape", {16, 16});
  b.Node("Reshape", {"mask_flat", "mask_shape"}, {"mask"}).Node("Add", {"ss", "mask"}, {"sm"});
  b.Node("Softmax", {"sm"}, {"p"}).Node("IsNaN", {"p"}, {"nan"});
  b.Node("Constant", {}, {"zero"})
      .Attr("value_float", 0.0)
      .Node("Where", {"nan", "zero", "p"}, {"p0"});
  b.Node("MatMul", {"p0", "v"}, {"heads"});
  b.Node("Transpose", {"heads"}, {"y"}).Attr("perm", std::vector<int64_t>{0, 2, 1, 3}).Output("y");
  return b;
}

GraphBuilder ActivationChainMlp() {
  GraphBuilder b;
  b.Input("x", {-1, 32}).Param("w1", {32, 32}).Param("w2", {32, 10});
  b.Node("MatMul", {"x", "w1"}, {"h0"});
  const char* ops[] = {"Relu", "Sigmoid", "Tanh", "Relu", "Sigmoid", "Tanh"};
  for (int i = 0; i < 6; ++i)
    b.Node(ops[i], {"h" + std::to_string(i)}, {"h" + std::to_string(i + 1)});
  b.Node("MatMul", {"h6", "w2"}, {"logits"}).Output("logits");
  return b;
}

GraphBuilder SqueezeExcitationTail() {
  GraphBuilder b;
  b.Input("x", {-1, 440, 7, 7}).Param("s", {1, 440, 1, 1}).Param("w", {440, 440, 1, 1});
  b.Input("z", {-1, 64, 56, 56}).Param("s2", {1, 64, 1, 1}).Param("v", {128, 64, 3, 3});
  b.Node("Mul", {"x", "s"}, {"h"}).Node("Conv", {"h", "w"}, {"c"});
  b.Node("Mul", {"z", "s2"}, {"h2"})
      .Node("Conv", {"h2", "v"}, {"c2"})
      .Attr("strides", std::vector<int64_t>{2, 2})
      .Attr("pads", std::vector<int64_t>{1, 1, 1, 1});
  b.Node("ReduceMean", {"c"}, {"m"})
      .Attr("axes", std::vector<int64_t>{2, 3})
      .Attr("keepdims", int64_t{0});
  b.Node("ReduceMean", {"c2"}, {"m2"})
      .Attr("axes", std::vector<int64_t>{2, 3})
      .Attr("keepdims", int64_t{0});
  b.Node("Concat", {"m", "m2"}, {"logits"}).Attr("axis", int64_t{1}).Output("logits");
  return b;
}

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const MemplanError& e) {
    return e.what();
  }
  return "";
}

GraphBuilder TwoLayerMlp() {
  GraphBuilder b;
  b.Input("x", {-1, 32})
      .Param("w1", {64, 32})
      .Param("b1", {64})
      .Param("w2", {10, 64})
      .Param("b2", {10});
  b.Node("Gemm", {"x", "w1", "b1"}, {"h"}).Attr("transB", int64_t{1});
  b.Node("Relu", {"h"}, {"r"});
  b.Node("Gemm", {"r", "w2", "b2"}, {"y"}).Attr("transB", int64_t{1});
  b.Output("y");
  return b;
}

}  // namespace memplan::testing
