// Offload (plan.h): the replay of a plan that keeps, recomputes or offloads each saved storage,
// where its copies go in the schedule, and the `offload` strategy.
//
// `offload` chooses, per activation storage, keep, recompute or offload, for the least predicted
// step time (recompute seconds + the copy streams' stall) with the device peak within the budget
// and the pinned host bytes within the host budget. A heuristic in four phases:
//   1. Greedy: replay; while the device peak exceeds the budget, take the storages alive at the
//      peak that a plan may still drop, best bytes per second of added step time first (each
//      priced as the cheaper of its recompute, the forward seconds of its producer, and its
//      offload, the transfer time its windows do not hide: the forward after its last reader
//      for the device-to-host copy, the backward before the work that first reads it for the
//      prefetch, and what the copies already taken, this round's included, queue ahead of it),
//      until their bytes cover the excess; replay again. Offloaded storages at the peak are
//      decided again: at a peak in the backward, those prefetched but not read there are
//      recomputed instead; at a peak in the forward, those whose device copy waits for its
//      device-to-host copy get their wait moved before the peak's node (the compute stream
//      stalls for the rest of the copy) or are recomputed instead, whichever costs less.
//   2. Placement (PlaceOffloads) on every replay: each device-to-host copy, in the order they
//      start, is waited for after the first forward node by whose end the copy stream will have
//      finished it (or earlier, as phase 1 moved it); each prefetch starts at the latest
//      backward node from which the host-to-device stream, working back from the last storage
//      needed, finishes it before the backward work that first reads it: its first saver's,
//      or, for a storage a recomputed chain reads, the work that chain is recomputed for.
//   3. The recompute-only plan of `selective` for the same budget: the answer is whichever of
//      the two fits with the least predicted overhead, so `offload` is never slower than it.
//      When neither fits, phase 1 runs again from selective's recomputed storages (offloading
//      what selective keeps at its peak) and the smallest peak is the answer.
//   4. When selective's plan is the answer: offload instead of recompute the storages whose
//      copies the windows hide better than recompute costs (most seconds saved first, each
//      priced behind those before it), the largest prefix of them (all, half, a quarter, ...)
//      that fits, is faster and peaks no higher than selective's plan, then each other one
//      alone on top (24 replays at most) under the same rule.
// Every number in the plan comes from the replay (Simulate, SimulateStreams), none from the
// estimates above.
#include <algorithm>
#include <numeric>

#include "graph_facts.h"
#include "memplan/plan.h"
#include "planner_internal.h"

namespace memplan {

LinkRates DefaultLinkRates(const std::string& device) {
  const bool cuda = device == "cuda" || device.rfind("cuda:", 0) == 0;
  const double rate = cuda ? 25e9 : 10e9;
  return {.device_to_host_bytes_per_second = rate, .host_to_device_bytes_per_second = rate};
}

std::vector<double> ScheduleStepSeconds(const std::vector<double>& node_seconds,
                                        const Schedule& s) {
  std::vector<double> out(s.steps.size(), 0);
  for (size_t i = 0; i < s.steps.size(); ++i) {
    const Step& step = s.steps[i];
    if (step.node < 0 || step.node >= static_cast<NodeId>(node_seconds.size())) continue;
    switch (step.phase) {
      case Phase::kForward:
      case Phase::kLoss:
      case Phase::kRecompute:
        out[i] = node_seconds[step.node];
        break;
      case Phase::kBackward:
        out[i] = kBackwardTimesForward * node_seconds[step.node];
        break;
      default:
        break;
    }
  }
  return out;
}

namespace planner {

Plan ReplayOffload(const TrainingGraph& g, std::vector<TensorId> recomputed,
                   std::vector<OffloadChoice> offloaded, const ReplayOptions& o,
                   const OffloadRequest& request) {
  std::sort(recomputed.begin(), recomputed.end());
  recomputed.erase(std::unique(recomputed.begin(), recomputed.end()), recomputed.end());
  std::sort(offloaded.begin(), offloaded.end(),
            [](const OffloadChoice& a, const OffloadChoice& b) { return a.tensor < b.tensor; });
  Plan p = ReplayedPlan(g, BuildSelectiveSchedule(g, *o.facts, recomputed, offloaded), o);
  p.recomputed = std::move(recomputed);
  p.offloaded = std::move(offloaded);
  p.recompute_flops = ScheduleRecomputeFlops(g, p.schedule);
  p.host_budget_bytes = request.host_budget_bytes;
  p.predicted_host_peak_bytes = p.timeline.host_peak_bytes;
  p.link = request.link;
  if (request.host_budget_bytes > 0 && p.predicted_host_peak_bytes > request.host_budget_bytes)
    p.feasible = false;
  if (!request.node_seconds.empty()) {
    p.predicted_recompute_seconds = ScheduleRecomputeSeconds(request.node_seconds, p.schedule);
    if (!p.offloaded.empty()) {
      p.predicted_stall_seconds =
          SimulateStreams(p.schedule, ScheduleStepSeconds(request.node_seconds, p.schedule),
                          request.link)
              .stall_seconds;
    }
  }
  return p;
}

namespace {

// The times the placement and the prices read, from the cost model's forward seconds.
struct OffloadTimes {
  std::vector<double> forward_end;     // per node: when its forward step ends
  std::vector<double> backward_start;  // per node with a backward: when its backward work starts
  std::vector<std::pair<double, NodeId>> backward_order;  // (start, node), in backward order
  std::vector<NodeId> first_need;  // per root: the first node in backward order saving it
  double forward_seconds = 0;
  double backward_seconds = 0;
};

OffloadTimes TimesOf(const TrainingGraph& g, const GraphFacts& f, const std::vector<double>& ns) {
  OffloadTimes t;
  const int n = f.num_nodes;
  t.forward_end.resize(n);
  double now = 0;
  for (NodeId i = 0; i < n; ++i) t.forward_end[i] = now += ns[i];
  t.forward_seconds = now;
  t.backward_start.assign(n, 0);
  now = 0;
  for (NodeId i = n - 1; i >= 0; --i) {
    if (!g.nodes[i].has_backward) continue;
    t.backward_start[i] = now;
    t.backward_order.push_back({now, i});
    now += kBackwardTimesForward * ns[i];
  }
  t.backward_seconds = now;
  t.first_need.assign(f.root.size(), kNone);
  for (NodeId i = 0; i < n; ++i) {
    for (TensorId s : g.nodes[i].saved_for_backward) {
      const int32_t r = s >= 0 ? f.root_of[s] : -1;
      if (r >= 0) t.first_need[r] = std::max(t.first_need[r], i);
    }
  }
  return t;
}

double Seconds(int64_t bytes, double rate) { return static_cast<double>(bytes) / rate; }

// Phase 2: where each offloaded root's copies go (see the file comment).
// deadline (per root; empty: none) moves a wait earlier than the copy's end, to free the device
// copy before a forward peak (the compute stream stalls instead); copy_end (per root, optional)
// receives when the device-to-host stream is estimated to finish each copy.
std::vector<OffloadChoice> PlaceOffloads(const TrainingGraph& g, const GraphFacts& f,
                                         const OffloadTimes& t, const LinkRates& link,
                                         std::vector<int32_t> roots,
                                         const std::vector<NodeId>& deadline = {},
                                         std::vector<double>* copy_end = nullptr) {
  const NodeId last = f.num_nodes - 1;
  std::vector<OffloadChoice> out(roots.size());
  std::sort(roots.begin(), roots.end(), [&](int32_t a, int32_t b) {
    return std::make_pair(f.root[a].last_reader, a) < std::make_pair(f.root[b].last_reader, b);
  });
  double free_at = 0;
  for (size_t k = 0; k < roots.size(); ++k) {
    const GraphFacts::Root& root = f.root[roots[k]];
    const double begin = std::max(t.forward_end[root.last_reader], free_at);
    free_at = begin + Seconds(g.tensors[root.tensor].bytes, link.device_to_host_bytes_per_second);
    auto it =
        std::lower_bound(t.forward_end.begin() + root.last_reader, t.forward_end.end(), free_at);
    out[k].tensor = root.tensor;
    out[k].free_after =
        it == t.forward_end.end() ? last : static_cast<NodeId>(it - t.forward_end.begin());
    if (!deadline.empty())
      out[k].free_after =
          std::max(root.last_reader, std::min(out[k].free_after, deadline[roots[k]]));
    if (copy_end) (*copy_end)[roots[k]] = free_at;
  }
  // Prefetches, from the storage needed last back to the one needed first.
  std::vector<size_t> order(roots.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::make_pair(t.first_need[roots[a]], roots[a]) <
           std::make_pair(t.first_need[roots[b]], roots[b]);
  });
  double next_begin = t.backward_seconds;
  for (size_t k : order) {
    const int32_t r = roots[k];
    const double need = t.backward_start[std::max<NodeId>(0, t.first_need[r])];
    const double begin = std::min(need, next_begin) - Seconds(g.tensors[f.root[r].tensor].bytes,
                                                              link.host_to_device_bytes_per_second);
    next_begin = begin;
    // The latest backward node whose work starts at or before `begin`.
    auto it =
        std::upper_bound(t.backward_order.begin(), t.backward_order.end(), begin,
                         [](double v, const std::pair<double, NodeId>& e) { return v < e.first; });
    out[k].prefetch_at = it == t.backward_order.begin() ? f.num_nodes : std::prev(it)->second;
  }
  return out;
}

}  // namespace

Plan RunOffload(Context& ctx, const PlanOptions& o) {
  auto start = Clock::now();
  const TrainingGraph& g = ctx.graph();
  const GraphFacts& f = ctx.facts();
  const std::vector<double>& ns = ctx.node_seconds();
  const LinkRates& link = o.link;
  if (!(link.device_to_host_bytes_per_second > 0) || !(link.host_to_device_bytes_per_second > 0))
    throw MemplanError("offload: the link rates must be > 0 bytes per second (--link-rate)");
  OffloadTimes times = TimesOf(g, f, ns);
  // A storage that a recompute reads is needed by the backward work that recompute serves,
  // which may come before its savers' (a chain recomputed for a later node's backward): per
  // root, the first node in backward order whose work reads it, under `recomputed`.
  const std::vector<NodeId> saver_need = times.first_need;
  auto set_need = [&](const std::vector<TensorId>& recomputed_now) {
    times.first_need = saver_need;
    std::vector<int32_t> chain;
    for (TensorId t : recomputed_now) {
      if (t >= 0 && f.root_of[t] >= 0) chain.push_back(f.root_of[t]);
    }
    std::sort(chain.begin(), chain.end(), [&](int32_t a, int32_t b) {
      return std::make_pair(f.root[a].producer, a) > std::make_pair(f.root[b].producer, b);
    });
    for (int32_t x : chain) {
      const NodeId producer = f.root[x].producer;
      if (producer < 0) continue;
      for (TensorId in : g.nodes[producer].inputs) {
        const int32_t r = in >= 0 ? f.root_of[in] : -1;
        if (r >= 0 && r != x)
          times.first_need[r] = std::max(times.first_need[r], times.first_need[x]);
      }
    }
  };
  const ReplayOptions replay{.facts = &f,
                             .fingerprint = ctx.fingerprint(),
                             .strategy = "offload",
                             .budget_bytes = o.budget_bytes,
                             .baseline_peak_bytes = ctx.baseline_peak(),
                             .sim = o.simulator};
  const OffloadRequest request{
      .host_budget_bytes = o.host_budget_bytes, .link = link, .node_seconds = ns};
  // 0 keep, 1 recompute, 2 offload; per root.
  std::vector<char> decision(f.root.size(), 0);
  std::vector<int32_t> offloaded_roots;
  std::vector<TensorId> recomputed;
  int64_t host_bytes = 0;
  double d2h_busy = 0, h2d_busy = 0;
  // Per root: the forward node after which its device copy must be freed at the latest (a forward
  // peak that waits for the copy), and the device-to-host stream's estimated end of its copy.
  std::vector<NodeId> deadline(f.root.size(), f.num_nodes - 1);
  std::vector<double> copy_end(f.root.size(), 0);
  auto replay_now = [&]() {
    set_need(recomputed);
    return ReplayOffload(g, recomputed,
                         PlaceOffloads(g, f, times, link, offloaded_roots, deadline, &copy_end),
                         replay, request);
  };
  // What offloading a root adds to the step: the transfer time its windows do not hide, and what
  // the copies already chosen queue ahead of it on each stream.
  auto offload_price = [&](int32_t r) {
    const int64_t bytes = g.tensors[f.root[r].tensor].bytes;
    const double d2h = Seconds(bytes, link.device_to_host_bytes_per_second);
    const double h2d = Seconds(bytes, link.host_to_device_bytes_per_second);
    const double fwd_window = times.forward_seconds - times.forward_end[f.root[r].last_reader];
    const double bwd_window = times.backward_start[std::max<NodeId>(0, times.first_need[r])];
    auto queue = [](double busy, double add, double window) {
      return std::max(0.0, busy + add - window) - std::max(0.0, busy - window);
    };
    return std::max(std::max(0.0, d2h - fwd_window), queue(d2h_busy, d2h, times.forward_seconds)) +
           std::max(std::max(0.0, h2d - bwd_window), queue(h2d_busy, h2d, times.backward_seconds));
  };
  auto unoffload = [&](int32_t r) {
    const int64_t bytes = g.tensors[f.root[r].tensor].bytes;
    offloaded_roots.erase(std::find(offloaded_roots.begin(), offloaded_roots.end(), r));
    host_bytes -= bytes;
    d2h_busy -= Seconds(bytes, link.device_to_host_bytes_per_second);
    h2d_busy -= Seconds(bytes, link.host_to_device_bytes_per_second);
  };
  // 1. Greedy from the storages `start` recomputes, a bounded number of replays.
  auto greedy = [&](const std::vector<TensorId>& start) {
    std::fill(decision.begin(), decision.end(), 0);
    std::fill(deadline.begin(), deadline.end(), f.num_nodes - 1);
    offloaded_roots.clear();
    recomputed = start;
    for (TensorId t : start) {
      if (f.root_of[t] >= 0) decision[f.root_of[t]] = 1;
    }
    host_bytes = 0;
    d2h_busy = h2d_busy = 0;
    Plan p = replay_now();
    for (int round = 0;
         round < 400 && o.budget_bytes > 0 && p.predicted_peak_bytes > o.budget_bytes; ++round) {
      enum class Action { kRecompute, kOffload, kRecomputeInstead, kWaitEarlier };
      struct Candidate {
        int32_t root;
        Action action;
        double seconds;
      };
      std::vector<Candidate> candidates;
      // A peak in the backward may hold prefetched storages that the peak's node does not read:
      // recomputed instead, each would come back only right before its reader.
      const Step& peak_step = p.schedule.steps[p.timeline.peak_step];
      const bool backward_peak = peak_step.phase == Phase::kBackward ||
                                 peak_step.phase == Phase::kRecompute ||
                                 peak_step.phase == Phase::kPrefetch;
      // A peak in the forward may hold offloaded storages whose copies the device-to-host stream
      // has not finished: their wait moves before the peak's node (the compute stream waits for
      // the copy: the stall the copy's estimated end exceeds that node's start by), or they are
      // recomputed instead, whichever costs less.
      NodeId forward_node = kNone;  // the forward node of the peak step, or the one before it
      if (!backward_peak) {
        for (int32_t i = p.timeline.peak_step; i >= 0 && forward_node == kNone; --i) {
          const Step& st = p.schedule.steps[i];
          if (st.node >= 0 && (st.phase == Phase::kForward || st.phase == Phase::kLoss))
            forward_node = st.node;
        }
      }
      for (BufferId b : p.timeline.alive_at_peak) {
        const Buffer& buf = p.schedule.buffers[b];
        if (buf.host || buf.category != MemoryCategory::kActivation || buf.tensor == kNone)
          continue;
        const int32_t r = f.root_of[buf.tensor];
        if (r < 0 || f.root[r].tensor != buf.tensor) continue;
        if (decision[r] == 2 && backward_peak && times.first_need[r] != peak_step.node &&
            f.root[r].producer != peak_step.node) {
          candidates.push_back({r, Action::kRecomputeInstead, ns[f.root[r].producer]});
          continue;
        }
        if (decision[r] == 2 && forward_node > 0 && f.root[r].last_reader < forward_node &&
            deadline[r] >= forward_node) {
          const double stall = std::max(0.0, copy_end[r] - times.forward_end[forward_node - 1]);
          const double recompute = ns[f.root[r].producer];
          candidates.push_back(stall <= recompute
                                   ? Candidate{r, Action::kWaitEarlier, stall}
                                   : Candidate{r, Action::kRecomputeInstead, recompute});
          continue;
        }
        if (decision[r] != 0) continue;
        const GraphFacts::Root& root = f.root[r];
        if (root.first_saver == kNone || root.producer == f.loss_node) continue;
        const int64_t bytes = g.tensors[root.tensor].bytes;
        const double recompute = ns[root.producer];
        const bool can_offload =
            o.host_budget_bytes <= 0 || host_bytes + bytes <= o.host_budget_bytes;
        const double offload = can_offload ? offload_price(r) : 0;
        const bool use_offload = can_offload && offload <= recompute;
        candidates.push_back({r, use_offload ? Action::kOffload : Action::kRecompute,
                              use_offload ? offload : recompute});
      }
      if (candidates.empty()) break;
      std::stable_sort(
          candidates.begin(), candidates.end(), [&](const Candidate& a, const Candidate& b) {
            const double ba = static_cast<double>(g.tensors[f.root[a.root].tensor].bytes);
            const double bb = static_cast<double>(g.tensors[f.root[b.root].tensor].bytes);
            return ba * (b.seconds + 1e-12) > bb * (a.seconds + 1e-12);
          });
      int64_t covered = 0;
      const int64_t excess = p.predicted_peak_bytes - o.budget_bytes;
      for (const Candidate& c : candidates) {
        if (covered >= excess) break;
        const TensorId t = f.root[c.root].tensor;
        const int64_t bytes = g.tensors[t].bytes;
        switch (c.action) {
          case Action::kRecomputeInstead:
            unoffload(c.root);
            decision[c.root] = 1;
            recomputed.push_back(t);
            break;
          case Action::kWaitEarlier:
            deadline[c.root] = forward_node - 1;
            break;
          case Action::kOffload:
            // Priced again: the copies taken before it in this round queue ahead of it.
            if ((o.host_budget_bytes <= 0 || host_bytes + bytes <= o.host_budget_bytes) &&
                offload_price(c.root) <= ns[f.root[c.root].producer]) {
              decision[c.root] = 2;
              offloaded_roots.push_back(c.root);
              host_bytes += bytes;
              d2h_busy += Seconds(bytes, link.device_to_host_bytes_per_second);
              h2d_busy += Seconds(bytes, link.host_to_device_bytes_per_second);
              break;
            }
            [[fallthrough]];
          case Action::kRecompute:
            decision[c.root] = 1;
            recomputed.push_back(t);
            break;
        }
        covered += bytes;
      }
      if (covered == 0) break;
      p = replay_now();
    }
    return p;
  };
  Plan p = greedy({});
  p.notes.push_back("offload: " + std::to_string(p.offloaded.size()) + " storages offloaded, " +
                    std::to_string(p.recomputed.size()) + " recomputed");
  // 3. Against the recompute-only plan (unless nothing can beat this one: it fits for free).
  if (o.budget_bytes > 0 && ctx.baseline_peak() > o.budget_bytes &&
      !(p.feasible && p.predicted_overhead_seconds() == 0)) {
    Plan selective = RunSelective(ctx, o);
    const bool better =
        selective.feasible &&
        (!p.feasible || selective.predicted_overhead_seconds() < p.predicted_overhead_seconds());
    // Neither fits: the greedy again, from selective's recompute (its smallest peak), also
    // offloads what selective keeps at its peak.
    if (!p.feasible && !selective.feasible) {
      Plan q = greedy(selective.recomputed);
      if (q.feasible || q.predicted_peak_bytes <
                            std::min(p.predicted_peak_bytes, selective.predicted_peak_bytes)) {
        q.notes = selective.notes;
        q.notes.push_back("offload: " + std::to_string(q.offloaded.size()) +
                          " storages offloaded, " + std::to_string(q.recomputed.size()) +
                          " recomputed, from selective's recomputed storages");
        p = std::move(q);
      }
    }
    if (better || (!p.feasible && !selective.feasible &&
                   selective.predicted_peak_bytes < p.predicted_peak_bytes)) {
      const size_t greedy_offloaded = p.offloaded.size();
      p = ReplayOffload(g, selective.recomputed, {}, replay, request);
      p.notes = selective.notes;
      p.notes.push_back(
          "offload: the recompute-only plan of `selective` is faster than the greedy "
          "offload (" +
          std::to_string(greedy_offloaded) + " storages)");
      // 4. Exchange: offload instead of recompute where the link hides the copies better than
      // recompute costs, the most saved first; the first prefix of them (all, half, a quarter,
      // ...) whose replay fits both budgets and is faster.
      if (p.feasible) {
        struct Swap {
          TensorId tensor;
          double gain;
        };
        std::vector<Swap> swaps;
        d2h_busy = h2d_busy = 0;
        set_need(p.recomputed);
        for (TensorId t : p.recomputed) {
          const int32_t r = f.root_of[t];
          if (r < 0 || f.root[r].first_saver == kNone) continue;
          const double gain = ns[f.root[r].producer] - offload_price(r);
          if (gain > 0) swaps.push_back({t, gain});
        }
        std::stable_sort(swaps.begin(), swaps.end(),
                         [](const Swap& a, const Swap& b) { return a.gain > b.gain; });
        // Priced again in that order, each behind the copies before it on the streams: those
        // the queue makes dearer than their recompute stay recomputed.
        std::vector<Swap> queued;
        for (const Swap& s : swaps) {
          const int32_t r = f.root_of[s.tensor];
          const double gain = ns[f.root[r].producer] - offload_price(r);
          if (gain <= 0) continue;
          queued.push_back({s.tensor, gain});
          d2h_busy += Seconds(g.tensors[s.tensor].bytes, link.device_to_host_bytes_per_second);
          h2d_busy += Seconds(g.tensors[s.tensor].bytes, link.host_to_device_bytes_per_second);
        }
        swaps = std::move(queued);
        // Accepted: the replay fits both budgets, is faster, and peaks no higher than
        // selective's plan (so that offload never needs more memory than selective either).
        const int64_t selective_peak = p.predicted_peak_bytes;
        auto try_swaps = [&](const std::vector<char>& with) -> bool {
          std::vector<int32_t> roots;
          std::vector<TensorId> kept_recomputed = p.recomputed;
          int64_t bytes = 0;
          for (size_t i = 0; i < swaps.size(); ++i) {
            if (!with[i]) continue;
            roots.push_back(f.root_of[swaps[i].tensor]);
            bytes += g.tensors[swaps[i].tensor].bytes;
            kept_recomputed.erase(
                std::find(kept_recomputed.begin(), kept_recomputed.end(), swaps[i].tensor));
          }
          for (const OffloadChoice& c : p.offloaded) {
            roots.push_back(f.root_of[c.tensor]);
            bytes += g.tensors[c.tensor].bytes;
          }
          if (o.host_budget_bytes > 0 && bytes > o.host_budget_bytes) return false;
          set_need(kept_recomputed);
          Plan q = ReplayOffload(g, kept_recomputed, PlaceOffloads(g, f, times, link, roots),
                                 replay, request);
          if (!q.feasible || q.predicted_peak_bytes > selective_peak ||
              !(q.predicted_overhead_seconds() < p.predicted_overhead_seconds()))
            return false;
          q.notes = p.notes;
          p = std::move(q);
          return true;
        };
        // The largest prefix (all, half, a quarter, ...), then the others one at a time, a
        // bounded number of replays.
        size_t prefix = 0;
        for (size_t k = swaps.size(); k > 0 && prefix == 0; k /= 2) {
          std::vector<char> with(swaps.size(), 0);
          std::fill(with.begin(), with.begin() + static_cast<std::ptrdiff_t>(k), 1);
          if (try_swaps(with)) prefix = k;
        }
        // try_swaps counts p.offloaded: from here each try adds one storage to those taken.
        size_t exchanged = prefix;
        int replays = 0;
        for (size_t i = prefix; i < swaps.size() && replays < 24; ++i, ++replays) {
          std::vector<char> with(swaps.size(), 0);
          with[i] = 1;
          // p.recomputed no longer lists the storages taken before; try_swaps removes only i.
          if (try_swaps(with)) ++exchanged;
        }
        if (exchanged > 0) {
          p.notes.push_back("offload: " + std::to_string(exchanged) +
                            " of selective's recomputed storages offloaded instead");
        }
      }
    }
  }
  p.solve_seconds = SecondsSince(start);
  return p;
}

}  // namespace planner

Plan ReplayOffload(const TrainingGraph& g, const std::vector<TensorId>& recomputed,
                   const std::vector<OffloadChoice>& offloaded, const ReplayRequest& r,
                   const OffloadRequest& o) {
  const planner::StandaloneReplay replay(g, r);
  return planner::ReplayOffload(g, recomputed, offloaded, replay.options, o);
}

}  // namespace memplan
