// ONNX -> TrainingGraph. Weights are never read: initializer shapes come from their dims,
// and external-data files are only checked for existence.
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>
#include <sys/stat.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <queue>
#include <set>
#include <sstream>
#include <unordered_map>

#include "loader_internal.h"
#include "memplan/analyzer.h"
#include "memplan/onnx_convert.h"
#include "memplan/parse.h"
#include "op_rules.h"

namespace memplan {
namespace {

constexpr int64_t kMaxConstElements = 1 << 16;
// Debian's ONNX library (1.12) has schemas up to opset 17: newer models skip its shape
// inference, and memplan's own rules, which follow every opset's semantics up to
// kMaxRuleOpset, are the only source of shapes (they resolve the corpus on their own).
constexpr int64_t kMaxOnnxLibraryOpset = 17;
constexpr int64_t kMaxRuleOpset = 23;

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string DirName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

bool IsExternal(const onnx::TensorProto& t) {
  return t.data_location() == onnx::TensorProto::EXTERNAL;
}

int64_t ExternalDataInteger(const std::string& what, const std::string& key,
                            const std::string& value) {
  try {
    return ParseInteger("external data " + key + " of '" + what + "'", value, 0, INT64_MAX);
  } catch (const MemplanError& e) {
    throw MemplanError(std::string(e.what()) +
                       "; the model's external data entries are damaged: re-export it");
  }
}

// Whether `inner` is `outer` or lies below it (both absolute and normal).
bool IsWithin(const std::filesystem::path& inner, const std::filesystem::path& outer) {
  auto o = outer.begin(), i = inner.begin();
  for (; o != outer.end(); ++o, ++i) {
    if (o->empty()) continue;  // a trailing separator
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

template <typename T>
void ReadRaw(const std::string& raw, int64_t n, std::vector<double>* f, std::vector<int64_t>* i) {
  if (static_cast<int64_t>(raw.size()) < n * static_cast<int64_t>(sizeof(T))) return;
  for (int64_t k = 0; k < n; ++k) {
    T v;
    std::memcpy(&v, raw.data() + k * sizeof(T), sizeof(T));
    if (f)
      f->push_back(static_cast<double>(v));
    else
      i->push_back(static_cast<int64_t>(v));
  }
}

// A varint at bytes[*pos] (protobuf's wire format); false when it is cut off or too long.
bool ReadVarint(const std::string& bytes, size_t* pos, uint64_t* value) {
  *value = 0;
  for (int shift = 0; shift < 64 && *pos < bytes.size(); shift += 7) {
    const uint8_t b = static_cast<uint8_t>(bytes[(*pos)++]);
    *value |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

// Why protobuf refused `bytes`, when the fields' sizes tell: a length-delimited field of the
// ModelProto (the graph, or one of the graph's initializers) that claims more bytes than
// protobuf can parse. Empty when no field claims that much.
std::string OversizedFieldMessage(const std::string& bytes, size_t begin, size_t end, int depth,
                                  const std::string& file) {
  size_t pos = begin;
  while (pos < end) {
    uint64_t tag = 0, length = 0;
    if (!ReadVarint(bytes, &pos, &tag)) return "";
    const uint64_t field = tag >> 3;
    switch (tag & 7) {
      case 0:
        if (!ReadVarint(bytes, &pos, &length)) return "";
        break;
      case 1:
        pos += 8;
        break;
      case 5:
        pos += 4;
        break;
      case 2: {
        if (!ReadVarint(bytes, &pos, &length) || pos > end) return "";
        // ModelProto.graph is field 7; GraphProto.initializer is field 5.
        const std::string what = depth == 0 && field == 7   ? "its graph"
                                 : depth == 1 && field == 5 ? "an initializer of its graph"
                                                            : "field " + std::to_string(field);
        if (length > static_cast<uint64_t>(kMaxOnnxFileBytes)) {
          return file + ": " + what + " claims " +
                 FormatBytes(length > INT64_MAX ? INT64_MAX : static_cast<int64_t>(length)) + " (" +
                 std::to_string(length) +
                 " bytes), more than the 2 GiB protobuf can parse. A model this large " +
                 "must keep its weights as external data: save it with onnx.save(model, path, "
                 "save_as_external_data=True) " +
                 "(or torch.onnx.export(..., external_data=True))";
        }
        if (length > end - pos) return "";
        if (depth == 0 && field == 7) {
          std::string inner = OversizedFieldMessage(bytes, pos, pos + length, 1, file);
          if (!inner.empty()) return inner;
        }
        pos += length;
        break;
      }
      default:
        return "";
    }
  }
  return "";
}

// Graphs larger than this are refused before protobuf parses them: a million nodes take
// `memplan plan` about 20 s and 3 GB, growing linearly, and a 2 GiB file could hold a
// hundred million tiny nodes whose parse alone would exhaust the memory.
constexpr int64_t kMaxGraphNodes = 2'000'000;
constexpr int64_t kMaxGraphInitializers = 2'000'000;

// The number of nodes (GraphProto field 1) and initializers (field 5) of the ModelProto's
// graph (field 7), read from the wire format without parsing. Malformed bytes end the count
// early (protobuf then refuses them).
void CountGraphEntries(const std::string& bytes, int64_t* nodes, int64_t* initializers) {
  *nodes = *initializers = 0;
  auto skip = [&](size_t* pos, size_t end, uint64_t tag, size_t* body, uint64_t* length) {
    switch (tag & 7) {
      case 0:
        return ReadVarint(bytes, pos, length);
      case 1:
        *pos += 8;
        return *pos <= end;
      case 5:
        *pos += 4;
        return *pos <= end;
      case 2:
        if (!ReadVarint(bytes, pos, length) || *pos > end || *length > end - *pos) return false;
        *body = *pos;
        *pos += *length;
        return true;
      default:
        return false;
    }
  };
  size_t pos = 0;
  while (pos < bytes.size()) {
    uint64_t tag = 0, length = 0;
    size_t body = 0;
    if (!ReadVarint(bytes, &pos, &tag) || !skip(&pos, bytes.size(), tag, &body, &length)) return;
    if (tag != ((7 << 3) | 2)) continue;
    for (size_t g = body; g < body + length;) {
      uint64_t inner_tag = 0, inner_length = 0;
      size_t inner_body = 0;
      if (!ReadVarint(bytes, &g, &inner_tag) ||
          !skip(&g, body + length, inner_tag, &inner_body, &inner_length))
        return;
      if (inner_tag == ((1 << 3) | 2)) ++*nodes;
      if (inner_tag == ((5 << 3) | 2)) ++*initializers;
    }
  }
}

float HalfToFloat(uint16_t h) {
  uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v;
  if (exp == 0)
    v = std::ldexp(static_cast<float>(mant), -24);
  else if (exp == 31)
    v = mant ? NAN : INFINITY;
  else
    v = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

}  // namespace

ExternalData ResolveExternalData(const onnx::TensorProto& t, const std::string& base_dir,
                                 const std::string& what, bool allow_outside) {
  namespace fs = std::filesystem;
  ExternalData d;
  for (const auto& kv : t.external_data()) {
    if (kv.key() == "location")
      d.location = kv.value();
    else if (kv.key() == "offset")
      d.offset = ExternalDataInteger(what, "offset", kv.value());
    else if (kv.key() == "length")
      d.length = ExternalDataInteger(what, "length", kv.value());
  }
  if (d.location.empty()) {
    throw MemplanError("tensor '" + what +
                       "' keeps its data in an external file but names none (no \"location\"); "
                       "re-export the model");
  }
  d.path = base_dir + "/" + d.location;
  if (allow_outside) return d;
  const std::string escape =
      "tensor '" + what + "' reads its data from '" + d.location +
      "', outside the model's folder '" + base_dir +
      "'; ONNX allows only files inside it. Move the data next to the model, or pass "
      "--allow-external-data-outside-model-dir if you trust this model";
  if (fs::path(d.location).is_absolute()) throw MemplanError(escape);
  for (const fs::path& part : fs::path(d.location).lexically_normal()) {
    if (part == "..") throw MemplanError(escape);
  }
  // Symbolic links may lead out too: compare the real paths of what exists.
  std::error_code ec;
  fs::path real_file = fs::weakly_canonical(d.path, ec);
  fs::path real_dir = ec ? fs::path() : fs::weakly_canonical(base_dir.empty() ? "." : base_dir, ec);
  if (!ec && !IsWithin(real_file, real_dir)) throw MemplanError(escape);
  return d;
}

std::optional<ConstValue> ConstValueFromTensorProto(const onnx::TensorProto& t) {
  if (IsExternal(t)) return std::nullopt;
  ConstValue v;
  v.dtype = DTypeFromOnnx(t.data_type());
  if (v.dtype == DType::kUndefined || v.dtype == DType::kString) return std::nullopt;
  v.shape.assign(t.dims().begin(), t.dims().end());
  int64_t n = 0;
  if (!CheckedNumel(v.shape, &n) || n > kMaxConstElements) return std::nullopt;
  const std::string& raw = t.raw_data();
  std::vector<double>* f = v.is_float() ? &v.floats : nullptr;
  std::vector<int64_t>* i = v.is_float() ? nullptr : &v.ints;
  if (t.has_raw_data()) {
    switch (v.dtype) {
      case DType::kFloat32:
        ReadRaw<float>(raw, n, f, i);
        break;
      case DType::kFloat64:
        ReadRaw<double>(raw, n, f, i);
        break;
      case DType::kFloat16: {
        std::vector<int64_t> bits;
        ReadRaw<uint16_t>(raw, n, nullptr, &bits);
        for (int64_t b : bits) v.floats.push_back(HalfToFloat(static_cast<uint16_t>(b)));
        break;
      }
      case DType::kInt64:
        ReadRaw<int64_t>(raw, n, f, i);
        break;
      case DType::kInt32:
        ReadRaw<int32_t>(raw, n, f, i);
        break;
      case DType::kInt16:
        ReadRaw<int16_t>(raw, n, f, i);
        break;
      case DType::kInt8:
        ReadRaw<int8_t>(raw, n, f, i);
        break;
      case DType::kUInt8:
      case DType::kBool:
        ReadRaw<uint8_t>(raw, n, f, i);
        break;
      case DType::kUInt16:
        ReadRaw<uint16_t>(raw, n, f, i);
        break;
      case DType::kUInt32:
        ReadRaw<uint32_t>(raw, n, f, i);
        break;
      case DType::kUInt64:
        ReadRaw<uint64_t>(raw, n, f, i);
        break;
      default:
        return std::nullopt;
    }
  } else {
    for (float x : t.float_data()) v.floats.push_back(x);
    for (double x : t.double_data()) v.floats.push_back(x);
    if (v.dtype == DType::kFloat16) {
      for (int32_t x : t.int32_data()) v.floats.push_back(HalfToFloat(static_cast<uint16_t>(x)));
    } else {
      for (int32_t x : t.int32_data()) (f ? f->push_back(x) : i->push_back(x));
    }
    for (int64_t x : t.int64_data()) (f ? f->push_back(static_cast<double>(x)) : i->push_back(x));
    for (uint64_t x : t.uint64_data())
      i ? i->push_back(static_cast<int64_t>(x)) : f->push_back(static_cast<double>(x));
  }
  int64_t got =
      v.is_float() ? static_cast<int64_t>(v.floats.size()) : static_cast<int64_t>(v.ints.size());
  if (got != n) return std::nullopt;
  return v;
}

Attribute AttributeFromOnnx(const onnx::AttributeProto& a) {
  Attribute out;
  using A = onnx::AttributeProto;
  switch (a.type()) {
    case A::INT:
      out.kind = Attribute::Kind::kInt;
      out.i = a.i();
      break;
    case A::FLOAT:
      out.kind = Attribute::Kind::kFloat;
      out.f = a.f();
      break;
    case A::STRING:
      out.kind = Attribute::Kind::kString;
      out.s = a.s();
      break;
    case A::INTS:
      out.kind = Attribute::Kind::kInts;
      out.ints.assign(a.ints().begin(), a.ints().end());
      break;
    case A::FLOATS:
      out.kind = Attribute::Kind::kFloats;
      out.floats.assign(a.floats().begin(), a.floats().end());
      break;
    case A::STRINGS:
      out.kind = Attribute::Kind::kStrings;
      out.strings.assign(a.strings().begin(), a.strings().end());
      break;
    case A::TENSOR:
      out.kind = Attribute::Kind::kTensor;
      out.tensor = ConstValueFromTensorProto(a.t());
      break;
    case A::GRAPH:
    case A::GRAPHS:
      out.kind = Attribute::Kind::kGraph;
      break;
    default:
      out.kind = Attribute::Kind::kString;
      break;
  }
  return out;
}

namespace {

// Replaces symbolic dims of graph inputs with bound values. The first symbolic dim of each
// input is the batch unless the user bound its name with --dim.
// Returns the value of the batch: the first input's first symbolic dim, which --dim NAME=VALUE
// may have bound instead of --batch (opt.batch when no input has a symbolic dim).
int64_t BindDims(onnx::GraphProto& graph, const std::set<std::string>& initializers,
                 const LoadOptions& opt, const std::string& file,
                 std::map<std::string, int64_t>& bound, std::string& batch_dim) {
  for (const auto& [name, value] : opt.dims) bound[name] = value;
  int64_t batch = -1;
  for (auto& input : *graph.mutable_input()) {
    if (initializers.count(input.name())) continue;
    if (!input.type().has_tensor_type()) {
      throw MemplanError(file + ": graph input '" + input.name() +
                         "' is not a tensor (sequences and maps are not supported)");
    }
    auto* shape = input.mutable_type()->mutable_tensor_type()->mutable_shape();
    bool first_symbolic = true;
    for (int d = 0; d < shape->dim_size(); ++d) {
      auto* dim = shape->mutable_dim(d);
      if (dim->has_dim_value()) {
        if (dim->dim_value() < 0) {
          throw MemplanError(file + ": graph input '" + input.name() +
                             "' has a negative dimension");
        }
        continue;
      }
      std::string param = dim->has_dim_param() ? dim->dim_param() : "";
      int64_t value;
      if (!param.empty() && bound.count(param)) {
        value = bound[param];
      } else if (first_symbolic) {
        value = opt.batch;
        if (!param.empty()) bound[param] = value;
      } else {
        throw MemplanError(file + ": dimension " + std::to_string(d) + " of input '" +
                           input.name() + "' is symbolic" +
                           (param.empty() ? "" : " ('" + param + "')") + ": bind it with --dim " +
                           (param.empty() ? "NAME" : param) + "=VALUE");
      }
      if (first_symbolic && batch < 0) {
        batch = value;
        batch_dim = param;
      }
      first_symbolic = false;
      dim->clear_dim_param();
      dim->set_dim_value(value);
    }
  }
  // Outputs and value_info may carry the same names; unknown names are dropped so that
  // inference does not fight them.
  auto rebind = [&](onnx::ValueInfoProto& vi) {
    if (!vi.type().has_tensor_type() || !vi.type().tensor_type().has_shape()) return;
    for (auto& dim : *vi.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim()) {
      if (dim.has_dim_param()) {
        auto it = bound.find(dim.dim_param());
        if (it != bound.end())
          dim.set_dim_value(it->second);
        else
          dim.clear_dim_param();
      }
    }
  };
  for (auto& o : *graph.mutable_output()) rebind(o);
  for (auto& v : *graph.mutable_value_info()) rebind(v);
  return batch < 0 ? opt.batch : batch;
}

// --dim names a symbolic dimension of the model's inputs; a misspelt name would otherwise be
// silently ignored.
void CheckDimNames(const onnx::GraphProto& graph, const LoadOptions& opt, const std::string& file) {
  std::set<std::string> params;
  for (const auto& input : graph.input()) {
    if (!input.type().has_tensor_type() || !input.type().tensor_type().has_shape()) continue;
    for (const auto& dim : input.type().tensor_type().shape().dim()) {
      if (dim.has_dim_param() && !dim.dim_param().empty()) params.insert(dim.dim_param());
    }
  }
  for (const auto& [name, value] : opt.dims) {
    if (params.count(name)) continue;
    std::string known;
    for (const std::string& p : params) known += (known.empty() ? "" : ", ") + p;
    throw MemplanError("--dim " + name + "=" + std::to_string(value) + ": " + file +
                       " has no symbolic dimension named '" + name + "'; " +
                       (params.empty() ? std::string("its inputs have no named dimensions")
                                       : "its inputs' symbolic dimensions are: " + known));
  }
}

// What ONNX's checker requires of initializers and inputs before anything reads them.
void CheckTensorDeclarations(const onnx::GraphProto& graph, const std::string& file) {
  std::map<std::string, const onnx::TensorProto*> seen;
  for (const auto& init : graph.initializer()) {
    const std::string where = file + ": initializer '" + init.name() + "'";
    auto [it, fresh] = seen.emplace(init.name(), &init);
    if (!fresh) {
      std::vector<int64_t> a(it->second->dims().begin(), it->second->dims().end()),
          b(init.dims().begin(), init.dims().end());
      throw MemplanError(
          where + " is defined twice" +
          (a != b ? " with different shapes (" + ShapeString(a) + " and " + ShapeString(b) + ")"
                  : std::string()) +
          "; initializer names must be unique: re-export the model");
    }
    DType dt = DTypeFromOnnx(init.data_type());
    if (dt == DType::kUndefined) {
      throw MemplanError(where + " has ONNX data_type " + std::to_string(init.data_type()) +
                         ", which is not a tensor element type memplan knows; re-export the model");
    }
    if (dt == DType::kString)
      throw MemplanError(where + " holds strings; memplan models numeric tensors only");
    for (int64_t d : init.dims()) {
      if (d < 0) {
        throw MemplanError(where + " has a negative dimension in " +
                           IntList(std::vector<int64_t>(init.dims().begin(), init.dims().end())) +
                           "; re-export the model");
      }
    }
  }
  for (const auto& input : graph.input()) {
    if (seen.count(input.name()) || !input.type().has_tensor_type()) continue;
    int elem = input.type().tensor_type().elem_type();
    DType dt = DTypeFromOnnx(elem);
    if (dt == DType::kUndefined || dt == DType::kString) {
      throw MemplanError(file + ": graph input '" + input.name() + "' has element type " +
                         std::to_string(elem) +
                         (elem == 0              ? " (undefined)"
                          : dt == DType::kString ? " (string)"
                                                 : " (unknown)") +
                         "; memplan needs a numeric tensor type: re-export the model");
    }
  }
  for (const auto& output : graph.output()) {
    if (seen.count(output.name())) {
      throw MemplanError(
          file + ": graph output '" + output.name() +
          "' is an initializer (a stored constant), not computed by the graph; nothing trains it: "
          "remove it from the graph outputs");
    }
  }
}

void ReadTypeInto(const onnx::TypeProto& type, Tensor& t) {
  if (!type.has_tensor_type()) return;
  const auto& tt = type.tensor_type();
  if (tt.elem_type() != 0) t.dtype = DTypeFromOnnx(tt.elem_type());
  if (!tt.has_shape()) {
    t.shape = {-1};
    return;
  }
  t.shape.clear();
  for (const auto& dim : tt.shape().dim())
    t.shape.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
}

}  // namespace

bool ShapeKnown(const Tensor& t) {
  if (t.dtype == DType::kUndefined) return false;
  for (int64_t d : t.shape)
    if (d < 0) return false;
  return true;
}

TrainingGraph ParseOnnxModel(const std::string& bytes, const std::string& file,
                             const LoadOptions& opt) {
  if (opt.batch <= 0) {
    throw MemplanError("batch size must be a positive integer (got " + std::to_string(opt.batch) +
                       ")");
  }
  for (const auto& [name, value] : opt.dims) {
    if (value <= 0) throw MemplanError("--dim " + name + " must be a positive integer");
  }
  onnx::ModelProto model;
  if (bytes.empty()) throw MemplanError(file + " is empty: it is not an ONNX model");
  CheckOnnxFileSize(file, static_cast<int64_t>(bytes.size()));
  {
    int64_t nodes = 0, initializers = 0;
    CountGraphEntries(bytes, &nodes, &initializers);
    const std::string fix =
        "; analyze a part of the model (onnx.utils.extract_model) or a configuration with fewer "
        "layers: time and "
        "memory grow linearly with the graph";
    if (nodes > kMaxGraphNodes) {
      throw MemplanError(file + " has a graph of " + std::to_string(nodes) +
                         " nodes; memplan handles at most " + std::to_string(kMaxGraphNodes) +
                         " (a million take `memplan plan` about 20 s and 3 GB)" + fix);
    }
    if (initializers > kMaxGraphInitializers) {
      throw MemplanError(file + " has " + std::to_string(initializers) +
                         " initializers; memplan handles at most " +
                         std::to_string(kMaxGraphInitializers) + fix);
    }
  }
  if (!model.ParseFromString(bytes)) {
    std::string oversized = OversizedFieldMessage(bytes, 0, bytes.size(), 0, file);
    if (!oversized.empty()) throw MemplanError(oversized);
    throw MemplanError(file +
                       " is not a valid ONNX model (the protobuf does not parse: the file is "
                       "truncated or not ONNX); re-export it");
  }
  if (!model.has_graph() || model.graph().node_size() == 0) {
    throw MemplanError(file + " has no graph nodes (truncated or not an ONNX model); re-export it");
  }
  TrainingGraph g;
  g.model_path = file;
  g.graph_name = model.graph().name();
  g.batch = opt.batch;
  g.loss_kind = opt.loss;
  g.optimizer = opt.optimizer;
  g.grads = opt.grads;
  for (const auto& imp : model.opset_import()) {
    if (imp.domain().empty() || imp.domain() == "ai.onnx") g.opset = imp.version();
  }
  if (g.opset == 0) throw MemplanError(file + " does not import the default ONNX opset");
  if (g.opset < 1) {
    throw MemplanError(file + " imports ONNX opset " + std::to_string(g.opset) +
                       ", which does not exist; re-export the model");
  }
  if (g.opset > kMaxRuleOpset) {
    throw MemplanError(file + " uses ONNX opset " + std::to_string(g.opset) +
                       "; memplan knows opsets up to " + std::to_string(kMaxRuleOpset) +
                       ": re-export with opset_version=" + std::to_string(kMaxRuleOpset) +
                       " or lower");
  }
  const bool onnx_library_knows_opset = g.opset <= kMaxOnnxLibraryOpset;
  onnx::GraphProto& graph = *model.mutable_graph();

  CheckTensorDeclarations(graph, file);
  CheckDimNames(graph, opt, file);
  g.allow_external_data_outside_model_dir = opt.allow_external_data_outside_model_dir;

  // External data: only its presence is checked, never its bytes.
  std::set<std::string> initializer_names;
  std::set<std::string> missing_files;
  for (const auto& init : graph.initializer()) {
    initializer_names.insert(init.name());
    if (IsExternal(init)) {
      ExternalData data = ResolveExternalData(init, DirName(file), init.name(),
                                              opt.allow_external_data_outside_model_dir);
      if (!FileExists(data.path)) missing_files.insert(data.location);
    }
  }
  if (!missing_files.empty()) {
    g.weights_present = false;
    g.notes.push_back("weights are absent (external data file '" + *missing_files.begin() +
                      "' not found): analysis needs only shapes, but `memplan run` will need "
                      "--random-weights");
  }

  g.batch = BindDims(graph, initializer_names, opt, file, g.dims, g.batch_dim);

  // Tensors: every named value.
  std::unordered_map<std::string, TensorId> ids;
  {
    // Reserved up front: growing these one element at a time copies every Tensor and Node
    // on each reallocation (a million-node graph).
    size_t names =
        static_cast<size_t>(graph.initializer_size()) + static_cast<size_t>(graph.input_size());
    for (const auto& np : graph.node()) names += static_cast<size_t>(np.output_size());
    ids.reserve(names);
    g.tensors.reserve(names + 3);  // and the loss, its target
    g.nodes.reserve(static_cast<size_t>(graph.node_size()) + 1);
  }
  auto tensor_id = [&](const std::string& name) {
    auto [it, fresh] = ids.try_emplace(name, static_cast<TensorId>(g.tensors.size()));
    if (!fresh) return it->second;
    Tensor t;
    t.id = it->second;
    t.storage = t.id;
    t.name = name;
    t.shape = {-1};
    g.tensors.push_back(std::move(t));
    return it->second;
  };
  for (const auto& init : graph.initializer()) {
    Tensor& t = g.tensors[tensor_id(init.name())];
    t.dtype = DTypeFromOnnx(init.data_type());
    t.shape.assign(init.dims().begin(), init.dims().end());
    t.category = TensorCategory::kConstant;
    t.value = ConstValueFromTensorProto(init);
  }
  for (const auto& input : graph.input()) {
    if (initializer_names.count(input.name())) continue;
    TensorId id = tensor_id(input.name());
    ReadTypeInto(input.type(), g.tensors[id]);
    g.tensors[id].category = TensorCategory::kInput;
    g.inputs.push_back(id);
  }

  // Nodes, then a topological order (ONNX requires one; we do not trust it).
  std::vector<Node> raw;
  raw.reserve(static_cast<size_t>(graph.node_size()));
  std::vector<int> producer_of;  // per tensor: the index in `raw` of the node producing it, or -1
  for (int k = 0; k < graph.node_size(); ++k) {
    const onnx::NodeProto& np = graph.node(k);
    Node n;
    n.name = np.name().empty() ? np.op_type() + "_" + std::to_string(k) : np.name();
    n.op_type = np.op_type();
    n.domain = np.domain();
    if (!n.domain.empty() && n.domain != "ai.onnx") {
      throw MemplanError(
          file + ": node '" + n.name + "' uses op " + n.domain + "::" + n.op_type +
          " from a custom domain, which memplan has no rule for; export with standard ONNX ops");
    }
    for (const auto& a : np.attribute()) n.attributes[a.name()] = AttributeFromOnnx(a);
    // Every ONNX op's first output is required; the rules read it.
    if (np.output_size() == 0 || np.output(0).empty()) {
      throw MemplanError(file + ": node '" + n.name + "' (" + n.op_type +
                         ") has no first output; every ONNX op produces at least one tensor");
    }
    for (const auto& o : np.output()) {
      if (o.empty()) {
        n.outputs.push_back(kNone);
        continue;
      }
      const TensorId id = tensor_id(o);
      producer_of.resize(g.tensors.size(), -1);
      // Initializers are the only constants so far.
      if (producer_of[id] >= 0 || g.tensors[id].category == TensorCategory::kConstant) {
        throw MemplanError(file + ": tensor '" + o + "' is produced twice (by node '" + n.name +
                           "' and another)");
      }
      producer_of[id] = static_cast<int>(raw.size());
      n.outputs.push_back(id);
    }
    raw.push_back(std::move(n));
  }
  producer_of.resize(g.tensors.size(), -1);
  std::vector<std::vector<int>> succ(raw.size());
  std::vector<int> indegree(raw.size(), 0);
  for (int k = 0; k < static_cast<int>(raw.size()); ++k) {
    const onnx::NodeProto& np = graph.node(k);
    for (const auto& in : np.input()) {
      if (in.empty()) {
        raw[k].inputs.push_back(kNone);
        continue;
      }
      // Every name a node produces, every graph input and every initializer has an id by now.
      auto it = ids.find(in);
      if (it == ids.end()) {
        throw MemplanError(
            file + ": node '" + raw[k].name + "' (" + raw[k].op_type + ") reads tensor '" + in +
            "', which no node produces and which is neither a graph input nor an initializer");
      }
      raw[k].inputs.push_back(it->second);
      if (const int p = producer_of[it->second]; p >= 0) {
        succ[p].push_back(k);
        ++indegree[k];
      }
    }
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;  // keep file order
  for (int k = 0; k < static_cast<int>(raw.size()); ++k)
    if (indegree[k] == 0) ready.push(k);
  std::vector<int> order;
  while (!ready.empty()) {
    int k = ready.top();
    ready.pop();
    order.push_back(k);
    for (int s : succ[k])
      if (--indegree[s] == 0) ready.push(s);
  }
  if (order.size() != raw.size()) {
    for (int k = 0; k < static_cast<int>(raw.size()); ++k) {
      if (indegree[k] > 0) {
        throw MemplanError(file + ": the graph has a cycle through node '" + raw[k].name + "' (" +
                           raw[k].op_type + "); ONNX graphs must be acyclic");
      }
    }
  }
  for (int k : order) {
    Node n = std::move(raw[k]);
    n.id = static_cast<NodeId>(g.nodes.size());
    g.nodes.push_back(std::move(n));
  }

  // ONNX's shape inference (1.12) assumes a sorted graph of known ops and crashes on others,
  // so it gets the nodes in our order and only after every op has a rule.
  {
    google::protobuf::RepeatedPtrField<onnx::NodeProto> sorted;
    for (int k : order) sorted.Add()->Swap(graph.mutable_node(k));
    graph.mutable_node()->Swap(&sorted);
  }
  RejectUnknownOps(g);

  // Each node against its op's definition, with the shapes declared so far (inputs and
  // initializers), before ONNX's shape inference divides by a stride of 0.
  for (const Node& n : g.nodes) {
    try {
      ValidateNode(n, g.tensors);
    } catch (const InvalidModelError& e) {
      throw MemplanError(file + ": " + e.what());
    }
  }

  // ONNX shape inference with data propagation; what it leaves is resolved by our rules.
  if (opt.onnx_shape_inference && onnx_library_knows_opset) try {
      onnx::ShapeInferenceOptions sio{/*check_type=*/false, /*error_mode=*/0,
                                      /*enable_data_propagation=*/true};
      onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(), sio);
    } catch (const std::exception& e) {
      g.notes.push_back(std::string("ONNX shape inference stopped early (") + e.what() +
                        "); memplan's own rules resolved the rest");
    }

  // What ONNX inference found.
  auto take = [&](const onnx::ValueInfoProto& vi) {
    auto it = ids.find(vi.name());
    if (it == ids.end()) return;
    Tensor& t = g.tensors[it->second];
    if (t.category == TensorCategory::kConstant || t.category == TensorCategory::kInput) return;
    Tensor copy = t;
    ReadTypeInto(vi.type(), copy);
    if (ShapeKnown(copy) || !ShapeKnown(t)) {
      t.dtype = copy.dtype;
      t.shape = copy.shape;
    }
  };
  if (opt.onnx_shape_inference && onnx_library_knows_opset)
    for (const auto& vi : graph.value_info()) take(vi);
  for (const auto& vi : graph.output()) {
    if (opt.onnx_shape_inference) take(vi);
    auto it = ids.find(vi.name());
    if (it == ids.end())
      throw MemplanError(file + ": graph output '" + vi.name() + "' is not produced by any node");
    g.outputs.push_back(it->second);
  }
  // ONNX's answers are hints; our rules (run in ResolveShapes) recompute every node and
  // fall back to these only where a rule cannot.
  return g;
}

void CheckOnnxFileSize(const std::string& path, int64_t size) {
  if (size <= kMaxOnnxFileBytes) return;
  throw MemplanError(
      path + " is " + FormatBytes(size) + " (" + std::to_string(size) +
      " bytes); protobuf cannot parse an ONNX file larger than 2 GiB. Store the weights as "
      "external "
      "data: onnx.save(model, path, save_as_external_data=True) (or torch.onnx.export(..., "
      "external_data=True)) keeps the .onnx file small");
}

TrainingGraph LoadTrainingGraph(const std::string& path, const LoadOptions& options) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    throw MemplanError("cannot open model '" + path + "': " + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode))
    throw MemplanError("'" + path + "' is a directory, not an ONNX model file");
  // Before reading a byte: a file protobuf cannot parse is refused at once.
  if (S_ISREG(st.st_mode)) CheckOnnxFileSize(path, static_cast<int64_t>(st.st_size));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw MemplanError("cannot open model '" + path + "': " + std::strerror(errno));
  // Read in one piece (no stream copies), and never more than protobuf could parse: a pipe or
  // a device (/dev/zero) stops at the limit instead of filling memory.
  std::string bytes;
  const size_t chunk = 1 << 20;
  while (in) {
    const size_t had = bytes.size();
    const size_t want = S_ISREG(st.st_mode) && had == 0 && st.st_size > 0
                            ? static_cast<size_t>(st.st_size) + 1
                            : chunk;
    bytes.resize(had + want);
    in.read(bytes.data() + had, static_cast<std::streamsize>(want));
    bytes.resize(had + static_cast<size_t>(in.gcount()));
    if (static_cast<int64_t>(bytes.size()) > kMaxOnnxFileBytes) {
      CheckOnnxFileSize(path, static_cast<int64_t>(bytes.size()));
    }
  }
  if (in.bad()) throw MemplanError("cannot read model '" + path + "': " + std::strerror(errno));
  return LoadTrainingGraphFromBytes(bytes, path, options);
}

TrainingGraph LoadTrainingGraphFromBytes(const std::string& bytes, const std::string& name,
                                         const LoadOptions& options) {
  TrainingGraph g = ParseOnnxModel(bytes, name, options);
  ResolveShapes(g);
  if (options.fuse_composite_ops) FuseCompositeOps(g);
  FinishTrainingGraph(g, options);
  return g;
}

}  // namespace memplan
