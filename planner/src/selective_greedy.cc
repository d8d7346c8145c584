// The `selective` search, phase 1a (selective_search.cc): the ways to drop one more storage as a
// replay's timeline (a range-add, range-max tree) prices them, and the greedy that takes the
// cheapest per byte until the target holds.
#include <algorithm>
#include <climits>
#include <cmath>
#include <queue>
#include <vector>

#include "selective_search.h"

namespace memplan::planner::selective {

Point Search::Greedy(const Point& start, int64_t target, bool capped, int32_t keep,
                     const std::vector<char>* first) {
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

int Search::RecomputeAt(const StepIndex& x, int32_t r) const {
  int at = saved(r) ? x.group[last_saver_[r]] : INT_MAX;
  for (NodeId n : f_.root[r].readers) {
    if (x.first_recompute[n] >= 0) at = std::min(at, x.first_recompute[n]);
  }
  return at;
}

bool Search::Held(const StepIndex& x, int32_t d, int at) const {
  if (!saved(d)) return false;
  const int from = x.first_recompute[f_.root[d].producer];
  const int to = x.backward[f_.root[d].first_saver];
  return from >= 0 && from <= at && at <= to;
}

void Search::Inputs(const Point& p, NodeId node, int at, int depth, bool drop_unsaved, Option& o) {
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

std::vector<Search::Option> Search::Options(const Point& p, const MaxTree& tree, int64_t target) {
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

void Search::Apply(MaxTree& tree, const Option& o, int64_t sign, Journal* journal) const {
  auto add = [&](int lo, int hi, int64_t d) {
    journal ? journal->Add(tree, lo, hi, d) : tree.Add(lo, hi, d);
  };
  add(o.lo, o.hi, -sign * bytes_[o.root]);
  for (const auto& [r, span] : o.held) add(span.first, span.second, sign * bytes_[r]);
}

bool Search::DropCheapest(const Point& p, int64_t target, bool capped, int32_t keep,
                          std::vector<char>& dropped, double* seconds) {
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

}  // namespace memplan::planner::selective
