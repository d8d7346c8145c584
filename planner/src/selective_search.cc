// `selective`: which activation storages to drop and recompute (plan.h's selective recompute)
// so that the replayed peak fits the budget at the least predicted recompute seconds.
//
// A heuristic; tests compare it with brute force over every subset on small graphs. Phases:
//   1. The trajectory. From the plain step, a sequence of drop sets whose replayed peaks
//      strictly decrease, each aiming `step` below the last (its target). Each point:
//      a. greedy: on the last replay's timeline (a range-add, range-max tree over its steps)
//         kept storages are dropped one at a time, first the one with the least predicted
//         seconds per byte by which it lowers the highest step it changes, until no step is
//         above the target; replay, repeat. Two orders: bytes counted only above the target
//         (a small excess is not worth a large drop) and all of them (one large drop may be
//         worth several small ones). Small graphs take both through b-d and keep the better;
//         larger ones take the order whose first round the tree prices lower.
//      b. pruning: the most expensive dropped storages are kept again while the tree says the
//         target holds; one replay checks, a bisection over them when it does not.
//      c. exchange: one more storage dropped (the cheapest per byte first) when the tree says
//         that lets more expensive ones be kept again; replayed and pruned, kept if cheaper.
//      d. rebuild: one of the most expensive dropped storages kept again and others dropped
//         instead (a, b); kept if cheaper.
//      e. fresh: the greedy from the plain step towards the same target (uncapped on larger
//         graphs, and only when its first round is priced below the best so far), improved.
//         The incremental path is steered by the small steps it took: capped drops of small
//         storages that one larger storage, cheaper per byte, would have made unnecessary
//         (mobilenet_v2 at 90%: 37 batch-norm and clip outputs where three convolution outputs
//         do, 80% more seconds). A fresh point is a worse base for the steps after it on some
//         graphs (densenet121: it picks the large pre-concat normalisations), so the purely
//         incremental lineage (a-d from its own last point) goes on beside the trajectory and
//         is a candidate at every point.
//      The next point is the best candidate (within the target, then cheaper, then lower)
//      that peaks below the last. When nothing lowers the peak: escape moves (keep one again
//      and re-drop, drop all, any single change), else the trajectory ends.
//      c, d and the escapes spend the same number of replays at every point, fewer as graphs
//      grow (about 2e6 schedule events replayed over the trajectory): graphs of thousands of
//      nodes get a and b only, and plan in about a second.
//   2. The first point P_k of the trajectory whose replayed peak fits the budget, or, when none
//      does, the last (smallest) one, with feasible = false.
//   3. The gap: points with peaks in [peak(P_k), peak(P_k-1)) found from P_k-1 and P_k alone
//      (P_k pruned, the greedy from P_k-1 and the fresh greedy, towards limits spread over the
//      gap), whatever the budget. The plan is the cheapest of P_k and those that fit (ties: the
//      lower peak). The steps of the trajectory are coarse (0.4% of the plain peak on graphs of
//      a few hundred nodes), and a budget between two points would otherwise get the lower
//      one: gpt at 90%, 3% more seconds.
// The trajectory does not depend on the budget, only where it stops does. So the peak is
// monotone in the budget: for budgets b1 < b2 that stop at the same P_k, the plan of b1 is
// chosen among the same points as that of b2, so b2's is b1's when that fits b1, and otherwise
// its peak is > b1 >= the peak of b1's plan. When b1 stops at a later point P_j (j > k), b1's
// plan peaks at <= peak(P_j) < peak(P_k), and b2's at >= peak(P_k). That is why each point
// aims a fixed step below the last rather than at the budget: aiming at the budget would give
// each budget its own greedy path, and a looser budget could end below a tighter one's plan.
// With a 1-byte step and exact points, the first point that fits b is optimal for b (it was
// the best for a target >= b); larger graphs take a coarser step (selective_levels), and the
// gap (3) recovers part of what the coarse step gives away.
// Every estimate here only ranks and guides; every point is replayed (BuildSelectiveSchedule,
// Simulate), and the plan is the replay of its drop set.
//
// Multi-output nodes: a saved output of a node that a recompute runs anyway (a dropout's mask
// beside its dropped output) is dropped at no seconds of its own (it is materialised by that
// run), and the dropped outputs of one node are kept again together (1b, 1c), since keeping
// only some saves no seconds.
//
// The storages considered are DroppableStorages: the saved activations, and the unsaved ones
// a recompute would otherwise keep alive from the forward (dropped together with a saved one
// whose producer reads them, or alone when an earlier drop holds them).
//
// No segment-border margin (SegmentBorderMargin): a selective plan runs the plain step's one
// autograd graph; no checkpoint becomes a leaf whose .grad AccumulateGrad copies into.
#include <algorithm>
#include <climits>
#include <cmath>
#include <queue>

#include "planner_internal.h"

namespace memplan::planner {
namespace {

// Range add and range max over [0, n) (steps of a timeline).
class MaxTree {
 public:
  explicit MaxTree(const std::vector<int64_t>& values)
      : n_(static_cast<int>(values.size())),
        max_(4 * std::max<size_t>(1, values.size()), 0),
        add_(max_.size(), 0) {
    if (n_ > 0) Build(1, 0, n_ - 1, values);
  }
  void Add(int lo, int hi, int64_t delta) {
    lo = std::max(lo, 0);
    hi = std::min(hi, n_ - 1);
    if (lo <= hi && delta != 0) Add(1, 0, n_ - 1, lo, hi, delta);
  }
  int64_t Max(int lo, int hi) const {
    lo = std::max(lo, 0);
    hi = std::min(hi, n_ - 1);
    return lo <= hi ? Max(1, 0, n_ - 1, lo, hi) : INT64_MIN;
  }
  int64_t Max() const { return n_ > 0 ? max_[1] : INT64_MIN; }

 private:
  void Build(int v, int l, int r, const std::vector<int64_t>& values) {
    if (l == r) {
      max_[v] = values[l];
      return;
    }
    const int m = (l + r) / 2;
    Build(2 * v, l, m, values);
    Build(2 * v + 1, m + 1, r, values);
    max_[v] = std::max(max_[2 * v], max_[2 * v + 1]);
  }
  void Add(int v, int l, int r, int lo, int hi, int64_t d) {
    if (lo <= l && r <= hi) {
      max_[v] += d;
      add_[v] += d;
      return;
    }
    const int m = (l + r) / 2;
    if (lo <= m) Add(2 * v, l, m, lo, hi, d);
    if (hi > m) Add(2 * v + 1, m + 1, r, lo, hi, d);
    max_[v] = std::max(max_[2 * v], max_[2 * v + 1]) + add_[v];
  }
  int64_t Max(int v, int l, int r, int lo, int hi) const {
    if (lo <= l && r <= hi) return max_[v];
    const int m = (l + r) / 2;
    int64_t best = INT64_MIN;
    if (lo <= m) best = std::max(best, Max(2 * v, l, m, lo, hi));
    if (hi > m) best = std::max(best, Max(2 * v + 1, m + 1, r, lo, hi));
    return best + add_[v];
  }

  int n_;
  std::vector<int64_t> max_, add_;
};

// Range adds made to a tree, to take back in reverse.
struct Journal {
  struct Entry {
    int lo, hi;
    int64_t delta;
  };
  std::vector<Entry> entries;
  void Add(MaxTree& t, int lo, int hi, int64_t delta) {
    t.Add(lo, hi, delta);
    entries.push_back({lo, hi, delta});
  }
  void Undo(MaxTree& t) {
    for (auto it = entries.rbegin(); it != entries.rend(); ++it) t.Add(it->lo, it->hi, -it->delta);
    entries.clear();
  }
};

// Where a replayed schedule runs each node, and when each forward storage dies.
struct StepIndex {
  std::vector<int> forward;   // per node: its forward (or loss) step
  std::vector<int> backward;  // per node: its backward step, or -1
  std::vector<int> group;  // per node: the first of the recompute steps right before its backward
  std::vector<int> first_recompute;  // per node: its first recompute step, or -1
  std::vector<int> last_recompute;   // per node: its last recompute step, or -1
  std::vector<int> recomputes;       // per node: how many recompute steps run it
  std::vector<int> forward_free;     // per root: the step that frees its forward buffer, or -1
};

// A replayed drop set: what the search reads of its schedule and timeline.
struct Point {
  std::vector<char> dropped;  // per root of the graph's facts
  StepIndex x;
  std::vector<int64_t> bytes;  // the timeline's bytes_during
  int64_t peak = 0;
  double seconds = 0;  // predicted recompute seconds (ScheduleRecomputeSeconds)
};

// Whether a is a better point than b for `target`: within it, then cheaper, then lower.
bool Better(const Point& a, const Point& b, int64_t target) {
  const bool fa = a.peak <= target, fb = b.peak <= target;
  if (fa != fb) return fa;
  if (a.seconds != b.seconds) return a.seconds < b.seconds;
  return a.peak < b.peak;
}

class Search {
 public:
  Search(Context& ctx, const PlanOptions& o)
      : g_(ctx.graph()), f_(ctx.facts()), seconds_(ctx.node_seconds()), sim_(o.simulator) {
    const size_t num_roots = f_.roots.size();
    last_saver_.assign(num_roots, kNone);
    for (const Node& n : g_.nodes) {
      for (TensorId t : n.saved_for_backward) {
        const int32_t r = f_.root_of[t];
        if (r >= 0) last_saver_[r] = std::max(last_saver_[r], n.id);
      }
    }
    bytes_.assign(num_roots, 0);
    for (size_t r = 0; r < num_roots; ++r) {
      bytes_[r] = AccountedBytes(g_.tensors[f_.roots[r]].bytes, sim_.policy);
      if (f_.root[r].producer != f_.loss_node) droppable_.push_back(static_cast<int32_t>(r));
    }
    seen_.assign(num_roots, 0);
  }

  // The plain step's point, where fresh greedy runs start.
  void set_origin(const Point& p) { origin_ = p; }
  int replays() const { return replays_; }
  size_t droppable() const { return droppable_.size(); }
  int64_t events() const { return events_; }  // allocations and frees of the first replay
  bool saved(int32_t r) const { return f_.root[r].first_saver != kNone; }
  // Replays a point may spend on c, d (per point) and the escapes (4x).
  void set_optional_per_point(int n) { optional_per_point_ = n; }
  bool rich() const { return optional_per_point_ >= kRich; }

  Point Replay(std::vector<char> dropped) {
    // The greedy orders and pruning often reach the same set: the last few replays are kept.
    for (const Point& c : recent_) {
      if (c.dropped == dropped) {
        return c;
      }
    }
    ++replays_;
    Point p;
    p.dropped = std::move(dropped);
    const Schedule s = BuildSelectiveSchedule(g_, f_, Ids(p.dropped));
    MemoryTimeline t = Simulate(s, sim_);
    p.x = Index(s);
    p.bytes = std::move(t.bytes_during);
    p.peak = t.peak_bytes;
    p.seconds = ScheduleRecomputeSeconds(seconds_, s);
    if (events_ == 0) {
      for (const Step& step : s.steps)
        events_ += static_cast<int64_t>(step.allocs.size() + step.frees.size());
    }
    recent_[next_recent_] = p;
    next_recent_ = (next_recent_ + 1) % kRecent;
    return p;
  }

  std::vector<TensorId> Ids(const std::vector<char>& dropped) const {
    std::vector<TensorId> ids;
    for (int32_t r : droppable_) {
      if (dropped[r]) ids.push_back(f_.roots[r]);
    }
    return ids;
  }

  // One point of the trajectory below `cur` (aiming at `target`); `cur` itself when nothing
  // lowers its peak. `alt`: the incremental lineage (see the header), advanced here.
  Point Next(const Point& cur, Point& alt, int64_t target) {
    optional_left_ = optional_per_point_;
    const bool same = alt.dropped == cur.dropped;
    bool have = false;
    Point next = Incremental(cur, target, have);
    if (same) {
      if (have) alt = next;
    } else {
      bool advanced = alt.peak <= target;
      Point a = advanced ? alt : Incremental(alt, target, advanced);
      if (advanced) {
        if (a.peak < cur.peak && (!have || Better(a, next, target))) {
          next = a;
          have = true;
        }
        alt = std::move(a);
      }
    }
    if (Fresh(cur, target, have ? &next : nullptr, next)) have = true;
    if (have) return next;
    Point q = Escape(cur, target);
    if (q.peak >= cur.peak) return cur;
    q = Improve(std::move(q), std::max(target, q.peak));
    if (same) alt = q;
    return q;
  }

  // 3. Points in the gap between two consecutive points `prev` and `cur` of the trajectory:
  // peaks in [cur.peak, prev.peak), cheaper than `cur`. For `parts` limits spread over the gap
  // (from its top down): `cur` pruned to the limit, the greedy from `prev` towards it, and the
  // fresh greedy, each improved. Depends on `prev` and `cur` only, never on the budget.
  std::vector<Point> Gap(const Point& prev, const Point& cur, int parts) {
    std::vector<Point> out;
    auto add = [&](Point q) {
      if (q.peak >= cur.peak && q.peak < prev.peak && q.seconds < cur.seconds)
        out.push_back(std::move(q));
    };
    for (int i = parts; i >= 1; --i) {
      const int64_t limit = cur.peak + (prev.peak - 1 - cur.peak) * i / parts;
      optional_left_ = optional_per_point_;
      add(Prune(cur, limit));
      bool have = false;
      Point q = Incremental(prev, limit, have);
      if (have) add(std::move(q));
      Point f;
      if (Fresh(prev, limit, &cur, f)) add(std::move(f));
    }
    return out;
  }

 private:
  static constexpr int kMaxGreedyRounds = 32;
  static constexpr int kMaxPrunePasses = 3;
  static constexpr int kExchangeCandidates = 64;  // options whose exchange is estimated
  // Replays an exchange (a replay and pruning) and a rebuild (a replay, two greedy runs and
  // pruning) take about; with this many a point, both greedy orders are improved.
  static constexpr int kExchangeReplays = 2, kRebuildReplays = 5, kRich = 16;
  // How far a drop pulls in the unsaved storages its recompute reads (dropping them too
  // instead of keeping them alive for it): a Linear's MatMul before its bias Add, a
  // normalisation before its activation.
  static constexpr int kMaxChainDepth = 4;

  // One way to drop a kept storage, as the tree sees it.
  struct Option {
    int32_t root = -1;
    int lo = 0, hi = -1;  // the steps whose bytes the drop lowers
    double seconds = 0;
    int64_t net = 0;                    // bytes freed less those of kept inputs held longer
    std::vector<int32_t> also_dropped;  // unsaved inputs dropped with it
    std::vector<std::pair<int32_t, std::pair<int, int>>> held;  // kept inputs held longer, and when
  };

  // 1a-d from `from`: greedy (both orders, each improved, on small graphs; else the order
  // whose first round the tree prices lower), improved; `have`: it lowers the peak of `from`.
  Point Incremental(const Point& from, int64_t target, bool& have) {
    Point next;
    have = false;
    if (rich()) {
      for (bool capped : {true, false}) {
        Point q = Greedy(from, target, capped);
        if (q.peak >= from.peak) continue;
        q = Improve(std::move(q), std::max(target, q.peak));
        if (!have || Better(q, next, target)) {
          next = std::move(q);
          have = true;
        }
      }
      return next;
    }
    std::vector<char> first[2] = {from.dropped, from.dropped};
    double seconds[2] = {0, 0};
    bool any[2];
    for (int k = 0; k < 2; ++k)
      any[k] = DropCheapest(from, target, k == 0, -1, first[k], &seconds[k]);
    const int k = any[0] && (!any[1] || seconds[0] <= seconds[1]) ? 0 : 1;
    if (!any[k]) return next;
    next = Greedy(from, target, k == 0, -1, &first[k]);
    have = next.peak < from.peak;
    if (have) next = Improve(std::move(next), std::max(target, next.peak));
    return next;
  }

  // 1e. The greedy from the plain step towards `target` (both orders on small graphs; else the
  // uncapped one, when its first round is priced below `best`), improved. Into `next` when it
  // peaks below `cur` and is better than `best` (none: nullptr); whether it was.
  bool Fresh(const Point& cur, int64_t target, const Point* best, Point& next) {
    if (origin_.peak <= target) return false;
    bool took = false;
    auto consider = [&](Point q) {
      if (q.peak >= cur.peak) return;
      q = Improve(std::move(q), std::max(target, q.peak));
      if (!(took || best) || Better(q, took ? next : *best, target)) {
        next = std::move(q);
        took = true;
      }
    };
    if (rich()) {
      for (bool capped : {true, false}) consider(Greedy(origin_, target, capped));
      return took;
    }
    std::vector<char> first = origin_.dropped;
    double seconds = 0;
    if (DropCheapest(origin_, target, false, -1, first, &seconds) &&
        (!best || seconds < best->seconds))
      consider(Greedy(origin_, target, false, -1, &first));
    return took;
  }

  Point Improve(Point p, int64_t limit) {
    return Rebuild(Exchange(Prune(std::move(p), limit), limit), limit);
  }

  // 1a. Drops more storages until the replay peaks at or below `target`; the lowest-peak
  // replay reached (the start itself when nothing lowers it). `keep` is never dropped.
  // `first`: the drop set of the first round, already chosen.
  Point Greedy(const Point& start, int64_t target, bool capped, int32_t keep = -1,
               const std::vector<char>* first = nullptr) {
    Point best, last;
    bool have = false;
    const Point* cur = &start;
    for (int round = 0; round < kMaxGreedyRounds && cur->peak > target; ++round) {
      std::vector<char> dropped = cur->dropped;
      if (round == 0 && first) {
        dropped = *first;
      } else if (!DropCheapest(*cur, target, capped, keep, dropped)) {
        break;
      }
      last = Replay(std::move(dropped));
      const Point& lowest = have ? best : start;
      if (last.peak < lowest.peak ||
          (have && last.peak == best.peak && last.seconds < best.seconds)) {
        best = last;
        have = true;
      }
      cur = &last;
    }
    return have ? best : start;
  }

  // 1b. Keeps again the most expensive dropped storages while the replay stays within `limit`
  // (`p` is within it).
  Point Prune(Point p, int64_t limit) {
    // A dropped storage that nothing recomputes (unsaved, and no recompute reads it) changes
    // nothing: kept again without a replay.
    for (int32_t r : droppable_) {
      if (p.dropped[r] && !saved(r) && p.x.first_recompute[f_.root[r].producer] < 0)
        p.dropped[r] = 0;
    }
    for (int pass = 0; pass < kMaxPrunePasses; ++pass) {
      MaxTree tree(p.bytes);
      std::vector<int32_t> undrop = KeepEstimate(p.x, p.dropped, tree, limit, nullptr);
      if (undrop.empty()) break;
      auto without = [&](size_t k) {
        std::vector<char> dropped = p.dropped;
        for (size_t i = 0; i < k; ++i) dropped[undrop[i]] = 0;
        return dropped;
      };
      Point all = Replay(without(undrop.size()));
      if (all.peak <= limit && all.seconds <= p.seconds) {
        p = std::move(all);
        continue;
      }
      // The estimate was wrong somewhere: the longest prefix that fits (0 fits).
      size_t lo = 0, hi = undrop.size();
      Point fit;
      bool have = false;
      while (hi - lo > 1) {
        const size_t mid = lo + (hi - lo) / 2;
        Point q = Replay(without(mid));
        if (q.peak <= limit && q.seconds <= p.seconds) {
          lo = mid;
          fit = std::move(q);
          have = true;
        } else {
          hi = mid;
        }
      }
      if (!have) break;
      p = std::move(fit);
    }
    return p;
  }

  // 1c. Drops one more storage where the tree says that lets more expensive ones be kept
  // again within `limit` (`p` is within it); replayed and pruned, kept when cheaper.
  Point Exchange(Point p, int64_t limit) {
    while (optional_left_ >= kExchangeReplays) {
      MaxTree tree(p.bytes);
      std::vector<Option> options = Options(p, tree, INT64_MIN);
      std::sort(options.begin(), options.end(), [](const Option& a, const Option& b) {
        const double l = a.seconds * static_cast<double>(std::max<int64_t>(1, b.net));
        const double r = b.seconds * static_cast<double>(std::max<int64_t>(1, a.net));
        if (l != r) return l < r;
        return a.root < b.root;
      });
      if (options.size() > kExchangeCandidates) options.resize(kExchangeCandidates);
      std::vector<std::pair<double, size_t>> moves;  // estimated gain, option
      Journal journal;
      for (size_t k = 0; k < options.size(); ++k) {
        const Option& o = options[k];
        Apply(tree, o, 1, &journal);
        std::vector<char> dropped = p.dropped;
        dropped[o.root] = 1;
        for (int32_t r : o.also_dropped) dropped[r] = 1;
        double gain = -o.seconds;
        for (int32_t r : KeepEstimate(p.x, dropped, tree, limit, &journal))
          gain += DropSeconds(p.x, r);
        journal.Undo(tree);
        if (gain > 0) moves.push_back({gain, k});
      }
      std::sort(moves.begin(), moves.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first > b.first : a.second < b.second;
      });
      bool improved = false;
      for (size_t m = 0; m < moves.size() && optional_left_ >= kExchangeReplays && !improved; ++m) {
        const Option& o = options[moves[m].second];
        std::vector<char> dropped = p.dropped;
        dropped[o.root] = 1;
        for (int32_t r : o.also_dropped) dropped[r] = 1;
        const int before = replays_;
        Point q = Replay(std::move(dropped));
        if (q.peak <= limit) q = Prune(std::move(q), limit);
        optional_left_ -= replays_ - before;
        if (q.peak <= limit && q.seconds < p.seconds) {
          p = std::move(q);
          improved = true;
        }
      }
      if (!improved) break;
    }
    return p;
  }

  // 1d. Keeps one of the most expensive dropped storages again and drops others instead
  // (greedy, both orders, and pruning, towards `limit`); kept when cheaper within `limit`.
  Point Rebuild(Point p, int64_t limit) {
    bool improved = true;
    while (improved && optional_left_ >= kRebuildReplays) {
      improved = false;
      std::vector<int32_t> order = Recomputed(p);
      std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        const double ca = DropSeconds(p.x, a), cb = DropSeconds(p.x, b);
        return ca != cb ? ca > cb : a < b;
      });
      for (size_t k = 0; k < order.size() && optional_left_ >= kRebuildReplays && !improved; ++k) {
        std::vector<char> dropped = p.dropped;
        dropped[order[k]] = 0;
        const int before = replays_;
        const Point start = Replay(std::move(dropped));
        for (bool capped : {true, false}) {
          Point q = Greedy(start, limit, capped, order[k]);
          if (q.peak > limit) continue;
          q = Prune(std::move(q), limit);
          if (q.seconds < p.seconds) {
            p = std::move(q);
            improved = true;
            break;
          }
        }
        optional_left_ -= replays_ - before;
      }
    }
    return p;
  }

  // When no drop lowers the peak of `p` (its highest step is a recompute's, or holds only
  // what cannot be dropped): keeps one dropped storage again and drops others instead, the
  // first that lowers the peak (greedy towards `target`, both orders); else every storage
  // dropped (or every saved one), when that peaks lower; else any single storage dropped or
  // kept again that lowers it. `p` when nothing does.
  Point Escape(const Point& p, int64_t target) {
    optional_left_ = 4 * optional_per_point_;
    for (int32_t r : Recomputed(p)) {
      if (optional_left_ < kRebuildReplays) break;
      std::vector<char> dropped = p.dropped;
      dropped[r] = 0;
      const int before = replays_;
      const Point start = Replay(std::move(dropped));
      for (bool capped : {true, false}) {
        Point q = Greedy(start, target, capped, r);
        if (q.peak < p.peak) {
          optional_left_ = optional_per_point_;
          return q;
        }
      }
      optional_left_ -= replays_ - before;
    }
    for (bool unsaved : {true, false}) {
      std::vector<char> dropped(f_.roots.size(), 0);
      for (int32_t r : droppable_) dropped[r] = unsaved || saved(r);
      Point q = Replay(std::move(dropped));
      if (q.peak < p.peak) return q;
    }
    for (size_t k = 0; k < droppable_.size() && optional_left_ > 0; ++k, --optional_left_) {
      std::vector<char> dropped = p.dropped;
      dropped[droppable_[k]] ^= 1;
      Point q = Replay(std::move(dropped));
      if (q.peak < p.peak) return q;
    }
    return p;
  }

  // The dropped storages of `p` that its schedule recomputes.
  std::vector<int32_t> Recomputed(const Point& p) const {
    std::vector<int32_t> out;
    for (int32_t r : droppable_) {
      if (p.dropped[r] && p.x.first_recompute[f_.root[r].producer] >= 0) out.push_back(r);
    }
    return out;
  }

  StepIndex Index(const Schedule& s) const {
    const size_t num_nodes = g_.nodes.size();
    StepIndex x;
    x.forward.assign(num_nodes, -1);
    x.backward.assign(num_nodes, -1);
    x.group.assign(num_nodes, -1);
    x.first_recompute.assign(num_nodes, -1);
    x.last_recompute.assign(num_nodes, -1);
    x.recomputes.assign(num_nodes, 0);
    x.forward_free.assign(f_.roots.size(), -1);
    std::vector<int32_t> forward_root(s.buffers.size(), -1);
    int group_start = -1;
    for (size_t i = 0; i < s.steps.size(); ++i) {
      const Step& step = s.steps[i];
      const int at = static_cast<int>(i);
      if (step.phase != Phase::kRecompute && step.phase != Phase::kBackward) group_start = -1;
      if (step.node != kNone) {
        switch (step.phase) {
          case Phase::kForward:
          case Phase::kLoss:
            x.forward[step.node] = at;
            for (BufferId b : step.allocs) {
              const TensorId t = s.buffers[b].tensor;
              if (t == kNone || s.buffers[b].category != MemoryCategory::kActivation) continue;
              const int32_t r = f_.root_of[t];
              if (r >= 0 && f_.roots[r] == t) forward_root[b] = r;
            }
            break;
          case Phase::kRecompute:
            if (group_start < 0) group_start = at;
            if (x.first_recompute[step.node] < 0) x.first_recompute[step.node] = at;
            x.last_recompute[step.node] = at;
            ++x.recomputes[step.node];
            break;
          case Phase::kBackward:
            x.backward[step.node] = at;
            x.group[step.node] = group_start >= 0 ? group_start : at;
            group_start = -1;
            break;
          default:
            break;
        }
      }
      for (BufferId b : step.frees) {
        if (forward_root[b] >= 0) x.forward_free[forward_root[b]] = at;
      }
    }
    return x;
  }

  // The step before which a kept r, dropped, would first be recomputed: before its last
  // saver's backward, or earlier where a recompute reads it. INT_MAX: never.
  int RecomputeAt(const StepIndex& x, int32_t r) const {
    int at = saved(r) ? x.group[last_saver_[r]] : INT_MAX;
    for (NodeId n : f_.root[r].readers) {
      if (x.first_recompute[n] >= 0) at = std::min(at, x.first_recompute[n]);
    }
    return at;
  }

  // Whether dropped root d is held (recomputed and not yet freed) at step `at`.
  bool Held(const StepIndex& x, int32_t d, int at) const {
    if (!saved(d)) return false;
    const int from = x.first_recompute[f_.root[d].producer];
    const int to = x.backward[f_.root[d].first_saver];
    return from >= 0 && from <= at && at <= to;
  }

  // What recomputing `node` before step `at` costs beyond itself: its dropped inputs not held
  // then run again, and its kept inputs dead by then either run again (unsaved ones, dropped
  // with it) or are held until then.
  void Inputs(const Point& p, NodeId node, int at, int depth, bool drop_unsaved, Option& o) {
    for (TensorId i : g_.nodes[node].inputs) {
      if (i == kNone) continue;
      const int32_t r = f_.root_of[i];
      if (r < 0 || seen_[r] == stamp_ || f_.root[r].producer == f_.loss_node) continue;
      seen_[r] = stamp_;
      const NodeId producer = f_.root[r].producer;
      if (p.dropped[r]) {
        if (Held(p.x, r, at)) continue;
        o.seconds += seconds_[producer];
        Inputs(p, producer, at, depth + 1, drop_unsaved, o);
        continue;
      }
      const int end = p.x.forward_free[r];
      if (end < 0 || end >= at - 1) continue;  // alive then anyway
      if (drop_unsaved && !saved(r) && depth < kMaxChainDepth) {
        o.also_dropped.push_back(r);
        o.seconds += seconds_[producer];
        Inputs(p, producer, at, depth + 1, drop_unsaved, o);
      } else {
        o.held.push_back({r, {end + 1, at - 1}});
        o.net -= bytes_[r];
      }
    }
  }

  // The ways to drop one more kept storage of `p` whose drop lowers some step above `target`.
  std::vector<Option> Options(const Point& p, const MaxTree& tree, int64_t target) {
    const StepIndex& x = p.x;
    std::vector<Option> options;
    for (int32_t r : droppable_) {
      if (p.dropped[r]) continue;
      const GraphFacts::Root& root = f_.root[r];
      int at = RecomputeAt(x, r);
      if (at == INT_MAX) continue;  // nothing would recompute it: it dies after the forward anyway
      // A saved output of a node that a recompute runs anyway before then (another output of
      // it dropped: a dropout's mask beside its output) comes with that run: held from there,
      // at no seconds of its own.
      const int again = x.first_recompute[root.producer];
      const bool rides = saved(r) && again >= 0 && again < at;
      if (rides) at = again;
      Option o;
      o.root = r;
      o.lo = x.forward[root.last_reader] + 1;
      o.hi = std::min(at - 1, x.forward_free[r] < 0 ? INT_MAX : x.forward_free[r]);
      if (o.hi < o.lo || tree.Max(o.lo, o.hi) <= target) continue;
      // Its producer runs again, with what it reads; saved, it runs again for each recompute
      // that reads it after its first saver's backward freed it; unsaved, for each one.
      const int freed = saved(r) ? x.backward[root.first_saver] : -1;
      int runs = saved(r) ? 1 : 0;
      for (NodeId n : root.readers) {
        if (x.last_recompute[n] > freed) runs += saved(r) ? 1 : x.recomputes[n];
      }
      o.seconds = seconds_[root.producer] * (rides ? runs - 1 : std::max(1, runs));
      o.net = bytes_[r];
      if (rides) {  // what it reads is there for that run already
        options.push_back(std::move(o));
        continue;
      }
      // Two ways to recompute it: holding the inputs it reads that died by then, or dropping
      // the unsaved ones among them too (they run again instead of being held).
      for (bool drop_unsaved : {false, true}) {
        Option v = o;
        seen_[r] = ++stamp_;
        Inputs(p, root.producer, at, 0, drop_unsaved, v);
        if (drop_unsaved && v.also_dropped.empty()) continue;
        options.push_back(std::move(v));
      }
    }
    return options;
  }

  void Apply(MaxTree& tree, const Option& o, int64_t sign, Journal* journal = nullptr) const {
    auto add = [&](int lo, int hi, int64_t d) {
      journal ? journal->Add(tree, lo, hi, d) : tree.Add(lo, hi, d);
    };
    add(o.lo, o.hi, -sign * bytes_[o.root]);
    for (const auto& [r, span] : o.held) add(span.first, span.second, sign * bytes_[r]);
  }

  // Drops kept storages, one at a time, while the tree has a step above `target`. Each pick:
  // the least seconds per byte by which its drop lowers the highest step among those it
  // changes (relieved, or holding an input longer), measured on the tree; `capped`: counting
  // only bytes above the target. Lazily: a drop only makes the others' gains smaller, so an
  // option whose gain, computed again, still leads the queue is the best. False when no drop
  // lowers any such step. Adds the predicted seconds of the drops to `seconds`.
  bool DropCheapest(const Point& p, int64_t target, bool capped, int32_t keep,
                    std::vector<char>& dropped, double* seconds = nullptr) {
    MaxTree tree(p.bytes);
    // The plain step's options do not change from point to point (only the target filters
    // them, below): computed once.
    if (&p == &origin_ && !origin_options_ready_) {
      origin_options_ = Options(p, tree, INT64_MIN);
      origin_options_ready_ = true;
    }
    std::vector<Option> own;
    if (&p != &origin_) own = Options(p, tree, target);
    const std::vector<Option>& options = &p == &origin_ ? origin_options_ : own;
    auto local_max = [&](const Option& o) {
      int64_t m = tree.Max(o.lo, o.hi);
      for (const auto& [r, span] : o.held) m = std::max(m, tree.Max(span.first, span.second));
      return m;
    };
    // Seconds per useful byte (infinite when useless), ties: larger net, then lower index.
    struct Entry {
      double ratio;
      int64_t net;
      size_t option;
      bool operator<(const Entry& b) const {  // priority_queue: the top is the largest
        if (ratio != b.ratio) return ratio > b.ratio;
        if (net != b.net) return net < b.net;
        return option > b.option;
      }
    };
    auto evaluate = [&](size_t k) -> Entry {
      const Option& o = options[k];
      Entry e{HUGE_VAL, o.net, k};
      if (dropped[o.root] || o.root == keep || tree.Max(o.lo, o.hi) <= target) return e;
      const int64_t before = local_max(o);
      Apply(tree, o, 1);
      const int64_t after = local_max(o);
      Apply(tree, o, -1);
      int64_t useful = before - after;
      if (capped) useful = std::min(useful, before - target);
      if (useful > 0) e.ratio = o.seconds / static_cast<double>(useful);
      return e;
    };
    std::priority_queue<Entry> queue;
    for (size_t k = 0; k < options.size(); ++k) {
      Entry e = evaluate(k);
      if (e.ratio != HUGE_VAL) queue.push(e);
    }
    bool any = false;
    while (tree.Max() > target && !queue.empty()) {
      Entry top = queue.top();
      queue.pop();
      Entry now = evaluate(top.option);
      if (now.ratio == HUGE_VAL) continue;
      if (!queue.empty() && now < queue.top()) {  // another leads now
        queue.push(now);
        continue;
      }
      const Option& o = options[top.option];
      Apply(tree, o, 1);
      if (seconds) *seconds += o.seconds;
      dropped[o.root] = 1;
      for (int32_t r : o.also_dropped) dropped[r] = 1;
      any = true;
    }
    return any;
  }

  // What a dropped storage's recomputes cost: its producer's seconds times its recomputes.
  double DropSeconds(const StepIndex& x, int32_t r) const {
    const NodeId producer = f_.root[r].producer;
    return seconds_[producer] * x.recomputes[producer];
  }

  // Dropped storages of `dropped` whose keeping the tree says stays within `limit`, most
  // expensive first (DropSeconds); adds them to the tree (and the journal).
  std::vector<int32_t> KeepEstimate(const StepIndex& x, const std::vector<char>& dropped,
                                    MaxTree& tree, int64_t limit, Journal* journal) const {
    std::vector<int32_t> order;
    for (int32_t r : droppable_) {
      if (dropped[r]) order.push_back(r);
    }
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      const double ca = DropSeconds(x, a), cb = DropSeconds(x, b);
      if (ca != cb) return ca > cb;
      if (bytes_[a] != bytes_[b]) return bytes_[a] < bytes_[b];
      return a < b;
    });
    Journal local;
    std::vector<int32_t> keep;
    std::vector<std::pair<int32_t, std::pair<int, int>>> released;
    std::vector<int32_t> unit;
    std::vector<char> handled(f_.roots.size(), 0);
    for (int32_t r : order) {
      if (handled[r]) continue;
      const NodeId producer = f_.root[r].producer;
      // The dropped outputs of one node are kept again together: while one stays dropped, its
      // producer runs again and keeping the others saves no seconds.
      unit.clear();
      for (int32_t u : f_.produced[producer]) {
        if (dropped[u] && !handled[u]) unit.push_back(u);
      }
      for (int32_t u : unit) handled[u] = 1;
      const int first = x.first_recompute[producer];
      if (first < 0) {  // never recomputed: dropping them changes nothing
        keep.insert(keep.end(), unit.begin(), unit.end());
        continue;
      }
      // Kept, a storage lives from its last forward reader until its first saver's backward and
      // the last recompute that reads it; dropped, it was there only while recomputed (from the
      // first recompute until its first saver's backward, when saved).
      std::vector<std::pair<int, int>> spans;
      for (int32_t u : unit) {
        const GraphFacts::Root& root = f_.root[u];
        int last_read = -1;
        for (NodeId n : root.readers) last_read = std::max(last_read, x.last_recompute[n]);
        if (saved(u)) {
          spans.push_back({x.forward[root.last_reader] + 1, first - 1});
          spans.push_back({x.backward[root.first_saver] + 1, last_read});
        } else {
          spans.push_back({x.forward[root.last_reader] + 1, last_read});
        }
      }
      // Kept inputs of the producer that live on only for its recomputes die earlier.
      released.clear();
      for (TensorId i : g_.nodes[producer].inputs) {
        const int32_t ri = i == kNone ? -1 : f_.root_of[i];
        if (ri < 0 || dropped[ri] || f_.root[ri].producer == producer) continue;
        int end = x.forward[f_.root[ri].last_reader];
        if (saved(ri)) end = std::max(end, x.backward[f_.root[ri].first_saver]);
        for (NodeId n : f_.root[ri].readers) {
          if (n != producer) end = std::max(end, x.last_recompute[n]);
        }
        if (end < x.forward_free[ri] &&
            std::none_of(released.begin(), released.end(),
                         [&](const auto& e) { return e.first == ri; })) {
          released.push_back({ri, {end + 1, x.forward_free[ri]}});
        }
      }
      for (const auto& [ri, span] : released) local.Add(tree, span.first, span.second, -bytes_[ri]);
      size_t k = 0;
      for (int32_t u : unit) {
        for (int j = 0; j < (saved(u) ? 2 : 1); ++j, ++k)
          local.Add(tree, spans[k].first, spans[k].second, bytes_[u]);
      }
      bool fits = true;
      for (auto [lo, hi] : spans) fits = fits && (lo > hi || tree.Max(lo, hi) <= limit);
      if (!fits) {
        local.Undo(tree);
        continue;
      }
      if (journal)
        journal->entries.insert(journal->entries.end(), local.entries.begin(), local.entries.end());
      local.entries.clear();
      keep.insert(keep.end(), unit.begin(), unit.end());
    }
    return keep;
  }

  const TrainingGraph& g_;
  const GraphFacts& f_;
  const std::vector<double>& seconds_;
  SimulatorOptions sim_;
  std::vector<NodeId> last_saver_;  // per root: the latest node whose backward saves it
  std::vector<int64_t> bytes_;      // per root: accounted bytes
  std::vector<int32_t> droppable_;  // roots not produced by the loss
  std::vector<uint32_t> seen_;      // per root: == stamp_ when visited by the current Inputs walk
  uint32_t stamp_ = 0;
  int64_t events_ = 0;
  Point origin_;
  std::vector<Option> origin_options_;
  bool origin_options_ready_ = false;
  static constexpr int kRecent = 4;
  Point recent_[kRecent];
  int next_recent_ = 0;
  int optional_per_point_ = 0;
  int optional_left_ = 0;
  int replays_ = 0;
};

}  // namespace

Plan RunSelective(Context& ctx, const PlanOptions& o) {
  auto start = Clock::now();
  const TrainingGraph& g = ctx.graph();
  Search search(ctx, o);
  Point cur = search.Replay(std::vector<char>(ctx.facts().roots.size(), 0));
  search.set_origin(cur);
  // Small graphs replay fast: finer steps there (1 B on toy graphs: each point aims just
  // below the last), and replays to spare for 1c, 1d and the escapes: a replay costs about
  // 0.1-0.5 us per event (allocation or free) of the schedule; about 2e6 event-replays (a
  // second or less) over the points, at most 64 replays a point.
  const int64_t num_nodes = std::max<int64_t>(1, static_cast<int64_t>(g.nodes.size()));
  const int64_t levels =
      std::max<int64_t>(std::max(1, o.selective_levels), (int64_t{1} << 16) / num_nodes);
  const int64_t step = std::max<int64_t>(1, ctx.baseline_peak() / levels);
  const int64_t points =
      std::min<int64_t>(levels, 2 * static_cast<int64_t>(search.droppable()) + 1);
  search.set_optional_per_point(
      o.selective_replays_per_point >= 0
          ? o.selective_replays_per_point
          : static_cast<int>(
                std::min<int64_t>(64, int64_t{2000000} / std::max<int64_t>(1, search.events()) /
                                          std::max<int64_t>(1, points))));
  Point alt = cur;
  int num_points = 1;
  bool stuck = false;
  // 1. The trajectory, until a point fits.
  Point prev;
  while (o.budget_bytes > 0 && cur.peak > o.budget_bytes) {
    Point next = search.Next(cur, alt, cur.peak - step);
    if (next.peak >= cur.peak) {
      stuck = true;
      break;
    }
    prev = std::move(cur);
    cur = std::move(next);
    ++num_points;
  }
  // 3. The cheapest point that fits among it and those in the gap above it.
  if (!stuck && num_points > 1) {
    // Four limits where points replay fast, two on graphs of thousands of nodes.
    for (Point& q : search.Gap(prev, cur, search.rich() || search.events() < 100000 ? 4 : 2)) {
      if (q.peak <= o.budget_bytes &&
          (q.seconds < cur.seconds || (q.seconds == cur.seconds && q.peak < cur.peak)))
        cur = std::move(q);
    }
  }
  // 2. The plan: that point's replay.
  Plan p = ReplaySelective(g, ctx.facts(), ctx.fingerprint(), "selective", search.Ids(cur.dropped),
                           o.budget_bytes, ctx.baseline_peak(), o.simulator);
  p.predicted_recompute_seconds = ScheduleRecomputeSeconds(ctx.node_seconds(), p.schedule);
  p.solve_seconds = SecondsSince(start);
  int saved = 0;
  for (TensorId t : p.recomputed) saved += search.saved(ctx.facts().root_of[t]);
  p.notes.push_back("selective: " + std::to_string(saved) + " saved activations recomputed, and " +
                    std::to_string(p.recomputed.size() - saved) +
                    " unsaved storages as inputs of those recomputes (" +
                    std::to_string(num_points) + " points of the search, " +
                    std::to_string(search.replays()) + " replays)");
  if (!p.feasible && stuck) {
    p.notes.push_back(
        "no selective plan the search finds fits the budget; this is the smallest peak it reaches");
  }
  return p;
}

}  // namespace memplan::planner
