// ONNX backend test cases (libonnx-testdata), forward only: run the model's nodes with the
// executor's kernels and compare with the expected outputs (rtol 1e-3, atol 1e-7, as ONNX's
// backend tests).
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <unordered_map>

#include "kernels.h"
#include "memplan/executor.h"
#include "tensor_io.h"

namespace memplan {
namespace {

bool Exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

std::vector<std::string> DataSets(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name.rfind("test_data_set_", 0) == 0) out.push_back(dir + "/" + name);
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string Shape(const at::Tensor& t) {
  std::ostringstream s;
  s << t.sizes();
  return s.str();
}

// "" when equal within tolerance, otherwise what differs.
std::string Compare(const std::string& name, const at::Tensor& got_in, const at::Tensor& want) {
  if (got_in.scalar_type() != want.scalar_type()) {
    std::ostringstream s;
    s << "output '" << name << "' has type " << got_in.scalar_type() << ", expected "
      << want.scalar_type();
    return s.str();
  }
  if (got_in.sizes() != want.sizes()) {
    return "output '" + name + "' has shape " + Shape(got_in) + ", expected " + Shape(want);
  }
  at::Tensor got = got_in.to(at::kCPU);
  if (got.numel() == 0) return "";
  if (at::isFloatingType(want.scalar_type())) {
    at::Tensor a = got.to(at::kDouble), b = want.to(at::kDouble);
    at::Tensor both_nan = at::logical_and(at::isnan(a), at::isnan(b));
    at::Tensor same_inf = at::logical_and(at::isinf(b), at::eq(a, b));
    at::Tensor close = at::le(at::abs(a - b), 1e-7 + 1e-3 * at::abs(b));
    at::Tensor ok = at::logical_or(at::logical_or(close, both_nan), same_inf);
    if (ok.all().item<bool>()) return "";
    int64_t bad = at::logical_not(ok).sum().item<int64_t>();
    double err = at::where(ok, at::zeros_like(a), at::abs(a - b)).max().item<double>();
    return "output '" + name + "': " + std::to_string(bad) + " of " + std::to_string(got.numel()) +
           " values differ (max abs error " + std::to_string(err) + ")";
  }
  if (at::equal(got, want)) return "";
  int64_t bad = at::ne(got, want).sum().item<int64_t>();
  return "output '" + name + "': " + std::to_string(bad) + " of " + std::to_string(got.numel()) +
         " values differ";
}

// The name of an ONNX element type; the number for types newer than the linked ONNX (1.12).
std::string ElemTypeName(int elem) {
  std::string name = onnx::TensorProto::DataType_Name(elem);
  static const char* const kNewer[] = {
      "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4",
      "INT4",         "FLOAT4E2M1",     "FLOAT8E8M0", "UINT2",          "INT2"};
  if (name.empty() && elem >= 17 && elem <= 26)
    name = kNewer[elem - 17];  // ONNX 1.14 to 1.20's types
  return name.empty() ? "ONNX element type " + std::to_string(elem) : name;
}

bool IsTensorType(const onnx::TypeProto& t) { return t.has_tensor_type(); }

// ONNX 1.12's test data stores bfloat16 tensors as uint16 bit patterns.
at::Tensor AsDeclared(at::Tensor t, const onnx::ValueInfoProto& v) {
  if (v.type().tensor_type().elem_type() == onnx::TensorProto::BFLOAT16 &&
      t.scalar_type() == at::kInt) {
    return t.to(at::kShort).view(at::kBFloat16);
  }
  return t;
}

}  // namespace

ConformanceResult RunConformanceCase(const std::string& case_dir) {
  ConformanceResult r;
  r.name = case_dir.substr(case_dir.find_last_of('/') + 1);
  exec::ModelData model;
  try {
    exec::LoadModelData(case_dir + "/model.onnx", "", &model);
  } catch (const std::exception& e) {
    r.skipped = true;
    r.message = e.what();
    return r;
  }
  const onnx::GraphProto& graph = model.model.graph();
  int64_t opset = 0;
  for (const auto& imp : model.model.opset_import()) {
    if (imp.domain().empty() || imp.domain() == "ai.onnx") opset = imp.version();
  }
  std::set<std::string> ops, missing;
  for (const auto& n : graph.node()) {
    std::string op = n.domain().empty() || n.domain() == "ai.onnx"
                         ? n.op_type()
                         : n.domain() + "::" + n.op_type();
    ops.insert(op);
    if (op != n.op_type() || !exec::FindKernel(op)) missing.insert(op);
  }
  r.op_types.assign(ops.begin(), ops.end());
  r.missing_ops.assign(missing.begin(), missing.end());
  if (!missing.empty()) {
    r.skipped = true;
    r.message = "unsupported ops";
    return r;
  }
  for (const auto& v : graph.input()) {
    if (!IsTensorType(v.type())) {
      r.skipped = true;
      r.message = "input '" + v.name() + "' is not a tensor";
      return r;
    }
  }
  for (const auto& v : graph.output()) {
    if (!IsTensorType(v.type())) {
      r.skipped = true;
      r.message = "output '" + v.name() + "' is not a tensor";
      return r;
    }
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& v : pass ? graph.output() : graph.input()) {
      int elem = v.type().tensor_type().elem_type();
      if (elem == onnx::TensorProto::STRING) {
        r.skipped = true;
        r.message = "string tensors ('" + v.name() + "') are not supported";
        return r;
      }
      // Element types memplan has no DType for (float8, float4, int4, int2, ...): like strings,
      // a type the executor cannot hold, not a kernel's failure.
      if (DTypeFromOnnx(elem) == DType::kUndefined) {
        r.skipped = true;
        r.message = ElemTypeName(elem) + " tensors are not supported";
        return r;
      }
    }
  }
  for (const auto& n : graph.node()) {
    if (n.op_type() != "Cast") continue;
    for (const auto& a : n.attribute()) {
      if (a.name() == "to" && DTypeFromOnnx(static_cast<int>(a.i())) == DType::kUndefined) {
        r.skipped = true;
        r.message = ElemTypeName(static_cast<int>(a.i())) + " tensors are not supported";
        return r;
      }
    }
  }
  std::vector<Node> nodes;
  std::vector<std::map<std::string, at::Tensor>> attrs(graph.node_size());
  for (int k = 0; k < graph.node_size(); ++k) {
    try {
      nodes.push_back(exec::NodeFromProto(graph.node(k), k, &attrs[k], case_dir));
    } catch (const std::exception& e) {
      r.message = std::string("reading node attributes: ") + e.what();
      return r;
    }
  }
  for (const Node& n : nodes) {
    // A random source's outputs are always drawn; Dropout's only when it trains (checked per call
    // below).
    if (RandomnessOf(n.op_type) == Randomness::kAlways) r.randomized = true;
  }
  std::vector<std::string> sets = DataSets(case_dir);
  if (sets.empty()) {
    r.skipped = true;
    r.message = "no test_data_set_*";
    return r;
  }
  try {
    for (const std::string& set : sets) {
      std::unordered_map<std::string, at::Tensor> values;
      for (const auto& init : graph.initializer())
        values[init.name()] = exec::TensorFromProto(init, case_dir, init.name());
      int k = 0;
      for (const auto& v : graph.input()) {
        if (values.count(v.name())) continue;
        std::string f = set + "/input_" + std::to_string(k++) + ".pb";
        if (!Exists(f)) throw MemplanError("missing " + f);
        values[v.name()] = AsDeclared(exec::ReadTensorFile(f), v);
      }
      for (int i = 0; i < graph.node_size(); ++i) {
        const onnx::NodeProto& np = graph.node(i);
        exec::OpCall call;
        call.node = &nodes[i];
        call.opset = opset;
        call.tensor_attrs = &attrs[i];
        for (const auto& in : np.input()) {
          if (in.empty()) {
            call.in.emplace_back();
            continue;
          }
          auto it = values.find(in);
          if (it == values.end())
            throw MemplanError("node " + nodes[i].name + " reads unknown tensor '" + in + "'");
          call.in.push_back(it->second);
        }
        // Which inputs and outputs are present (the op rules read that; the values are the
        // call's).
        nodes[i].inputs.assign(np.input_size(), kNone);
        for (int k = 0; k < np.input_size(); ++k)
          if (!np.input(k).empty()) nodes[i].inputs[k] = k;
        nodes[i].outputs.assign(np.output_size(), kNone);
        for (int o = 0; o < np.output_size(); ++o)
          if (!np.output(o).empty()) nodes[i].outputs[o] = o;
        if (nodes[i].op_type == "Dropout" && exec::DropoutActive(call)) {
          r.randomized = true;
        }
        std::vector<at::Tensor> outs = (*exec::FindKernel(nodes[i].op_type))(call);
        for (int o = 0; o < np.output_size(); ++o) {
          if (np.output(o).empty()) continue;
          if (o >= static_cast<int>(outs.size()) || !outs[o].defined()) {
            throw MemplanError("node " + nodes[i].name + " did not produce output " +
                               std::to_string(o));
          }
          values[np.output(o)] = outs[o];
        }
      }
      k = 0;
      for (const auto& v : graph.output()) {
        std::string f = set + "/output_" + std::to_string(k++) + ".pb";
        at::Tensor want = AsDeclared(exec::ReadTensorFile(f), v);
        at::Tensor got = values.at(v.name());
        if (r.randomized) {
          // Random outputs: same type and shape; dropout keeps 0 or x/(1-ratio); masks are bool.
          if (got.scalar_type() != want.scalar_type() || got.sizes() != want.sizes()) {
            r.message = "output '" + v.name() + "' has type/shape " + Shape(got) + ", expected " +
                        Shape(want);
            return r;
          }
          continue;
        }
        std::string diff = Compare(v.name(), got, want);
        if (!diff.empty()) {
          r.message = diff + " (" + set.substr(set.find_last_of('/') + 1) + ")";
          return r;
        }
      }
    }
  } catch (const c10::Error& e) {
    std::string w = e.what_without_backtrace();
    r.message = w.substr(0, w.find('\n'));
    return r;
  } catch (const std::exception& e) {
    r.message = e.what();
    return r;
  }
  r.passed = true;
  return r;
}

}  // namespace memplan
