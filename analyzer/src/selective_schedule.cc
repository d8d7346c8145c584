// The schedule of a step with selective recompute (plan.h): some activation storages are dropped
// after the forward and recomputed, without autograd, right before the backward step that first
// needs them; and some are offloaded to pinned host memory and prefetched back (storage_facts.h).
#include <algorithm>
#include <memory>
#include <utility>

#include "memplan/storage_facts.h"

namespace memplan {

class SelectiveScheduleBuilder::Impl {
 public:
  Impl(const TrainingGraph& g, const GraphFacts& f, bool named) : g_(g), f_(f), named_(named) {
    const size_t num_roots = f_.root.size();
    const int num_nodes = f_.num_nodes;
    // The buffers every schedule starts with. Every activation storage gets its forward buffer
    // up front: the backward, built first, decides when the kept ones that recomputation reads
    // die.
    Schedule fixed;
    fixed.named = named;
    setup_ = AddPersistentBuffers(g_, fixed).setup;
    forward_buffer_.assign(num_roots, kNone);
    for (size_t r = 0; r < num_roots; ++r) {
      const Tensor& t = g_.tensors[f_.root[r].tensor];
      forward_buffer_[r] =
          fixed.AddBuffer({named ? t.name : "", t.bytes, MemoryCategory::kActivation, t.id});
    }
    extras_.resize(num_nodes);
    for (const Node& n : g_.nodes) {
      for (const SavedExtra& e : n.saved_extras) {
        extras_[n.id].push_back(fixed.AddBuffer(
            {named ? n.name + ":" + e.name : "", e.bytes, MemoryCategory::kSavedExtra, kNone}));
      }
    }
    fixed_ = std::move(fixed.buffers);
    // Views of parameters and constants: dropped after their last forward reader.
    views_.resize(num_nodes);
    for (TensorId v : f_.persistent_views) {
      const Tensor& t = g_.tensors[v];
      NodeId last_reader = t.producer;
      for (NodeId c : t.consumers) last_reader = std::max(last_reader, c);
      views_[last_reader].push_back(v);
    }
    // The gradient flow, run once on a schedule of its own: its buffers and each backward
    // step's part depend on no drop, only their ids (Build adds the buffers in the same order).
    Schedule flow_schedule;
    flow_schedule.named = named;
    GradientFlow flow(g_, flow_schedule);
    flow_.resize(num_nodes);
    for (NodeId id = num_nodes - 1; id >= 0; --id) {
      const Node& n = g_.nodes[id];
      if (!n.has_backward) continue;
      flow_[id] = RecordFlow(flow_schedule, [&](Step& step) { flow.Backward(n, step); });
    }
    // The backward call through the loss returns after the last backward step: the seed gradient
    // and the loss's storage die there (GradientFlow::EndBackwardCall).
    flow_end_ = RecordFlow(flow_schedule, [&](Step& step) { flow.EndBackwardCall(step.frees); });
    flow_finish_ = RecordFlow(flow_schedule, [&](Step& step) { flow.Finish(step); });
    flow_buffers_ = std::move(flow_schedule.buffers);
    flow_id_.assign(flow_buffers_.size(), kNone);

    s_.named = named;
    free_backward_.resize(num_nodes);
    free_forward_.resize(num_nodes);
    handed_forward_.resize(num_nodes);
    offload_start_.resize(num_nodes);
    offload_wait_.resize(num_nodes);
    views_of_.resize(num_roots);
  }

  const Schedule& Build(const std::vector<TensorId>& recomputed,
                        const std::vector<OffloadChoice>& offloaded) {
    Reset(recomputed, offloaded);
    const int num_nodes = f_.num_nodes;
    // The setup step, each node's forward step and the offload copies come first.
    backward_begin_ = 1 + static_cast<size_t>(num_nodes) + 2 * offloaded.size();
    if (s_.steps.size() < backward_begin_) s_.steps.resize(backward_begin_);
    num_backward_ = 0;

    for (size_t r = 0; r < f_.root.size(); ++r) {
      if (!dropped_[r] && f_.root[r].first_saver != kNone)
        free_backward_[f_.root[r].first_saver].push_back(r);
    }
    for (size_t r = 0; r < f_.root.size(); ++r) {
      if (offload_of_[r] < 0) continue;
      const Tensor& t = g_.tensors[f_.root[r].tensor];
      Buffer host{s_.named ? t.name + " (host)" : "", t.bytes, MemoryCategory::kActivation, t.id};
      host.host = true;
      host_buffer_[r] = s_.AddBuffer(std::move(host));
      offload_roots_.push_back(static_cast<int32_t>(r));
    }
    std::stable_sort(offload_roots_.begin(), offload_roots_.end(), [&](int32_t a, int32_t b) {
      return offloaded_[offload_of_[a]].prefetch_at > offloaded_[offload_of_[b]].prefetch_at;
    });
    size_t next_prefetch = 0;  // into offload_roots_: the next whose prefetch may start

    // 2. Backward (built first, after the forward's steps).
    for (NodeId id = num_nodes - 1; id >= 0; --id) {
      const Node& n = g_.nodes[id];
      if (!n.has_backward) continue;
      for (; next_prefetch < offload_roots_.size() &&
             offloaded_[offload_of_[offload_roots_[next_prefetch]]].prefetch_at >= id;
           ++next_prefetch) {
        if (prefetch_state_[offload_roots_[next_prefetch]] == 0)
          StartPrefetch(offload_roots_[next_prefetch]);
      }
      chain_.clear();
      wanted_.clear();
      for (TensorId t : n.saved_for_backward) {
        const int32_t r = f_.root_of[t];
        if (r >= 0 && dropped_[r] && materialized_[r] == kNone) wanted_.push_back(r);
      }
      std::sort(wanted_.begin(), wanted_.end(),
                [&](int32_t a, int32_t b) { return f_.root[a].producer < f_.root[b].producer; });
      for (int32_t r : wanted_) Need(f_.root[r].tensor);
      // A recomputed storage no backward step still to come saves dies with the chain.
      if (!chain_.empty()) {
        Step& last = backward(num_backward_ - 1);
        for (int32_t r : chain_) {
          if (f_.root[r].first_saver != kNone && f_.root[r].first_saver <= id)
            free_backward_[f_.root[r].first_saver].push_back(r);
          else
            Release(r, last);
        }
      }
      for (TensorId t : n.saved_for_backward) {
        const int32_t r = f_.root_of[t];
        if (r >= 0 && offload_of_[r] >= 0) OnDevice(r);
      }
      const int at = num_backward_;
      Step& step = AddBackwardStep();
      step.phase = Phase::kBackward;
      step.node = id;
      AddFlow(flow_[id], step);
      for (BufferId b : extras_[id]) step.frees.push_back(b);
      for (int32_t r : free_backward_[id]) {
        if (dropped_[r]) {
          if (materialized_[r] != kNone) Release(r, step);
        } else {
          kept_free_step_.push_back({r, at});
        }
      }
    }

    // 1. Forward: the plain step's, except that dropped storages are not saved and kept storages
    // that recomputation reads live until their last such read.
    for (auto [r, step] : kept_free_step_) saved_free_step_[r] = step;
    for (size_t r = 0; r < f_.root.size(); ++r) {
      const GraphFacts::Root& root = f_.root[r];
      const BufferId b = forward_buffer_[r];
      const bool saved = !dropped_[r] && root.first_saver != kNone;
      const int read = last_recompute_read_[r];
      if (static_cast<int32_t>(r) == f_.loss_root && !dropped_[r] && offload_of_[r] < 0 &&
          num_backward_ > 0) {
        backward(num_backward_ - 1).frees.push_back(b);
        continue;
      }
      if (offload_of_[r] >= 0) {
        if (prefetched_[r] == kNone || prefetch_state_[r] != 2) {
          throw MemplanError("offload: no backward step reads '" + g_.tensors[root.tensor].name +
                             "' although it is saved (a bug in the schedule builder)");
        }
        handed_forward_[root.last_reader].push_back(b);
        offload_start_[root.last_reader].push_back(static_cast<int32_t>(r));
        const NodeId after = std::clamp<NodeId>(offloaded_[offload_of_[r]].free_after,
                                                root.last_reader, num_nodes - 1);
        offload_wait_[after].push_back(static_cast<int32_t>(r));
        backward(std::max(saved_free_step_[r], read)).frees.push_back(prefetched_[r]);
        continue;
      }
      if (read < 0) {
        if (saved) {
          handed_forward_[root.last_reader].push_back(b);
          backward(saved_free_step_[r]).frees.push_back(b);
        } else {
          free_forward_[root.last_reader].push_back(b);
        }
      } else if (saved && saved_free_step_[r] > read) {
        backward(read).handed_to_backward.push_back(b);
        backward(saved_free_step_[r]).frees.push_back(b);
      } else {
        backward(read).frees.push_back(b);
      }
    }
    size_t at = 0;
    Renew(s_.steps[at++]) = setup_;
    for (const Node& n : g_.nodes) {
      Step& step = Renew(s_.steps[at++]);
      step.phase = n.id == f_.loss_node ? Phase::kLoss : Phase::kForward;
      step.node = n.id;
      for (int32_t r : f_.produced[n.id]) step.allocs.push_back(forward_buffer_[r]);
      for (BufferId b : extras_[n.id]) step.allocs.push_back(b);
      AddForwardWorkspace(n, s_, step);
      step.frees.insert(step.frees.end(), free_forward_[n.id].begin(), free_forward_[n.id].end());
      step.handed_to_backward = handed_forward_[n.id];
      step.dropped_views = views_[n.id];
      for (int32_t r : offload_start_[n.id]) {
        Step& copy =
            CopyStep(s_.steps[at++], Phase::kOffload, forward_buffer_[r], host_buffer_[r], false);
        copy.allocs.push_back(host_buffer_[r]);
      }
      for (int32_t r : offload_wait_[n.id]) {
        Step& wait =
            CopyStep(s_.steps[at++], Phase::kOffload, forward_buffer_[r], host_buffer_[r], true);
        wait.frees.push_back(forward_buffer_[r]);
      }
    }
    if (num_backward_ > 0) AddFlow(flow_end_, backward(num_backward_ - 1));
    Step& optimizer = AddBackwardStep();
    optimizer.phase = Phase::kOptimizer;
    AddFlow(flow_finish_, optimizer);
    s_.steps.resize(backward_begin_ + num_backward_);
    return s_;
  }

  Schedule Take() {
    Schedule out = std::move(s_);
    s_ = Schedule{};
    s_.named = named_;
    return out;
  }

 private:
  // The gradient flow's part of one step: the buffers it adds (flow_buffers_[first, end)), and
  // what the step allocates and frees, as indices into flow_buffers_.
  struct FlowStep {
    int32_t first = 0, end = 0;
    std::vector<int32_t> allocs, frees;
  };

  template <typename Run>
  static FlowStep RecordFlow(const Schedule& s, Run run) {
    FlowStep part;
    part.first = static_cast<int32_t>(s.buffers.size());
    Step step;
    run(step);
    part.end = static_cast<int32_t>(s.buffers.size());
    part.allocs = std::move(step.allocs);
    part.frees = std::move(step.frees);
    return part;
  }

  void AddFlow(const FlowStep& part, Step& step) {
    for (int32_t k = part.first; k < part.end; ++k) flow_id_[k] = s_.AddBuffer(flow_buffers_[k]);
    for (int32_t k : part.allocs) step.allocs.push_back(flow_id_[k]);
    for (int32_t k : part.frees) step.frees.push_back(flow_id_[k]);
  }

  // Validates the drops and offloads and forgets the last schedule's.
  void Reset(const std::vector<TensorId>& recomputed, const std::vector<OffloadChoice>& offloaded) {
    const size_t num_roots = f_.root.size();
    dropped_.assign(num_roots, 0);
    offload_of_.assign(num_roots, -1);
    for (TensorId t : recomputed) {
      if (t < 0 || t >= static_cast<TensorId>(g_.tensors.size())) {
        throw MemplanError("selective recompute: tensor id " + std::to_string(t) +
                           " is not in the graph");
      }
      const int32_t r = f_.root_of[t];
      if (r < 0 || f_.root[r].tensor != t) {
        throw MemplanError(
            "selective recompute: '" + g_.tensors[t].name +
            "' cannot be recomputed: it is not an activation with its own storage (a view, an "
            "input, a parameter or a constant); name the tensor it is a view of");
      }
      if (f_.root[r].producer == f_.loss_node) {
        throw MemplanError("selective recompute: '" + g_.tensors[t].name +
                           "' is an output of the loss node '" + g_.nodes[f_.loss_node].name +
                           "', which is never recomputed");
      }
      dropped_[r] = 1;
    }
    offloaded_ = offloaded;
    for (size_t i = 0; i < offloaded.size(); ++i) {
      const TensorId t = offloaded[i].tensor;
      if (t < 0 || t >= static_cast<TensorId>(g_.tensors.size())) {
        throw MemplanError("offload: tensor id " + std::to_string(t) + " is not in the graph");
      }
      const int32_t r = f_.root_of[t];
      if (r < 0 || f_.root[r].tensor != t || f_.root[r].first_saver == kNone ||
          f_.root[r].producer == f_.loss_node) {
        throw MemplanError("offload: '" + g_.tensors[t].name +
                           "' cannot be offloaded: only an activation with its own storage that "
                           "the backward saves (not a view, an input, a parameter, a constant or "
                           "an output of the loss node) can be; name the tensor it is a view of");
      }
      if (dropped_[r] || offload_of_[r] >= 0) {
        throw MemplanError("offload: '" + g_.tensors[t].name + "' is named twice (" +
                           (dropped_[r] ? "recomputed and offloaded" : "offloaded twice") +
                           "); give each storage one decision");
      }
      offload_of_[r] = static_cast<int32_t>(i);
    }

    // The fixed buffers stay; whatever the last schedule added after them goes.
    if (s_.buffers.size() >= fixed_.size())
      s_.buffers.resize(fixed_.size());
    else
      s_.buffers = fixed_;
    last_recompute_read_.assign(num_roots, -1);
    materialized_.assign(num_roots, kNone);
    have_view_.assign(g_.tensors.size(), 0);
    for (std::vector<TensorId>& v : views_of_) v.clear();
    for (std::vector<int32_t>& v : free_backward_) v.clear();
    kept_free_step_.clear();
    host_buffer_.assign(num_roots, kNone);
    prefetched_.assign(num_roots, kNone);
    prefetch_state_.assign(num_roots, 0);
    offload_roots_.clear();
    saved_free_step_.assign(num_roots, -1);
    for (std::vector<BufferId>& v : free_forward_) v.clear();
    for (std::vector<BufferId>& v : handed_forward_) v.clear();
    for (std::vector<int32_t>& v : offload_start_) v.clear();
    for (std::vector<int32_t>& v : offload_wait_) v.clear();
  }

  // A new Step in `slot`, keeping the memory of the vectors the step it replaces held.
  static Step& Renew(Step& slot) {
    Step fresh;
    fresh.allocs.swap(slot.allocs);
    fresh.frees.swap(slot.frees);
    fresh.handed_to_backward.swap(slot.handed_to_backward);
    fresh.dropped_views.swap(slot.dropped_views);
    fresh.allocs.clear();
    fresh.frees.clear();
    fresh.handed_to_backward.clear();
    fresh.dropped_views.clear();
    slot = std::move(fresh);
    return slot;
  }

  // The k-th recompute or backward step (in backward order).
  Step& backward(int k) { return s_.steps[backward_begin_ + k]; }

  Step& AddBackwardStep() {
    const size_t at = backward_begin_ + num_backward_++;
    if (at == s_.steps.size()) s_.steps.emplace_back();
    return Renew(s_.steps[at]);
  }

  // A copy between device and host on the copy stream, in `slot`: its start (`wait` false) or the
  // step that waits for it to complete.
  static Step& CopyStep(Step& slot, Phase phase, BufferId from, BufferId to, bool wait) {
    Step& step = Renew(slot);
    step.phase = phase;
    step.copy_from = from;
    step.copy_to = to;
    step.copy_wait = wait;
    return step;
  }

  // Makes tensor x available to a recompute step, recomputing what it depends on.
  void Need(TensorId x) {
    const Tensor& t = g_.tensors[x];
    if (t.is_persistent() || t.producer == kNone) return;
    const int32_t r = f_.root_of[x];
    if (r < 0) return;          // a view of a parameter or a constant: the executor holds it
    if (offload_of_[r] >= 0) {  // offloaded: prefetched (and waited for) before the read
      OnDevice(r);
      return;
    }
    if (!dropped_[r]) return;  // kept: the reading step extends its life
    if (x == f_.root[r].tensor ? materialized_[r] != kNone : have_view_[x]) return;
    const Node& p = g_.nodes[t.producer];
    for (TensorId i : p.inputs) {
      if (i != kNone) Need(i);
    }
    const int at = num_backward_;
    Step& step = AddBackwardStep();
    step.phase = Phase::kRecompute;
    step.node = p.id;
    for (TensorId i : p.inputs) {
      if (i == kNone) continue;
      const int32_t ri = f_.root_of[i];
      if (ri >= 0 && !dropped_[ri]) last_recompute_read_[ri] = at;
    }
    for (int32_t o : f_.produced[p.id]) {
      const Tensor& ot = g_.tensors[f_.root[o].tensor];
      if (dropped_[o] && materialized_[o] == kNone) {
        BufferId b = s_.AddBuffer({s_.named ? ot.name + " (recomputed)" : "", ot.bytes,
                                   MemoryCategory::kActivation, ot.id});
        materialized_[o] = b;
        chain_.push_back(o);
        step.allocs.push_back(b);
      } else {
        // Computed again but already held (kept, or recomputed earlier): a discarded copy.
        BufferId b = s_.AddBuffer({s_.named ? ot.name + " (recomputed, discarded)" : "", ot.bytes,
                                   MemoryCategory::kTemporary, ot.id});
        step.allocs.push_back(b);
        step.frees.push_back(b);
      }
    }
    for (const SavedExtra& e : p.saved_extras) {
      BufferId b = s_.AddBuffer({s_.named ? p.name + ":" + e.name + " (no grad)" : "", e.bytes,
                                 MemoryCategory::kTemporary, kNone});
      step.allocs.push_back(b);
      step.frees.push_back(b);
    }
    AddForwardWorkspace(p, s_, step);
    for (TensorId o : p.outputs) {
      if (o == kNone) continue;
      const int32_t ro = f_.root_of[o];
      if (ro >= 0 && dropped_[ro] && o != f_.root[ro].tensor && materialized_[ro] != kNone) {
        have_view_[o] = 1;
        views_of_[ro].push_back(o);
      }
    }
  }

  // Starts the prefetch of offloaded root r: its device buffer, the host-to-device copy.
  void StartPrefetch(int32_t r) {
    const Tensor& t = g_.tensors[f_.root[r].tensor];
    prefetched_[r] = s_.AddBuffer(
        {s_.named ? t.name + " (prefetched)" : "", t.bytes, MemoryCategory::kActivation, t.id});
    Step& step =
        CopyStep(AddBackwardStep(), Phase::kPrefetch, host_buffer_[r], prefetched_[r], false);
    step.allocs.push_back(prefetched_[r]);
    prefetch_state_[r] = 1;
  }

  // Offloaded root r is on the device from here on: waits for its prefetch (started now if not
  // yet), then frees its host copy.
  void OnDevice(int32_t r) {
    if (prefetch_state_[r] == 2) return;
    if (prefetch_state_[r] == 0) StartPrefetch(r);
    Step& step =
        CopyStep(AddBackwardStep(), Phase::kPrefetch, host_buffer_[r], prefetched_[r], true);
    step.frees.push_back(host_buffer_[r]);
    prefetch_state_[r] = 2;
  }

  // Frees a recomputed storage (and forgets its views) after `step`.
  void Release(int32_t r, Step& step) {
    step.frees.push_back(materialized_[r]);
    materialized_[r] = kNone;
    for (TensorId v : views_of_[r]) have_view_[v] = 0;
    views_of_[r].clear();
  }

  const TrainingGraph& g_;
  const GraphFacts& f_;
  const bool named_;
  Schedule s_;  // the last schedule built (its steps and buffers reused by the next)

  // Fixed for the graph.
  std::vector<Buffer> fixed_;  // the persistent, forward and saved-extra buffers, in that order
  Step setup_;
  std::vector<BufferId> forward_buffer_;       // per root
  std::vector<std::vector<BufferId>> extras_;  // per node: its saved extras
  std::vector<std::vector<TensorId>> views_;   // per node: persistent views it reads last
  std::vector<Buffer> flow_buffers_;           // the gradient flow's, in the order it adds them
  std::vector<FlowStep> flow_;                 // per node with a backward
  FlowStep flow_finish_;                       // the optimizer step's
  // The end of the backward call through the loss: the seed gradient goes, and the loss's storage.
  FlowStep flow_end_;

  // Per schedule.
  std::vector<BufferId> flow_id_;         // per flow buffer: its id in s_
  size_t backward_begin_ = 0;             // s_.steps index of the first recompute or backward step
  int num_backward_ = 0;                  // recompute and backward steps so far
  std::vector<char> dropped_;             // per root
  std::vector<int> last_recompute_read_;  // per kept root: a backward(k) index, or -1
  std::vector<BufferId> materialized_;    // per dropped root: its recomputed buffer, or kNone
  std::vector<char> have_view_;           // per tensor: a view of a materialized root, computed
  std::vector<std::vector<TensorId>> views_of_;
  std::vector<int32_t> chain_;   // roots materialized for the current backward step
  std::vector<int32_t> wanted_;  // dropped roots the current backward step saves
  std::vector<std::vector<int32_t>> free_backward_;  // per node: roots whose last saver it is
  std::vector<std::pair<int32_t, int>> kept_free_step_;
  std::vector<int> saved_free_step_;  // per kept saved root: the backward(k) that frees it
  // Per node: forward buffers its forward step frees or hands to the backward, and offloaded
  // roots whose copy starts after it and whose copy it waits for.
  std::vector<std::vector<BufferId>> free_forward_, handed_forward_;
  std::vector<std::vector<int32_t>> offload_start_, offload_wait_;
  // Offload: the choices, and per root its index among them (-1: not offloaded), its host
  // buffer, its prefetched buffer, and its prefetch (0 not started, 1 started, 2 waited for).
  std::vector<OffloadChoice> offloaded_;
  std::vector<int32_t> offload_of_;
  std::vector<int32_t> offload_roots_;  // by prefetch_at descending, then ascending
  std::vector<BufferId> host_buffer_;
  std::vector<BufferId> prefetched_;
  std::vector<char> prefetch_state_;
};

SelectiveScheduleBuilder::SelectiveScheduleBuilder(const TrainingGraph& g, const GraphFacts& f,
                                                   bool named)
    : impl_(std::make_unique<Impl>(g, f, named)) {}
SelectiveScheduleBuilder::~SelectiveScheduleBuilder() = default;
SelectiveScheduleBuilder::SelectiveScheduleBuilder(SelectiveScheduleBuilder&&) noexcept = default;
SelectiveScheduleBuilder& SelectiveScheduleBuilder::operator=(SelectiveScheduleBuilder&&) noexcept =
    default;

const Schedule& SelectiveScheduleBuilder::Build(const std::vector<TensorId>& recomputed,
                                                const std::vector<OffloadChoice>& offloaded) {
  return impl_->Build(recomputed, offloaded);
}

Schedule SelectiveScheduleBuilder::Take() { return impl_->Take(); }

Schedule BuildSelectiveSchedule(const TrainingGraph& g, const GraphFacts& f,
                                const std::vector<TensorId>& recomputed,
                                const std::vector<OffloadChoice>& offloaded, bool named) {
  SelectiveScheduleBuilder builder(g, f, named);
  builder.Build(recomputed, offloaded);
  return builder.Take();
}

}  // namespace memplan
