// The schedule of a step with selective recompute (plan.h): some activation storages are dropped
// after the forward and recomputed, without autograd, right before the backward step that first
// needs them.
#include <algorithm>
#include <unordered_set>

#include "memplan/storage_facts.h"

namespace memplan {
namespace {

class SelectiveBuilder {
 public:
  SelectiveBuilder(const TrainingGraph& g, const GraphFacts& f,
                   const std::vector<TensorId>& recomputed)
      : g_(g), f_(f), dropped_(f.root.size(), false) {
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
  }

  Schedule Build() {
    const int num_nodes = f_.num_nodes;
    PersistentBuffers persistent = AddPersistentBuffers(g_, s_);
    // Every activation storage gets its forward buffer up front: the backward, built first,
    // decides when the kept ones that recomputation reads die.
    forward_buffer_.assign(f_.root.size(), kNone);
    for (size_t r = 0; r < f_.root.size(); ++r) {
      const Tensor& t = g_.tensors[f_.root[r].tensor];
      forward_buffer_[r] = s_.AddBuffer({t.name, t.bytes, MemoryCategory::kActivation, t.id});
    }
    extras_.resize(num_nodes);
    for (const Node& n : g_.nodes) {
      for (const SavedExtra& e : n.saved_extras) {
        extras_[n.id].push_back(
            s_.AddBuffer({n.name + ":" + e.name, e.bytes, MemoryCategory::kSavedExtra, kNone}));
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

    // 2. Backward (built first, into backward_).
    GradientFlow flow(g_, s_);
    for (NodeId id = num_nodes - 1; id >= 0; --id) {
      const Node& n = g_.nodes[id];
      if (!n.has_backward) continue;
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
    for (size_t r = 0; r < f_.root.size(); ++r) {
      const GraphFacts::Root& root = f_.root[r];
      const BufferId b = forward_buffer_[r];
      const bool saved = !dropped_[r] && root.first_saver != kNone;
      const int read = last_recompute_read_[r];
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
    }
    for (Step& step : backward_) s_.steps.push_back(std::move(step));
    Step optimizer;
    optimizer.phase = Phase::kOptimizer;
    flow.Finish(optimizer);
    s_.steps.push_back(std::move(optimizer));
    return std::move(s_);
  }

 private:
  // Makes tensor x available to a recompute step, recomputing what it depends on.
  void Need(TensorId x) {
    const Tensor& t = g_.tensors[x];
    if (t.is_persistent() || t.producer == kNone) return;
    const int32_t r = f_.root_of[x];
    if (r < 0) return;         // a view of a parameter or a constant: the executor holds it
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
        BufferId b =
            s_.AddBuffer({ot.name + " (recomputed)", ot.bytes, MemoryCategory::kActivation, ot.id});
        materialized_[o] = b;
        chain_.push_back(o);
        step.allocs.push_back(b);
      } else {
        // Computed again but already held (kept, or recomputed earlier): a discarded copy.
        BufferId b = s_.AddBuffer(
            {ot.name + " (recomputed, discarded)", ot.bytes, MemoryCategory::kTemporary, ot.id});
        step.allocs.push_back(b);
        step.frees.push_back(b);
      }
    }
    for (const SavedExtra& e : p.saved_extras) {
      BufferId b = s_.AddBuffer(
          {p.name + ":" + e.name + " (no grad)", e.bytes, MemoryCategory::kTemporary, kNone});
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
};

}  // namespace

Schedule BuildSelectiveSchedule(const TrainingGraph& g, const GraphFacts& f,
                                const std::vector<TensorId>& recomputed) {
  return SelectiveBuilder(g, f, recomputed).Build();
}

}  // namespace memplan
