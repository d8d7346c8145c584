// The executor's autograd engine: the base engine, plus default saved-tensor hooks while a
// SaveTensorsThrough guard is alive on the calling thread (saved_tensors.h).
#include "saved_tensors.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/saved_variable_hooks.h>

#include <mutex>

namespace memplan::exec {
namespace {

thread_local std::weak_ptr<SavedTensorOwner> tls_owner;

class Hooks final : public torch::autograd::SavedVariableHooks {
 public:
  explicit Hooks(std::weak_ptr<SavedTensorOwner> owner) : owner_(std::move(owner)) {}
  ~Hooks() override {
    if (!slot_ || slot_->root == kNone) return;
    if (auto owner = owner_.lock()) owner->Released(*slot_);
  }

  void call_pack_hook(const at::Tensor& tensor) override {
    slot_ = std::make_shared<SavedSlot>();
    // variable_data(): the same storage without the autograd history, so that a saved output
    // does not keep its own grad_fn alive (SavedVariable restores the history on unpack).
    slot_->held = tensor.variable_data();
    if (auto owner = owner_.lock()) owner->Packed(slot_);
  }

  at::Tensor call_unpack_hook() override {
    if (slot_->held.defined()) return slot_->held;
    auto owner = owner_.lock();
    TORCH_CHECK(owner, "memplan: a recomputable saved tensor was read after its step ended");
    return owner->Unpack(*slot_);
  }

 private:
  std::weak_ptr<SavedTensorOwner> owner_;
  std::shared_ptr<SavedSlot> slot_;
};

class Engine final : public torch::autograd::Engine {
 public:
  ~Engine() override { stop(); }
  std::unique_ptr<torch::autograd::SavedVariableHooks> get_default_saved_variable_hooks() override {
    if (tls_owner.expired()) return nullptr;
    return std::make_unique<Hooks>(tls_owner);
  }
};

torch::autograd::Engine& ExecutorEngine() {
  // Never destroyed: autograd's device threads may outlive static destruction order.
  static Engine* engine = new Engine();
  return *engine;
}

}  // namespace

SaveTensorsThrough::SaveTensorsThrough(std::weak_ptr<SavedTensorOwner> owner)
    : previous_(tls_owner) {
  tls_owner = std::move(owner);
}

SaveTensorsThrough::~SaveTensorsThrough() { tls_owner = previous_; }

void InstallSavedTensorEngine() {
  static std::once_flag once;
  std::call_once(once, [] { torch::autograd::set_default_engine_stub(&ExecutorEngine); });
}

}  // namespace memplan::exec
