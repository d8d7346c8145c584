// Planner quality and speed on real models: two tables. For each model at a realistic batch and
// budgets of 75/50/35% of the plain step's peak: every strategy's recompute overhead
// (recompute FLOPs / forward FLOPs) and replayed peak, optimal's and milp's solve times, and
// optimal's gap to milp where CBC proves its optimum. Then selective recompute against optimal
// in predicted recompute seconds (and resnet50, vit_b_16, gpt at batch 16, issue 11's table).
//   bench_planner [MODEL_DIR] [--models a,b,...] [--milp-seconds S] [--milp-max-nodes N]
//   [--milp-candidates N]
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "memplan/planner.h"

namespace {

using namespace memplan;

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

int64_t Batch(const std::string& model) {
  if (model == "vit_b_16" || model == "swin_t" || model == "gpt_deep") return 16;
  return 32;
}

// The number of candidate cuts a plan's notes report ("... positions (81)").
std::string Candidates(const Plan& p) {
  for (const std::string& n : p.notes) {
    size_t open = n.rfind('('), close = n.rfind(')');
    if (n.find("position") != std::string::npos && open != std::string::npos && close > open) {
      return n.substr(open + 1, close - open - 1);
    }
  }
  return "?";
}

std::string Cell(const Plan& p) {
  char buf[32];
  double peak = 100.0 * static_cast<double>(p.predicted_peak_bytes) /
                static_cast<double>(p.baseline_peak_bytes);
  if (p.feasible)
    std::snprintf(buf, sizeof buf, "%5.1f/%3.0f", 100 * p.overhead(), peak);
  else
    std::snprintf(buf, sizeof buf, "   x /%3.0f", peak);
  return buf;
}

bool Proven(const Plan& p) {
  for (const std::string& n : p.notes)
    if (n.find("proved optimality") != std::string::npos) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  const char* env = std::getenv("MEMPLAN_MODEL_CACHE");
  dir = env && *env ? env : MEMPLAN_MODEL_CACHE;
  std::vector<std::string> models = {"resnet18",  "resnet50", "vgg16",       "mobilenet_v2",
                                     "vit_b_16",  "gpt",      "densenet121", "efficientnet_b0",
                                     "googlenet", "swin_t",   "gpt_deep"};
  double milp_seconds = 60;
  size_t milp_max_nodes = 300;
  int milp_candidates = 100;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--models" && i + 1 < argc)
      models = Split(argv[++i]);
    else if (a == "--milp-seconds" && i + 1 < argc)
      milp_seconds = std::atof(argv[++i]);
    else if (a == "--milp-max-nodes" && i + 1 < argc)
      milp_max_nodes = static_cast<size_t>(std::atol(argv[++i]));
    else if (a == "--milp-candidates" && i + 1 < argc)
      milp_candidates = std::atoi(argv[++i]);
    else if (a.rfind("--", 0) != 0)
      dir = a;
    else {
      std::fprintf(stderr,
                   "usage: bench_planner [MODEL_DIR] [--models a,b] [--milp-seconds S] "
                   "[--milp-max-nodes N] [--milp-candidates N]\n");
      return 1;
    }
  }

  std::printf(
      "cells: recompute overhead %% / replayed peak %% of baseline (x: over budget); times in "
      "ms\n");
  std::printf("%-15s %5s %5s %6s | %-10s %-10s %-10s %-10s | %-10s %8s | %-11s %8s %5s | %7s %8s\n",
              "model", "nodes", "batch", "budget", "speed", "bottleneck", "sqrt", "sections",
              "optimal", "opt ms", "milp", "milp ms", "cands", "gap pp", "speedup");
  for (const std::string& name : models) {
    std::string path = dir + "/" + name + ".onnx";
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      std::printf("%-15s (missing: %s)\n", name.c_str(), path.c_str());
      continue;
    }
    LoadOptions lo;
    lo.batch = Batch(name);
    TrainingGraph g = LoadTrainingGraph(path, lo);
    const CostModel cost;
    PlanOptions o;
    const int64_t baseline = PlanNone(g, cost, o).predicted_peak_bytes;
    for (int percent : {75, 50, 35}) {
      o.budget_bytes = baseline * percent / 100;
      std::printf("%-15s %5zu %5lld %5d%% |", name.c_str(), g.nodes.size(),
                  static_cast<long long>(g.batch), percent);
      for (const char* s : {"speed", "bottleneck", "sqrt", "sections"}) {
        o.strategy = s;
        std::printf(" %-10s", Cell(MakePlan(g, cost, o)).c_str());
      }
      o.strategy = "optimal";
      Plan opt = MakePlan(g, cost, o);
      std::printf(" | %-10s %8.1f |", Cell(opt).c_str(), 1000 * opt.solve_seconds);
      // milp where optimal fits (the gap needs both; an infeasible budget makes CBC minimise
      // the peak instead, which can take many times its time limit).
      if (MilpAvailable() && g.nodes.size() <= milp_max_nodes && opt.feasible) {
        o.strategy = "milp";
        o.milp_time_limit_seconds = milp_seconds;
        o.milp_max_candidates = milp_candidates;
        Plan milp = MakePlan(g, cost, o);
        // optimal over exactly the cut candidates milp was given: the apples-to-apples gap.
        o.strategy = "optimal";
        o.max_cut_candidates = milp_candidates;
        Plan same = MakePlan(g, cost, o);
        o.max_cut_candidates = PlanOptions{}.max_cut_candidates;
        std::string gap = "-", speedup = "-";
        if (Proven(milp) && milp.feasible && same.feasible) {
          char buf[16];
          std::snprintf(buf, sizeof buf, "%+.2f", 100 * (same.overhead() - milp.overhead()));
          gap = buf;
          std::snprintf(buf, sizeof buf, "%.0fx",
                        milp.solve_seconds / std::max(1e-6, same.solve_seconds));
          speedup = buf;
        }
        std::printf(" %-11s %8.0f %5s | %7s %8s", (Cell(milp) + (Proven(milp) ? "" : "*")).c_str(),
                    1000 * milp.solve_seconds, Candidates(milp).c_str(), gap.c_str(),
                    speedup.c_str());
      } else {
        std::printf(" %-11s %8s %5s | %7s %8s", "-", "-", "-", "-", "-");
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  std::printf(
      "milp: the same segment model as a MILP for CBC over at most `cands` candidate cuts (* = "
      "stopped at the "
      "time limit, not proven); gap pp = overhead of optimal restricted to the same candidates "
      "minus milp's, in "
      "percentage points; speedup = milp's solve time / that optimal's\n");

  // Selective recompute (issue 11) against optimal's segments: predicted recompute seconds at
  // the default cpu rates, the replayed peak, and the time to plan; the batch as above, then
  // issue 11's batch of 16.
  std::printf(
      "\nselective vs optimal: predicted recompute s (roofline, default cpu rates) / replayed peak "
      "%% of "
      "baseline (x: over budget)\n");
  std::printf("%-15s %5s %5s %6s | %-14s %8s | %-14s %8s | %7s\n", "model", "nodes", "batch",
              "budget", "optimal", "opt ms", "selective", "sel ms", "ratio");
  auto seconds_cell = [](const Plan& p) {
    char buf[32];
    const double peak = 100.0 * static_cast<double>(p.predicted_peak_bytes) /
                        static_cast<double>(p.baseline_peak_bytes);
    if (p.feasible)
      std::snprintf(buf, sizeof buf, "%7.3f/%3.0f", p.predicted_recompute_seconds, peak);
    else
      std::snprintf(buf, sizeof buf, "      x/%3.0f", peak);
    return std::string(buf);
  };
  std::vector<std::pair<std::string, int64_t>> runs;
  for (const std::string& name : models) runs.push_back({name, Batch(name)});
  for (const char* name : {"resnet50", "vit_b_16", "gpt"}) {
    if (std::find(models.begin(), models.end(), name) != models.end() && Batch(name) != 16)
      runs.push_back({name, 16});
  }
  for (const auto& [name, batch] : runs) {
    std::string path = dir + "/" + name + ".onnx";
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) continue;
    LoadOptions lo;
    lo.batch = batch;
    TrainingGraph g = LoadTrainingGraph(path, lo);
    const CostModel cost;
    PlanOptions o;
    const int64_t baseline = PlanNone(g, cost, o).predicted_peak_bytes;
    for (int percent : {75, 50, 35}) {
      o.budget_bytes = baseline * percent / 100;
      o.strategy = "optimal";
      Plan opt = MakePlan(g, cost, o);
      o.strategy = "selective";
      Plan sel = MakePlan(g, cost, o);
      std::string ratio = "-";
      if (opt.feasible && sel.feasible && opt.predicted_recompute_seconds > 0) {
        char buf[16];
        std::snprintf(buf, sizeof buf, "%.2f",
                      sel.predicted_recompute_seconds / opt.predicted_recompute_seconds);
        ratio = buf;
      }
      std::printf("%-15s %5zu %5lld %5d%% | %-14s %8.1f | %-14s %8.1f | %7s\n", name.c_str(),
                  g.nodes.size(), static_cast<long long>(g.batch), percent,
                  seconds_cell(opt).c_str(), 1000 * opt.solve_seconds, seconds_cell(sel).c_str(),
                  1000 * sel.solve_seconds, ratio.c_str());
      std::fflush(stdout);
    }
  }
  std::printf("ratio = selective's predicted recompute seconds / optimal's, where both fit\n");
  return 0;
}
