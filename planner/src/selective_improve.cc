// The `selective` search, phases 1b-d (selective_search.cc): keeping dropped storages again
// (pruning), dropping one more to keep costlier ones (exchange), and keeping one again while
// dropping others (rebuild).
#include <algorithm>
#include <climits>
#include <cmath>
#include <queue>
#include <vector>

#include "selective_search.h"

namespace memplan::planner::selective {

Point Search::Improve(Point p, int64_t limit) {
  return Rebuild(Exchange(Prune(std::move(p), limit), limit), limit);
}

Point Search::Prune(Point p, int64_t limit) {
  // A dropped storage that nothing recomputes (unsaved, and no recompute reads it) changes
  // nothing: kept again without a replay.
  for (int32_t r : droppable_) {
    if (p.dropped[r] && !saved(r) && p.x.first_recompute[f_.root[r].producer] < 0) p.dropped[r] = 0;
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

Point Search::Exchange(Point p, int64_t limit) {
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

Point Search::Rebuild(Point p, int64_t limit) {
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

double Search::DropSeconds(const StepIndex& x, int32_t r) const {
  const NodeId producer = f_.root[r].producer;
  return seconds_[producer] * x.recomputes[producer];
}

std::vector<int32_t> Search::KeepEstimate(const StepIndex& x, const std::vector<char>& dropped,
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
  std::vector<char> handled(f_.root.size(), 0);
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
      if (end < x.forward_free[ri] && std::none_of(released.begin(), released.end(),
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

}  // namespace memplan::planner::selective
