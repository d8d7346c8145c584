// ONNX TensorProto <-> at::Tensor, ONNX nodes -> IR nodes, and a model's weights.
#pragma once

#include <ATen/ATen.h>
#include <onnx/onnx_pb.h>

#include <map>
#include <string>
#include <unordered_map>

#include "memplan/training_graph.h"

namespace memplan::exec {

// Reads a TensorProto: raw or typed fields, or external data (`location`, `offset`,
// `length`) relative to `base_dir`, which must stay inside it unless `allow_outside`
// (ResolveExternalData, the analyzer's rule). `what` names the tensor in errors.
at::Tensor TensorFromProto(const onnx::TensorProto& t, const std::string& base_dir,
                           const std::string& what, bool allow_outside = false);
// A serialized TensorProto file (.pb), as ONNX's test data and `--input NAME=FILE.pb`; its
// external data must lie in the file's folder unless `allow_outside`.
at::Tensor ReadTensorFile(const std::string& path, bool allow_outside = false);
bool IsExternal(const onnx::TensorProto& t);

// An IR node with the attributes of `p` (TENSOR attributes go to `tensor_attrs`).
Node NodeFromProto(const onnx::NodeProto& p, int index,
                   std::map<std::string, at::Tensor>* tensor_attrs, const std::string& base_dir);
// TENSOR attributes of a node, read in full (the IR keeps only small ones).
std::map<std::string, at::Tensor> TensorAttributes(const onnx::NodeProto& p,
                                                   const std::string& base_dir);

struct ModelData {
  onnx::ModelProto model;
  std::string dir;  // where external data files live
  std::unordered_map<std::string, const onnx::TensorProto*> initializers;
  std::unordered_map<std::string, const onnx::NodeProto*> node_by_output;
};
// Parses a model from `bytes`, or from the file `path` when bytes is empty.
void LoadModelData(const std::string& path, const std::string& bytes, ModelData* out);

}  // namespace memplan::exec
