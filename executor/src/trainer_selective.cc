// Selective recompute (RunOptions::recomputed) in the trainer: saved tensors of dropped storages
// become references through the saved-tensor hooks, and are recomputed when autograd reads them.
#include <algorithm>

#include "trainer.h"

namespace memplan::exec {

void SavedTensorBridge::Packed(std::shared_ptr<exec::SavedSlot> slot) {
  if (trainer) trainer->pending_.push_back(std::move(slot));
}
at::Tensor SavedTensorBridge::Unpack(const exec::SavedSlot& slot) {
  if (!trainer)
    throw MemplanError("internal error: a recomputable tensor was read after its run ended");
  return trainer->UnpackSaved(slot);
}
void SavedTensorBridge::Released(const exec::SavedSlot& slot) {
  if (trainer) trainer->ReleaseSaved(slot.root);
}

// What the node just run saved for backward: a view of a dropped storage becomes a reference
// to it (recomputed when read); anything else stays held, as autograd holds it.
void Trainer::ResolveSaved() {
  for (const std::shared_ptr<exec::SavedSlot>& slot : pending_) {
    const at::Tensor& held = slot->held;
    if (!held.defined() || !held.has_storage()) continue;
    // An offloaded storage: the slot holds it until the offload's wait (FinishOffload), then
    // reads the prefetched copy.
    auto off = offload_storage_.find(held.storage().unsafeGetStorageImpl());
    if (off != offload_storage_.end()) {
      const TensorId root = off->second;
      const at::Tensor& base = offload_device_[root];
      if (held.scalar_type() != base.scalar_type()) continue;  // a reinterpretation: keep it
      slot->root = root;
      slot->sizes = held.sizes().vec();
      slot->strides = held.strides().vec();
      slot->offset = held.storage_offset() - base.storage_offset();
      offload_slots_[root].push_back(slot);
      ++savers_left_[root];
      continue;
    }
    auto it = dropped_storage_.find(held.storage().unsafeGetStorageImpl());
    if (it == dropped_storage_.end()) continue;
    const at::Tensor& base = values_[it->second];
    if (held.scalar_type() != base.scalar_type()) continue;  // a reinterpretation: keep it
    slot->root = it->second;
    slot->sizes = held.sizes().vec();
    slot->strides = held.strides().vec();
    slot->offset = held.storage_offset() - base.storage_offset();
    slot->held.reset();
    ++savers_left_[it->second];
  }
  pending_.clear();
}

void Trainer::ForgetDroppedStorage(TensorId t) {
  if (!dropped_[t] || !values_[t].defined()) return;
  dropped_storage_.erase(values_[t].storage().unsafeGetStorageImpl());
}

at::Tensor Trainer::UnpackSaved(const exec::SavedSlot& slot) {
  at::Tensor base = offloaded_[slot.root] ? Prefetched(slot.root) : Recomputed(slot.root);
  return base.as_strided(slot.sizes, slot.strides, base.storage_offset() + slot.offset);
}

// The last backward function that saved `root` is done with it (plan.h: held until the backward
// of its last saver).
void Trainer::ReleaseSaved(TensorId root) {
  // A prefetched storage that recompute still reads stays until that read (RecomputeNode).
  if (--savers_left_[root] <= 0 && (!offloaded_[root] || recompute_reads_left_[root] <= 0))
    recomputed_[root].reset();
}

// A dropped storage, recomputed without autograd from what is held, recursively.
at::Tensor Trainer::Recomputed(TensorId root) {
  if (recomputed_[root].defined()) return recomputed_[root];
  const bool outermost = recompute_depth_ == 0;
  auto t0 = Clock::now();
  ++recompute_depth_;
  std::vector<at::Tensor> outs;
  try {
    outs = RecomputeNode(g_.nodes[g_.tensors[root].producer]);
  } catch (...) {
    --recompute_depth_;
    throw;
  }
  --recompute_depth_;
  at::Tensor value = recomputed_[root];
  if (!value.defined()) {
    throw MemplanError("internal error: recomputing '" + g_.tensors[root].name +
                       "' did not produce it");
  }
  if (outermost) {
    // A storage recomputed only as an input of the chain: no backward still to run saved it.
    for (TensorId r : chain_) {
      if (savers_left_[r] <= 0) recomputed_[r].reset();
    }
    chain_.clear();
    recompute_seconds_ += Seconds(t0, Clock::now());
  }
  return value;
}

// The kept activation storages `n` reads (each once), which a recompute of `n` keeps alive.
std::set<TensorId> Trainer::KeptStoragesRead(const Node& n) const {
  std::set<TensorId> read;
  for (TensorId i : n.inputs) {
    if (i == kNone || g_.tensors[i].is_persistent()) continue;
    const TensorId root = g_.tensors[i].storage;
    if (!g_.tensors[root].is_persistent() && !dropped_[root]) read.insert(root);
  }
  return read;
}

at::Tensor Trainer::RecomputeInput(TensorId t) {
  if (persistent_[t].defined()) return persistent_[t];
  const TensorId root = g_.tensors[t].storage;
  if (offloaded_[root]) return OffloadedView(t);
  if (root == t && dropped_[t]) return Recomputed(t);
  if (!dropped_[root] && values_[t].defined()) return values_[t];
  if (ckpt_[t].defined()) return ckpt_[t];
  // A view of a dropped storage, or of a parameter the forward let go: views cost nothing, so
  // their producer runs again.
  const Node& p = g_.nodes[g_.tensors[t].producer];
  std::vector<at::Tensor> outs = RecomputeNode(p);
  for (size_t k = 0; k < p.outputs.size() && k < outs.size(); ++k) {
    if (p.outputs[k] == t) return outs[k];
  }
  throw MemplanError("internal error: recomputing " + p.op_type + " node '" + p.name +
                     "' did not produce '" + g_.tensors[t].name + "'");
}

// Runs `n` again without autograd (batch-norm statistics untouched, dropout with the forward's
// mask). Dropped storages it produces are kept for the backward; the rest is returned only.
std::vector<at::Tensor> Trainer::RecomputeNode(const Node& n) {
  c10::AutoGradMode no_grad(false);
  where_.node = n.id;
  OpCall call = CallFor(n, /*update_running_stats=*/false);
  for (TensorId i : n.inputs) call.in.push_back(i == kNone ? at::Tensor() : RecomputeInput(i));
  std::vector<at::Tensor> outs;
  {
    ProfileGuard scope(profiling_, Scope(Phase::kRecompute, n.id, segment_of_[n.id]));
    outs = (*kernels_[n.id])(call);
  }
  call.in.clear();
  for (size_t k = 0; k < n.outputs.size() && k < outs.size(); ++k) {
    const TensorId o = n.outputs[k];
    if (o == kNone || !outs[k].defined()) continue;
    if (outs[k].device() != device_) outs[k] = outs[k].to(device_);
    if (dropped_[o] && !recomputed_[o].defined()) {
      // Saved views are rebuilt on the forward's layout; a kernel that lays out differently
      // when run again gets it back by a copy.
      if (!dropped_strides_[o].empty() && outs[k].strides().vec() != dropped_strides_[o]) {
        outs[k] = at::empty_strided(outs[k].sizes(), dropped_strides_[o], outs[k].options())
                      .copy_(outs[k]);
      }
      recomputed_[o] = outs[k];
      chain_.push_back(o);
    }
  }
  // Kept storages this recompute read: held until their last recompute step.
  for (TensorId r : KeptStoragesRead(n)) {
    if (recompute_reads_left_[r] > 0 && --recompute_reads_left_[r] == 0) {
      for (TensorId t : sharing_[r]) values_[t].reset();
      if (offloaded_[r] && savers_left_[r] <= 0) recomputed_[r].reset();
    }
  }
  return outs;
}

void Trainer::StartSelectiveBackward() { recompute_reads_left_ = recompute_reads_; }

void Trainer::EndSelectiveBackward() {
  // Everything the backward held for recompute is released with its last saver; what autograd
  // never read (a saver whose gradient was not needed) goes now.
  std::fill(recomputed_.begin(), recomputed_.end(), at::Tensor());
  std::fill(savers_left_.begin(), savers_left_.end(), 0);
  chain_.clear();
  for (size_t r = 0; r < recompute_reads_left_.size(); ++r) {
    if (recompute_reads_left_[r] > 0) {
      for (TensorId t : sharing_[r]) values_[t].reset();
    }
  }
  dropped_storage_.clear();
  pending_.clear();
  if (Offloads()) EndOffloadBackward();
}

}  // namespace memplan::exec
