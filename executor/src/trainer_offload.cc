// Offload (RunOptions::offloaded) in the trainer: the schedule's copies of saved storages to
// pinned host memory and back (plan.h), on the selective step's saved-tensor hooks. A storage's
// saved slots hold its device tensor until the offload's wait step, then read the prefetched copy,
// which is held and released as a recomputed storage is (trainer_selective.cc).
#include "trainer.h"

namespace memplan::exec {

// Where the schedule puts each copy: the offload's start and wait after a forward step; the
// prefetch's start before the backward work of the node whose backward step comes next.
void Trainer::FollowOffloadSteps(const Schedule& s) {
  const size_t nt = g_.tensors.size(), nn = g_.nodes.size();
  offload_start_after_.assign(nn, {});
  offload_wait_after_.assign(nn, {});
  prefetch_before_.assign(nn, {});
  // Per step, the node of the next backward step with one (kNone: none follows).
  std::vector<NodeId> next_backward(s.steps.size() + 1, kNone);
  for (size_t i = s.steps.size(); i-- > 0;) {
    const memplan::Step& st = s.steps[i];
    next_backward[i] =
        st.phase == Phase::kBackward && st.node != kNone ? st.node : next_backward[i + 1];
  }
  NodeId forward_node = kNone;
  for (size_t i = 0; i < s.steps.size(); ++i) {
    const memplan::Step& st = s.steps[i];
    if (st.node != kNone && (st.phase == Phase::kForward || st.phase == Phase::kLoss))
      forward_node = st.node;
    if (st.phase == Phase::kOffload) {
      const TensorId root = g_.tensors[s.buffers[st.copy_from].tensor].storage;
      (st.copy_wait ? offload_wait_after_ : offload_start_after_)[forward_node].push_back(root);
    } else if (st.phase == Phase::kPrefetch && !st.copy_wait) {
      // None follows: the backward's first read starts it (Prefetched).
      const NodeId m = next_backward[i + 1];
      if (m != kNone)
        prefetch_before_[m].push_back(g_.tensors[s.buffers[st.copy_to].tensor].storage);
    }
  }
  offload_device_.assign(nt, at::Tensor());
  host_copy_.assign(nt, at::Tensor());
  offload_slots_.assign(nt, {});
  offload_ticket_.assign(nt, -1);
  prefetch_ticket_.assign(nt, -1);
  prefetch_state_.assign(nt, 0);
  offload_geometry_.assign(nt, {});
}

// `n` just ran with autograd: an offloaded storage it produced, or a view of one, is remembered
// (its device tensor, and where each tensor sits in it).
void Trainer::ProducedOffloaded(const Node& n) {
  for (TensorId o : n.outputs) {
    if (o == kNone || !values_[o].defined() || !values_[o].has_storage()) continue;
    const TensorId root = g_.tensors[o].storage;
    if (!offloaded_[root]) continue;
    const at::Tensor& v = values_[o];
    if (o == root) {
      offload_device_[root] = v;
      offload_storage_[v.storage().unsafeGetStorageImpl()] = root;
    }
    // The prefetched copy holds the whole storage: offsets stay what they were.
    offload_geometry_[o] = {v.sizes().vec(), v.strides().vec(), v.storage_offset(),
                            v.scalar_type()};
  }
}

// The copies the schedule starts and waits for after `n`'s forward step; with autograd, the
// prefetches before its backward work.
void Trainer::AfterForwardStep(const Node& n) {
  if (!Offloads()) return;
  for (TensorId r : offload_start_after_[n.id]) StartOffload(r);
  for (TensorId r : offload_wait_after_[n.id]) FinishOffload(r);
  if (prefetch_before_[n.id].empty() || !at::GradMode::is_enabled()) return;
  const NodeId id = n.id;
  BeforeBackwardOf(n, [id](Trainer& t) { t.PrefetchBefore(id); });
}

namespace {
// A tensor of `geo` on `storage` (the prefetched copy of a storage, or a view of it).
at::Tensor OnStorage(const at::Tensor& storage_of, const TensorGeometry& geo) {
  return at::empty({0}, storage_of.options().dtype(geo.dtype))
      .set_(storage_of.storage(), geo.offset, geo.sizes, geo.strides);
}

// The bytes of `t`'s whole storage.
at::Tensor StorageBytes(const at::Tensor& t) {
  const int64_t n = static_cast<int64_t>(t.storage().nbytes());
  return at::empty({0}, t.options().dtype(at::kByte)).set_(t.storage(), 0, {n}, {1});
}
}  // namespace

// The offload's start: the host buffer, and the device-to-host copy of the whole storage.
void Trainer::StartOffload(TensorId root) {
  const at::Tensor& device = offload_device_[root];
  if (!device.defined()) {
    throw MemplanError("internal error: the offloaded storage '" + g_.tensors[root].name +
                       "' was not produced before its offload");
  }
  ProfileGuard scope(profiling_, Scope(Phase::kOffload));
  c10::AutoGradMode no_grad(false);
  at::Tensor bytes = StorageBytes(device);
  host_copy_[root] = host_memory_->Bytes(bytes.numel());
  offload_ticket_[root] = link_->Start(CopyLink::kToHost, host_copy_[root], bytes);
}

// The offload's wait: once the copy is done, nothing holds the device copy any more.
void Trainer::FinishOffload(TensorId root) {
  ProfileGuard scope(profiling_, Scope(Phase::kOffload));
  link_->Wait(offload_ticket_[root]);
  for (const std::shared_ptr<exec::SavedSlot>& slot : offload_slots_[root]) slot->held.reset();
  offload_slots_[root].clear();
  for (TensorId t : sharing_[root]) values_[t].reset();
  if (offload_device_[root].defined())
    offload_storage_.erase(offload_device_[root].storage().unsafeGetStorageImpl());
  offload_device_[root].reset();
}

void Trainer::PrefetchBefore(NodeId n) {
  for (TensorId r : prefetch_before_[n]) StartPrefetch(r);
}

// The prefetch's start: the device buffer, and the host-to-device copy into it. The storage's
// tensor is rebuilt on it with the forward's geometry.
void Trainer::StartPrefetch(TensorId root) {
  if (prefetch_state_[root] != 0 || !host_copy_[root].defined()) return;
  ProfileGuard scope(profiling_, Scope(Phase::kPrefetch));
  c10::AutoGradMode no_grad(false);
  at::Tensor bytes =
      at::empty({host_copy_[root].numel()}, at::TensorOptions().dtype(at::kByte).device(device_));
  prefetch_ticket_[root] = link_->Start(CopyLink::kToDevice, bytes, host_copy_[root]);
  recomputed_[root] = OnStorage(bytes, offload_geometry_[root]);
  prefetch_state_[root] = 1;
}

// The prefetch's wait, at the backward's first read of the storage: then the host copy goes.
const at::Tensor& Trainer::Prefetched(TensorId root) {
  if (prefetch_state_[root] != 2) {
    if (prefetch_state_[root] == 0) StartPrefetch(root);
    if (prefetch_state_[root] != 1) {
      throw MemplanError("internal error: the backward read the offloaded storage '" +
                         g_.tensors[root].name + "' before it was offloaded");
    }
    ProfileGuard scope(profiling_, Scope(Phase::kPrefetch));
    link_->Wait(prefetch_ticket_[root]);
    host_copy_[root].reset();
    prefetch_state_[root] = 2;
  }
  return recomputed_[root];
}

// Tensor `t` of an offloaded storage, read by a recompute step: a view of the prefetched copy.
at::Tensor Trainer::OffloadedView(TensorId t) {
  const TensorId root = g_.tensors[t].storage;
  const at::Tensor& base = Prefetched(root);
  if (!base.defined()) {
    throw MemplanError("internal error: the prefetched storage '" + g_.tensors[root].name +
                       "' was released before a recompute read it");
  }
  if (t == root) return base;
  return OnStorage(base, offload_geometry_[t]);
}

// The micro-batch's backward is over: nothing of its offloads is left.
void Trainer::EndOffloadBackward() {
  std::fill(offload_device_.begin(), offload_device_.end(), at::Tensor());
  std::fill(host_copy_.begin(), host_copy_.end(), at::Tensor());
  for (auto& slots : offload_slots_) slots.clear();
  std::fill(prefetch_state_.begin(), prefetch_state_.end(), 0);
  offload_storage_.clear();
}

}  // namespace memplan::exec
