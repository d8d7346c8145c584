// The training step's schedule, plain or in segments (plan.h's execution semantics): which
// buffer is allocated at which step, and when it dies.
#include <algorithm>
#include <unordered_set>

#include "memplan/storage_facts.h"

namespace memplan {

GraphFacts ComputeGraphFacts(const TrainingGraph& g) {
  GraphFacts f;
  f.num_nodes = static_cast<int>(g.nodes.size());
  f.loss_node = g.loss == kNone ? kNone : g.tensors[g.loss].producer;
  f.root_of.assign(g.tensors.size(), -1);
  for (const Tensor& t : g.tensors) {
    if (t.is_view() || t.is_persistent() || t.producer == kNone) continue;
    f.root_of[t.id] = static_cast<int32_t>(f.root.size());
    GraphFacts::Root r;
    r.tensor = t.id;
    r.producer = t.producer;
    r.last_reader = t.producer;
    f.root.push_back(r);
  }
  for (const Tensor& t : g.tensors) {
    if (t.storage == kNone || t.storage == t.id) continue;
    f.root_of[t.id] = f.root_of[t.storage];
  }
  if (g.loss != kNone) f.loss_root = f.root_of[g.loss];
  for (const Tensor& t : g.tensors) {
    int32_t r = f.root_of[t.id];
    if (r < 0) continue;
    GraphFacts::Root& root = f.root[r];
    if (t.producer != kNone) root.last_reader = std::max(root.last_reader, t.producer);
    for (NodeId c : t.consumers) {
      root.readers.push_back(c);
      root.last_reader = std::max(root.last_reader, c);
    }
  }
  for (GraphFacts::Root& r : f.root) {
    std::sort(r.readers.begin(), r.readers.end());
    r.readers.erase(std::unique(r.readers.begin(), r.readers.end()), r.readers.end());
  }
  for (const Node& n : g.nodes) {
    for (TensorId t : n.saved_for_backward) {
      int32_t r = f.root_of[t];
      if (r < 0) continue;
      NodeId& fs = f.root[r].first_saver;
      fs = fs == kNone ? n.id : std::min(fs, n.id);
    }
  }
  f.produced.resize(g.nodes.size());
  f.extra_bytes.assign(g.nodes.size(), 0);
  for (const Node& n : g.nodes) {
    for (TensorId o : n.outputs) {
      if (o == kNone) continue;
      int32_t r = f.root_of[o];
      if (r >= 0 && f.root[r].tensor == o) f.produced[n.id].push_back(r);
    }
    for (const SavedExtra& e : n.saved_extras) f.extra_bytes[n.id] += e.bytes;
  }
  for (const Tensor& t : g.tensors) {
    if (t.is_persistent() || t.producer == kNone || t.storage == kNone) continue;
    if (g.tensors[t.storage].is_persistent()) f.persistent_views.push_back(t.id);
  }
  return f;
}

NodeId GraphFacts::FirstReaderFrom(int32_t r, NodeId from) const {
  const std::vector<NodeId>& rd = root[r].readers;
  auto it = std::lower_bound(rd.begin(), rd.end(), from);
  return it == rd.end() ? num_nodes : *it;
}

Schedule BuildScheduleFromCuts(const TrainingGraph& g, const GraphFacts& f,
                               const std::vector<NodeId>& cuts) {
  const int num_nodes = f.num_nodes;
  const int num_segments = static_cast<int>(cuts.size()) + 1;
  const int last = num_segments - 1;
  std::vector<NodeId> begin(num_segments), end(num_segments);
  std::vector<int> seg_of(num_nodes);
  for (int k = 0; k < num_segments; ++k) {
    begin[k] = k == 0 ? 0 : cuts[k - 1];
    end[k] = k == last ? num_nodes : cuts[k];
    for (NodeId n = begin[k]; n < end[k]; ++n) seg_of[n] = k;
  }
  auto border = [&](int32_t r) {
    int k = seg_of[f.root[r].producer];
    return k < last && f.root[r].last_reader >= end[k];
  };

  Schedule s;
  // At most: setup, forward, recompute (the nodes before the last cut), backward, one step per
  // segment without any, optimizer. Reserved so that a large graph's steps are never moved.
  const size_t recomputed = cuts.empty() ? 0 : static_cast<size_t>(cuts.back());
  s.steps.reserve(2 * static_cast<size_t>(num_nodes) + recomputed +
                  static_cast<size_t>(num_segments) + 2);
  s.buffers.reserve(2 * g.tensors.size() + recomputed);
  PersistentBuffers persistent = AddPersistentBuffers(g, s);
  s.steps.push_back(persistent.setup);

  std::vector<std::vector<BufferId>> free_forward(num_nodes), free_recompute(num_nodes),
      free_backward(num_nodes), handed_forward(num_nodes), handed_recompute(num_nodes);
  std::vector<std::vector<BufferId>> free_at_segment_end(num_segments);
  std::vector<std::vector<BufferId>> extras(num_nodes);
  // Views of parameters and constants: dropped after their last reader in the producer's
  // segment (its forward and its recompute), or kept, as a checkpoint, until the backward of
  // the earliest later segment reading them.
  std::vector<std::vector<TensorId>> views_forward(num_nodes), views_at_segment_end(num_segments);
  for (TensorId v : f.persistent_views) {
    const Tensor& t = g.tensors[v];
    const int k = seg_of[t.producer];
    NodeId last_reader = t.producer;
    int later = -1;
    for (NodeId c : t.consumers) {
      const int j = seg_of[c];
      if (j == k)
        last_reader = std::max(last_reader, c);
      else if (j > k && (later < 0 || j < later))
        later = j;
    }
    if (later >= 0)
      views_at_segment_end[later].push_back(v);
    else
      views_forward[last_reader].push_back(v);
  }

  // 1. Forward: segments 0..K-2 without autograd, the last one as the plain step.
  for (const Node& n : g.nodes) {
    const int k = seg_of[n.id];
    Step step;
    step.phase = n.id == f.loss_node ? Phase::kLoss : Phase::kForward;
    step.node = n.id;
    for (int32_t r : f.produced[n.id]) {
      const GraphFacts::Root& root = f.root[r];
      const Tensor& t = g.tensors[root.tensor];
      BufferId b = s.AddBuffer({t.name, t.bytes, MemoryCategory::kActivation, t.id});
      step.allocs.push_back(b);
      if (r == f.loss_root) {  // until the backward call through it (the last segment's) ends
        free_at_segment_end[last].push_back(b);
      } else if (k == last) {
        if (root.first_saver != kNone) {
          free_backward[root.first_saver].push_back(b);
          handed_forward[root.last_reader].push_back(b);
        } else
          free_forward[root.last_reader].push_back(b);
      } else if (border(r)) {
        // A checkpoint: freed after the backward of the earliest later segment reading it.
        free_at_segment_end[seg_of[f.FirstReaderFrom(r, end[k])]].push_back(b);
      } else {
        free_forward[root.last_reader].push_back(b);
      }
    }
    for (const SavedExtra& e : n.saved_extras) {
      if (k == last) {
        BufferId b =
            s.AddBuffer({n.name + ":" + e.name, e.bytes, MemoryCategory::kSavedExtra, kNone});
        extras[n.id].push_back(b);
        step.allocs.push_back(b);
      } else {
        BufferId b = s.AddBuffer(
            {n.name + ":" + e.name + " (no grad)", e.bytes, MemoryCategory::kTemporary, kNone});
        step.allocs.push_back(b);
        step.frees.push_back(b);
      }
    }
    AddForwardWorkspace(n, s, step);
    for (BufferId b : free_forward[n.id]) step.frees.push_back(b);
    step.handed_to_backward = std::move(handed_forward[n.id]);
    step.dropped_views = views_forward[n.id];
    s.steps.push_back(std::move(step));
  }

  // 2. Backward, segment by segment from the last; each earlier segment recomputes first.
  GradientFlow flow(g, s);
  for (int k = last; k >= 0; --k) {
    const size_t first_step = s.steps.size();
    std::vector<BufferId> deferred;
    if (k < last) {
      for (NodeId id = begin[k]; id < end[k]; ++id) {
        const Node& n = g.nodes[id];
        Step step;
        step.phase = Phase::kRecompute;
        step.node = id;
        for (int32_t r : f.produced[id]) {
          const GraphFacts::Root& root = f.root[r];
          const Tensor& t = g.tensors[root.tensor];
          BufferId b =
              s.AddBuffer({t.name + " (recomputed)", t.bytes, MemoryCategory::kActivation, t.id});
          step.allocs.push_back(b);
          if (border(r))
            deferred.push_back(b);
          else if (root.first_saver != kNone) {
            free_backward[root.first_saver].push_back(b);
            handed_recompute[root.last_reader].push_back(b);
          } else
            free_recompute[root.last_reader].push_back(b);
        }
        for (const SavedExtra& e : n.saved_extras) {
          BufferId b =
              s.AddBuffer({n.name + ":" + e.name, e.bytes, MemoryCategory::kSavedExtra, kNone});
          extras[id].push_back(b);
          step.allocs.push_back(b);
        }
        AddForwardWorkspace(n, s, step);
        for (BufferId b : free_recompute[id]) step.frees.push_back(b);
        step.handed_to_backward = std::move(handed_recompute[id]);
        step.dropped_views = views_forward[id];
        s.steps.push_back(std::move(step));
      }
    }
    // Tensors of segment k read by later segments: their gradients are held to the end.
    std::vector<TensorId> outputs_read_later;
    if (k < last) {
      for (NodeId id = begin[k]; id < end[k]; ++id) {
        for (TensorId o : g.nodes[id].outputs) {
          if (o == kNone || !g.tensors[o].has_gradient) continue;
          const std::vector<NodeId>& c = g.tensors[o].consumers;
          if (!c.empty() && *std::max_element(c.begin(), c.end()) >= end[k])
            outputs_read_later.push_back(o);
        }
      }
    }
    std::unordered_set<BufferId> pinned;
    for (NodeId id = end[k] - 1; id >= begin[k]; --id) {
      const Node& n = g.nodes[id];
      if (!n.has_backward) continue;
      Step step;
      step.phase = Phase::kBackward;
      step.node = id;
      flow.Backward(n, step);
      if (!outputs_read_later.empty()) {
        pinned.clear();
        for (TensorId o : outputs_read_later) {
          if (flow.gradient(o) != kNone) pinned.insert(flow.gradient(o));
        }
        auto held = std::stable_partition(step.frees.begin(), step.frees.end(),
                                          [&](BufferId b) { return !pinned.count(b); });
        deferred.insert(deferred.end(), held, step.frees.end());
        step.frees.erase(held, step.frees.end());
      }
      for (BufferId b : extras[id]) step.frees.push_back(b);
      for (BufferId b : free_backward[id]) step.frees.push_back(b);
      s.steps.push_back(std::move(step));
    }
    deferred.insert(deferred.end(), free_at_segment_end[k].begin(), free_at_segment_end[k].end());
    if (k == last) flow.EndBackwardCall(deferred);
    if (deferred.empty() && views_at_segment_end[k].empty()) continue;
    if (s.steps.size() == first_step) {
      Step step;  // a segment without recompute or backward steps still ends somewhere
      step.phase = Phase::kBackward;
      s.steps.push_back(std::move(step));
    }
    std::vector<BufferId>& frees = s.steps.back().frees;
    frees.insert(frees.end(), deferred.begin(), deferred.end());
    std::vector<TensorId>& views = s.steps.back().dropped_views;
    views.insert(views.end(), views_at_segment_end[k].begin(), views_at_segment_end[k].end());
  }

  Step optimizer;
  optimizer.phase = Phase::kOptimizer;
  flow.Finish(optimizer);
  s.steps.push_back(std::move(optimizer));
  return s;
}

}  // namespace memplan
