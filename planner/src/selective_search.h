// The `selective` planner's search (selective_search.cc describes it and its phases), split by
// phase:
//   selective_search.cc      the phases in order (RunSelective); replaying a drop set
//   selective_trajectory.cc  1. the trajectory: its next point, the escapes; 3. the gap
//   selective_greedy.cc      1a. greedy drops, priced on a replay's timeline
//   selective_improve.cc     1b-d. pruning, exchange and rebuild
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <utility>
#include <vector>

#include "planner_internal.h"

namespace memplan::planner::selective {

// Range add and range max over [0, n) (steps of a timeline). Bottom-up, without recursion: the
// search asks it millions of times. Leaves at [size_, size_ + n); each inner node v holds the
// max of its children plus add_[v], the adds that covered all of its range.
class MaxTree {
 public:
  explicit MaxTree(const std::vector<int64_t>& values) : n_(static_cast<int>(values.size())) {
    while (size_ < n_) size_ *= 2;
    // Leaves past n hold INT64_MIN: no add ever covers them, and any real leaf beats them.
    max_.assign(2 * static_cast<size_t>(size_), INT64_MIN);
    add_.assign(size_, 0);
    std::copy(values.begin(), values.end(), max_.begin() + size_);
    for (int v = size_ - 1; v >= 1; --v) max_[v] = std::max(max_[2 * v], max_[2 * v + 1]);
  }
  void Add(int lo, int hi, int64_t delta) {
    lo = std::max(lo, 0);
    hi = std::min(hi, n_ - 1);
    if (lo > hi || delta == 0) return;
    const int first = lo + size_, last = hi + size_;
    for (int l = first, r = last + 1; l < r; l /= 2, r /= 2) {
      if (l & 1) Apply(l++, delta);
      if (r & 1) Apply(--r, delta);
    }
    Pull(first);
    Pull(last);
  }
  int64_t Max(int lo, int hi) const {
    lo = std::max(lo, 0);
    hi = std::min(hi, n_ - 1);
    if (lo > hi) return INT64_MIN;
    // The nodes covering [lo, hi] taken from the left lie under node l - 1, those from the right
    // under node r: each level up adds that node's own adds to what was taken so far.
    int64_t left = INT64_MIN, right = INT64_MIN;
    bool have_left = false, have_right = false;
    int l = lo + size_, r = hi + size_ + 1;
    while (l < r) {
      if (l & 1) {
        left = have_left ? std::max(left, max_[l]) : max_[l];
        have_left = true;
        ++l;
      }
      if (r & 1) {
        --r;
        right = have_right ? std::max(right, max_[r]) : max_[r];
        have_right = true;
      }
      l /= 2;
      r /= 2;
      if (have_left) left += add_[l - 1];
      if (have_right) right += add_[r];
    }
    for (int v = (l - 1) / 2; have_left && v >= 1; v /= 2) left += add_[v];
    for (int v = r / 2; have_right && v >= 1; v /= 2) right += add_[v];
    return std::max(left, right);
  }
  int64_t Max() const { return n_ > 0 ? max_[1] : INT64_MIN; }

 private:
  void Apply(int v, int64_t delta) {
    max_[v] += delta;
    if (v < size_) add_[v] += delta;
  }
  // Recomputes the ancestors of leaf v.
  void Pull(int v) {
    for (v /= 2; v >= 1; v /= 2) max_[v] = std::max(max_[2 * v], max_[2 * v + 1]) + add_[v];
  }

  int n_;
  int size_ = 1;
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
inline bool Better(const Point& a, const Point& b, int64_t target) {
  const bool fa = a.peak <= target, fb = b.peak <= target;
  if (fa != fb) return fa;
  if (a.seconds != b.seconds) return a.seconds < b.seconds;
  return a.peak < b.peak;
}

class Search {
 public:
  Search(Context& ctx, const PlanOptions& o);

  // The plain step's point, where fresh greedy runs start.
  void set_origin(const Point& p) { origin_ = p; }
  int replays() const { return replays_; }
  size_t droppable() const { return droppable_.size(); }
  int64_t events() const { return events_; }  // allocations and frees of the first replay
  bool saved(int32_t r) const { return f_.root[r].first_saver != kNone; }
  // Replays a point may spend on c, d (per point) and the escapes (4x).
  void set_optional_per_point(int n) { optional_per_point_ = n; }
  int optional_per_point() const { return optional_per_point_; }
  bool rich() const { return optional_per_point_ >= kRich; }

  Point Replay(std::vector<char> dropped);

  std::vector<TensorId> Ids(const std::vector<char>& dropped) const;

  // One point of the trajectory below `cur` (aiming at `target`); `cur` itself when nothing
  // lowers its peak. `alt`: the incremental lineage (selective_search.cc, 1e), advanced here.
  Point Next(const Point& cur, Point& alt, int64_t target);

  // 3. Points in the gap between two consecutive points `prev` and `cur` of the trajectory:
  // peaks in [cur.peak, prev.peak), cheaper than `cur`. For `parts` limits spread over the gap
  // (from its top down): `cur` pruned to the limit, the greedy from `prev` towards it, and the
  // fresh greedy, each improved. Depends on `prev` and `cur` only, never on the budget.
  std::vector<Point> Gap(const Point& prev, const Point& cur, int parts);

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
  Point Incremental(const Point& from, int64_t target, bool& have);

  // 1e. The greedy from the plain step towards `target` (both orders on small graphs; else the
  // uncapped one, when its first round is priced below `best`), improved. Into `next` when it
  // peaks below `cur` and is better than `best` (none: nullptr); whether it was.
  bool Fresh(const Point& cur, int64_t target, const Point* best, Point& next);

  Point Improve(Point p, int64_t limit);

  // 1a. Drops more storages until the replay peaks at or below `target`; the lowest-peak
  // replay reached (the start itself when nothing lowers it). `keep` is never dropped.
  // `first`: the drop set of the first round, already chosen.
  Point Greedy(const Point& start, int64_t target, bool capped, int32_t keep = -1,
               const std::vector<char>* first = nullptr);

  // 1b. Keeps again the most expensive dropped storages while the replay stays within `limit`
  // (`p` is within it).
  Point Prune(Point p, int64_t limit);

  // 1c. Drops one more storage where the tree says that lets more expensive ones be kept
  // again within `limit` (`p` is within it); replayed and pruned, kept when cheaper.
  Point Exchange(Point p, int64_t limit);

  // 1d. Keeps one of the most expensive dropped storages again and drops others instead
  // (greedy, both orders, and pruning, towards `limit`); kept when cheaper within `limit`.
  Point Rebuild(Point p, int64_t limit);

  // When no drop lowers the peak of `p` (its highest step is a recompute's, or holds only
  // what cannot be dropped): keeps one dropped storage again and drops others instead, the
  // first that lowers the peak (greedy towards `target`, both orders); else every storage
  // dropped (or every saved one), when that peaks lower; else any single storage dropped or
  // kept again that lowers it. `p` when nothing does.
  Point Escape(const Point& p, int64_t target);

  // The dropped storages of `p` that its schedule recomputes.
  std::vector<int32_t> Recomputed(const Point& p) const;

  StepIndex Index(const Schedule& s) const;

  // The step before which a kept r, dropped, would first be recomputed: before its last
  // saver's backward, or earlier where a recompute reads it. INT_MAX: never.
  int RecomputeAt(const StepIndex& x, int32_t r) const;

  // Whether dropped root d is held (recomputed and not yet freed) at step `at`.
  bool Held(const StepIndex& x, int32_t d, int at) const;

  // What recomputing `node` before step `at` costs beyond itself: its dropped inputs not held
  // then run again, and its kept inputs dead by then either run again (unsaved ones, dropped
  // with it) or are held until then.
  void Inputs(const Point& p, NodeId node, int at, int depth, bool drop_unsaved, Option& o);

  // The ways to drop one more kept storage of `p` whose drop lowers some step above `target`.
  std::vector<Option> Options(const Point& p, const MaxTree& tree, int64_t target);

  void Apply(MaxTree& tree, const Option& o, int64_t sign, Journal* journal = nullptr) const;

  // Drops kept storages, one at a time, while the tree has a step above `target`. Each pick:
  // the least seconds per byte by which its drop lowers the highest step among those it
  // changes (relieved, or holding an input longer), measured on the tree; `capped`: counting
  // only bytes above the target. Lazily: a drop only makes the others' gains smaller, so an
  // option whose gain, computed again, still leads the queue is the best. False when no drop
  // lowers any such step. Adds the predicted seconds of the drops to `seconds`.
  bool DropCheapest(const Point& p, int64_t target, bool capped, int32_t keep,
                    std::vector<char>& dropped, double* seconds = nullptr);

  // What a dropped storage's recomputes cost: its producer's seconds times its recomputes.
  double DropSeconds(const StepIndex& x, int32_t r) const;

  // Dropped storages of `dropped` whose keeping the tree says stays within `limit`, most
  // expensive first (DropSeconds); adds them to the tree (and the journal).
  std::vector<int32_t> KeepEstimate(const StepIndex& x, const std::vector<char>& dropped,
                                    MaxTree& tree, int64_t limit, Journal* journal) const;

  const TrainingGraph& g_;
  const GraphFacts& f_;
  const std::vector<double>& seconds_;
  SimulatorOptions sim_;
  // The replays' schedules, without buffer names, each built in the memory of the last.
  SelectiveScheduleBuilder builder_;
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

}  // namespace memplan::planner::selective
