// memplan run: train the model for a few steps with LibTorch (optionally following a plan)
// and compare the measured peak with the predicted one.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli_util.h"
#include "commands.h"
#include "launch.h"
#include "memplan/analysis_report.h"
#include "memplan/analyzer.h"
#include "memplan/cuda_device.h"
#include "memplan/executor.h"
#include "memplan/run_report.h"
#ifdef MEMPLAN_HAVE_PLANNER
#include "memplan/plan.h"
#include "memplan/plan_report.h"
#include "memplan/planner.h"
#endif

namespace memplan::cli {
namespace {

// A learning rate above this diverges to inf / nan in a step or two.
constexpr double kMaxLearningRate = 10;

std::string Pct(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.2f%%", v);
  return buf;
}

// A CPU step whose predicted peak exceeds what the machine can hold would be killed by the
// kernel's OOM killer part-way (or swap for minutes): refused before any allocation. With
// --memory-limit the user's limit applies instead (the meter fails the allocation beyond it).
// Data-parallel ranks on one host share it: LOCAL_WORLD_SIZE (set by torchrun and --nproc) of
// them each need their peak.
void CheckFitsHostMemory(const Args& a, const TrainingGraph& g, const RunOptions& opt,
                         int64_t peak) {
  if (a.has("memory-limit") || opt.device.rfind("cpu", 0) != 0) return;
  const HostMemory host = HostMemoryLimit();
  int64_t local_ranks = 1;
  if (opt.distributed.world_size > 1) {
    const char* v = std::getenv("LOCAL_WORLD_SIZE");
    const long long n = v ? std::atoll(v) : 0;
    local_ranks = n >= 1 && n <= opt.distributed.world_size ? n : 1;
  }
  int64_t need = 0;
  if (__builtin_mul_overflow(peak, local_ranks, &need)) need = INT64_MAX;
  if (host.bytes <= 0 || need <= host.bytes) return;
  const std::string batch = std::to_string(g.batch * opt.micro_batches);
  if (local_ranks > 1) {
    throw MemplanError(
        g.model_path + ": " + std::to_string(local_ranks) +
        " ranks on this host each predict a peak of " + FormatBytes(peak) + ", " +
        FormatBytes(need) + " together, more than the " + FormatBytes(host.bytes) +
        " this machine can use (" + host.source +
        "); the ranks would be killed for lack of memory. "
        "Start fewer ranks per host, or plan a smaller per-rank peak (memplan plan --devices N "
        "--budget "
        "SIZE, --shard parameters); --memory-limit SIZE runs anyway, failing at SIZE per rank");
  }
  throw MemplanError(
      g.model_path + ": the predicted peak of a training step at batch " + batch + " is " +
      FormatBytes(peak) + ", more than the " + FormatBytes(host.bytes) + " this machine can use (" +
      host.source +
      "); the run would be killed for lack of memory. Make it fit with `memplan plan " +
      g.model_path + " --batch " + batch + " --budget " +
      std::to_string(host.bytes / 10 * 9 >> 20) + "MiB" +
      " --json PLAN.json` and run with --plan PLAN.json, or use a smaller --batch " +
      "(--memory-limit SIZE runs anyway, failing at SIZE)");
}

// A CUDA step whose predicted reserved peak exceeds the device's free memory would fail part-way
// with an out-of-memory error: refused before training (--memory-limit runs anyway).
void CheckFitsDevice(const Args& a, const RunOptions& opt, const DeviceMemory& m) {
  if (a.has("memory-limit") || !ExecutorHasCuda()) return;
  const size_t colon = opt.device.find(':');
  const int index = colon == std::string::npos ? 0 : std::atoi(opt.device.c_str() + colon + 1);
  CudaMemoryInfo info;
  try {
    info = QueryCudaMemory(index);
  } catch (const MemplanError&) {
    return;  // no device here: the run itself names that
  }
  if (m.reserved_peak_bytes <= info.free_bytes) return;
  throw MemplanError("the predicted reserved peak of this step, " +
                     FormatBytes(m.reserved_peak_bytes) + " (" + m.allocator_mode + " segments, " +
                     FormatBytes(m.workspace_bytes) + " of library workspaces), is more than the " +
                     FormatBytes(info.free_bytes) + " free on " + opt.device + " (of " +
                     FormatBytes(info.total_bytes) + "); plan for it with `memplan plan --device " +
                     opt.device + " --budget " + std::to_string(info.free_bytes >> 20) +
                     "MiB`, or use a smaller --batch (--memory-limit SIZE "
                     "runs anyway)");
}

#ifdef MEMPLAN_HAVE_PLANNER
// A run that cannot keep the plan's promise says so before it starts: a plan written as not
// fitting its budget, or options that change the step's memory from what was planned.
// A plan holds on the device it was made for: the kernels (a CPU's ISA and threads, a card)
// decide the workspaces. `here` is what this run runs on.
void WarnAboutDevice(const Args& a, const PlanReport& plan_file, const std::string& here,
                     const std::string& here_summary) {
  if (!plan_file.device_fingerprint || *plan_file.device_fingerprint == here) return;
  const std::string planned = *plan_file.device_fingerprint;
  // A CUDA run measures its card only when it starts: compare the kind of device alone.
  const bool plan_cuda = planned.rfind("cuda/", 0) == 0, run_cuda = here.rfind("cuda/", 0) == 0;
  if (plan_cuda && run_cuda) return;
  std::fprintf(stderr,
               "memplan run: warning: the plan '%s' was made for %s [%s] and runs on %s [%s]: "
               "its workspaces, prediction and budget hold for the device it was made for; "
               "re-plan here (memplan plan%s), or run where it was made\n",
               a.get("plan").c_str(), plan_file.device_summary.value_or(planned).c_str(),
               planned.c_str(), here_summary.c_str(), here.c_str(),
               a.has("threads") ? (" --threads " + a.get("threads")).c_str() : "");
}

void WarnAboutPlan(const Args& a, const PlanReport& plan_file, const Plan& p,
                   const TrainingGraph& g) {
  const std::string file = a.get("plan");
  if (plan_file.feasible && !*plan_file.feasible) {
    std::fprintf(
        stderr,
        "memplan run: warning: the plan '%s' does not fit its budget of %s (memplan plan said so: "
        "predicted %s); expect the run to exceed it\n",
        file.c_str(), FormatBytes(p.budget_bytes).c_str(),
        FormatBytes(p.predicted_peak_bytes).c_str());
  }
  const std::string optimizer = plan_file.optimizer.value_or("");
  const std::string grads = plan_file.grads.value_or("");
  const std::string loss = plan_file.loss.value_or("");
  std::string changed;
  if (a.has("optimizer") && !optimizer.empty() && optimizer != OptimizerName(g.optimizer)) {
    changed += "--optimizer " + std::string(OptimizerName(g.optimizer)) +
               " (the plan's: " + optimizer + ")";
  }
  if (a.has("grads") && !grads.empty() && grads != a.get("grads")) {
    changed += (changed.empty() ? "" : ", ") + std::string("--grads ") + a.get("grads") +
               " (the plan's: " + grads + ")";
  }
  if (a.has("loss") && !loss.empty() && loss != "model_output" &&
      loss != LossKindName(g.loss_kind)) {
    changed += (changed.empty() ? "" : ", ") + std::string("--loss ") + LossKindName(g.loss_kind) +
               " (the plan's: " + loss + ")";
  }
  if (changed.empty()) return;
  std::fprintf(stderr,
               "memplan run: warning: %s changes the step's memory from what '%s' planned: "
               "predicted %s against "
               "its budget of %s%s; re-plan with the same options\n",
               changed.c_str(), file.c_str(), FormatBytes(p.predicted_peak_bytes).c_str(),
               FormatBytes(p.budget_bytes).c_str(),
               p.budget_bytes > 0 && p.predicted_peak_bytes + p.margin_bytes > p.budget_bytes
                   ? ", which it EXCEEDS"
                   : "");
}
#endif

}  // namespace

CLI::App* AddRunCommand(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "run", "train for a few steps with LibTorch (following a plan) and measure the peak");
  AddModel(*sub);
  AddValue(
      *sub, "plan", "PLAN.json",
      "run this plan (from memplan plan --json); it sets batch, loss and optimizer unless given");
  AddValue(*sub, "device", "cpu|cuda[:K]",
           "where to run (default cpu); on cuda memplan sets "
           "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True unless "
           "it is set");
  AddValue(*sub, "device-file", "DEV.json",
           "the device's measured figures for the prediction (memplan calibrate): a GPU's with "
           "--device cuda, else this CPU's");
  AddValue(*sub, "steps", "N", "training steps (default 3)");
  AddValue(*sub, "seed", "S", "the random seed (default 0)");
  AddFlag(*sub, "random-weights", "deterministic random weights instead of the model's");
  AddRepeated(*sub, "input", "NAME=FILE.pb", "an input tensor from a TensorProto file");
  AddValue(*sub, "lr", "LR", "the learning rate");
  AddValue(*sub, "threads", "N", "intra-op threads");
  AddValue(*sub, "memory-limit", "SIZE", "fail like an out-of-memory device above this many bytes");
  AddFlag(*sub, "trace", "record the memory after every node into the JSON");
  AddValue(*sub, "link-time", "modelled|none",
           "offload plans on CPU: each copy takes the plan's link rate (modelled, the default) "
           "or completes at once (none)");
  AddValue(*sub, "profile", "OUT.json",
           "profile the last step: time and memory per node and phase (CUPTI on CUDA)");
  AddValue(*sub, "trace-events", "OUT.json",
           "profile the last step as a Chrome trace-event file (opens in ui.perfetto.dev)");
  AddLoadOptions(*sub);
  AddValue(*sub, "json", "OUT", "also write the run as JSON");
  AddValue(
      *sub, "timeout", "SECONDS",
      "data-parallel ranks: the rendezvous and every collective fail after this long (default 30)");
  AddValue(*sub, "nproc", "N",
           "start N local ranks of this run, as torchrun does (docs/distributed.md)");
  return sub;
}

int RunRun(const Args& a) {
  if (LocalRanksRequested(a))
    return RunLocalRanks(a);  // --nproc N: this command N times (launch.h)
  const std::string model = a.positional[0];
  CheckOutputPaths(a, {"json", "profile", "trace-events"});
  // One rank of a data-parallel run when a launcher set WORLD_SIZE (torchrun, srun, --nproc).
  DistributedOptions dist = DistributedFromEnvironment();
  dist.timeout_seconds = a.get_real("timeout", dist.timeout_seconds, /*min=*/0.001, /*max=*/1e6);
  const int64_t ranks = dist.world_size;
  const bool rank0 = dist.rank == 0;
  // Rank 0 alone reports and writes files; the others print nothing unless they fail (stderr).
  FILE* out = stdout;
  if (!rank0) {
    out = std::fopen("/dev/null", "w");
    if (!out) throw MemplanError("rank " + std::to_string(dist.rank) + ": cannot open /dev/null");
  }
  std::unique_ptr<FILE, int (*)(FILE*)> close_out(rank0 ? nullptr : out, &std::fclose);

  // The plan decides batch, loss and optimizer unless the user names them.
  nlohmann::json plan_json;
  int64_t micro_batches = 1;
  LoadOptions lo = LoadOptionsFromArgs(a);
  if (a.has("plan")) {
#ifndef MEMPLAN_HAVE_PLANNER
    throw MemplanError("--plan needs the planner, which this build lacks");
#else
    plan_json = ReadJsonInput(a.get("plan"), "plan");
    if (!IsPlanJson(plan_json)) {
      throw MemplanError(
          "'" + a.get("plan") +
          "' is not a memplan plan (expected \"kind\": \"plan\"); make one with `memplan plan`");
    }
    // The graph runs at the plan's micro-batch size; --batch names the whole batch.
    micro_batches = PlanMicroBatches(plan_json);
    dist.layout = PlanLayout(plan_json);
    if (dist.layout.runtime != ShardRuntime::kMemplan) {
      throw MemplanError("the plan '" + a.get("plan") + "' predicts PyTorch's " +
                         ShardRuntimeName(dist.layout.runtime) +
                         " runtime, which memplan's executor does not run; re-plan without "
                         "--runtime to run it with memplan");
    }
    if (dist.layout.devices != ranks) {
      throw MemplanError(
          "the plan '" + a.get("plan") + "' is for " + std::to_string(dist.layout.devices) +
          " device" + (dist.layout.devices == 1 ? "" : "s") + " but WORLD_SIZE is " +
          (ranks == 1 && !std::getenv("WORLD_SIZE") ? std::string("unset (one process)")
                                                    : std::to_string(ranks)) +
          ": start as many ranks as the plan has devices (memplan run --nproc " +
          std::to_string(dist.layout.devices) +
          ", or torchrun --nproc-per-node), or re-plan with --devices " + std::to_string(ranks));
    }
    lo = LoadOptionsForPlan(plan_json, lo,
                            {/*batch=*/a.has("batch"), /*optimizer=*/a.has("optimizer"),
                             /*grads=*/a.has("grads"), /*loss=*/a.has("loss")});
#endif
  } else if (ranks > 1) {
    // No plan: the plain step on every rank, gradients all-reduced in 25 MiB buckets.
    dist.layout.devices = ranks;
    if (lo.batch % ranks != 0) {
      throw MemplanError(
          std::to_string(ranks) + " ranks (WORLD_SIZE) do not divide --batch " +
          std::to_string(lo.batch) +
          ": every rank trains on an equal share of the batch; use a batch that is a multiple of " +
          std::to_string(ranks));
    }
    lo.batch /= ranks;
  }
#ifdef MEMPLAN_HAVE_PLANNER
  if (!a.has("plan")) dist.layout.gradient_shards = lo.grads;  // a plan's layout says its own
  lo.grads = SteppedGradients(lo.grads, ranks, micro_batches);
#else
  if (ranks > 1 || micro_batches > 1) lo.grads = GradientLifetime::kKept;
#endif
  TrainingGraph g = LoadTrainingGraph(model, lo);
  // Every op must be runnable before any work starts.
  CheckExecutorSupports(g);
  // On CUDA the caching allocator runs as memplan's model of it assumes (expandable segments)
  // unless the user chose its mode; set before anything touches the device. The prediction
  // includes the cuBLAS/cuBLASLt workspaces.
  std::optional<CudaDevice> cuda;
  if (a.get("device", "cpu").rfind("cuda", 0) == 0) {
    ::setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", /*overwrite=*/0);
    cuda = CudaDeviceFromArgs(a);
    PrepareGraphForCuda(g, *cuda);
  }
  // The CPU this run runs on (with --threads), and a device file's must be it: calibrated
  // workspaces hold on the machine that measured them.
  CpuDevice here = ThisMachineCpu();
  if (a.has("threads")) here.kernels.threads = a.get_int("threads", 1, 1, kMaxThreads);
  if (!cuda && PredictsForCuda(a))
    throw MemplanError("--device-file describes a CUDA device: use it with --device cuda");
  if (!cuda && a.has("device-file")) {
    const CpuDevice file = CpuDeviceFromArgs(a, here);
    if (file.fingerprint() != here.fingerprint()) {
      throw MemplanError("--device-file '" + PrintableText(a.get("device-file")) + "' describes " +
                         file.summary() + ", but this run is on " + here.summary() +
                         ": calibrate this machine (memplan calibrate MODEL.onnx --json DEV.json" +
                         (a.has("threads") ? " --threads " + a.get("threads") : "") +
                         "), or run without --device-file");
    }
  }

  RunOptions opt;
  opt.steps = a.get_int("steps", 3, /*min=*/1, /*max=*/1000000);
  opt.seed = static_cast<uint64_t>(a.get_int("seed", 0, /*min=*/0, /*max=*/INT64_MAX));
  opt.random_weights = a.has("random-weights");
  opt.device = a.get("device", "cpu");
  opt.threads = static_cast<int>(a.get_int("threads", 0, /*min=*/1, /*max=*/kMaxThreads));
  opt.learning_rate = a.get_real("lr", opt.learning_rate, /*min=*/0, /*max=*/kMaxLearningRate);
  opt.memory_limit_bytes = a.get_bytes("memory-limit", opt.memory_limit_bytes);
  opt.trace = a.has("trace");
  const std::string link_time = a.get("link-time", "modelled");
  if (link_time != "modelled" && link_time != "none")
    throw MemplanError("--link-time expects modelled or none, got '" + PrintableText(link_time) +
                       "'");
  opt.emulate_link = link_time == "modelled";
  opt.profile = a.has("profile") || a.has("trace-events");
  opt.distributed = dist;
  if (a.has("input")) {
    for (const std::string& kv : a.flags.at("input")) {
      size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == kv.size()) {
        throw MemplanError("--input expects NAME=FILE.pb, got '" + kv + "'");
      }
      opt.input_files[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  }
  if (!g.weights_present && !opt.random_weights) {
    throw MemplanError(model +
                       ": the model's weights are absent (external data file not found); run with "
                       "--random-weights "
                       "to measure memory with deterministic random weights");
  }

  // The schedule actually run, and its prediction.
  Schedule schedule;
  nlohmann::json plan_out = {{"strategy", "none"},
                             {"sections", nlohmann::json::array()},
                             {"checkpoints", nlohmann::json::array()}};
  std::string strategy = "none";
  // What the plan promised: its budget, and its predicted recompute seconds.
  int64_t plan_budget = 0;
  double plan_recompute_seconds = -1;
  // Offload plans: the pinned host peak and the stall the plan predicts.
  int64_t plan_host_peak = 0;
  double plan_stall_seconds = 0;
#ifdef MEMPLAN_HAVE_PLANNER
  if (a.has("plan")) {
    Plan p = PlanFromJson(plan_json, g);
    opt.segments = p.segments;
    opt.recomputed = p.recomputed;
    opt.offloaded = p.offloaded;
    opt.link = p.link;
    plan_host_peak = p.predicted_host_peak_bytes;
    plan_stall_seconds = p.predicted_stall_seconds;
    opt.micro_batches = p.micro_batches;
    schedule = p.schedule;
    strategy = p.strategy;
    plan_out = PlanToJson(p, g);
    plan_out.erase("timeline");
    plan_budget = p.budget_bytes;
    plan_recompute_seconds = p.predicted_recompute_seconds;
    const PlanReport plan_file = PlanReportFromJson(plan_json);
    WarnAboutPlan(a, plan_file, p, g);
    if (cuda)
      WarnAboutDevice(a, plan_file, "cuda/", cuda->device);
    else
      WarnAboutDevice(a, plan_file, here.fingerprint(), here.summary());
  }
#endif
  CheckSegments(g, opt.segments);
  // No plan (or a plan of one plain step): the analyzer's training step.
  if (ranks == 1 && opt.segments.size() <= 1 && opt.recomputed.empty() && opt.offloaded.empty() &&
      opt.micro_batches <= 1) {
    schedule = BuildTrainingSchedule(g);
  }
  if (!a.has("plan") && ranks > 1) {
#ifdef MEMPLAN_HAVE_PLANNER
    // The rank's prediction: the plain step rewritten for the layout (plan.h).
    PlanOptions none;
    none.strategy = "none";
    Plan p = PlanNone(g, CostModel{}, none);
    ApplyDataParallel(p, g, dist.layout);
    schedule = p.schedule;
    plan_out = PlanToJson(p, g);
    plan_out.erase("timeline");
#else
    throw MemplanError("data-parallel runs need the planner, which this build lacks");
#endif
  }
  // The prediction; workspace margins (rules unverified on this CPU) are kept apart.
  MemoryTimeline predicted = Simulate(schedule, {.count_margins = false});
  const int64_t margin = Simulate(schedule).peak_bytes - predicted.peak_bytes;
  // On CPU the offloaded copies are host memory too.
  CheckFitsHostMemory(a, g, opt, predicted.peak_bytes + plan_host_peak);
  std::optional<DeviceMemory> device_memory;
  if (cuda) {
    device_memory = PredictDeviceMemory(schedule, *cuda);
    CheckFitsDevice(a, opt, *device_memory);
  }

  std::fprintf(out, "model        %s (%zu nodes), batch %lld, optimizer %s, loss %s, grads %s\n",
               g.model_path.c_str(), g.nodes.size(),
               static_cast<long long>(g.batch * opt.micro_batches * ranks),
               OptimizerName(g.optimizer), LossKindName(g.loss_kind),
               GradientLifetimeName(g.grads));
  std::fprintf(out, "plan         %s (%zu segment%s", strategy.c_str(),
               std::max<size_t>(opt.segments.size(), 1), opt.segments.size() > 1 ? "s" : "");
  if (!opt.recomputed.empty()) std::fprintf(out, ", %zu tensors recomputed", opt.recomputed.size());
  if (!opt.offloaded.empty()) {
    std::fprintf(out, ", %zu tensors offloaded (%s pinned host peak)", opt.offloaded.size(),
                 FormatBytes(plan_host_peak).c_str());
  }
  if (opt.micro_batches > 1) {
    std::fprintf(out, ", %lld micro-batches of %lld", static_cast<long long>(opt.micro_batches),
                 static_cast<long long>(g.batch));
  }
  std::fprintf(out, ")\n");
#ifdef MEMPLAN_HAVE_PLANNER
  if (ranks > 1) {
    std::fprintf(
        out,
        "ranks        %lld (rank batch %lld), shard %s, buckets of %s, collective timeout %g s\n",
        static_cast<long long>(ranks), static_cast<long long>(g.batch * opt.micro_batches),
        ShardModeName(dist.layout.shard), FormatBytes(dist.layout.bucket_bytes).c_str(),
        dist.timeout_seconds);
  }
#endif
  std::fprintf(out, "predicted    %s peak%s at %s\n", FormatBytes(predicted.peak_bytes).c_str(),
               ranks > 1 ? " per rank" : "", schedule.StepLabel(g, predicted.peak_step).c_str());
  if (device_memory) {
    std::fprintf(
        out,
        "predicted    %s reserved (caching allocator %s), %s of it cuBLAS/cuBLASLt workspaces\n",
        FormatBytes(device_memory->reserved_peak_bytes).c_str(),
        device_memory->allocator_mode.c_str(), FormatBytes(device_memory->workspace_bytes).c_str());
  }
  std::fflush(out);
  if (ranks == 1)
    opt.on_step = [&](const StepStats& s) {
      std::fprintf(out, "step %lld/%lld   loss %.5g   time %.3f s   recompute %.3f s   ",
                   static_cast<long long>(s.step + 1), static_cast<long long>(opt.steps), s.loss,
                   s.seconds, s.recompute_seconds);
      if (!opt.offloaded.empty()) {
        std::fprintf(out, "stall %.3f s   host peak %s   ", s.stall_seconds,
                     FormatBytes(s.host_peak_bytes).c_str());
      }
      std::fprintf(out, "peak %s\n", FormatBytes(s.peak_bytes).c_str());
      std::fflush(out);
    };
  RunResult r = RunTraining(g, opt);
  if (ranks > 1) {
    // Every rank's figures are known now (RunTraining gathered them): the mean loss, the
    // slowest rank's time.
    for (size_t i = 0; i < r.steps.size(); ++i) {
      double slowest = 0, comm = 0;
      int64_t peak = 0;
      for (const RankStats& k : r.ranks) {
        slowest = std::max(slowest, k.step_seconds[i]);
        comm = std::max(comm, k.comm_seconds[i]);
        peak = std::max(peak, k.peak_bytes[i]);
      }
      std::fprintf(out,
                   "step %lld/%lld   loss %.5g (mean of %lld ranks)   time %.3f s   communication "
                   "%.3f s   peak %s (highest rank)\n",
                   static_cast<long long>(i + 1), static_cast<long long>(opt.steps),
                   r.steps[i].loss, static_cast<long long>(ranks), slowest, comm,
                   FormatBytes(peak).c_str());
    }
    for (const RankStats& k : r.ranks) {
      const double e = k.measured_peak_bytes > 0
                           ? 100.0 *
                                 static_cast<double>(predicted.peak_bytes - k.measured_peak_bytes) /
                                 static_cast<double>(k.measured_peak_bytes)
                           : 0.0;
      std::fprintf(out,
                   "rank %-7lld measured %s peak, predicted %s (%s), communication %.3f s in the "
                   "last step\n",
                   static_cast<long long>(k.rank), FormatBytes(k.measured_peak_bytes).c_str(),
                   FormatBytes(predicted.peak_bytes).c_str(), Pct(e).c_str(),
                   k.comm_seconds.back());
    }
  }

  double err = predicted.peak_bytes > 0 && r.measured_peak_bytes > 0
                   ? 100.0 * static_cast<double>(predicted.peak_bytes - r.measured_peak_bytes) /
                         static_cast<double>(r.measured_peak_bytes)
                   : 0.0;
  std::fprintf(out, "device       %s\n", r.device.c_str());
  std::fprintf(out, "measured     %s peak (last step)\n",
               FormatBytes(r.measured_peak_bytes).c_str());
  std::fprintf(out, "prediction   %s (%s of measured)\n", FormatBytes(predicted.peak_bytes).c_str(),
               Pct(err).c_str());
  if (margin > 0) {
    const int64_t with = predicted.peak_bytes + margin;
    std::fprintf(out,
                 "margin       %s for workspaces unverified on %s: %s with it (%s of measured); "
                 "memplan calibrate measures them\n",
                 FormatBytes(margin).c_str(), CpuIsaName(here.kernels.isa),
                 FormatBytes(with).c_str(),
                 Pct(100.0 * static_cast<double>(with - r.measured_peak_bytes) /
                     static_cast<double>(std::max<int64_t>(1, r.measured_peak_bytes)))
                     .c_str());
  }
  if (device_memory && !r.steps.empty()) {
    const int64_t reserved = r.steps.back().reserved_peak_bytes;
    std::fprintf(
        out, "reserved     %s measured (last step), %s predicted (%s of measured)\n",
        FormatBytes(reserved).c_str(), FormatBytes(device_memory->reserved_peak_bytes).c_str(),
        reserved > 0
            ? Pct(100.0 * static_cast<double>(device_memory->reserved_peak_bytes - reserved) /
                  static_cast<double>(reserved))
                  .c_str()
            : "n/a");
  }
  if (plan_budget > 0) {
    int64_t highest = r.measured_peak_bytes;
    for (const RankStats& k : r.ranks) highest = std::max(highest, k.measured_peak_bytes);
    std::fprintf(out, "budget       %s (the plan's): %s\n", FormatBytes(plan_budget).c_str(),
                 highest <= plan_budget
                     ? ("held, " + FormatBytes(plan_budget - highest) + " to spare").c_str()
                     : ("EXCEEDED by " + FormatBytes(highest - plan_budget) + " (measured " +
                        FormatBytes(highest) + ")")
                           .c_str());
  }
  if (!opt.offloaded.empty() && !r.steps.empty()) {
    std::fprintf(out,
                 "host         %s pinned peak measured (last step), %s predicted; stall %.3g s "
                 "measured, %.3g s predicted%s\n",
                 FormatBytes(r.measured_host_peak_bytes).c_str(),
                 FormatBytes(plan_host_peak).c_str(), r.steps.back().stall_seconds,
                 plan_stall_seconds,
                 opt.device.rfind("cpu", 0) == 0
                     ? (opt.emulate_link ? " (emulated link)" : " (--link-time none)")
                     : "");
  }
  if (plan_recompute_seconds >= 0 && !r.steps.empty() &&
      (!opt.segments.empty() || !opt.recomputed.empty())) {
    const double measured = r.steps.back().recompute_seconds;
    std::fprintf(
        out, "recompute    %.3g s measured (last step), %.3g s predicted by the plan (%s)\n",
        measured, plan_recompute_seconds,
        measured > 0 ? Pct(100.0 * (plan_recompute_seconds - measured) / measured).c_str() : "n/a");
  }

  if (r.profile) {
#ifdef MEMPLAN_HAVE_PLANNER
    // The time model's prediction beside each measured forward and recompute scope.
    std::string rates_source;
    CostModel cost;
    cost.node_seconds = RooflineNodeSeconds(RatesFor(opt.device, &rates_source));
    const std::vector<double> predicted_seconds = PredictNodeSeconds(g, cost);
    for (NodeProfile& n : r.profile->nodes) {
      const bool forward =
          n.phase == Phase::kForward || n.phase == Phase::kLoss || n.phase == Phase::kRecompute;
      if (forward && n.node != kNone)
        n.predicted_seconds = predicted_seconds[n.node] * static_cast<double>(n.calls);
    }
#endif
    std::fprintf(out, "%s", FormatProfileSummary(*r.profile).c_str());
    if (a.has("profile") && rank0) {
#ifdef MEMPLAN_HAVE_PLANNER
      r.profile->structure_fingerprint = StructureFingerprint(g);
#endif
      WriteJsonFile(a.get("profile"), ProfileToJson(*r.profile));
      std::fprintf(out, "wrote        %s\n", a.get("profile").c_str());
    }
    if (a.has("trace-events") && rank0) {
      std::vector<int32_t> segment_of_node(g.nodes.size(), 0);
      for (size_t k = 0; k < opt.segments.size(); ++k) {
        for (NodeId n : opt.segments[k]) segment_of_node[n] = static_cast<int32_t>(k);
      }
      WriteJsonFile(
          a.get("trace-events"),
          TraceEventsJson(*r.profile, PredictedMemoryOf(schedule, predicted, segment_of_node)));
      std::fprintf(out, "wrote        %s (open in ui.perfetto.dev)\n",
                   a.get("trace-events").c_str());
    }
  }
  if (a.has("json") && rank0) {
    RunReport report;
    report.memplan_version = MEMPLAN_VERSION;
    report.model = g.model_path;
    report.batch = g.batch * opt.micro_batches;
    report.micro_batches = opt.micro_batches;
    report.optimizer = OptimizerName(g.optimizer);
    report.grads = GradientLifetimeName(g.grads);
    report.loss_kind = LossKindName(g.loss_kind);
    report.device = r.device;
    report.steps = opt.steps;
    report.seed = opt.seed;
    report.random_weights = opt.random_weights;
    report.measured_peak_bytes = r.measured_peak_bytes;
    report.max_measured_peak_bytes = r.max_peak_bytes;
    report.predicted_peak_bytes = predicted.peak_bytes;
    report.prediction_error = err / 100.0;
    report.persistent_bytes = r.persistent_bytes;
    report.peak_bytes.emplace();
    report.reserved_peak_bytes.emplace();
    for (const StepStats& s : r.steps) {
      report.step_seconds.push_back(s.seconds);
      report.recompute_seconds.push_back(s.recompute_seconds);
      report.loss.push_back(s.loss);
      report.peak_bytes->push_back(s.peak_bytes);
      report.reserved_peak_bytes->push_back(s.reserved_peak_bytes);
    }
    report.plan = plan_out;
    if (!opt.offloaded.empty()) {
      report.measured_host_peak_bytes = r.measured_host_peak_bytes;
      report.predicted_host_peak_bytes = plan_host_peak;
      report.stall_seconds.emplace();
      for (const StepStats& s : r.steps) report.stall_seconds->push_back(s.stall_seconds);
    }
    if (device_memory) {
      report.allocator_mode = device_memory->allocator_mode;
      report.predicted_reserved_peak_bytes = device_memory->reserved_peak_bytes;
      report.workspace_bytes = device_memory->workspace_bytes;
    }
#ifdef MEMPLAN_HAVE_PLANNER
    if (ranks > 1) {
      report.batch = g.batch * opt.micro_batches * ranks;
      report.devices = ranks;
      report.shard = ShardModeName(dist.layout.shard);
      report.ranks.emplace();
      for (const RankStats& k : r.ranks) {
        report.ranks->push_back(
            {k.rank, k.measured_peak_bytes, predicted.peak_bytes, k.step_seconds, k.comm_seconds});
      }
    }
#endif
    report.predicted_timeline = TimelinePoints(g, schedule, predicted);
    if (opt.trace) {
      report.measured_trace.emplace();
      for (const TraceEvent& e : r.trace) {
        report.measured_trace->push_back({e.phase, e.node == kNone ? "" : g.nodes[e.node].name,
                                          e.op, e.bytes_after, e.peak_during});
      }
    }
    nlohmann::json run_json = RunReportToJson(report);
    if (!cuda) run_json["cpu_device"] = CpuDeviceSummaryJson(here);
    if (margin > 0) run_json["margin_bytes"] = margin;
    WriteJsonFile(a.get("json"), run_json);
    std::fprintf(out, "wrote        %s\n", a.get("json").c_str());
  }
  return kExitOk;
}

CLI::App* AddCalibrateCommand(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "calibrate",
      "measure this machine's CPU, or a CUDA device, for planning (memplan plan --device-file)");
  AddValue(*sub, "device", "cpu|cuda[:K]", "the device to measure (default cpu)");
  AddValue(*sub, "threads", "N",
           "cpu: measure with N intra-op threads (default LibTorch's; runs must use as many)");
  AddValue(*sub, "json", "OUT", "write the device file here");
  // A model (optional, after the options): its ops' workspaces at that batch and its divisors.
  AddLoadOptions(*sub);
  return sub;
}

namespace {

// The CPU's device file: what decides its kernels, and the workspaces of the model's ops
// measured one signature at a time (MeasureCpuWorkspaces).
// "8, 4, 2, 1": the batches a model was measured at.
std::string BatchList(const std::vector<TrainingGraph>& at) {
  std::string s;
  for (const TrainingGraph& g : at) s += (s.empty() ? "" : ", ") + std::to_string(g.batch);
  return s;
}

int CalibrateCpu(const Args& a, const std::vector<TrainingGraph>& model) {
  if (a.has("threads"))
    SetIntraOpThreads(static_cast<int>(a.get_int("threads", 1, 1, kMaxThreads)));
  CpuDevice d = ThisMachineCpu();
  d.measured = true;
  for (const TrainingGraph& g : model) d.workspaces.merge(MeasureCpuWorkspaces(g));
  std::printf("device       cpu: %s%s\n", d.summary().c_str(),
              d.cpu_name.empty() ? "" : ("; " + d.cpu_name).c_str());
  if (!d.max_cpu_isa.empty())
    std::printf("isa cap      ONEDNN_MAX_CPU_ISA=%s\n", d.max_cpu_isa.c_str());
  if (!model.empty()) {
    int64_t largest = 0;
    for (const auto& [signature, ws] : d.workspaces)
      largest = std::max({largest, ws.forward_bytes, ws.backward_bytes});
    std::printf("workspaces   %zu op signatures of %s at batch %s measured; the largest %s\n",
                d.workspaces.size(), model.front().model_path.c_str(), BatchList(model).c_str(),
                FormatBytes(largest).c_str());
    // Where the rules for these kernels (without their margins) differ from the measurement.
    std::map<std::string, const Node*> first;
    for (const TrainingGraph& g : model)
      for (const Node& n : g.nodes) first.emplace(WorkspaceSignature(n, g.tensors), &n);
    int64_t exact = 0;
    for (const auto& [signature, ws] : d.workspaces) {
      const Node& n = *first.at(signature);
      const int64_t fwd = n.forward_workspace_bytes - n.forward_workspace_margin_bytes;
      const int64_t bwd = n.backward_workspace_bytes - n.backward_workspace_margin_bytes;
      if (fwd == ws.forward_bytes && bwd == ws.backward_bytes) {
        ++exact;
        continue;
      }
      std::printf(
          "differs      %s (%s): forward rule %lld measured %lld, backward rule %lld "
          "measured %lld (margin %lld)\n",
          PrintableText(n.name).c_str(), signature.c_str(), static_cast<long long>(fwd),
          static_cast<long long>(ws.forward_bytes), static_cast<long long>(bwd),
          static_cast<long long>(ws.backward_bytes),
          static_cast<long long>(n.backward_workspace_margin_bytes));
    }
    std::printf("rules        %lld of %zu signatures exact on %s without calibration\n",
                static_cast<long long>(exact), d.workspaces.size(), CpuIsaName(d.kernels.isa));
  }
  if (a.has("json")) {
    WriteJsonFile(a.get("json"), CpuDeviceToJson(d));
    std::printf("wrote        %s (memplan plan MODEL.onnx --device-file %s)\n",
                a.get("json").c_str(), a.get("json").c_str());
  }
  if (!d.workspaces.empty() && !CpuWorkspaceCachePath().empty()) {
    try {
      CacheCpuWorkspaces(d);
      std::printf(
          "cached       %zu workspaces for %s in %s: analyze, plan and run on this machine "
          "use them\n",
          d.workspaces.size(), d.fingerprint().c_str(), CpuWorkspaceCachePath().c_str());
    } catch (const MemplanError& e) {  // the device file is what was asked for; the cache helps
      std::fprintf(stderr, "memplan calibrate: warning: not cached (%s); use --device-file\n",
                   e.what());
    }
  }
  return kExitOk;
}

}  // namespace

int RunCalibrate(const Args& a) {
  if (a.positional.size() > 1) {
    throw MemplanError(
        "memplan calibrate takes at most one MODEL.onnx (see memplan calibrate --help)");
  }
  CheckOutputPaths(a, {"json"});
  const std::string device = a.get("device", "cpu");
  if (device != "cpu") CudaDeviceFromEnvironment(device);  // names a bad --device first
  if (device != "cpu" && a.has("threads"))
    throw MemplanError("--threads is for the CPU: drop it with --device " + PrintableText(device));
  // A model's ops are measured at the shapes it has at --batch and at every batch a plan of it may
  // run (micro-batches and data-parallel ranks: each divisor of the batch), largest first (a bad
  // model fails first).
  std::vector<TrainingGraph> model;
  if (!a.positional.empty()) {
    LoadOptions lo = LoadOptionsFromArgs(a);
    lo.cpu_workspaces.clear();  // the rules, to compare with what is measured
    model.push_back(LoadTrainingGraph(a.positional[0], lo));
    for (int64_t b = lo.batch - 1; b >= 1; --b) {
      if (lo.batch % b == 0)
        model.push_back(LoadTrainingGraph(a.positional[0], lo.AtBatch(model.front(), b)));
    }
  }
  if (device == "cpu") return CalibrateCpu(a, model);
  // The allocator mode memplan run uses, unless the user chose one: the file records it.
  ::setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", /*overwrite=*/0);
  CudaDevice d = MeasureCudaDevice(device);
  for (const TrainingGraph& g : model) d.conv_workspaces.merge(MeasureConvWorkspaces(g, device));
  std::printf("device       %s (%s, compute capability %d.%d), LibTorch %s\n", d.device.c_str(),
              d.name.c_str(), d.compute_major, d.compute_minor, d.torch_version.c_str());
  std::printf(
      "memory       %s in all; %s outside the caching allocator (context, kernels, handles)\n",
      FormatBytes(d.total_memory_bytes).c_str(), FormatBytes(d.context_bytes).c_str());
  std::printf("workspaces   %s each for cuBLAS and cuBLASLt; allocator %s\n",
              FormatBytes(CublasWorkspaceBytes(d)).c_str(), d.allocator_mode().c_str());
  if (!model.empty()) {
    int64_t largest = 0;
    for (const auto& [signature, ws] : d.conv_workspaces) {
      largest =
          std::max({largest, ws.forward_bytes, ws.backward_data_bytes, ws.backward_filter_bytes});
    }
    std::printf(
        "convolution  %zu cuDNN signatures of %s at batch %s measured; the largest "
        "workspace %s\n",
        d.conv_workspaces.size(), model.front().model_path.c_str(), BatchList(model).c_str(),
        FormatBytes(largest).c_str());
  }
  if (a.has("json")) {
    WriteJsonFile(a.get("json"), CudaDeviceToJson(d));
    std::printf("wrote        %s (memplan plan MODEL.onnx --device cuda --device-file %s)\n",
                a.get("json").c_str(), a.get("json").c_str());
  }
  return kExitOk;
}

}  // namespace memplan::cli
