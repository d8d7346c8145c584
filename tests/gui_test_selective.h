// A selective plan (plan.h: per-tensor keep or recompute) on a hand-built graph, replayed by
// the planner's ReplaySelective, for the dashboard's tests. Every span below is worked out by
// hand from plan.h's semantics.
//
// x [1, 25] (100 B) -> Mul(w [25]) -> h0 -> Relu -> a, Sigmoid(h0) -> b, Add(a, b) -> c,
// Relu(c) -> d, a sum loss. Every activation is 100 B. Nodes: 0 Mul, 1 Relu, 2 Sigmoid, 3 Add,
// 4 Relu, 5 the loss. Relu and Sigmoid save their outputs (a, b, d); Mul saves its inputs, Add
// nothing, so h0 and c are saved by nobody.
//
// Dropped: h0, a and b. Kept: d (saved), and c (not saved: not a decision). Schedule steps:
//   0 setup; 1..5 forward of nodes 0..4; 6 the loss; 7 loss backward; 8 Relu(d) backward (d
//   freed); 9 Add backward;
//   before Sigmoid's backward it needs b: 10 recompute Mul (h0), 11 recompute Sigmoid (b); h0,
//   saved by nobody, is freed after the chain (step 11); 12 Sigmoid backward (b freed);
//   before Relu(a)'s backward it needs a, and h0 again: 13 recompute Mul (h0, a second time),
//   14 recompute Relu (a); h0 freed at 14; 15 Relu backward (a freed); 16 Mul backward;
//   17 optimizer.
// Spans (steps, inclusive): h0 forward 1-3 (its last forward reader, Sigmoid, is node 2),
// recomputed 10-11 and 13-14 (2 times); a forward 2-4 (last reader Add), recomputed 14-15;
// b forward 3-4, recomputed 11-12; d 5-8 (kept until Relu(d)'s backward).
#pragma once

#include <memory>

#include "document.h"
#include "memplan/plan.h"

namespace memplan::gui::fixtures {

TrainingGraph SelectiveGraph();
// ReplaySelective of SelectiveGraph() dropping h0, a and b, for a budget of 2000 B.
Plan SelectivePlan(const TrainingGraph& g);
// The plan as the explorer shows it: schedule, timeline, recomputed ids and storages.
std::shared_ptr<Item> SelectiveItem();

}  // namespace memplan::gui::fixtures
