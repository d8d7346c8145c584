// Selective recompute (plan.h): schedules on hand-built graphs with every expected peak worked
// out by hand, and consistency on the corpus; the `selective` strategy on hand-computed chains,
// against brute force over every subset on small graphs, its plan JSON, and on corpus models
// (fits as replayed, monotone peak over a budget sweep, planning time, versus `optimal`).
//
// ReluChain(6): input x [1, 25] (100 B), parameter w (100 B), h0 = Mul(x, w), h_i = Relu(h_{i-1})
// for i = 1..6, a sum loss (4 B; its seed gradient is handed on as a view; both live until the
// backward call returns). Persistent P = x + w + grad w = 300 B. Mul saves only x; each Relu saves
// its output; h0 is saved by nobody (freed after Relu_1). Nodes: 0 Mul, i Relu_i, 7 loss.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "memplan/planner.h"
#include "planner_internal.h"
#include "planner_toy_graphs.h"
#include "testing/corpus.h"
#include "testing/sanitizer.h"

namespace memplan {
namespace {

TensorId T(const TrainingGraph& g, const std::string& name) { return g.FindTensor(name); }

Plan Replay(const TrainingGraph& g, const std::vector<std::string>& names) {
  std::vector<TensorId> ids;
  for (const std::string& n : names) ids.push_back(T(g, n));
  return ReplaySelective(g, ids, {.strategy = "selective"});
}

int CountRecomputeSteps(const Schedule& s) {
  int n = 0;
  for (const Step& step : s.steps) n += step.phase == Phase::kRecompute;
  return n;
}

TEST(SelectiveSchedule, NothingDroppedIsThePlainStep) {
  TrainingGraph g = testing::ReluChain(6);
  // Relu_6's backward: P 300 + saved h1..h6 600 + the loss and the seed 8 + grad h5 100 = 1008 B.
  EXPECT_EQ(Replay(g, {}).predicted_peak_bytes, 1008);
}

TEST(SelectiveSchedule, OneDroppedTensorIsRecomputedOnceBeforeItsSaver) {
  TrainingGraph g = testing::ReluChain(6);
  // h3 is freed after Relu_4's forward. Relu_6's backward: P 300 + h1, h2, h4, h5, h6 500
  // + the loss and the seed 8 + grad h5 100 = 908 B. Before Relu_3's backward h3 is recomputed
  // from h2: P 300 + h1, h2 200 + grad h3 100 + h3 100 + 8 = 708, + grad h2 = 808 B.
  Plan p = Replay(g, {"h3"});
  EXPECT_EQ(p.predicted_peak_bytes, 908);
  EXPECT_EQ(CountRecomputeSteps(p.schedule), 1);
  EXPECT_DOUBLE_EQ(p.recompute_flops, g.nodes[3].forward_flops);
}

TEST(SelectiveSchedule, ADroppedChainIsRecomputedTogetherAndHeldUntilItsSavers) {
  TrainingGraph g = testing::ReluChain(6);
  // Relu_6's backward: P 300 + h1, h2, h5, h6 400 + the loss and the seed 8 + grad h5 100
  // = 808 B. Before Relu_4's backward h3 then h4 are recomputed; h3 waits for Relu_3's backward.
  // Relu_4's backward: P 300 + h1, h2 200 + grad h4 100 + h3, h4 200 + grad h3 100 + 8 = 908 B.
  Plan p = Replay(g, {"h3", "h4"});
  EXPECT_EQ(p.predicted_peak_bytes, 908);
  EXPECT_EQ(CountRecomputeSteps(p.schedule), 2);
}

TEST(SelectiveSchedule, AKeptInputOfARecomputeLivesUntilTheRecompute) {
  TrainingGraph g = testing::ReluChain(6);
  // Dropping h1 keeps h0 (saved by nobody) alive for the recompute of Relu_1: nothing saved.
  // Relu_6's backward: P 300 + h0, h2..h6 600 + the loss and the seed 8 + grad h5 100 = 1008 B.
  EXPECT_EQ(Replay(g, {"h1"}).predicted_peak_bytes, 1008);
  // Dropping h0 too recomputes Mul then Relu_1; h0 dies after the chain:
  // P 300 + h2..h6 500 + 8 + grad h5 100 = 908 B.
  Plan p = Replay(g, {"h0", "h1"});
  EXPECT_EQ(p.predicted_peak_bytes, 908);
  EXPECT_EQ(CountRecomputeSteps(p.schedule), 2);
}

TEST(SelectiveSchedule, RecomputableTensorsAreTheSavedActivations) {
  TrainingGraph g = testing::ReluChain(3);
  std::vector<TensorId> r = RecomputableTensors(g);
  std::vector<std::string> names;
  for (TensorId t : r) names.push_back(g.tensors[t].name);
  // h0 is saved by nobody; the loss's output is never recomputed.
  EXPECT_EQ(names, (std::vector<std::string>{"h1", "h2", "h3"}));
}

TEST(SelectiveSchedule, RefusesAViewOrAPersistentTensor) {
  TrainingGraph g = testing::ReluChain(2);
  EXPECT_THROW(Replay(g, {"x"}), MemplanError);
  EXPECT_THROW(Replay(g, {"w"}), MemplanError);
}

// ---- The `selective` strategy ----

Plan Selective(const TrainingGraph& g, const CostModel& cost, int64_t budget,
               int replays_per_point = -1) {
  PlanOptions o;
  o.strategy = "selective";
  o.budget_bytes = budget;
  o.selective_replays_per_point = replays_per_point;
  return MakePlan(g, cost, o);
}

std::vector<std::string> Names(const TrainingGraph& g, const std::vector<TensorId>& ids) {
  std::vector<std::string> out;
  for (TensorId t : ids) out.push_back(g.tensors[t].name);
  return out;
}

TEST(SelectivePlanner, AFittingPlainStepRecomputesNothing) {
  TrainingGraph g = testing::ReluChain(6);
  Plan p = Selective(g, {}, 1008);
  EXPECT_TRUE(p.feasible);
  EXPECT_TRUE(p.recomputed.empty());
  EXPECT_EQ(p.predicted_peak_bytes, 1008);
  EXPECT_EQ(p.predicted_recompute_seconds, 0);
  EXPECT_EQ(p.strategy, "selective");
}

TEST(SelectivePlanner, DropsTheCheapestSavedActivation) {
  TrainingGraph g = testing::ReluChain(6);
  // Relu_3 (node 3) is the cheapest op; every other op takes 5 s. One 100 B activation less
  // at Relu_6's backward is enough: dropping h3 gives 908 B (OneDroppedTensor... above) for 1 s.
  Plan p = Selective(g, testing::Seconds({{"Relu_3", 1}}, 5), 908);
  ASSERT_TRUE(p.feasible);
  EXPECT_EQ(Names(g, p.recomputed), (std::vector<std::string>{"h3"}));
  EXPECT_EQ(p.predicted_peak_bytes, 908);
  EXPECT_DOUBLE_EQ(p.predicted_recompute_seconds, 1);
  EXPECT_DOUBLE_EQ(p.recompute_flops, g.nodes[3].forward_flops);
}

TEST(SelectivePlanner, DropsTwoApartRatherThanAChain) {
  TrainingGraph g = testing::ReluChain(6);
  // Relu_2 and Relu_4 cost 1 s, every other op 5 s. 808 B needs two activations less at
  // Relu_6's backward: P 300 + h1, h3, h5, h6 400 + the loss and the seed 8 + grad h5 100
  // = 808 B. Recomputing h4 before Relu_4's backward: P 300 + h1, h3 200 + h4 100 + grad h4,
  // grad h3 200 + 8 = 808 B; h2 before Relu_2's likewise (h1 + h2 + grads + 8: 708 B). 2 s in all.
  Plan p = Selective(g, testing::Seconds({{"Relu_2", 1}, {"Relu_4", 1}}, 5), 808);
  ASSERT_TRUE(p.feasible);
  EXPECT_EQ(Names(g, p.recomputed), (std::vector<std::string>{"h2", "h4"}));
  EXPECT_EQ(p.predicted_peak_bytes, 808);
  EXPECT_DOUBLE_EQ(p.predicted_recompute_seconds, 2);
}

TEST(SelectivePlanner, DropsAnUnsavedInputWithItsConsumer) {
  TrainingGraph g = testing::ReluChain(6);
  // Mul and Relu_1 take 0.5 s, the other Relus 5 s. Dropping h1 alone keeps h0 (saved by
  // nobody) alive for its recompute: still 1008 B (AKeptInputOfARecompute... above). Dropping
  // h0 with it: 908 B for Mul + Relu_1 = 1 s, cheaper than any other Relu's 5 s.
  Plan p = Selective(g, testing::Seconds({{"Mul_0", 0.5}, {"Relu_1", 0.5}}, 5), 908);
  ASSERT_TRUE(p.feasible);
  EXPECT_EQ(Names(g, p.recomputed), (std::vector<std::string>{"h0", "h1"}));
  EXPECT_EQ(p.predicted_peak_bytes, 908);
  EXPECT_DOUBLE_EQ(p.predicted_recompute_seconds, 1);
}

TEST(SelectivePlanner, WithoutAFitReturnsTheSmallestPeakItReaches) {
  TrainingGraph g = testing::ReluChain(6);
  Plan p = Selective(g, {}, 1);
  EXPECT_FALSE(p.feasible);
  EXPECT_LT(p.predicted_peak_bytes, 1008);
  // The persistent 300 B, the seed and one activation with its gradient at least.
  EXPECT_GE(p.predicted_peak_bytes, 300 + 4 + 100 + 100);
  EXPECT_EQ(ReplaySelective(g, p.recomputed, {.budget_bytes = 1}).predicted_peak_bytes,
            p.predicted_peak_bytes);
}

TEST(SelectivePlanner, KeepsNoSegmentBorderMargin) {
  // Residual's Adds hand one gradient to two inputs: segmented plans keep 100 B free
  // (PlannerMargin); a selective plan runs one autograd graph and needs none.
  TrainingGraph g = testing::Residual();
  ASSERT_GT(SegmentBorderMargin(g), 0);
  const int64_t baseline = PlanNone(g, {}, {}).predicted_peak_bytes;
  Plan p = Selective(g, {}, baseline - 100);
  EXPECT_EQ(p.margin_bytes, 0);
  EXPECT_TRUE(p.segments.empty());
  EXPECT_EQ(p.feasible, p.predicted_peak_bytes <= baseline - 100);
}

// `auto` runs selective beside the segment strategies and keeps the plan that fits with the
// least predicted recompute time: never slower than any strategy named alone.
TEST(SelectivePlanner, AutoTakesTheLeastPredictedTimeAmongStrategies) {
  TrainingGraph g = testing::ReluChain(12);
  PlanOptions o;
  o.budget_bytes = PlanNone(g, {}, o).predicted_peak_bytes * 3 / 4;
  Plan a = MakePlan(g, {}, o);
  ASSERT_TRUE(a.feasible);
  for (const char* s : {"optimal", "sections", "sqrt", "bottleneck", "speed", "selective"}) {
    PlanOptions named = o;
    named.strategy = s;
    Plan p = MakePlan(g, {}, named);
    if (p.feasible) EXPECT_LE(a.predicted_recompute_seconds, p.predicted_recompute_seconds) << s;
  }
  const std::vector<std::string>& names = StrategyNames();
  EXPECT_NE(std::find(names.begin(), names.end(), "selective"), names.end());
}

// ---- Brute force: every subset of the droppable storages, replayed ----

struct Subset {
  std::vector<TensorId> dropped;
  int64_t peak;
  double seconds;
};

// The exact optimum's reference: every subset of DroppableStorages (a superset of
// RecomputableTensors: the planner may also drop unsaved storages that recomputes read, so the
// optimum over the recomputable ones alone could be beaten).
std::vector<Subset> BruteForce(const TrainingGraph& g, const std::vector<double>& node_seconds) {
  const std::vector<TensorId> all = DroppableStorages(g);
  std::vector<Subset> out;
  for (uint32_t mask = 0; mask < (1u << all.size()); ++mask) {
    std::vector<TensorId> d;
    for (size_t k = 0; k < all.size(); ++k)
      if (mask & (1u << k)) d.push_back(all[k]);
    Plan p = ReplaySelective(g, d);
    out.push_back({d, p.predicted_peak_bytes, ScheduleRecomputeSeconds(node_seconds, p.schedule)});
  }
  return out;
}

// Heterogeneous toy seconds: 1..9 ms per node.
CostModel ToySeconds() {
  CostModel c = testing::ToyCosts();
  c.node_seconds = [](const TrainingGraph&, const Node& n) {
    return 1e-3 * static_cast<double>(1 + std::hash<std::string>{}(n.name + "s") % 9);
  };
  return c;
}

struct Gap {
  int budgets = 0;
  double worst = 1;      // the largest selective / optimum seconds
  int floor_misses = 0;  // budgets within 1% of the smallest peak that selective does not fit
};

// For every budget at which some subset peaks (and one below them all): selective fits when
// any subset does, within 2% of the least seconds; its peak never rises as the budget falls.
// One miss is legitimate, and counted apart: at the smallest peak brute force reaches, the
// subsets that reach it may differ from the search's last point in many storages at once
// (random DAG 3: 2500 B needs five changes to the 2504 B point the search ends at), where the
// search's escapes try one change, or keeping one storage and dropping others greedily.
// `replays_per_point` 0: the lean search of large graphs, whose gap is reported, not held.
Gap ExpectSelectiveNearBruteForce(const TrainingGraph& raw, const CostModel& cost,
                                  int replays_per_point = -1) {
  const bool lean = replays_per_point >= 0;
  TrainingGraph g = ApplyCostModel(raw, cost);
  const std::vector<double> seconds = PredictNodeSeconds(g, cost);
  Gap gap;
  if (DroppableStorages(g).size() > 14) {
    ADD_FAILURE() << "too many droppable storages for brute force: " << DroppableStorages(g).size();
    return gap;
  }
  std::vector<Subset> all = BruteForce(g, seconds);
  std::set<int64_t> peaks;
  int64_t smallest = INT64_MAX;
  for (const Subset& s : all) {
    peaks.insert(s.peak);
    smallest = std::min(smallest, s.peak);
  }
  std::vector<int64_t> budgets(peaks.rbegin(), peaks.rend());  // descending
  budgets.push_back(smallest - 1);
  int64_t previous_peak = INT64_MAX;
  CostModel seconds_only;
  seconds_only.node_seconds = cost.node_seconds;
  for (int64_t budget : budgets) {
    double best = -1;
    for (const Subset& s : all) {
      if (s.peak <= budget && (best < 0 || s.seconds < best)) best = s.seconds;
    }
    Plan p = Selective(g, seconds_only, budget, replays_per_point);
    EXPECT_LE(p.predicted_peak_bytes, previous_peak)
        << "budget " << budget << ": the peak rose as the budget fell";
    previous_peak = p.predicted_peak_bytes;
    EXPECT_EQ(ReplaySelective(g, p.recomputed).predicted_peak_bytes, p.predicted_peak_bytes);
    if (best < 0) {
      EXPECT_FALSE(p.feasible) << "budget " << budget;
      continue;
    }
    ++gap.budgets;
    if (!p.feasible) {
      if (lean || (budget - smallest <= smallest / 100 &&
                   p.predicted_peak_bytes - smallest <= smallest / 100)) {
        ++gap.floor_misses;
        std::printf("  budget %lld: the search ends at %lld B, brute force reaches %lld B\n",
                    static_cast<long long>(budget), static_cast<long long>(p.predicted_peak_bytes),
                    static_cast<long long>(smallest));
      } else {
        ADD_FAILURE() << "budget " << budget << ": brute force fits it at " << best << " s";
      }
      continue;
    }
    EXPECT_LE(p.predicted_peak_bytes, budget);
    if (!lean) {
      EXPECT_LE(p.predicted_recompute_seconds, 1.02 * best + 1e-12)
          << "budget " << budget << ": " << ::testing::PrintToString(Names(g, p.recomputed));
    }
    if (best > 0) gap.worst = std::max(gap.worst, p.predicted_recompute_seconds / best);
  }
  return gap;
}

// Under AddressSanitizer (testing/sanitizer.h) the chains are 9 long, not 12: the 2^12 subsets'
// replays took 58 s of ASan's test time on CI's two cores. The plain build runs 12.
constexpr int kBruteForceChain = testing::UnlessSanitized(12, 9);

TEST(SelectiveBruteForce, Chain) {
  Gap gap = ExpectSelectiveNearBruteForce(testing::ReluChain(kBruteForceChain), ToySeconds());
  std::printf("chain(%d): %d budgets, worst %.3f x the optimum\n", kBruteForceChain, gap.budgets,
              gap.worst);
  EXPECT_EQ(gap.floor_misses, 0);
}

TEST(SelectiveBruteForce, ChainRoofline) {
  // The default cost model: the roofline at the cpu's default rates.
  CostModel bytes = testing::ToyCosts();
  bytes.node_seconds = nullptr;
  Gap gap = ExpectSelectiveNearBruteForce(testing::ReluChain(kBruteForceChain), bytes);
  std::printf("chain(%d), roofline: %d budgets, worst %.3f x the optimum\n", kBruteForceChain,
              gap.budgets, gap.worst);
  EXPECT_EQ(gap.floor_misses, 0);
}

TEST(SelectiveBruteForce, Residual) {
  Gap gap = ExpectSelectiveNearBruteForce(testing::Residual(), ToySeconds());
  std::printf("residual: %d budgets, worst %.3f x the optimum\n", gap.budgets, gap.worst);
  EXPECT_EQ(gap.floor_misses, 0);
}

TEST(SelectiveBruteForce, RandomDags) {
  int tried = 0, floor_misses = 0;
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    TrainingGraph g = testing::RandomDag(seed, 10);
    if (DroppableStorages(g).size() > 14) continue;
    ++tried;
    Gap gap = ExpectSelectiveNearBruteForce(g, ToySeconds());
    std::printf("random dag %u: %zu storages, %d budgets, worst %.3f x the optimum\n", seed,
                DroppableStorages(g).size(), gap.budgets, gap.worst);
    floor_misses += gap.floor_misses;
  }
  EXPECT_GE(tried, 6) << "too few random DAGs small enough for brute force";
  EXPECT_LE(floor_misses, 1) << "see ExpectSelectiveNearBruteForce";
}

// The search as it runs on graphs of thousands of nodes (greedy and pruning only): how far
// from the optimum it is here, for the record.
TEST(SelectiveBruteForce, LeanSearchGap) {
  std::vector<std::pair<std::string, TrainingGraph>> graphs = {
      {"chain(12)", testing::ReluChain(12)}, {"residual", testing::Residual()}};
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    TrainingGraph g = testing::RandomDag(seed, 10);
    if (DroppableStorages(g).size() <= 14)
      graphs.push_back({"random dag " + std::to_string(seed), g});
  }
  double worst = 1, sum = 0;
  int budgets = 0, misses = 0;
  for (const auto& [name, g] : graphs) {
    Gap gap = ExpectSelectiveNearBruteForce(g, ToySeconds(), /*replays_per_point=*/0);
    worst = std::max(worst, gap.worst);
    sum += gap.worst;
    budgets += gap.budgets;
    misses += gap.floor_misses;
  }
  std::printf(
      "lean search: %zu graphs, %d budgets that fit, worst %.3f x the optimum (mean of the graphs' "
      "worst "
      "%.3f), %d budgets not fit\n",
      graphs.size(), budgets, worst, sum / static_cast<double>(graphs.size()), misses);
}

// ---- One trajectory for every budget ----

// The search's trajectory does not depend on the budget: a plan that takes its points from a
// memo another plan of the graph filled (PlanForBudget shares one per request), whatever the
// order of the budgets, is the plan its own search from the plain step makes. Budgets that fit,
// that stop early on the memo's points, that go on beyond them, and 1 B (the search gets stuck).
// The trajectory's length where the plan stopped, from its note ("... (N points of the search").
int SearchPoints(const Plan& p) {
  for (const std::string& note : p.notes) {
    const size_t at = note.find(" points of the search");
    if (at == std::string::npos) continue;
    const size_t open = note.rfind('(', at);
    return std::stoi(note.substr(open + 1, at - open - 1));
  }
  return -1;
}

TEST(SelectiveMemo, PlansFromASharedTrajectoryAreTheFreshSearchesPlans) {
  std::vector<std::pair<std::string, TrainingGraph>> graphs = {
      {"chain(24)", testing::ReluChain(24)}, {"residual", testing::Residual()}};
  for (uint32_t seed = 1; seed <= 3; ++seed)
    graphs.push_back({"random dag " + std::to_string(seed), testing::RandomDag(seed, 16)});
  for (const auto& [name, g] : graphs) {
    const int64_t base = Selective(g, ToySeconds(), int64_t{1} << 40).timeline.peak_bytes;
    const int64_t least = Selective(g, ToySeconds(), 1).timeline.peak_bytes;
    ASSERT_LT(least, base) << name;
    planner::SelectiveMemo memo;
    // Percent of the way from the least peak the search reaches up to the plain step's.
    for (int percent : {80, 50, 65, 30, -1, 90, 40, 100, 10}) {
      SCOPED_TRACE(name + " at " + std::to_string(percent) + "%");
      PlanOptions o;
      o.strategy = "selective";
      o.budget_bytes = percent < 0 ? 1 : least + (base - least) * percent / 100;
      const Plan fresh = MakePlan(g, ToySeconds(), o);
      o.selective_memo = &memo;
      const Plan shared = MakePlan(g, ToySeconds(), o);
      EXPECT_EQ(shared.recomputed, fresh.recomputed);
      EXPECT_EQ(shared.timeline.peak_bytes, fresh.timeline.peak_bytes);
      EXPECT_EQ(shared.feasible, fresh.feasible);
      EXPECT_EQ(SearchPoints(shared), SearchPoints(fresh));  // it stopped at the same point
      EXPECT_GT(SearchPoints(fresh), 0);
    }
    ASSERT_EQ(memo.trajectories.size(), 1u) << name;
    const planner::SelectiveTrajectory& t = memo.trajectories.begin()->second;
    EXPECT_TRUE(t.stuck) << name;  // 1 B fits no plan
    EXPECT_GE(t.dropped.size(), 3u) << name;
  }
}

// ---- Plan JSON ----

Plan SelectiveChainPlan(const TrainingGraph& g) {
  // As DropsTwoApartRatherThanAChain: h2 and h4 dropped, 808 B.
  Plan p = Selective(g, testing::Seconds({{"Relu_2", 1}, {"Relu_4", 1}}, 5), 808);
  EXPECT_EQ(Names(g, p.recomputed), (std::vector<std::string>{"h2", "h4"}));
  return p;
}

TEST(SelectiveJson, RoundTripReplaysTheRecomputedTensors) {
  TrainingGraph g = testing::ReluChain(6);
  Plan p = SelectiveChainPlan(g);
  nlohmann::json j = nlohmann::json::parse(PlanToJson(p, g).dump());
  EXPECT_EQ(j["strategy"], "selective");
  EXPECT_EQ(j["recomputed"], (nlohmann::json{"h2", "h4"}));
  EXPECT_EQ(j["sections"].size(), 1u);
  EXPECT_TRUE(j["checkpoints"].empty());
  Plan q = PlanFromJson(j, g);
  EXPECT_EQ(q.recomputed, p.recomputed);
  EXPECT_TRUE(q.segments.empty());
  // Rebuilt by ReplaySelective, not read from the file: the same schedule and peak.
  EXPECT_EQ(q.predicted_peak_bytes, 808);
  EXPECT_EQ(q.schedule.steps.size(), p.schedule.steps.size());
  EXPECT_DOUBLE_EQ(q.recompute_flops, p.recompute_flops);
  EXPECT_DOUBLE_EQ(q.predicted_recompute_seconds, p.predicted_recompute_seconds);
  EXPECT_EQ(q.feasible, p.feasible);
  // Edited peaks in the file change nothing: the replay decides.
  j["predicted_peak_bytes"] = 1;
  EXPECT_EQ(PlanFromJson(j, g).predicted_peak_bytes, 808);
}

TEST(SelectiveJson, SegmentedPlansWriteAnEmptyListAndOldPlansLackIt) {
  TrainingGraph g = testing::ReluChain(6);
  PlanOptions o;
  o.strategy = "optimal";
  o.budget_bytes = 904;
  Plan p = MakePlan(g, {}, o);
  nlohmann::json j = PlanToJson(p, g);
  ASSERT_TRUE(j.contains("recomputed"));
  EXPECT_TRUE(j["recomputed"].is_array());
  EXPECT_TRUE(j["recomputed"].empty());
  j.erase("recomputed");  // a plan written before selective recompute
  Plan q = PlanFromJson(j, g);
  EXPECT_TRUE(q.recomputed.empty());
  EXPECT_EQ(q.segments, p.segments);
  EXPECT_EQ(q.predicted_peak_bytes, p.predicted_peak_bytes);
}

std::string JsonError(const nlohmann::json& j, const TrainingGraph& g) {
  try {
    PlanFromJson(j, g);
  } catch (const MemplanError& e) {
    return e.what();
  }
  return "";
}

TEST(SelectiveJson, RefusesNamesThatCannotBeRecomputed) {
  TrainingGraph g = testing::ReluChain(6);
  nlohmann::json j = PlanToJson(SelectiveChainPlan(g), g);
  j["recomputed"] = {"h2", "no_such_tensor"};
  std::string e = JsonError(j, g);
  EXPECT_NE(e.find("no_such_tensor"), std::string::npos) << e;
  EXPECT_NE(e.find("does not have"), std::string::npos) << e;
  // A parameter, a data input and the loss's output are not droppable storages.
  for (const std::string& name : {std::string("w"), std::string("x"), g.tensors[g.loss].name}) {
    j["recomputed"] = {name};
    e = JsonError(j, g);
    EXPECT_NE(e.find("'" + name + "'"), std::string::npos) << e;
    EXPECT_NE(e.find("not an activation"), std::string::npos) << e;
  }
  j["recomputed"] = "h2";
  EXPECT_NE(JsonError(j, g).find("array of tensor names"), std::string::npos);
  j["recomputed"] = {7};
  EXPECT_NE(JsonError(j, g).find("array of tensor names"), std::string::npos);
}

TEST(SelectiveJson, RefusesRecomputedTensorsWithSections) {
  TrainingGraph g = testing::ReluChain(6);
  PlanOptions o;
  o.strategy = "optimal";
  o.budget_bytes = 904;
  Plan p = MakePlan(g, {}, o);
  ASSERT_GT(p.segments.size(), 1u);
  nlohmann::json j = PlanToJson(p, g);
  j["recomputed"] = {"h2"};
  const std::string e = JsonError(j, g);
  EXPECT_NE(e.find("sections"), std::string::npos) << e;
  EXPECT_NE(e.find("does not combine"), std::string::npos) << e;
}

class SelectiveCorpus : public ::testing::TestWithParam<std::string> {};

// Every subset of the recomputable tensors gives a consistent schedule (Simulate checks every
// buffer is allocated once and freed once, while alive); none dropped is the plain step. With
// kept gradients the plain step peaks where the forward ends, so dropping everything lowers it
// (set to None, the peak may sit late in the backward, where recomputes only add).
TEST_P(SelectiveCorpus, AnyDroppedSetReplays) {
  LoadOptions o;
  o.batch = 2;
  o.grads = GradientLifetime::kKept;
  o.cpu_kernels = testing::VerifiedKernels();
  TrainingGraph g = LoadTrainingGraph(testing::CorpusModel(GetParam()), o);
  const int64_t plain = Simulate(BuildTrainingSchedule(g)).peak_bytes;
  EXPECT_EQ(ReplaySelective(g, {}).predicted_peak_bytes, plain);
  std::vector<TensorId> all = RecomputableTensors(g);
  ASSERT_FALSE(all.empty());
  Plan every = ReplaySelective(g, all);
  EXPECT_LT(every.predicted_peak_bytes, plain);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 5; ++trial) {
    std::vector<TensorId> some;
    for (TensorId t : all)
      if (rng() % 2) some.push_back(t);
    Plan p = ReplaySelective(g, some);
    EXPECT_GT(p.recompute_flops, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, SelectiveCorpus, ::testing::ValuesIn(testing::TestCorpus()),
                         [](const auto& info) { return info.param; });

// ---- `selective` on corpus models ----

// A realistic batch, as planner_corpus_test's: activations dominate the step.
int64_t RealisticBatch(const std::string& model) {
  if (model == "vit_b_16" || model == "swin_t" || model == "gpt_deep") return 16;
  return 32;
}

TrainingGraph LoadCorpus(const std::string& model, int64_t batch) {
  LoadOptions o;
  o.batch = batch;
  o.cpu_kernels = testing::VerifiedKernels();
  return LoadTrainingGraph(testing::CorpusModel(model), o);
}

// CPU seconds of planning (wall time varies with whatever else runs on the machine).
Plan TimedSelective(const TrainingGraph& g, int64_t budget, double* cpu_seconds) {
  const std::clock_t start = std::clock();
  Plan p = Selective(g, {}, budget);
  *cpu_seconds = static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
  return p;
}

class SelectiveCorpusPlans : public ::testing::TestWithParam<std::string> {};

// At 75% and 50% of the baseline: the plan is its own replay, fits when it says so, and its
// predicted seconds are the cost model's over its recompute steps. How long planning takes is
// bench_planner's table ("sel ms"), not a test: a loaded machine would fail it.
TEST_P(SelectiveCorpusPlans, FitsItsBudgetAsReplayed) {
  TrainingGraph g = LoadCorpus(GetParam(), RealisticBatch(GetParam()));
  const int64_t baseline = Simulate(BuildTrainingSchedule(g)).peak_bytes;
  const std::vector<double> seconds = PredictNodeSeconds(g, {});
  for (double fraction : {0.75, 0.5}) {
    const int64_t budget = static_cast<int64_t>(fraction * static_cast<double>(baseline));
    double cpu = 0;
    Plan p = TimedSelective(g, budget, &cpu);
    std::printf(
        "%s at %.0f%%: peak %.1f%% of the baseline, %s, %.3g s recompute predicted, %zu "
        "recomputed, "
        "planned in %.2f s (%.2f s cpu)\n",
        GetParam().c_str(), 100 * fraction,
        100.0 * static_cast<double>(p.predicted_peak_bytes) / baseline,
        p.feasible ? "fits" : "does not fit", p.predicted_recompute_seconds, p.recomputed.size(),
        p.solve_seconds, cpu);
    Plan replay = ReplaySelective(
        g, p.recomputed,
        {.strategy = "selective", .budget_bytes = budget, .baseline_peak_bytes = baseline});
    EXPECT_EQ(p.predicted_peak_bytes, replay.predicted_peak_bytes);
    EXPECT_EQ(p.feasible, p.predicted_peak_bytes <= budget);
    EXPECT_EQ(p.margin_bytes, 0);
    EXPECT_TRUE(p.segments.empty());
    EXPECT_LE(p.predicted_peak_bytes, baseline);
    EXPECT_DOUBLE_EQ(p.predicted_recompute_seconds,
                     ScheduleRecomputeSeconds(seconds, replay.schedule));
    EXPECT_DOUBLE_EQ(p.recompute_flops, replay.recompute_flops);
  }
  // Half the baseline fits every model here but gpt, whose loss alone (logits, their
  // log-probabilities and gradient) is most of the step at batch 32.
  if (GetParam() != "gpt") {
    Plan half = Selective(g, {}, baseline / 2);
    EXPECT_TRUE(half.feasible) << "peak " << half.predicted_peak_bytes << " of " << baseline;
  }
}

// A smaller budget never gets a larger replayed peak: budgets from the baseline down to 30%.
TEST_P(SelectiveCorpusPlans, PeakIsMonotoneInTheBudget) {
  TrainingGraph g = LoadCorpus(GetParam(), RealisticBatch(GetParam()));
  const int64_t baseline = Simulate(BuildTrainingSchedule(g)).peak_bytes;
  int64_t previous = INT64_MAX;
  for (int percent = 100; percent >= 30; percent -= 10) {
    const int64_t budget = baseline * percent / 100;
    Plan p = Selective(g, {}, budget);
    EXPECT_LE(p.predicted_peak_bytes, previous) << percent << "%: the peak rose as the budget fell";
    if (p.feasible) EXPECT_LE(p.predicted_peak_bytes, budget);
    // (Recompute seconds are not monotone: a search at a smaller budget may find a cheaper set;
    // resnet50 b32 with gradients set to None does, 1.097 s at 50% against 1.112 s at 60%.)
    previous = p.predicted_peak_bytes;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, SelectiveCorpusPlans,
                         ::testing::Values("resnet50", "vit_b_16", "gpt", "mobilenet_v2",
                                           "densenet121", "efficientnet_b0", "swin_t", "gpt_deep"),
                         [](const auto& info) { return info.param; });

// Selective against optimal (segments) at half the baseline, batch 16: predicted recompute
// seconds at the default cpu rates (issue 11's table; bench_planner prints the same).
TEST(SelectiveCorpusReport, VersusOptimalAtHalfTheBaseline) {
  for (const std::string model : {"resnet50", "vit_b_16", "gpt"}) {
    TrainingGraph g = LoadCorpus(model, 16);
    const int64_t baseline = Simulate(BuildTrainingSchedule(g)).peak_bytes;
    PlanOptions o;
    o.budget_bytes = baseline / 2;
    o.strategy = "optimal";
    Plan optimal = MakePlan(g, {}, o);
    o.strategy = "selective";
    Plan selective = MakePlan(g, {}, o);
    std::printf(
        "%-9s batch 16 at 50%%: selective %s %.3f s (peak %.1f%%, %.2f s to plan), optimal %s %.3f "
        "s "
        "(peak %.1f%%)\n",
        model.c_str(), selective.feasible ? "fits," : "does not fit,",
        selective.predicted_recompute_seconds,
        100.0 * static_cast<double>(selective.predicted_peak_bytes) / baseline,
        selective.solve_seconds, optimal.feasible ? "fits," : "does not fit,",
        optimal.predicted_recompute_seconds,
        100.0 * static_cast<double>(optimal.predicted_peak_bytes) / baseline);
    if (selective.feasible && optimal.feasible) {
      EXPECT_LE(selective.predicted_recompute_seconds, optimal.predicted_recompute_seconds)
          << model;
    }
  }
}

}  // namespace
}  // namespace memplan
