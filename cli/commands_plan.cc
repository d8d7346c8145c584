// memplan plan: choose checkpoints / sections so that a training step fits a memory budget.
#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli_util.h"
#include "commands.h"
#include "memplan/planner.h"

namespace memplan::cli {
namespace {

std::vector<std::string> SplitNames(const Args& a) {
  std::vector<std::string> out;
  auto it = a.flags.find("checkpoints");
  if (it == a.flags.end()) return out;
  for (const std::string& list : it->second) {
    size_t start = 0;
    while (start <= list.size()) {
      size_t comma = list.find(',', start);
      std::string name =
          list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (!name.empty()) out.push_back(name);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  return out;
}

std::string Percent(double ratio) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100 * ratio);
  return buf;
}

void PrintPlan(const Plan& p, const TrainingGraph& g) {
  std::printf("model        %s (%zu nodes), batch %lld, optimizer %s\n", g.model_path.c_str(),
              g.nodes.size(), static_cast<long long>(p.batch * p.micro_batches), OptimizerName(g.optimizer));
  std::printf("strategy     %s\n", p.strategy.c_str());
  if (p.micro_batches > 1) {
    std::printf("micro-batch  %lld x %lld (gradient accumulation over the batch of %lld)\n",
                static_cast<long long>(p.micro_batches), static_cast<long long>(p.batch),
                static_cast<long long>(p.batch * p.micro_batches));
  }
  std::printf("baseline     %s (no plan)\n", FormatBytes(p.baseline_peak_bytes).c_str());
  if (p.budget_bytes > 0) std::printf("budget       %s\n", FormatBytes(p.budget_bytes).c_str());
  std::printf("plan peak    %s (%s of the baseline), %s, at %s\n",
              FormatBytes(p.predicted_peak_bytes).c_str(),
              Percent(p.baseline_peak_bytes
                          ? static_cast<double>(p.predicted_peak_bytes) / p.baseline_peak_bytes
                          : 0)
                  .c_str(),
              p.feasible ? "fits" : "DOES NOT FIT",
              p.schedule.StepLabel(g, p.timeline.peak_step).c_str());
  if (p.margin_bytes > 0) {
    std::printf("margin       %s kept free under the budget (gradient copies at segment borders)\n",
                FormatBytes(p.margin_bytes).c_str());
  }
  std::printf("overhead     %s recompute (%.3g of %.3g forward FLOPs)\n",
              Percent(p.overhead()).c_str(), p.recompute_flops, p.forward_flops);
  std::printf("checkpoints  %zu   sections %d\n", p.checkpoints.size(), p.num_sections());
  std::printf("solve time   %.3f s\n", p.solve_seconds);
  for (const std::string& n : p.notes) std::printf("note         %s\n", n.c_str());
}

void PrintSweep(const SweepResult& s) {
  std::printf("\nbudget sweep (Pareto points, baseline %s):\n",
              FormatBytes(s.baseline_peak_bytes).c_str());
  std::printf("  %-12s %-11s %-12s %9s %6s %8s %9s\n", "budget", "strategy", "peak", "overhead",
              "ckpts", "sections", "solve s");
  for (const SweepPoint& p : s.points) {
    std::printf("  %-12s %-11s %-12s %9s %6d %8d %9.3f\n", FormatBytes(p.budget_bytes).c_str(),
                p.strategy.c_str(), FormatBytes(p.peak_bytes).c_str(), Percent(p.overhead).c_str(),
                p.num_checkpoints, p.num_sections, p.solve_seconds);
  }
  std::printf("smallest feasible budget: %s (%s)\n", FormatBytes(s.min_budget_bytes).c_str(),
              s.min_budget_strategy.c_str());
}

}  // namespace

CLI::App* AddPlanCommand(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("plan", "choose checkpoints, sections and micro-batches so that a training step fits a budget");
  AddModel(*sub);
  AddValue(*sub, "budget", "SIZE|PERCENT%", "the memory budget: a size (8GiB) or a percentage of the unplanned peak (60%)");
  std::string strategies;
  for (const std::string& s : StrategyNames()) strategies += (strategies.empty() ? "" : "|") + s;
  AddValue(*sub, "strategy", strategies, "the planner (default auto; manual with --checkpoints)");
  AddRepeated(*sub, "checkpoints", "NAME,...", "the tensors to keep (--strategy manual)");
  AddFlag(*sub, "sweep", "also print the budget sweep (Pareto points); without --budget, plan for the smallest budget");
  AddValue(*sub, "micro-batches", "K|auto", "split the batch into K micro-batches (default auto: only when no plan fits)");
  AddValue(*sub, "time-limit", "SECONDS", "the milp solver's time limit");
  AddLoadOptions(*sub);
  AddValue(*sub, "json", "OUT", "also write the plan as JSON");
  return sub;
}

int RunPlan(const Args& a) {
  const bool sweep = a.has("sweep");
  if (!a.has("budget") && !sweep) throw MemplanError("--budget SIZE is required (see memplan plan --help)");

  BudgetPlanOptions request;
  request.sweep = sweep;
  // --budget SIZE, or PERCENT% of the plain step's peak (PlanForBudget resolves it).
  if (a.has("budget")) request.budget = ParseBudget("--budget", a.get("budget"));
  PlanOptions& options = request.plan;
  options.checkpoints = SplitNames(a);
  options.strategy = a.get("strategy", options.checkpoints.empty() ? "auto" : "manual");
  bool known = false;
  for (const std::string& s : StrategyNames()) known = known || s == options.strategy;
  if (!known)
    throw MemplanError("--strategy: unknown strategy '" + options.strategy +
                       "' (see memplan plan --help)");
  if (!options.checkpoints.empty() && options.strategy != "manual") {
    throw MemplanError("--checkpoints goes with --strategy manual (got --strategy " +
                       options.strategy + ")");
  }
  if (options.strategy == "milp" && !MilpAvailable()) {
    throw MemplanError("--strategy milp is not available: memplan was built without COIN-OR CBC");
  }
  options.milp_time_limit_seconds =
      a.get_real("time-limit", options.milp_time_limit_seconds, /*min=*/0.001, /*max=*/7 * 24 * 3600.0);

  const LoadOptions load_options = LoadOptionsFromArgs(a);
  // 0: split the batch only when no plan fits without
  if (a.has("micro-batches") && a.get("micro-batches") != "auto") {
    request.micro_batches = a.get_int("micro-batches", 1, 1, INT64_MAX);
  }
  TrainingGraph g = LoadTrainingGraph(a.positional[0], load_options);
  const GraphAtBatch graph_at_batch = [&](int64_t batch) {
    if (batch == g.batch) return g;
    LoadOptions o = load_options;
    o.batch = batch;
    return LoadTrainingGraph(a.positional[0], o);
  };
  const BudgetPlan result = PlanForBudget(g, graph_at_batch, CostModel{}, request);
  const Plan& plan = result.plan;

  // The graph the plan describes: the one loaded, unless the plan splits the batch.
  std::optional<TrainingGraph> micro_graph;
  if (plan.batch != g.batch) micro_graph = graph_at_batch(plan.batch);
  const TrainingGraph& plan_graph = micro_graph ? *micro_graph : g;
  if (a.has("json")) {
    nlohmann::json j = PlanToJson(plan, plan_graph);
    if (sweep) j["sweep"] = SweepToJson(result.sweep);
    if (!plan.feasible) {
      j["smallest_budget_bytes"] = result.smallest_budget_bytes();
      j["smallest_budget_strategy"] = result.smallest.strategy;
    }
    WriteJsonFile(a.get("json"), j);
  }
  PrintPlan(plan, plan_graph);
  if (sweep) PrintSweep(result.sweep);
  if (a.has("json")) std::printf("wrote        %s\n", a.get("json").c_str());
  if (!plan.feasible) {
    const Plan& smallest = result.smallest;
    std::fprintf(stderr,
                 "memplan plan: no %splan fits the budget of %s; the smallest peak any strategy "
                 "reaches is %s "
                 "(strategy %s%s): use --budget %s or more, a smaller --batch, or more devices\n",
                 options.strategy == "auto" ? "" : (options.strategy + " ").c_str(),
                 FormatBytes(result.budget_bytes).c_str(),
                 FormatBytes(result.smallest_budget_bytes()).c_str(), smallest.strategy.c_str(),
                 smallest.micro_batches > 1 ? (", " + std::to_string(smallest.micro_batches) + " micro-batches").c_str() : "",
                 FormatBytes(result.smallest_budget_bytes()).c_str());
    return kExitInfeasible;
  }
  return kExitOk;
}

}  // namespace memplan::cli
