// The schedule of a step with selective recompute (plan.h): some activation storages are dropped
// after the forward and recomputed, without autograd, right before the backward step that first
// needs them; and some are offloaded to pinned host memory and prefetched back (storage_facts.h).
#include <algorithm>
#include <unordered_set>

#include "memplan/storage_facts.h"

namespace memplan {
namespace {

class SelectiveBuilder {
 public:
  SelectiveBuilder(const TrainingGraph& g, const GraphFacts& f,
                   const std::vector<TensorId>& recomputed,
                   const std::vector<OffloadChoice>& offloaded, bool named)
      : g_(g), f_(f), dropped_(f.root.size(), false), offload_of_(f.root.size(), -1) {
    s_.named = named;
    for (TensorId t : recomputed) {
      if (t < 0 || t >= static_cast<TensorId>(g.tensors.size())) {
        throw MemplanError("selective recompute: tensor id " + std::to_string(t) +
                           " is not in the graph");
      }
      const int32_t r = f.root_of[t];
      if (r < 0 || f.root[r].tensor != t) {
        throw MemplanError(
            "selective recompute: '" + g.tensors[t].name +
            "' cannot be recomputed: it is not an activation with its own storage (a view, an "
            "input, a parameter or a constant); name the tensor it is a view of");
      }
      if (f.root[r].producer == f.loss_node) {
        throw MemplanError("selective recompute: '" + g.tensors[t].name +
                           "' is an output of the loss node '" + g.nodes[f.loss_node].name +
                           "', which is never recomputed");
      }
      dropped_[r] = true;
    }
    offloaded_ = offloaded;
    for (size_t i = 0; i < offloaded.size(); ++i) {
      const TensorId t = offloaded[i].tensor;
      if (t < 0 || t >= static_cast<TensorId>(g.tensors.size())) {
        throw MemplanError("offload: tensor id " + std::to_string(t) + " is not in the graph");
      }
      const int32_t r = f.root_of[t];
      if (r < 0 || f.root[r].tensor != t || f.root[r].first_saver == kNone ||
          f.root[r].producer == f.loss_node) {
        throw MemplanError("offload: '" + g.tensors[t].name +
                           "' cannot be offloaded: only an activation with its own storage that "
                           "the backward saves (not a view, an input, a parameter, a constant or "
                           "an output of the loss node) can be; name the tensor it is a view of");
      }
      if (dropped_[r] || offload_of_[r] >= 0) {
        throw MemplanError("offload: '" + g.tensors[t].name + "' is named twice (" +
                           (dropped_[r] ? "recomputed and offloaded" : "offloaded twice") +
                           "); give each storage one decision");
      }
      offload_of_[r] = static_cast<int32_t>(i);
    }
  }

  Schedule Build() {
    const int num_nodes = f_.num_nodes;
    PersistentBuffers persistent = AddPersistentBuffers(g_, s_);
    // Every activation storage gets its forward buffer up front: the backward, built first,
    // decides when the kept ones that recomputation reads die.
    forward_buffer_.assign(f_.root.size(), kNone);
    for (size_t r = 0; r < f_.root.size(); ++r) {
      const Tensor& t = g_.tensors[f_.root[r].tensor];
      forward_buffer_[r] =
          s_.AddBuffer({s_.named ? t.name : "", t.bytes, MemoryCategory::kActivation, t.id});
    }
    extras_.resize(num_nodes);
    for (const Node& n : g_.nodes) {
      for (const SavedExtra& e : n.saved_extras) {
        extras_[n.id].push_back(s_.AddBuffer(
            {s_.named ? n.name + ":" + e.name : "", e.bytes, MemoryCategory::kSavedExtra, kNone}));
      }
    }
    last_recompute_read_.assign(f_.root.size(), -1);
    materialized_.assign(f_.root.size(), kNone);
    have_view_.assign(g_.tensors.size(), false);
    views_of_.resize(f_.root.size());
    free_backward_.resize(num_nodes);
    for (size_t r = 0; r < f_.root.size(); ++r) {
      if (!dropped_[r] && f_.root[r].first_saver != kNone)
        free_backward_[f_.root[r].first_saver].push_back(r);
    }

    host_buffer_.assign(f_.root.size(), kNone);
    prefetched_.assign(f_.root.size(), kNone);
    prefetch_state_.assign(f_.root.size(), 0);
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

    // 2. Backward (built first, into backward_).
    GradientFlow flow(g_, s_);
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
      std::vector<int32_t> wanted;
      for (TensorId t : n.saved_for_backward) {
        const int32_t r = f_.root_of[t];
        if (r >= 0 && dropped_[r] && materialized_[r] == kNone) wanted.push_back(r);
      }
      std::sort(wanted.begin(), wanted.end(),
                [&](int32_t a, int32_t b) { return f_.root[a].producer < f_.root[b].producer; });
      for (int32_t r : wanted) Need(f_.root[r].tensor);
      // A recomputed storage no backward step still to come saves dies with the chain.
      if (!chain_.empty()) {
        Step& last = backward_.back();
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
      Step step;
      step.phase = Phase::kBackward;
      step.node = id;
      flow.Backward(n, step);
      for (BufferId b : extras_[id]) step.frees.push_back(b);
      for (int32_t r : free_backward_[id]) {
        if (dropped_[r]) {
          if (materialized_[r] != kNone) Release(r, step);
        } else {
          kept_free_step_.push_back({r, static_cast<int>(backward_.size())});
        }
      }
      backward_.push_back(std::move(step));
    }

    // 1. Forward: the plain step's, except that dropped storages are not saved and kept storages
    // that recomputation reads live until their last such read.
    std::vector<std::vector<BufferId>> free_forward(num_nodes), handed_forward(num_nodes);
    std::vector<int> saved_free_step(f_.root.size(), -1);
    for (auto [r, step] : kept_free_step_) saved_free_step[r] = step;
    std::vector<std::vector<int32_t>> offload_start(num_nodes), offload_wait(num_nodes);
    for (size_t r = 0; r < f_.root.size(); ++r) {
      const GraphFacts::Root& root = f_.root[r];
      const BufferId b = forward_buffer_[r];
      const bool saved = !dropped_[r] && root.first_saver != kNone;
      const int read = last_recompute_read_[r];
      if (offload_of_[r] >= 0) {
        if (prefetched_[r] == kNone || prefetch_state_[r] != 2) {
          throw MemplanError("offload: no backward step reads '" + g_.tensors[root.tensor].name +
                             "' although it is saved (a bug in the schedule builder)");
        }
        handed_forward[root.last_reader].push_back(b);
        offload_start[root.last_reader].push_back(static_cast<int32_t>(r));
        const NodeId after = std::clamp<NodeId>(offloaded_[offload_of_[r]].free_after,
                                                root.last_reader, num_nodes - 1);
        offload_wait[after].push_back(static_cast<int32_t>(r));
        backward_[std::max(saved_free_step[r], read)].frees.push_back(prefetched_[r]);
        continue;
      }
      if (read < 0) {
        if (saved) {
          handed_forward[root.last_reader].push_back(b);
          backward_[saved_free_step[r]].frees.push_back(b);
        } else {
          free_forward[root.last_reader].push_back(b);
        }
      } else if (saved && saved_free_step[r] > read) {
        backward_[read].handed_to_backward.push_back(b);
        backward_[saved_free_step[r]].frees.push_back(b);
      } else {
        backward_[read].frees.push_back(b);
      }
    }
    // Views of parameters and constants: dropped after their last forward reader.
    std::vector<std::vector<TensorId>> views(num_nodes);
    for (TensorId v : f_.persistent_views) {
      const Tensor& t = g_.tensors[v];
      NodeId last_reader = t.producer;
      for (NodeId c : t.consumers) last_reader = std::max(last_reader, c);
      views[last_reader].push_back(v);
    }
    s_.steps.reserve(static_cast<size_t>(num_nodes) + backward_.size() + 2);
    s_.steps.push_back(persistent.setup);
    for (const Node& n : g_.nodes) {
      Step step;
      step.phase = n.id == f_.loss_node ? Phase::kLoss : Phase::kForward;
      step.node = n.id;
      for (int32_t r : f_.produced[n.id]) step.allocs.push_back(forward_buffer_[r]);
      for (BufferId b : extras_[n.id]) step.allocs.push_back(b);
      AddForwardWorkspace(n, s_, step);
      for (BufferId b : free_forward[n.id]) step.frees.push_back(b);
      step.handed_to_backward = std::move(handed_forward[n.id]);
      step.dropped_views = std::move(views[n.id]);
      s_.steps.push_back(std::move(step));
      for (int32_t r : offload_start[n.id]) {
        Step copy = CopyStep(Phase::kOffload, forward_buffer_[r], host_buffer_[r], false);
        copy.allocs.push_back(host_buffer_[r]);
        s_.steps.push_back(std::move(copy));
      }
      for (int32_t r : offload_wait[n.id]) {
        Step wait = CopyStep(Phase::kOffload, forward_buffer_[r], host_buffer_[r], true);
        wait.frees.push_back(forward_buffer_[r]);
        s_.steps.push_back(std::move(wait));
      }
    }
    for (Step& step : backward_) s_.steps.push_back(std::move(step));
    Step optimizer;
    optimizer.phase = Phase::kOptimizer;
    flow.Finish(optimizer);
    s_.steps.push_back(std::move(optimizer));
    return std::move(s_);
  }

 private:
  // A copy between device and host on the copy stream: its start (`wait` false) or the step that
  // waits for it to complete.
  static Step CopyStep(Phase phase, BufferId from, BufferId to, bool wait) {
    Step step;
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
    Step step;
    step.phase = Phase::kRecompute;
    step.node = p.id;
    for (TensorId i : p.inputs) {
      if (i == kNone) continue;
      const int32_t ri = f_.root_of[i];
      if (ri >= 0 && !dropped_[ri]) last_recompute_read_[ri] = static_cast<int>(backward_.size());
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
        have_view_[o] = true;
        views_of_[ro].push_back(o);
      }
    }
    backward_.push_back(std::move(step));
  }

  // Starts the prefetch of offloaded root r: its device buffer, the host-to-device copy.
  void StartPrefetch(int32_t r) {
    const Tensor& t = g_.tensors[f_.root[r].tensor];
    prefetched_[r] = s_.AddBuffer(
        {s_.named ? t.name + " (prefetched)" : "", t.bytes, MemoryCategory::kActivation, t.id});
    Step step = CopyStep(Phase::kPrefetch, host_buffer_[r], prefetched_[r], false);
    step.allocs.push_back(prefetched_[r]);
    backward_.push_back(std::move(step));
    prefetch_state_[r] = 1;
  }

  // Offloaded root r is on the device from here on: waits for its prefetch (started now if not
  // yet), then frees its host copy.
  void OnDevice(int32_t r) {
    if (prefetch_state_[r] == 2) return;
    if (prefetch_state_[r] == 0) StartPrefetch(r);
    Step step = CopyStep(Phase::kPrefetch, host_buffer_[r], prefetched_[r], true);
    step.frees.push_back(host_buffer_[r]);
    backward_.push_back(std::move(step));
    prefetch_state_[r] = 2;
  }

  // Frees a recomputed storage (and forgets its views) after `step`.
  void Release(int32_t r, Step& step) {
    step.frees.push_back(materialized_[r]);
    materialized_[r] = kNone;
    for (TensorId v : views_of_[r]) have_view_[v] = false;
    views_of_[r].clear();
  }

  const TrainingGraph& g_;
  const GraphFacts& f_;
  Schedule s_;
  std::vector<bool> dropped_;                  // per root
  std::vector<BufferId> forward_buffer_;       // per root
  std::vector<std::vector<BufferId>> extras_;  // per node: its saved extras
  std::vector<Step> backward_;                 // recompute and backward steps, in order
  std::vector<int> last_recompute_read_;       // per kept root: index into backward_, or -1
  std::vector<BufferId> materialized_;         // per dropped root: its recomputed buffer, or kNone
  std::vector<bool> have_view_;  // per tensor: a view of a materialized root, computed
  std::vector<std::vector<TensorId>> views_of_;
  std::vector<int32_t> chain_;  // roots materialized for the current backward step
  std::vector<std::vector<int32_t>> free_backward_;  // per node: roots whose last saver it is
  std::vector<std::pair<int32_t, int>> kept_free_step_;
  // Offload: the choices, and per root its index among them (-1: not offloaded), its host
  // buffer, its prefetched buffer, and its prefetch (0 not started, 1 started, 2 waited for).
  std::vector<OffloadChoice> offloaded_;
  std::vector<int32_t> offload_of_;
  std::vector<int32_t> offload_roots_;  // by prefetch_at descending, then ascending
  std::vector<BufferId> host_buffer_;
  std::vector<BufferId> prefetched_;
  std::vector<char> prefetch_state_;
};

}  // namespace

Schedule BuildSelectiveSchedule(const TrainingGraph& g, const GraphFacts& f,
                                const std::vector<TensorId>& recomputed,
                                const std::vector<OffloadChoice>& offloaded, bool named) {
  return SelectiveBuilder(g, f, recomputed, offloaded, named).Build();
}

}  // namespace memplan
