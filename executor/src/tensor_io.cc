#include "tensor_io.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "kernels.h"
#include "memplan/onnx_convert.h"

namespace memplan::exec {

bool IsExternal(const onnx::TensorProto& t) {
  return t.data_location() == onnx::TensorProto::EXTERNAL;
}

namespace {

std::string DirName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// Element size in the ONNX encoding (raw_data).
int64_t OnnxElementSize(int elem) {
  using T = onnx::TensorProto;
  switch (elem) {
    case T::FLOAT:
    case T::INT32:
    case T::UINT32:
      return 4;
    case T::DOUBLE:
    case T::INT64:
    case T::UINT64:
      return 8;
    case T::FLOAT16:
    case T::BFLOAT16:
    case T::INT16:
    case T::UINT16:
      return 2;
    case T::INT8:
    case T::UINT8:
    case T::BOOL:
      return 1;
    default:
      return 0;
  }
}

// Converts raw little-endian ONNX bytes into `out` (already shaped and typed).
void FillFromRaw(const char* data, int elem, at::Tensor& out) {
  using T = onnx::TensorProto;
  int64_t n = out.numel();
  if (elem == T::UINT16) {
    int32_t* p = out.data_ptr<int32_t>();
    for (int64_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, data + 2 * i, 2);
      p[i] = v;
    }
  } else if (elem == T::UINT32) {
    int64_t* p = out.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      uint32_t v;
      std::memcpy(&v, data + 4 * i, 4);
      p[i] = v;
    }
  } else {
    std::memcpy(out.data_ptr(), data, n * OnnxElementSize(elem));  // UINT64 reinterpreted as int64
  }
}

}  // namespace

at::Tensor TensorFromProto(const onnx::TensorProto& t, const std::string& base_dir,
                           const std::string& what, bool allow_outside) {
  using T = onnx::TensorProto;
  int elem = t.data_type();
  if (elem == T::STRING)
    throw MemplanError("tensor '" + what + "' holds strings, which the executor does not support");
  int64_t esize = OnnxElementSize(elem);
  if (esize == 0)
    throw MemplanError("tensor '" + what + "' has ONNX element type " + std::to_string(elem) +
                       ", which the executor does not support");
  std::vector<int64_t> shape(t.dims().begin(), t.dims().end());
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(ScalarTypeOfOnnx(elem)));
  int64_t n = out.numel();
  if (IsExternal(t)) {
    const ExternalData data = ResolveExternalData(t, base_dir, what, allow_outside);
    const std::string& file = data.path;
    const int64_t offset = data.offset, length = data.length;
    if (length >= 0 && length != n * esize) {
      throw MemplanError("tensor '" + what + "': external data length " + std::to_string(length) +
                         " does not match its shape (" + std::to_string(n * esize) + " bytes)");
    }
    std::ifstream in(file, std::ios::binary);
    if (!in)
      throw MemplanError("cannot read weights of '" + what + "' from '" + file +
                         "': " + std::strerror(errno) +
                         " (run with --random-weights to train without the model's weights)");
    in.seekg(offset);
    std::string buf(static_cast<size_t>(n * esize), '\0');
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (!in)
      throw MemplanError("weights file '" + file + "' is truncated: tensor '" + what +
                         "' needs bytes " + std::to_string(offset) + ".." +
                         std::to_string(offset + n * esize));
    FillFromRaw(buf.data(), elem, out);
    return out;
  }
  if (t.has_raw_data()) {
    if (static_cast<int64_t>(t.raw_data().size()) != n * esize) {
      throw MemplanError("tensor '" + what + "': raw data has " +
                         std::to_string(t.raw_data().size()) + " bytes, its shape needs " +
                         std::to_string(n * esize));
    }
    FillFromRaw(t.raw_data().data(), elem, out);
    return out;
  }
  auto check = [&](int64_t got) {
    if (got != n)
      throw MemplanError("tensor '" + what + "' has " + std::to_string(got) +
                         " values, its shape needs " + std::to_string(n));
  };
  switch (elem) {
    case T::FLOAT: {
      check(t.float_data_size());
      std::memcpy(out.data_ptr(), t.float_data().data(), n * 4);
      break;
    }
    case T::DOUBLE: {
      check(t.double_data_size());
      std::memcpy(out.data_ptr(), t.double_data().data(), n * 8);
      break;
    }
    case T::INT64: {
      check(t.int64_data_size());
      std::memcpy(out.data_ptr(), t.int64_data().data(), n * 8);
      break;
    }
    case T::UINT32:
    case T::UINT64: {
      check(t.uint64_data_size());
      int64_t* p = out.data_ptr<int64_t>();
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int64_t>(t.uint64_data(i));
      break;
    }
    case T::FLOAT16:
    case T::BFLOAT16: {
      check(t.int32_data_size());
      uint16_t* p = reinterpret_cast<uint16_t*>(out.data_ptr());
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<uint16_t>(t.int32_data(i));
      break;
    }
    default: {  // int32, int16, int8, uint16, uint8, bool: int32_data
      check(t.int32_data_size());
      at::Tensor wide = at::empty(shape, at::TensorOptions().dtype(at::kInt));
      std::memcpy(wide.data_ptr(), t.int32_data().data(), n * 4);
      out.copy_(wide);
      break;
    }
  }
  return out;
}

at::Tensor ReadTensorFile(const std::string& path, bool allow_outside) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw MemplanError("cannot open tensor file '" + path + "': " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  onnx::TensorProto t;
  if (!t.ParseFromString(ss.str()))
    throw MemplanError("'" + path + "' is not an ONNX TensorProto file");
  return TensorFromProto(t, DirName(path), t.name().empty() ? path : t.name(), allow_outside);
}

std::map<std::string, at::Tensor> TensorAttributes(const onnx::NodeProto& p,
                                                   const std::string& base_dir) {
  std::map<std::string, at::Tensor> out;
  for (const auto& a : p.attribute()) {
    if (a.type() == onnx::AttributeProto::TENSOR &&
        a.t().data_type() != onnx::TensorProto::STRING) {
      out[a.name()] = TensorFromProto(a.t(), base_dir, p.name() + ":" + a.name());
    }
  }
  return out;
}

Node NodeFromProto(const onnx::NodeProto& p, int index,
                   std::map<std::string, at::Tensor>* tensor_attrs, const std::string& base_dir) {
  Node n;
  n.id = index;
  n.name = p.name().empty() ? p.op_type() + "_" + std::to_string(index) : p.name();
  n.op_type = p.op_type();
  n.domain = p.domain();
  for (const auto& a : p.attribute()) n.attributes[a.name()] = AttributeFromOnnx(a);
  if (tensor_attrs) *tensor_attrs = TensorAttributes(p, base_dir);
  return n;
}

void LoadModelData(const std::string& path, const std::string& bytes, ModelData* out) {
  std::string data = bytes;
  if (data.empty()) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw MemplanError("cannot open model '" + path + "': " + std::strerror(errno));
    std::stringstream ss;
    ss << in.rdbuf();
    data = ss.str();
  }
  if (!out->model.ParseFromString(data)) throw MemplanError(path + " is not a valid ONNX model");
  out->dir = DirName(path);
  for (const auto& init : out->model.graph().initializer()) out->initializers[init.name()] = &init;
  for (const auto& node : out->model.graph().node()) {
    for (const auto& o : node.output())
      if (!o.empty()) out->node_by_output[o] = &node;
  }
}

}  // namespace memplan::exec
