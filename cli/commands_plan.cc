// memplan plan: choose checkpoints / sections so that a training step fits a memory budget.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli_util.h"
#include "commands.h"
#include "memplan/analysis_report.h"
#include "memplan/device_name.h"
#include "memplan/parse.h"
#include "memplan/plan_report.h"
#include "memplan/planner.h"
#include "memplan/profile_costs.h"
#include "memplan/profiler.h"
#include "memplan/rates_cache.h"
#ifdef MEMPLAN_HAVE_EXECUTOR
#include "memplan/machine_rates.h"
#endif

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

// How the plan's seconds were predicted: the roofline's rates and, with --costs, the profile.
struct TimeModel {
  MachineRates rates;
  std::string rates_source;  // measured now, read from the cache, or the defaults
  std::string costs;         // the --costs profile ("" without)
  std::vector<std::string> notes;

  std::string Describe() const {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%.3g FLOP/s, %.3g B/s, %.3g us per op", rates.flops_per_second,
                  rates.bytes_per_second, rates.op_overhead_seconds * 1e6);
    const std::string roofline = std::string("roofline at ") + buf + ", " + rates_source;
    return costs.empty() ? roofline : "calibrated by " + costs + "; other nodes: " + roofline;
  }
  PlanTimeModel ToReport() const {
    PlanTimeModel t{MachineRatesToJson(rates), rates_source, std::nullopt};
    if (!costs.empty()) t.costs = costs;
    return t;
  }
};

TimeModel TimeModelFor(const Args& a, const TrainingGraph& g, CostModel& cost) {
  const std::string device = a.get("device", "cpu");
  ParseDeviceName(device);  // anything but cpu, cuda and cuda:K is refused here
  TimeModel t;
  t.rates = RatesFor(device, &t.rates_source);
  cost.node_seconds = RooflineNodeSeconds(t.rates);
  if (!a.has("costs")) return t;
  t.costs = a.get("costs");
  Profile profile;
  try {
    profile = ProfileFromJson(ReadJsonInput(t.costs, "profile"));
  } catch (const MemplanError& e) {
    const std::string what = e.what();
    throw MemplanError(what.find(t.costs) != std::string::npos
                           ? "--costs: " + what
                           : "--costs '" + PrintableText(t.costs) + "': " + what);
  }
  const Calibration c = CalibrateByProfile(g, profile, t.costs, t.rates, device);
  cost.node_seconds = c.node_seconds;
  t.notes = c.notes;
  return t;
}

// Selective recompute: how many saved activations are kept and recomputed, and the largest
// recomputed storages.
void PrintRecomputed(const Plan& p, const TrainingGraph& g) {
  const std::vector<TensorId> saved = RecomputableTensors(g);
  int64_t saved_bytes = 0, recomputed_bytes = 0;
  size_t recomputed_saved = 0;
  for (TensorId t : saved) saved_bytes += g.tensors[t].bytes;
  for (TensorId t : p.recomputed) {
    if (!std::binary_search(saved.begin(), saved.end(), t)) continue;
    ++recomputed_saved;
    recomputed_bytes += g.tensors[t].bytes;
  }
  std::printf("recomputed   %zu of %zu saved activations (%s of %s); %zu kept (%s)\n",
              recomputed_saved, saved.size(), FormatBytes(recomputed_bytes).c_str(),
              FormatBytes(saved_bytes).c_str(), saved.size() - recomputed_saved,
              FormatBytes(saved_bytes - recomputed_bytes).c_str());
  if (p.recomputed.size() > recomputed_saved) {
    std::printf("             and %zu unsaved storages, recomputed only as inputs of those\n",
                p.recomputed.size() - recomputed_saved);
  }
  std::vector<TensorId> largest = p.recomputed;
  std::stable_sort(largest.begin(), largest.end(),
                   [&](TensorId a, TensorId b) { return g.tensors[a].bytes > g.tensors[b].bytes; });
  if (largest.size() > 5) largest.resize(5);
  std::string list;
  for (TensorId t : largest) {
    list += (list.empty() ? "" : ", ") + PrintableText(g.tensors[t].name) + " (" +
            FormatBytes(g.tensors[t].bytes) + ")";
  }
  if (!list.empty()) std::printf("largest      %s\n", list.c_str());
}

// Offload: the storages moved to host memory, the host peak and the copies' stall.
void PrintOffloaded(const Plan& p, const TrainingGraph& g) {
  int64_t bytes = 0;
  for (const OffloadChoice& c : p.offloaded) bytes += g.tensors[c.tensor].bytes;
  std::printf("offloaded    %zu saved activations (%s); host peak %s", p.offloaded.size(),
              FormatBytes(bytes).c_str(), FormatBytes(p.predicted_host_peak_bytes).c_str());
  if (p.host_budget_bytes > 0)
    std::printf(" of a host budget of %s", FormatBytes(p.host_budget_bytes).c_str());
  std::printf("\nlink         %s/s to the host, %s/s back; %.3g s of copies not hidden (stall)\n",
              FormatBytes(static_cast<int64_t>(p.link.device_to_host_bytes_per_second)).c_str(),
              FormatBytes(static_cast<int64_t>(p.link.host_to_device_bytes_per_second)).c_str(),
              p.predicted_stall_seconds);
}

// Data parallelism: the layout, the rank's persistent bytes per kind, its peak and the
// collectives' predicted seconds.
void PrintLayout(const Plan& p, const TrainingGraph& g) {
  const std::vector<ParameterBucket> buckets = ParameterBuckets(g, p.layout);
  const RankPersistent rp = RankPersistentBytes(g, p.layout);
  std::printf("devices      %lld ranks x batch %lld, shard %s, %zu bucket%s (--bucket-size %s)\n",
              static_cast<long long>(p.layout.devices),
              static_cast<long long>(p.batch * p.micro_batches), ShardModeName(p.layout.shard),
              buckets.size(), buckets.size() == 1 ? "" : "s",
              FormatBytes(p.layout.bucket_bytes).c_str());
  std::printf("per rank     parameters %s, gradients %s, optimizer state %s (persistent %s)\n",
              FormatBytes(rp.parameters).c_str(), FormatBytes(rp.gradients).c_str(),
              FormatBytes(rp.optimizer_state).c_str(), FormatBytes(rp.total()).c_str());
  std::printf("rank peak    %s\n", FormatBytes(p.predicted_peak_bytes).c_str());
  char link[64];
  std::snprintf(link, sizeof link, "%.3g GB/s, %.3g us per collective",
                p.layout.link_bytes_per_second / 1e9, p.layout.link_latency_seconds * 1e6);
  std::printf("comm         %.3g s predicted per step (%s)\n", p.predicted_comm_seconds, link);
}

// `auto`: why it chose, one line per strategy tried.
void PrintCandidates(const Plan& p) {
  if (p.candidates.empty()) return;
  if (p.micro_batches > 1) {
    std::printf(
        "auto tried   (on micro-batches of %lld, the other micro-batches' inputs resident)\n",
        static_cast<long long>(p.batch));
  } else {
    std::printf("auto tried\n");
  }
  for (const PlanCandidate& c : p.candidates) {
    std::printf(
        "  %-11s peak %-12s %-13s recompute %.3g s%s\n", c.strategy.c_str(),
        FormatBytes(c.predicted_peak_bytes).c_str(), c.feasible ? "fits" : "does not fit",
        c.predicted_recompute_seconds,
        c.margin_bytes > 0 ? (" (margin " + FormatBytes(c.margin_bytes) + ")").c_str() : "");
  }
}

void PrintPlan(const Plan& p, const TrainingGraph& g, const TimeModel& time) {
  std::printf("model        %s (%zu nodes), batch %lld, optimizer %s, grads %s\n",
              g.model_path.c_str(), g.nodes.size(),
              static_cast<long long>(p.batch * p.micro_batches * p.layout.devices),
              OptimizerName(g.optimizer), GradientLifetimeName(g.grads));
  std::printf("strategy     %s\n", p.strategy.c_str());
  if (p.micro_batches > 1) {
    std::printf("micro-batch  %lld x %lld (gradient accumulation over the batch of %lld)\n",
                static_cast<long long>(p.micro_batches), static_cast<long long>(p.batch),
                static_cast<long long>(p.batch * p.micro_batches));
  }
  std::printf("baseline     %s (no plan%s)\n", FormatBytes(p.baseline_peak_bytes).c_str(),
              p.layout.devices > 1 ? ", one device, the whole batch" : "");
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
    std::printf(
        "margin       %s kept free under the budget (gradient copies at segment borders; "
        "workspaces whose rules are not verified on the device)\n",
        FormatBytes(p.margin_bytes).c_str());
  }
  std::printf("overhead     %s recompute (%.3g of %.3g forward FLOPs)\n",
              Percent(p.overhead()).c_str(), p.recompute_flops, p.forward_flops);
  std::printf("recompute    %.3g s predicted (%s)\n", p.predicted_recompute_seconds,
              time.Describe().c_str());
  if (p.micro_batches > 1) {
    std::printf(
        "micro-batch  %.3g s predicted per step for running %lld micro-batches instead of one "
        "batch\n",
        p.predicted_micro_batch_seconds, static_cast<long long>(p.micro_batches));
  }
  std::printf("checkpoints  %zu   sections %d\n", p.checkpoints.size(), p.num_sections());
  if (p.layout.devices > 1) PrintLayout(p, g);
  if (!p.recomputed.empty() || p.strategy == "selective") PrintRecomputed(p, g);
  if (!p.offloaded.empty() || p.strategy == "offload") PrintOffloaded(p, g);
  std::printf("solve time   %.3f s\n", p.solve_seconds);
  for (const std::string& n : p.notes) std::printf("note         %s\n", n.c_str());
  PrintCandidates(p);
}

void PrintSweep(const SweepResult& s) {
  std::printf("\nbudget sweep (Pareto points, baseline %s):\n",
              FormatBytes(s.baseline_peak_bytes).c_str());
  std::printf("  %-12s %-11s %-12s %9s %11s %6s %8s %6s %9s\n", "budget", "strategy", "peak",
              "overhead", "recompute s", "ckpts", "sections", "micro", "solve s");
  for (const SweepPoint& p : s.points) {
    std::printf("  %-12s %-11s %-12s %9s %11.3g %6d %8d %6d %9.3f\n",
                FormatBytes(p.budget_bytes).c_str(), p.strategy.c_str(),
                FormatBytes(p.peak_bytes).c_str(), Percent(p.overhead).c_str(), p.recompute_seconds,
                p.num_checkpoints, p.num_sections, p.micro_batches, p.solve_seconds);
  }
  std::printf("smallest feasible budget: %s (%s)\n", FormatBytes(s.min_budget_bytes).c_str(),
              s.min_budget_strategy.c_str());
}

// Exit 2's message: what the strategy asked for reaches at best, and for a named strategy
// whether another fits.
std::string InfeasibleMessage(const BudgetPlan& r, const std::string& strategy) {
  const bool is_auto = strategy == "auto" || strategy.empty();
  const Plan& s = r.smallest;
  const std::string at =
      s.micro_batches > 1 ? " with " + std::to_string(s.micro_batches) + " micro-batches" : "";
  // Rounded alike, the budget and the smallest would read as one number: then bytes.
  std::string least = FormatBytes(r.smallest_budget_bytes());
  if (least == FormatBytes(r.budget_bytes)) least = std::to_string(r.smallest_budget_bytes()) + "B";
  std::string m = "memplan plan: no " + (is_auto ? std::string() : strategy + " ") +
                  "plan fits the budget of " + FormatBytes(r.budget_bytes) + "; ";
  if (is_auto) {
    m +=
        "the smallest budget any strategy fits is " + least + " (strategy " + s.strategy + at + ")";
  } else {
    m += strategy + " fits " + least + " at best" + at;
  }
  m += ": use --budget " + least + " or more";
  if (!r.alternative.schedule.steps.empty()) {
    const Plan& alt = r.alternative;
    char buf[96];
    std::snprintf(buf, sizeof buf, "%.3g s recompute", alt.predicted_overhead_seconds());
    m += "; strategy " + alt.strategy + " fits this budget (peak " +
         FormatBytes(alt.predicted_peak_bytes) +
         (alt.micro_batches > 1 ? ", " + std::to_string(alt.micro_batches) + " micro-batches"
                                : std::string()) +
         ", " + buf + "): use --strategy " + alt.strategy + " or auto";
  } else {
    m += ", a smaller --batch, or more devices";
  }
  return m;
}

}  // namespace

// The rates of `device`: from the cache (CacheDirectory()/machine_rates.json, one entry per
// MachineRatesKey; rates_cache.h), else measured once and cached; without LibTorch, or when the
// device cannot be measured here, DefaultMachineRates.
MachineRates RatesFor(const std::string& device, std::string* source) {
#ifdef MEMPLAN_HAVE_EXECUTOR
  std::string key;
  try {
    key = MachineRatesKey(device);
  } catch (const MemplanError& e) {
    *source = std::string("default rates: ") + e.what();
    return DefaultMachineRates(device);
  }
  const std::string dir = CacheDirectory();
  return CachedMachineRates(
      dir.empty() ? "" : dir + "/machine_rates.json", key,
      [&] { return MeasureMachineRates(device); }, source);
#else
  *source = "default rates: this memplan has no LibTorch to measure them";
  return DefaultMachineRates(device);
#endif
}

// A rate option written as a size per second ("10GB/s"; the "/s" may be left out), in bytes
// per second.
double BytesPerSecond(const Args& a, const char* option, const char* example) {
  std::string text = a.get(option);
  if (text.size() > 2 && text.compare(text.size() - 2, 2, "/s") == 0) text.resize(text.size() - 2);
  try {
    return static_cast<double>(ParseBytes(text));
  } catch (const MemplanError& e) {
    throw MemplanError(std::string("--") + option + ": " + e.what() +
                       " (a size per second: " + example + ")");
  }
}

CLI::App* AddPlanCommand(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "plan",
      "choose checkpoints, sections and micro-batches so that a training step fits a budget");
  AddModel(*sub);
  AddValue(*sub, "budget", "SIZE|PERCENT%",
           "the memory budget: a size (8GiB) or a percentage of the unplanned peak (60%)");
  std::string strategies;
  for (const std::string& s : StrategyNames()) strategies += (strategies.empty() ? "" : "|") + s;
  AddValue(*sub, "strategy", strategies, "the planner (default auto; manual with --checkpoints)");
  AddRepeated(*sub, "checkpoints", "NAME,...", "the tensors to keep (--strategy manual)");
  AddFlag(*sub, "sweep",
          "also print the budget sweep (Pareto points); without --budget, plan for the smallest "
          "budget");
  AddValue(*sub, "micro-batches", "K|auto",
           "split the batch into K micro-batches (default auto: only when no plan fits)");
  AddValue(*sub, "time-limit", "SECONDS", "the milp solver's time limit");
  AddValue(*sub, "device", "cpu|cuda[:K]",
           "the device to plan for (default cpu): its rates predict the recompute seconds "
           "(measured once and "
           "cached); cuda adds the CUDA libraries' workspaces, and the budget bounds the reserved "
           "memory");
  AddDeviceFileOptions(*sub);
  AddValue(*sub, "threads", "N",
           "on the CPU: plan for N intra-op threads (default LibTorch's: one per physical core, "
           "or OMP_NUM_THREADS); memplan run --threads N runs with as many");
  AddValue(*sub, "budget-of", "reserved|allocated",
           "with --device cuda: the memory the budget bounds (default reserved: the caching "
           "allocator's segments)");
  AddValue(*sub, "devices", "N",
           "data parallelism: plan for N ranks, each on batch / N (the budget is per device)");
  AddValue(*sub, "shard", "none|optimizer|gradients|parameters|auto",
           "with --devices N > 1: what the ranks shard (ZeRO 1: optimizer, 2: gradients; default "
           "none; auto: the "
           "cheapest that fits)");
  AddValue(*sub, "bucket-size", "SIZE",
           "with --devices: the gradient buckets' size (default 25MiB, as DDP)");
  AddValue(*sub, "runtime", "memplan|fsdp2",
           "with --shard parameters: whose runtime the per-rank peak is for: memplan's executor "
           "(default; in-place collectives) or PyTorch FSDP2's fully_shard (its all-gather "
           "outputs and held reduce-scatter inputs, and on cpu Gloo's staging copies); a "
           "prediction only, memplan run refuses it");
  AddValue(*sub, "link-bandwidth", "SIZE/s",
           "with --devices: the link's bandwidth for the predicted communication seconds (default "
           "5GB/s)");
  AddValue(*sub, "host-budget", "SIZE",
           "offload: the pinned host memory the plan may hold (default: the memory available "
           "now, less 10% and 1 GiB); with --strategy auto, also try offload");
  AddValue(*sub, "link-rate", "SIZE/s",
           "offload: the device-host link's rate each way (default: cuda 25GB/s, pinned PCIe "
           "Gen5; cpu: an emulated 10GB/s)");
  AddValue(*sub, "costs", "PROFILE.json",
           "calibrate the predicted seconds with a profile of this model on this device (memplan "
           "run --profile)");
  AddLoadOptions(*sub);
  AddValue(*sub, "json", "OUT", "also write the plan as JSON");
  return sub;
}

int RunPlan(const Args& a) {
  const bool sweep = a.has("sweep");
  if (!a.has("budget") && !sweep)
    throw MemplanError("--budget SIZE is required (see memplan plan --help)");

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
  options.milp_time_limit_seconds = a.get_real("time-limit", options.milp_time_limit_seconds,
                                               /*min=*/0.001, /*max=*/7 * 24 * 3600.0);

  // The device first: the graphs are loaded for it.
  request.cuda = CudaDeviceFromArgs(a);
  if (!request.cuda) request.cpu = CpuDeviceFromArgs(a, ThisMachineCpu());
  LoadOptions load_options = LoadOptionsFromArgs(a, request.cpu);
  // 0: split the batch only when no plan fits without
  if (a.has("micro-batches") && a.get("micro-batches") != "auto") {
    request.micro_batches = a.get_int("micro-batches", 1, 1, INT64_MAX);
  }
  // Data parallelism. --shard other than none and auto needs several devices: with one there
  // is nothing to shard, and a plan that silently ignores it would mislead.
  request.layout.devices = a.get_int("devices", 1, 1, 1 << 20);
  request.layout.gradient_shards = load_options.grads;  // the ranks' graphs keep theirs
  load_options.grads = SteppedGradients(load_options.grads, request.layout.devices, 1);
  const std::string shard = a.get("shard", "none");
  if (shard == "auto")
    request.shard_auto = true;
  else
    request.layout.shard = ParseShardMode(shard);
  if (request.layout.devices == 1 && shard != "none" && shard != "auto") {
    throw MemplanError("--shard " + PrintableText(shard) +
                       " needs --devices N with N > 1 (one device has nothing to shard)");
  }
  request.layout.bucket_bytes = a.get_bytes("bucket-size", request.layout.bucket_bytes);
  if (a.has("runtime")) {
    request.layout.runtime = ParseShardRuntime(a.get("runtime"));
    if (request.layout.runtime != ShardRuntime::kMemplan &&
        (request.layout.shard != ShardMode::kParameters || request.shard_auto)) {
      throw MemplanError("--runtime " + PrintableText(a.get("runtime")) +
                         " goes with --shard parameters (FSDP2 shards parameters)");
    }
    // FSDP2 reduce-scatters in every backward; its gradient accumulation is not modelled.
    if (request.layout.runtime == ShardRuntime::kFsdp2) {
      if (request.micro_batches > 1)
        throw MemplanError("--runtime fsdp2 predicts one micro-batch; drop --micro-batches");
      request.micro_batches = 1;
    }
  }
  if (a.has("link-bandwidth"))
    request.layout.link_bytes_per_second = BytesPerSecond(a, "link-bandwidth", "10GB/s");
  // FSDP2 on the CPU runs Gloo, whose collectives stage through a copy; NCCL's do not.
  request.layout.staged_collectives =
      request.layout.runtime == ShardRuntime::kFsdp2 && !request.cuda;
  // Offload: the link and the host budget.
  options.link = DefaultLinkRates(request.cuda ? "cuda" : "cpu");
  if (a.has("link-rate")) {
    const double rate = BytesPerSecond(a, "link-rate", "25GB/s");
    if (!(rate > 0)) throw MemplanError("--link-rate must be more than 0 bytes per second");
    options.link = {.device_to_host_bytes_per_second = rate,
                    .host_to_device_bytes_per_second = rate};
  }
  options.auto_offload = a.has("host-budget");
  options.host_budget_bytes =
      a.has("host-budget") ? a.get_bytes("host-budget", 0) : DefaultHostBudget();
  if (a.has("host-budget") && options.host_budget_bytes <= 0)
    throw MemplanError("--host-budget must be more than 0 bytes");
  if ((options.strategy == "offload" || options.auto_offload) && request.layout.devices > 1) {
    throw MemplanError(
        "offload plans one device; drop --devices, or --strategy offload and "
        "--host-budget");
  }
  const std::string budget_of = a.get("budget-of", "reserved");
  if (budget_of != "reserved" && budget_of != "allocated") {
    throw MemplanError("--budget-of must be reserved or allocated (got '" +
                       PrintableText(budget_of) + "')");
  }
  if (a.has("budget-of") && !request.cuda) throw MemplanError("--budget-of is for --device cuda");
  request.budget_reserved = budget_of == "reserved";
  // On a CUDA device every graph carries the libraries' workspaces.
  auto on_device = [&](TrainingGraph graph) {
    if (request.cuda) PrepareGraphForCuda(graph, *request.cuda);
    return graph;
  };
  TrainingGraph g = on_device(LoadTrainingGraph(a.positional[0], load_options));
  // Micro-batches' convolutions are smaller: the whole batch's margins cover them.
  if (request.cuda) request.cuda->conv_margin_bytes = ConvWorkspaceMargins(g, *request.cuda);
  // Planning asks for a micro-batch's graph again and again (each split, each reserved round):
  // loaded once per batch.
  std::map<int64_t, TrainingGraph> loaded;
  const GraphAtBatch graph_at_batch = [&](int64_t batch) {
    if (batch == g.batch) return g;
    auto it = loaded.find(batch);
    if (it == loaded.end()) {
      it = loaded
               .emplace(batch, on_device(LoadTrainingGraph(a.positional[0],
                                                           load_options.AtBatch(g, batch))))
               .first;
    }
    return it->second;
  };
  CostModel cost;
  const TimeModel time = TimeModelFor(a, g, cost);
  // Offload: the link measured with the device's rates, unless given.
  if (request.cuda && !a.has("link-rate") && time.rates.link.device_to_host_bytes_per_second > 0)
    options.link = time.rates.link;
  BudgetPlan result;
  {
    ProgressTicker ticker("memplan plan: still planning (--strategy " + options.strategy +
                          (sweep ? ", --sweep" : "") + ")");
    result = PlanForBudget(g, graph_at_batch, cost, request);
  }
  Plan plan = result.plan;
  plan.notes.insert(plan.notes.end(), time.notes.begin(), time.notes.end());

  // The graph the plan describes: the one loaded, unless the plan splits the batch.
  std::optional<TrainingGraph> micro_graph;
  if (plan.batch != g.batch) micro_graph = graph_at_batch(plan.batch);
  const TrainingGraph& plan_graph = micro_graph ? *micro_graph : g;
  std::optional<DeviceMemory> device_memory;
  if (request.cuda) device_memory = PredictDeviceMemory(plan.schedule, *request.cuda);
  if (a.has("json")) {
    PlanReport report = PlanReportOf(plan, plan_graph);
    if (device_memory) {
      report.device = DevicePredictionOf(*device_memory, *request.cuda);
      report.device->reserved_peak_bytes.reset();  // a plan's is predicted_reserved_peak_bytes
    }
    report.time_model = time.ToReport();
    if (sweep) report.sweep = result.sweep;
    if (result.smallest_searched) {
      report.smallest_budget_bytes = result.smallest_budget_bytes();
      report.smallest_budget_strategy = result.smallest.strategy;
      report.smallest_budget_micro_batches = result.smallest.micro_batches;
    }
    WriteJsonFile(a.get("json"), PlanReportToJson(report));
  }
  PrintPlan(plan, plan_graph, time);
  if (plan.cpu_device)
    PrintCpuDevice(*plan.cpu_device, plan.workspace_margin_bytes, plan.margin_by_op);
  if (device_memory) {
    PrintDeviceMemory(*device_memory, *request.cuda);
    std::printf("budget of    %s memory\n", plan.budget_of.c_str());
  }
  if (sweep) PrintSweep(result.sweep);
  if (a.has("json")) std::printf("wrote        %s\n", a.get("json").c_str());
  if (!plan.feasible) {
    std::fprintf(stderr, "%s\n", InfeasibleMessage(result, options.strategy).c_str());
    return kExitInfeasible;
  }
  return kExitOk;
}

}  // namespace memplan::cli
