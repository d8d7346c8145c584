// The executor carries out the planner's schedule: after every forward, loss and recompute
// node, the activations it holds are exactly those the schedule keeps alive and has not yet
// handed to the backward (autograd's saved tensors are the backward's, not the executor's).
// Views of parameters and constants, which have no buffer, are left out.
// Checked event by event on every corpus model, for the plain step and a 3-segment plan.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "memplan/analyzer.h"
#include "memplan/executor.h"
#include "memplan/plan.h"
#include "testing/corpus.h"
#include "testing/graph_builder.h"

namespace memplan {
namespace {

// Storages (root tensors) the schedule says an executor holds after each forward-side step.
std::vector<std::set<TensorId>> ScheduledHolds(const TrainingGraph& g, const Schedule& s,
                                               std::vector<const Step*>* steps) {
  std::vector<char> alive(s.buffers.size(), 0), handed(s.buffers.size(), 0);
  std::vector<std::set<TensorId>> holds;
  const TensorId loss_storage = g.tensors[g.loss].storage;
  for (const Step& step : s.steps) {
    for (BufferId b : step.allocs) alive[b] = 1;
    for (BufferId b : step.handed_to_backward) handed[b] = 1;
    for (BufferId b : step.frees) alive[b] = 0;
    if (step.node == kNone || step.phase == Phase::kBackward) continue;
    std::set<TensorId> held;
    for (size_t b = 0; b < s.buffers.size(); ++b) {
      const Buffer& buf = s.buffers[b];
      if (!alive[b] || handed[b] || buf.category != MemoryCategory::kActivation ||
          buf.tensor == kNone)
        continue;
      TensorId root = g.tensors[buf.tensor].storage;
      if (root != loss_storage) held.insert(root);
    }
    holds.push_back(std::move(held));
    steps->push_back(&step);
  }
  return holds;
}

void ExpectExecutorFollows(const TrainingGraph& g, const std::vector<std::vector<NodeId>>& segments,
                           const std::string& what) {
  RunOptions o;
  o.random_weights = true;
  o.steps = 1;
  o.trace = true;
  o.segments = segments;
  RunResult r = RunTraining(g, o);
  std::vector<const Step*> steps;
  std::vector<std::set<TensorId>> expected =
      ScheduledHolds(g, BuildSegmentedSchedule(g, segments), &steps);
  std::vector<const TraceEvent*> events;
  for (const TraceEvent& e : r.trace) {
    if (e.node != kNone && (e.phase == "forward" || e.phase == "loss" || e.phase == "recompute"))
      events.push_back(&e);
  }
  ASSERT_EQ(events.size(), steps.size()) << what;
  int mismatches = 0;
  for (size_t i = 0; i < steps.size() && mismatches < 3; ++i) {
    ASSERT_EQ(events[i]->node, steps[i]->node) << what << " event " << i;
    ASSERT_EQ(events[i]->phase, PhaseName(steps[i]->phase)) << what << " event " << i;
    std::set<TensorId> held;
    for (TensorId t : events[i]->held) {
      // The loss is the backward's root (Step holds it); views of parameters and constants
      // have no buffer of their own.
      const TensorId root = g.tensors[t].storage;
      if (root != g.tensors[g.loss].storage && !g.tensors[root].is_persistent()) held.insert(root);
    }
    if (held == expected[i]) continue;
    ++mismatches;
    std::string diff;
    for (TensorId t : held)
      if (!expected[i].count(t)) diff += " +" + g.tensors[t].name;
    for (TensorId t : expected[i])
      if (!held.count(t)) diff += " -" + g.tensors[t].name;
    const Node& n = g.nodes[steps[i]->node];
    ADD_FAILURE() << what << ": after " << events[i]->phase << " of " << n.op_type << " node '"
                  << n.name << "' the executor holds (+) / lacks (-) against the schedule:" << diff;
  }
}

class ExecutorSchedule : public ::testing::TestWithParam<std::string> {};

TEST_P(ExecutorSchedule, HoldsExactlyWhatTheScheduleKeepsAlive) {
  TrainingGraph g = LoadTrainingGraph(testing::CorpusModel(GetParam()), {/*batch=*/1});
  ExpectExecutorFollows(g, {}, GetParam() + " plain step");
  ExpectExecutorFollows(g, testing::EqualSegments(g, 3), GetParam() + " 3 segments");
}

std::vector<std::string> Models() {
  std::vector<std::string> m = testing::TestCorpus();
  for (const std::string& d : testing::DynamoCorpus()) m.push_back(d);
  return m;
}

// Named by model, so that tests/executor_tests.cmake can give the large ones to `make check`.
INSTANTIATE_TEST_SUITE_P(Corpus, ExecutorSchedule, ::testing::ValuesIn(Models()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace memplan
