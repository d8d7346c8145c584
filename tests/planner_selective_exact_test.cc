// The exact selective reference (selective_exact.cc). Its claim rests on a relaxation, checked
// here part by part on every subset of small graphs: the rows' bytes never exceed the replay's
// at the steps both share, the objective never exceeds the replayed seconds, and canonical sets
// (every dropped unsaved storage read by the producer of another dropped one) lose nothing.
// Then the reference itself: equal to brute force over every subset at every budget, on chains,
// a residual block and random DAGs, with and without `selective`'s plan as the first incumbent;
// and by hand on ReluChain(6) (planner_selective_test.cc's figures).
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "memplan/planner.h"
#include "planner_toy_graphs.h"
#include "testing/sanitizer.h"

namespace memplan {
namespace {

CostModel ToySeconds() {  // 1..9 ms per node, as planner_selective_test.cc
  CostModel c = testing::ToyCosts();
  c.node_seconds = [](const TrainingGraph&, const Node& n) {
    return 1e-3 * static_cast<double>(1 + std::hash<std::string>{}(n.name + "s") % 9);
  };
  return c;
}

struct Subset {
  std::vector<TensorId> dropped;
  int64_t peak = 0;
  double seconds = 0;
  bool canonical = false;
};

// Every subset of DroppableStorages, replayed; each canonical one's relaxation checked.
std::vector<Subset> ReplayEverySubset(const TrainingGraph& raw, const CostModel& cost) {
  TrainingGraph g = ApplyCostModel(raw, cost);
  const std::vector<double> node_seconds = PredictNodeSeconds(g, cost);
  const std::vector<TensorId> all = DroppableStorages(g);
  EXPECT_LE(all.size(), 14u) << "too many droppable storages for brute force";
  std::vector<Subset> out;
  for (uint32_t mask = 0; mask < (1u << all.size()); ++mask) {
    Subset s;
    for (size_t k = 0; k < all.size(); ++k)
      if (mask & (1u << k)) s.dropped.push_back(all[k]);
    Plan p = ReplaySelective(g, s.dropped);
    s.peak = p.predicted_peak_bytes;
    s.seconds = ScheduleRecomputeSeconds(node_seconds, p.schedule);
    SelectiveRelaxation r = RelaxSelective(g, cost, s.dropped);
    s.canonical = r.canonical;
    out.push_back(s);
    if (!r.canonical) continue;
    EXPECT_LE(r.seconds, s.seconds + 1e-15) << "mask " << mask;
    // The replay's steps, recompute steps left out, are the plain step's.
    std::vector<int64_t> shared;
    for (size_t i = 0; i < p.schedule.steps.size(); ++i) {
      if (p.schedule.steps[i].phase != Phase::kRecompute)
        shared.push_back(p.timeline.bytes_during[i]);
    }
    if (shared.size() != r.bytes.size()) {
      ADD_FAILURE() << "mask " << mask << ": " << shared.size() << " shared steps, "
                    << r.bytes.size() << " relaxed";
      continue;
    }
    for (size_t t = 0; t < shared.size(); ++t) {
      if (r.bytes[t] > shared[t]) {
        ADD_FAILURE() << "mask " << mask << ", step " << t << ": the relaxation counts "
                      << r.bytes[t] << " B, the replay " << shared[t] << " B";
        break;
      }
    }
  }
  return out;
}

// The least seconds over `subsets` that fit `budget` (-1: none fits).
double Least(const std::vector<Subset>& subsets, int64_t budget, bool canonical_only) {
  double best = -1;
  for (const Subset& s : subsets) {
    if ((!canonical_only || s.canonical) && s.peak <= budget && (best < 0 || s.seconds < best))
      best = s.seconds;
  }
  return best;
}

// At every budget where some subset peaks, and one below them all: canonical subsets reach the
// brute-force optimum, and the reference (seeded or not) finds it and proves it.
void ExpectExactEqualsBruteForce(const TrainingGraph& g, const CostModel& cost) {
  std::vector<Subset> all = ReplayEverySubset(g, cost);
  std::set<int64_t> peaks;
  for (const Subset& s : all) peaks.insert(s.peak);
  std::vector<int64_t> budgets(peaks.begin(), peaks.end());
  budgets.push_back(*peaks.begin() - 1);
  for (int64_t budget : budgets) {
    SCOPED_TRACE("budget " + std::to_string(budget));
    const double best = Least(all, budget, false);
    EXPECT_EQ(Least(all, budget, true), best) << "the canonical sets miss the optimum";
    for (bool seed : {false, true}) {
      PlanOptions o;
      o.budget_bytes = budget;
      SelectiveExactOptions e;
      e.seed_with_search = seed;
      SelectiveExactResult r = PlanSelectiveExact(g, cost, o, e);
      EXPECT_TRUE(r.proven) << "seed " << seed;
      if (best < 0) {
        EXPECT_FALSE(r.found);
        EXPECT_FALSE(r.plan.feasible);
        continue;
      }
      ASSERT_TRUE(r.found) << "seed " << seed;
      EXPECT_TRUE(r.plan.feasible);
      EXPECT_LE(r.plan.predicted_peak_bytes, budget);
      EXPECT_NEAR(r.plan.predicted_recompute_seconds, best, 1e-12) << "seed " << seed;
      EXPECT_NEAR(r.lower_bound, best, 1e-12);
      EXPECT_EQ(r.plan.strategy, "selective-exact");
    }
  }
}

TEST(SelectiveExact, ByHandOnAChain) {
  // planner_selective_test.cc's DropsTwoApartRatherThanAChain: Relu_2 and Relu_4 cost 1 s,
  // every other op 5 s; 808 B needs two of h1..h5 dropped, h2 and h4 (apart, each recomputed
  // from a kept input) for 2 s.
  TrainingGraph g = testing::ReluChain(6);
  PlanOptions o;
  o.budget_bytes = 808;
  SelectiveExactOptions e;
  e.seed_with_search = false;
  SelectiveExactResult r =
      PlanSelectiveExact(g, testing::Seconds({{"Relu_2", 1}, {"Relu_4", 1}}, 5), o, e);
  ASSERT_TRUE(r.found);
  EXPECT_TRUE(r.proven);
  EXPECT_EQ(r.plan.predicted_peak_bytes, 808);
  EXPECT_DOUBLE_EQ(r.plan.predicted_recompute_seconds, 2);
  std::vector<std::string> names;
  for (TensorId t : r.plan.recomputed) names.push_back(g.tensors[t].name);
  EXPECT_EQ(names, (std::vector<std::string>{"h2", "h4"}));
}

TEST(SelectiveExact, AFittingPlainStepIsProvenAtOnce) {
  TrainingGraph g = testing::ReluChain(6);
  PlanOptions o;
  o.budget_bytes = 1008;  // the plain step's peak (planner_selective_test.cc)
  SelectiveExactResult r = PlanSelectiveExact(g, testing::Seconds({}, 1), o);
  EXPECT_TRUE(r.proven);
  EXPECT_TRUE(r.plan.recomputed.empty());
  EXPECT_EQ(r.plan.predicted_recompute_seconds, 0);
  EXPECT_EQ(r.iterations, 0);
}

// Under AddressSanitizer (testing/sanitizer.h) the brute forces take 9-long chains, not 12, and
// the first 4 random DAGs, not 12: every subset's replay and relaxation, and two exact searches
// per budget, took 86 s of ASan's test time on CI's two cores. The plain build runs the full sizes.
constexpr int kBruteForceChain = testing::UnlessSanitized(12, 9);

TEST(SelectiveExact, ChainEqualsBruteForce) {
  ExpectExactEqualsBruteForce(testing::ReluChain(kBruteForceChain), ToySeconds());
}

TEST(SelectiveExact, ChainRooflineEqualsBruteForce) {
  CostModel bytes = testing::ToyCosts();
  bytes.node_seconds = nullptr;
  ExpectExactEqualsBruteForce(testing::ReluChain(kBruteForceChain), bytes);
}

TEST(SelectiveExact, ResidualEqualsBruteForce) {
  ExpectExactEqualsBruteForce(testing::Residual(), ToySeconds());
}

TEST(SelectiveExact, RandomDagsEqualBruteForce) {
  int tried = 0;
  for (uint32_t seed = 1; seed <= testing::UnlessSanitized(12u, 4u); ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    TrainingGraph g = testing::RandomDag(seed, 10);
    if (DroppableStorages(g).size() > 12) continue;
    ++tried;
    ExpectExactEqualsBruteForce(g, ToySeconds());
  }
  EXPECT_GE(tried, testing::UnlessSanitized(6, 2))
      << "too few random DAGs small enough for brute force";
}

}  // namespace
}  // namespace memplan
