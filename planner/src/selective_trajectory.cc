// The `selective` search, phases 1 and 3 (selective_search.cc): the trajectory's next point from
// the incremental, the fresh and the alternative lineage, the escapes when nothing lowers the
// peak, and the points in the gap between two points.
#include <algorithm>
#include <climits>
#include <cmath>
#include <queue>
#include <vector>

#include "selective_search.h"

namespace memplan::planner::selective {

Point Search::Next(const Point& cur, Point& alt, int64_t target) {
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

std::vector<Point> Search::Gap(const Point& prev, const Point& cur, int parts) {
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

Point Search::Incremental(const Point& from, int64_t target, bool& have) {
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

bool Search::Fresh(const Point& cur, int64_t target, const Point* best, Point& next) {
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

Point Search::Escape(const Point& p, int64_t target) {
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
    std::vector<char> dropped(f_.root.size(), 0);
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

}  // namespace memplan::planner::selective
