// Per-segment memory tables (see segment_costs.h for the decomposition).
//
// Why the tables depend on (a, b) only. Take a segment [a, b) and a storage r it produces
// (a <= producer(r) < b). Under BuildScheduleFromCuts:
//   - forward without autograd: r is alive at step n (n >= producer) iff n <= last_reader(r)
//     (a checkpoint's last reader is at or after b, beyond every step of the segment);
//   - recompute with autograd (and the last segment's plain forward): r is alive at step n
//     iff it is saved for backward or n <= last_reader(r) (a border tensor is held to the
//     segment's end and its last reader lies beyond b);
//   - backward step n: r is alive iff it crosses b (held to the end) or it is saved and its
//     first saver f satisfies f <= n (freed after f's backward).
// Saved extras live from the node's recompute to its backward; without autograd only during
// the node's step. A forward workspace lives only during its node's step, in every mode. Gradient
// buffers follow GradientFlow exactly as in the plain step, except that the gradients of tensors
// read after b are held to the segment's end; their bytes at backward step n are plain(n) + the
// held ones whose plain free came at a node above n. The last segment's backward is the backward
// call through the loss, which holds the loss and the seed gradient until it returns: the loss's
// storage is alive from its producer to the segment's end, and the seed from the loss node's
// backward to the segment's end (the plain replay below lets go of it at once, so that its own
// free is where its readers put it). Everything produced before a is a checkpoint,
// a constant during the segment; it is the DP's part. So every quantity below is a sum over
// storages and nodes of [a, b), computed for all b of a given a in one sweep with a max segment
// tree for the backward steps.
#include "segment_costs.h"

#include <algorithm>
#include <cstdint>

namespace memplan::planner {
namespace {

// Range add, range max over [0, n).
class MaxTree {
 public:
  void Build(const int64_t* values, int n) {
    n_ = n;
    size_ = 1;
    while (size_ < n) size_ <<= 1;
    mx_.assign(2 * size_, kNoValue);
    add_.assign(2 * size_, 0);
    for (int i = 0; i < n; ++i) mx_[size_ + i] = values[i];
    for (int i = size_ - 1; i >= 1; --i) mx_[i] = std::max(mx_[2 * i], mx_[2 * i + 1]);
  }
  void Add(int l, int r, int64_t v) {
    if (l < r) Add(1, 0, size_, l, r, v);
  }
  int64_t Max(int l, int r) const { return l < r ? Max(1, 0, size_, l, r) : kNoValue; }

 private:
  void Add(int node, int nl, int nr, int l, int r, int64_t v) {
    if (r <= nl || nr <= l) return;
    if (l <= nl && nr <= r) {
      mx_[node] += v;
      add_[node] += v;
      return;
    }
    int mid = (nl + nr) / 2;
    Add(2 * node, nl, mid, l, r, v);
    Add(2 * node + 1, mid, nr, l, r, v);
    mx_[node] = std::max(mx_[2 * node], mx_[2 * node + 1]) + add_[node];
  }
  int64_t Max(int node, int nl, int nr, int l, int r) const {
    if (r <= nl || nr <= l) return kNoValue;
    if (l <= nl && nr <= r) return mx_[node];
    int mid = (nl + nr) / 2;
    return std::max(Max(2 * node, nl, mid, l, r), Max(2 * node + 1, mid, nr, l, r)) + add_[node];
  }
  int n_ = 0, size_ = 1;
  std::vector<int64_t> mx_, add_;
};

bool ReadsActivation(const Node& n, const GraphFacts& f) {
  for (TensorId i : n.inputs) {
    if (i != kNone && f.root_of[i] >= 0) return true;
  }
  return false;
}

}  // namespace

std::vector<NodeId> DistinctCutPositions(const TrainingGraph& g, const GraphFacts& f) {
  std::vector<NodeId> out;
  for (NodeId c = 1; c <= f.loss_node; ++c) {
    const Node& prev = g.nodes[c - 1];
    bool inert = c > 1 && f.produced[prev.id].empty() && f.extra_bytes[prev.id] == 0 &&
                 !prev.has_backward && prev.forward_flops == 0 && !ReadsActivation(prev, f);
    if (!inert) out.push_back(c);
  }
  return out;
}

std::vector<NodeId> BottleneckCuts(const TrainingGraph& g, const GraphFacts& f) {
  std::vector<NodeId> out;
  for (TensorId t : FindBottlenecks(g)) {
    NodeId c = g.tensors[t].producer + 1;
    if (g.tensors[t].producer != kNone && c >= 1 && c <= f.loss_node) out.push_back(c);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<int64_t> CrossingBytes(const TrainingGraph& g, const GraphFacts& f) {
  std::vector<int64_t> diff(g.nodes.size() + 2, 0);
  for (const GraphFacts::Root& r : f.root) {
    if (r.last_reader <= r.producer) continue;
    int64_t b = g.tensors[r.tensor].bytes;
    diff[r.producer + 1] += b;
    diff[r.last_reader + 1] -= b;
  }
  std::vector<int64_t> out(g.nodes.size() + 1, 0);
  int64_t run = 0;
  for (size_t c = 0; c < out.size(); ++c) {
    run += diff[c];
    out[c] = run;
  }
  return out;
}

int CappedCutCandidates(int max_candidates, int num_nodes) {
  const int64_t affordable =
      std::max<int64_t>(kMinCutCandidates, kMaxSweepSteps / std::max(1, num_nodes));
  if (max_candidates <= 0) return static_cast<int>(std::min<int64_t>(affordable, INT32_MAX));
  return static_cast<int>(std::min<int64_t>(max_candidates, affordable));
}

std::vector<NodeId> SelectCutCandidates(const TrainingGraph& g, const GraphFacts& f, int max_count,
                                        bool* all_positions) {
  std::vector<NodeId> distinct = DistinctCutPositions(g, f);
  if (all_positions)
    *all_positions = max_count <= 0 || static_cast<int>(distinct.size()) <= max_count;
  if (max_count <= 0 || static_cast<int>(distinct.size()) <= max_count) return distinct;
  // Maps a position to the distinct one it is equivalent to (the start of its inert run).
  auto canonical = [&](NodeId c) {
    auto it = std::upper_bound(distinct.begin(), distinct.end(), c);
    return it == distinct.begin() ? distinct.front() : *(it - 1);
  };
  std::vector<NodeId> chosen;
  std::vector<NodeId> bottlenecks = BottleneckCuts(g, f);
  const size_t bottleneck_cap = static_cast<size_t>(max_count) / 2;
  for (size_t i = 0; i < bottlenecks.size(); ++i) {
    if (bottlenecks.size() > bottleneck_cap &&
        (i * bottleneck_cap) / bottlenecks.size() ==
            ((i + 1) * bottleneck_cap) / bottlenecks.size()) {
      continue;  // thin evenly
    }
    chosen.push_back(canonical(bottlenecks[i]));
  }
  // Local minima of the crossing bytes, smallest first.
  std::vector<int64_t> cb = CrossingBytes(g, f);
  std::vector<NodeId> minima;
  for (size_t i = 0; i < distinct.size(); ++i) {
    int64_t here = cb[distinct[i]];
    int64_t before = i > 0 ? cb[distinct[i - 1]] : INT64_MAX;
    int64_t after = i + 1 < distinct.size() ? cb[distinct[i + 1]] : INT64_MAX;
    if (here <= before && here < after) minima.push_back(distinct[i]);
  }
  std::stable_sort(minima.begin(), minima.end(), [&](NodeId x, NodeId y) { return cb[x] < cb[y]; });
  const size_t minima_cap = static_cast<size_t>(max_count) * 3 / 4;
  for (NodeId c : minima) {
    if (chosen.size() >= minima_cap) break;
    chosen.push_back(c);
  }
  std::sort(chosen.begin(), chosen.end());
  chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end());
  // Evenly spaced fill.
  size_t room = static_cast<size_t>(max_count) > chosen.size() ? max_count - chosen.size() : 0;
  for (size_t k = 0; k < room; ++k) chosen.push_back(distinct[(k * distinct.size()) / room]);
  std::sort(chosen.begin(), chosen.end());
  chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end());
  return chosen;
}

// What a row's sweep reads, computed once per table.
struct SegmentSweep {
  const GraphFacts* facts = nullptr;
  int num_nodes = 0;
  std::vector<int64_t> grad_in;  // gradient bytes alive when the backward reaches boundary b
  std::vector<int64_t>
      static_backward;  // per backward node: plain gradient bytes + extras of nodes <= n
  std::vector<int64_t> extra, extra_prefix;
  std::vector<int64_t> forward_workspace;    // per node: its forward step's temporaries
  std::vector<std::vector<int32_t>> ending;  // per node: storages whose last reader it is
  struct Pin {
    BufferId buffer;
    NodeId producer;
    NodeId freed;
    int64_t bytes;
  };
  NodeId seed_freed = kNone;  // the backward node whose step frees the seed in the plain replay
  int64_t seed_bytes = 0;
  std::vector<Pin> pins;  // held gradients: tensors read after their segment
  std::vector<std::vector<int32_t>> pin_start, pin_end;
  // Scratch.
  MaxTree tree;
  std::vector<int> pin_count;
  std::vector<BufferId> touched;
};

SegmentCosts ComputeSegmentCosts(const TrainingGraph& g, const GraphFacts& f,
                                 const std::vector<NodeId>& candidates, AllocatorPolicy policy,
                                 int64_t limit) {
  const int num_nodes = f.num_nodes;
  auto acc = [policy](int64_t bytes) { return AccountedBytes(bytes, policy); };
  SegmentCosts c;
  c.pos.push_back(0);
  c.pos.insert(c.pos.end(), candidates.begin(), candidates.end());
  c.pos.push_back(num_nodes);
  const size_t nb = c.pos.size();
  c.limit = limit;
  c.sweep_ = std::make_shared<SegmentSweep>();
  SegmentSweep& w = *c.sweep_;
  w.facts = &f;
  w.num_nodes = num_nodes;

  // 1. Persistent bytes, and the plain step's gradient side per backward node.
  Schedule scratch;
  PersistentBuffers persistent = AddPersistentBuffers(g, scratch);
  for (BufferId b : persistent.setup.allocs) c.persistent += acc(scratch.buffers[b].bytes);
  std::vector<int64_t> grad_during(num_nodes, kNoValue), grad_after(num_nodes, 0);
  std::vector<NodeId> freed_at;  // per scratch buffer: the backward node that frees it
  GradientFlow flow(g, scratch);
  int64_t running = 0;
  for (NodeId n = num_nodes - 1; n >= 0; --n) {
    if (!g.nodes[n].has_backward) continue;
    Step step;
    flow.Backward(g.nodes[n], step);
    flow.EndBackwardCall(step.frees);  // the seed as its readers alone hold it (see above)
    for (BufferId b : step.allocs) running += acc(scratch.buffers[b].bytes);
    grad_during[n] = running;
    for (BufferId b : step.frees) {
      running -= acc(scratch.buffers[b].bytes);
      if (freed_at.size() <= static_cast<size_t>(b)) freed_at.resize(scratch.buffers.size(), kNone);
      freed_at[b] = n;
    }
    grad_after[n] = running;
  }
  freed_at.resize(scratch.buffers.size(), kNone);
  if (flow.seed() != kNone) {
    w.seed_freed = freed_at[flow.seed()];
    w.seed_bytes = acc(scratch.buffers[flow.seed()].bytes);
  }
  Step optimizer;
  flow.Finish(optimizer);
  int64_t optimizer_bytes = c.persistent + running;
  for (BufferId b : optimizer.allocs) optimizer_bytes += acc(scratch.buffers[b].bytes);
  c.floor = std::max(c.persistent, optimizer_bytes);
  w.grad_in.assign(num_nodes + 1, 0);
  for (NodeId n = num_nodes - 1; n >= 0; --n)
    w.grad_in[n] = g.nodes[n].has_backward ? grad_after[n] : w.grad_in[n + 1];

  // 2. Per-node and per-storage inputs of the sweep.
  const size_t num_roots = f.root.size();
  c.root_bytes.resize(num_roots);
  for (size_t r = 0; r < num_roots; ++r) c.root_bytes[r] = acc(g.tensors[f.root[r].tensor].bytes);
  w.extra.assign(num_nodes, 0);
  w.extra_prefix.assign(num_nodes + 1, 0);
  w.forward_workspace.assign(num_nodes, 0);
  for (const Node& n : g.nodes) {
    if (n.forward_workspace_bytes > 0) w.forward_workspace[n.id] = acc(n.forward_workspace_bytes);
    for (const SavedExtra& e : n.saved_extras) w.extra[n.id] += acc(e.bytes);
    w.extra_prefix[n.id + 1] = w.extra_prefix[n.id] + w.extra[n.id];
  }
  w.ending.resize(num_nodes);
  for (size_t r = 0; r < num_roots; ++r)
    w.ending[f.root[r].last_reader].push_back(static_cast<int32_t>(r));
  w.pin_start.resize(num_nodes);
  w.pin_end.resize(num_nodes);
  for (const Tensor& t : g.tensors) {
    if (!t.has_gradient || t.producer == kNone || t.consumers.empty()) continue;
    BufferId b = flow.gradient(t.id);
    if (b == kNone) continue;
    NodeId last = *std::max_element(t.consumers.begin(), t.consumers.end());
    if (last <= t.producer) continue;
    int32_t id = static_cast<int32_t>(w.pins.size());
    w.pins.push_back({b, t.producer, freed_at[b], acc(scratch.buffers[b].bytes)});
    w.pin_start[t.producer].push_back(id);
    w.pin_end[last].push_back(id);
  }
  w.pin_count.assign(scratch.buffers.size(), 0);
  w.static_backward.resize(num_nodes);
  for (NodeId n = 0; n < num_nodes; ++n) {
    w.static_backward[n] =
        g.nodes[n].has_backward ? grad_during[n] + w.extra_prefix[n + 1] : kNoValue;
  }
  c.rows_.resize(nb);

  // 3. Crossing storages per boundary, and prefix FLOPs.
  c.crossing.resize(nb);
  c.crossing_bytes.assign(nb, 0);
  for (size_t r = 0; r < num_roots; ++r) {
    const GraphFacts::Root& root = f.root[r];
    auto lo = std::upper_bound(c.pos.begin(), c.pos.end(), root.producer);
    for (auto it = lo; it != c.pos.end() && *it <= root.last_reader; ++it) {
      size_t k = static_cast<size_t>(it - c.pos.begin());
      c.crossing[k].push_back(static_cast<int32_t>(r));
      c.crossing_bytes[k] += c.root_bytes[r];
    }
  }
  c.prefix_flops.assign(nb, 0);
  double flops = 0;
  NodeId n = 0;
  for (size_t k = 0; k < nb; ++k) {
    for (; n < c.pos[k]; ++n) flops += g.nodes[n].forward_flops;
    c.prefix_flops[k] = flops;
  }
  return c;
}

// One sweep from start a = pos[i] over the following nodes: every segment [a, b) at once.
void SegmentCosts::ComputeRow(size_t i) const {
  SegmentSweep& w = *sweep_;
  const GraphFacts& f = *w.facts;
  const int num_nodes = w.num_nodes;
  const size_t nb = pos.size();
  RowData& row = rows_[i];
  row.done = true;
  row.fwd.assign(nb - i - 1, kInfinite);
  row.phase.assign(nb - i - 1, kInfinite);
  if (i + 1 >= nb) return;
  const NodeId a = pos[i];
  w.tree.Build(w.static_backward.data() + a, num_nodes - a);
  const int64_t extra_offset = w.extra_prefix[a];
  int64_t fwd_cur = 0, fwd_max = kNoValue, rec_cur = 0, rec_max = kNoValue, border = 0;
  size_t j = i + 1;
  for (NodeId n = a; n < num_nodes && j < nb; ++n) {
    for (int32_t r : f.produced[n]) {
      fwd_cur += root_bytes[r];
      rec_cur += root_bytes[r];
      if (f.root[r].last_reader > n) border += root_bytes[r];
    }
    fwd_max = std::max(fwd_max, fwd_cur + w.extra[n] + w.forward_workspace[n]);
    rec_max =
        std::max(rec_max, rec_cur + w.extra_prefix[n + 1] - extra_offset + w.forward_workspace[n]);
    // Every segment from a that holds node n recomputes at least this much: beyond the limit.
    if (persistent + rec_max > limit) break;
    for (int32_t r : w.ending[n]) {
      const GraphFacts::Root& root = f.root[r];
      if (root.producer < a) continue;
      fwd_cur -= root_bytes[r];
      if (root.last_reader > root.producer) border -= root_bytes[r];
      if (r == f.loss_root) {
        w.tree.Add(0, num_nodes - a, root_bytes[r]);  // held to the end of the backward call
      } else if (root.first_saver == kNone) {
        rec_cur -= root_bytes[r];
      } else {
        w.tree.Add(root.first_saver - a, num_nodes - a, root_bytes[r]);
      }
    }
    // The seed, held to the end of the backward call through the loss (only the last segment
    // holds the loss node) beyond its plain free.
    if (n == f.loss_node && w.seed_freed != kNone && w.seed_freed > a)
      w.tree.Add(0, w.seed_freed - a, w.seed_bytes);
    for (int32_t p : w.pin_start[n]) {
      const SegmentSweep::Pin& pin = w.pins[p];
      if (w.pin_count[pin.buffer]++ == 0) {
        w.touched.push_back(pin.buffer);
        if (pin.freed != kNone && pin.freed > a) w.tree.Add(0, pin.freed - a, pin.bytes);
      }
    }
    for (int32_t p : w.pin_end[n]) {
      const SegmentSweep::Pin& pin = w.pins[p];
      if (pin.producer < a) continue;
      if (--w.pin_count[pin.buffer] == 0 && pin.freed != kNone && pin.freed > a)
        w.tree.Add(0, pin.freed - a, -pin.bytes);
    }
    if (n + 1 == pos[j]) {
      const NodeId b = n + 1;
      if (j + 1 < nb) row.fwd[j - i - 1] = fwd_max;
      int64_t rec = w.grad_in[b] + rec_max;
      int64_t bwd = w.tree.Max(0, b - a);
      if (bwd > kNoValue / 2) bwd += border - extra_offset;
      row.phase[j - i - 1] = std::max(rec, bwd);
      ++j;
    }
  }
  for (BufferId b : w.touched) w.pin_count[b] = 0;
  w.touched.clear();
}

}  // namespace memplan::planner
