// The fast `selective` search against its exact reference (PlanSelectiveExact: Benders on CBC)
// on corpus models of a few hundred nodes, at budgets of 90/75/60/50% of the plain step's peak.
// Costs are predicted recompute milliseconds (the default roofline). The reference is proven
// optimal, or "<=" its incumbent with ">=" its lower bound at the time limit; the gap is the
// fast plan's seconds over the reference's (over its bound when not proven: an upper bound).
//   bench_selective_reference [MODEL_DIR] [--models a,b,...] [--batch N] [--seconds S]
//   [--percents 90,75,...]
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "memplan/planner.h"

namespace {

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    std::string item =
        s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace memplan;
  const char* env = std::getenv("MEMPLAN_MODEL_CACHE");
  std::string dir = env && *env ? env : MEMPLAN_MODEL_CACHE;
  std::vector<std::string> models = {"resnet18", "mobilenet_v2", "gpt"};
  std::vector<int> percents = {90, 75, 60, 50};
  int64_t batch = 4;
  double seconds = 120;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--models" && i + 1 < argc) {
      models = Split(argv[++i]);
    } else if (a == "--batch" && i + 1 < argc) {
      batch = std::atoll(argv[++i]);
    } else if (a == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (a == "--percents" && i + 1 < argc) {
      percents.clear();
      for (const std::string& p : Split(argv[++i])) percents.push_back(std::atoi(p.c_str()));
    } else if (a.rfind("--", 0) != 0) {
      dir = a;
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (!MilpAvailable()) {
    std::printf("built without COIN-OR CBC: no exact reference\n");
    return 0;
  }
  std::printf(
      "selective (fast) vs selective-exact (reference), batch %lld, reference time limit %.0f s\n",
      static_cast<long long>(batch), seconds);
  std::printf(
      "| model | nodes | candidates | budget | reference ms | bound ms | fast ms | gap %% | ref s "
      "| fast s | "
      "MILP solves | replays |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const std::string& name : models) {
    const std::string path = dir + "/" + name + ".onnx";
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      std::printf("| %s | missing: %s |\n", name.c_str(), path.c_str());
      continue;
    }
    LoadOptions lo;
    lo.batch = batch;
    const TrainingGraph g = LoadTrainingGraph(path, lo);
    const CostModel cost;
    PlanOptions o;
    const int64_t baseline = PlanNone(g, cost, o).predicted_peak_bytes;
    const size_t candidates = DroppableStorages(ApplyCostModel(g, cost)).size();
    for (int percent : percents) {
      o.budget_bytes = baseline * percent / 100;
      o.strategy = "selective";
      const Plan fast = MakePlan(g, cost, o);
      SelectiveExactOptions e;
      e.time_limit_seconds = seconds;
      const SelectiveExactResult ref = PlanSelectiveExact(g, cost, o, e);
      char ref_cell[64], bound_cell[32], fast_cell[32], gap_cell[32];
      const double ref_ms = 1e3 * ref.plan.predicted_recompute_seconds,
                   bound_ms = 1e3 * ref.lower_bound;
      if (!ref.found) {
        std::snprintf(ref_cell, sizeof ref_cell, ref.proven ? "none fits (proven)" : "none found");
      } else {
        std::snprintf(ref_cell, sizeof ref_cell, ref.proven ? "%.3f (proven)" : "<= %.3f", ref_ms);
      }
      std::snprintf(bound_cell, sizeof bound_cell, "%.3f", bound_ms);
      if (fast.feasible)
        std::snprintf(fast_cell, sizeof fast_cell, "%.3f", 1e3 * fast.predicted_recompute_seconds);
      else
        std::snprintf(
            fast_cell, sizeof fast_cell, "x (%.0f%%)",
            100.0 * static_cast<double>(fast.predicted_peak_bytes) / static_cast<double>(baseline));
      if (fast.feasible && ref.found) {
        const double base = ref.proven ? ref.plan.predicted_recompute_seconds : ref.lower_bound;
        const double gap = base > 0 ? 100.0 * (fast.predicted_recompute_seconds - base) / base : 0;
        std::snprintf(gap_cell, sizeof gap_cell, ref.proven ? "%.2f" : "<= %.2f", gap);
      } else {
        std::snprintf(gap_cell, sizeof gap_cell, "-");
      }
      std::printf("| %s | %zu | %zu | %d%% | %s | %s | %s | %s | %.1f | %.3f | %d | %d |\n",
                  name.c_str(), g.nodes.size(), candidates, percent, ref_cell, bound_cell,
                  fast_cell, gap_cell, ref.plan.solve_seconds, fast.solve_seconds, ref.iterations,
                  ref.replays);
      std::fflush(stdout);
    }
  }
  return 0;
}
