// Forward FLOPs per op (a multiply-add counts 2). Backward FLOPs are the rule's
// backward_factor times these.
#include <algorithm>
#include <unordered_map>

#include "op_rules_internal.h"

namespace memplan::rules {
namespace {

double OutNumel(const Node& n, const std::vector<Tensor>& t) {
  return static_cast<double>(t[n.outputs[0]].numel());
}
double InNumel(const Node& n, const std::vector<Tensor>& t) {
  return static_cast<double>(t[n.inputs[0]].numel());
}

}  // namespace

double NoFlops(const Node&, const std::vector<Tensor>&) { return 0; }
double ElementwiseFlops(const Node& n, const std::vector<Tensor>& t) {
  return std::max(OutNumel(n, t), InNumel(n, t));
}
double TranscendentalFlops(const Node& n, const std::vector<Tensor>& t) {
  return 4 * OutNumel(n, t);
}
double NormFlops(const Node& n, const std::vector<Tensor>& t) { return 8 * OutNumel(n, t); }
double SoftmaxFlops(const Node& n, const std::vector<Tensor>& t) { return 5 * OutNumel(n, t); }
double ReduceFlops(const Node& n, const std::vector<Tensor>& t) { return InNumel(n, t); }

double ConvFlops(const Node& n, const std::vector<Tensor>& t) {
  const std::vector<int64_t>& w = t[n.inputs[1]].shape;
  double per_out = static_cast<double>(Numel(w)) / static_cast<double>(w[0]);  // Cin/g x kernel
  double f = 2 * OutNumel(n, t) * per_out;
  if (n.inputs.size() > 2 && n.inputs[2] != kNone) f += OutNumel(n, t);
  return f;
}

double ConvTransposeFlops(const Node& n, const std::vector<Tensor>& t) {
  const std::vector<int64_t>& w = t[n.inputs[1]].shape;  // [Cin, Cout/g, k...]
  double per_in = static_cast<double>(Numel(w)) / static_cast<double>(w[0]);
  return 2 * InNumel(n, t) * per_in;
}

double MatMulFlops(const Node& n, const std::vector<Tensor>& t) {
  const std::vector<int64_t>& a = t[n.inputs[0]].shape;
  return 2 * OutNumel(n, t) * static_cast<double>(a.back());
}

double GemmFlops(const Node& n, const std::vector<Tensor>& t) {
  const std::vector<int64_t>& a = t[n.inputs[0]].shape;
  double k = static_cast<double>(n.attr_int("transA", 0) ? a[0] : a[1]);
  return 2 * OutNumel(n, t) * k + OutNumel(n, t);
}

double PoolFlops(const Node& n, const std::vector<Tensor>& t) {
  return OutNumel(n, t) * static_cast<double>(Numel(n.attr_ints("kernel_shape")));
}

double EinsumFlops(const Node& n, const std::vector<Tensor>& t) {
  // Product of every distinct index's size, twice (multiply-add).
  std::string eq = n.attr_string("equation", "");
  std::string lhs = eq.substr(0, eq.find("->"));
  std::unordered_map<char, int64_t> size;
  size_t input = 0, pos = 0;
  for (char ch : lhs + ",") {
    if (ch == ' ') continue;
    if (ch == ',') {
      ++input;
      pos = 0;
      continue;
    }
    size[ch] = t[n.inputs[input]].shape[pos++];
  }
  double f = 2;
  for (auto& [ch, s] : size) f *= static_cast<double>(s);
  return f;
}
// Q K^T and P V (two multiply-adds per T x S x d) and the softmax over T x S.
double AttentionFlops(const Node& n, const std::vector<Tensor>& t) {
  const std::vector<int64_t>& q = t[n.inputs[0]].shape;
  const std::vector<int64_t>& kt = t[n.inputs[1]].shape;
  const std::vector<int64_t>& v = t[n.inputs[2]].shape;
  const double scores = static_cast<double>(q[0] * q[1] * q[2] * kt[3]);
  return 2 * scores * static_cast<double>(q[3]) + 2 * scores * static_cast<double>(v[3]) +
         5 * scores;
}
double CrossEntropyFlops(const Node& n, const std::vector<Tensor>& t) { return 5 * InNumel(n, t); }

}  // namespace memplan::rules
