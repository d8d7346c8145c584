// A tiny way to write ONNX graphs in tests:
//   GraphBuilder b;
//   b.Input("x", {-1, 100}).Param("w", {100, 100}).Node("MatMul", {"x", "w"}, {"y"}).Output("y");
//   TrainingGraph g = b.Load({.batch = 1});
// A -1 dimension in an input is the symbolic batch dimension "N".
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "memplan/training_graph.h"

namespace memplan::testing {

using AttrValue =
    std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>>;

class GraphBuilder {
 public:
  GraphBuilder& Input(const std::string& name, std::vector<int64_t> shape,
                      DType dtype = DType::kFloat32);
  // A trainable float initializer (zeros; analysis never reads it).
  GraphBuilder& Param(const std::string& name, std::vector<int64_t> shape);
  // An int64 initializer with known values (shape constants).
  GraphBuilder& Ints(const std::string& name, std::vector<int64_t> values);
  GraphBuilder& Node(const std::string& op, std::vector<std::string> inputs,
                     std::vector<std::string> outputs);
  // Adds an attribute to the last node.
  GraphBuilder& Attr(const std::string& name, AttrValue value);
  // Names the last node (an exporter's module scope: "/layer1/conv1/Conv").
  GraphBuilder& Name(const std::string& name) {
    nodes_.back().name = name;
    return *this;
  }
  GraphBuilder& Output(const std::string& name);
  GraphBuilder& Opset(int64_t opset) {
    opset_ = opset;
    return *this;
  }

  std::string Bytes() const;  // serialized ModelProto
  TrainingGraph Load(const LoadOptions& options = {}) const;
  // Writes the model to `path` (for CLI tests).
  void Save(const std::string& path) const;

 private:
  struct InputSpec {
    std::string name;
    std::vector<int64_t> shape;
    DType dtype;
  };
  struct InitSpec {
    std::string name;
    std::vector<int64_t> shape;
    DType dtype;
    std::vector<int64_t> ints;
  };
  struct NodeSpec {
    std::string op, name;
    std::vector<std::string> inputs, outputs;
    std::vector<std::pair<std::string, AttrValue>> attrs;
  };
  std::vector<InputSpec> inputs_;
  std::vector<InitSpec> inits_;
  std::vector<NodeSpec> nodes_;
  std::vector<std::string> outputs_;
  int64_t opset_ = 17;
};

// Attention as the dynamo exporter writes scaled_dot_product_attention: x[N,16,2,4] (rows, heads,
// head size) -> q, k, v (MatMul by wq, wk, wv [4,4], heads moved before rows by Transposes: views),
// MatMul(q, k^T), Mul(0.5), Add(a causal -inf mask [16,16]), Softmax, Where(IsNaN(p), 0, p),
// MatMul(·, v), rows back before heads -> y[N,16,2,4].
GraphBuilder AttentionBlock();

// x[N,32] -> Gemm(w1[64,32], b1) -> Relu -> Gemm(w2[10,64], b2) -> y[N,10]: no dropout or
// batch norm, so micro-batches and data-parallel ranks reproduce the full batch's step.
// 2762 trained elements: w1 2048, b1 64, w2 640, b2 10.
GraphBuilder TwoLayerMlp();

// An SE block's tail and a strided convolution: h = x[N,440,7,7] * s [1,440,1,1] -> 1x1 Conv
// w[440,440] (oneDNN pads the channels to its block) -> c; h2 = z[N,64,56,56] * s2 -> 3x3 Conv
// v[128,64] stride 2, pad 1 -> c2; each spatially averaged, concatenated -> logits [N,568].
GraphBuilder SqueezeExcitationTail();

// The message of the MemplanError `f` throws; "" when it throws none.
std::string ErrorOf(const std::function<void()>& f);

// x[N,32] -> MatMul(w1[32,32]) -> Relu, Sigmoid, Tanh, Relu, Sigmoid, Tanh -> MatMul(w2[32,10])
// -> logits[N,10]: six saved activations of N x 128 bytes (8 KiB each at N = 64), which outweigh
// the parameters (5,376 bytes).
GraphBuilder ActivationChainMlp();

// Appends GELU as TorchScript exports it before opset 20, from `x` to `y`:
// Div(x, divisor) -> gelu_d -> Erf -> gelu_e -> Add(1) -> gelu_a -> Mul(x, ·) -> gelu_m ->
// Mul(0.5) -> y. With divisor √2 it is erf-GELU.
GraphBuilder& AppendErfGelu(GraphBuilder& b, const std::string& x, const std::string& y,
                            double divisor);

// Appends GELU's tanh approximation as TorchScript exports F.gelu(approximate='tanh') before
// opset 20: x³ as Mul(x, Mul(x, x)), then 0.044715·x³ + x, times √(2/π), Tanh, Add(1),
// Mul(x, ·), Mul(0.5, ·) -> y.
GraphBuilder& AppendTanhGelu(GraphBuilder& b, const std::string& x, const std::string& y);

// Appends layer normalisation over the last axis as TorchScript exports it before opset 17:
// ReduceMean, Sub, Pow 2, ReduceMean, Add 1e-5, Sqrt, Div, Mul by `scale`, Add `bias` -> y.
GraphBuilder& AppendLayerNormOps(GraphBuilder& b, const std::string& x, const std::string& y,
                                 const std::string& scale, const std::string& bias);

// Appends RMS normalisation over the last axis as the dynamo exporter writes torch's rms_norm and
// Hugging Face's LlamaRMSNorm (opset 20): Pow(x, 2), ReduceMean, Add(1e-6), Sqrt, Reciprocal,
// Mul(x, ·), Mul(scale, ·).
GraphBuilder& AppendRmsNormOps(GraphBuilder& b, const std::string& x, const std::string& y,
                               const std::string& scale);

// Appends SiLU as the dynamo exporter writes F.silu: Mul(x, Sigmoid(x)).
GraphBuilder& AppendSiluOps(GraphBuilder& b, const std::string& x, const std::string& y);

// `k` contiguous segments of (roughly) equal node counts: a plan's segmentation for tests.
std::vector<std::vector<NodeId>> EqualSegments(const TrainingGraph& g, int k);

}  // namespace memplan::testing
