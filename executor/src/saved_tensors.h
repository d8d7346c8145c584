// Selective recompute on LibTorch (plan.h): what autograd saves during the forward goes through
// saved-tensor hooks, the C++ counterpart of torch.autograd.graph.saved_tensors_hooks. A saved
// tensor whose storage the plan drops is replaced by where to find it again (the storage's IR
// tensor and the view's geometry); its backward asks the owner to recompute that storage.
//
// LibTorch's C++ API has no push_hooks without Python: SavedVariable asks the default autograd
// engine for default hooks, and the engine is replaceable (Python's engine does the same). The
// executor's engine is the base engine plus hooks while a SaveTensorsThrough guard is alive on
// the forward's thread; with none alive it saves exactly as the base engine does.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "memplan/training_graph.h"

namespace memplan::exec {

// One tensor autograd saved: the tensor itself, or (root != kNone) a view of the recomputable
// storage `root` with the geometry below (offset relative to the storage tensor's own).
struct SavedSlot {
  at::Tensor held;
  TensorId root = kNone;
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
};

// Who decides what a saved tensor becomes; the trainer implements it.
class SavedTensorOwner {
 public:
  virtual ~SavedTensorOwner() = default;
  // A tensor was saved during the forward (slot->held is set); the owner may turn it into a
  // recomputable reference once the node has run.
  virtual void Packed(std::shared_ptr<SavedSlot> slot) = 0;
  // The backward reads a recomputable slot (slot.root != kNone).
  virtual at::Tensor Unpack(const SavedSlot& slot) = 0;
  // The backward function that saved a recomputable slot released it (after it ran, or with
  // the graph).
  virtual void Released(const SavedSlot& slot) = 0;
};

// While alive, every tensor autograd saves on this thread is handed to `owner`. The hooks keep
// only a weak reference: once the owner is gone they hold tensors as autograd does.
class SaveTensorsThrough {
 public:
  explicit SaveTensorsThrough(std::weak_ptr<SavedTensorOwner> owner);
  ~SaveTensorsThrough();
  SaveTensorsThrough(const SaveTensorsThrough&) = delete;
  SaveTensorsThrough& operator=(const SaveTensorsThrough&) = delete;

 private:
  std::weak_ptr<SavedTensorOwner> previous_;
};

// Makes the executor's engine the default autograd engine (once per process; idempotent).
void InstallSavedTensorEngine();

}  // namespace memplan::exec
