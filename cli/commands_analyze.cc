#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli_util.h"
#include "commands.h"
#include "memplan/analysis_report.h"
#include "memplan/analyzer.h"
#include "memplan/cpu_device.h"
#include "memplan/cuda_device.h"

namespace memplan::cli {

CLI::App* AddAnalyzeCommand(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "analyze", "the memory of one training step: peak, breakdown, bottlenecks");
  AddModel(*sub);
  AddLoadOptions(*sub);
  AddDeviceOptions(*sub);
  AddValue(*sub, "json", "OUT", "also write the analysis as JSON");
  return sub;
}

int RunAnalyze(const Args& a) {
  std::optional<CudaDevice> cuda = CudaDeviceFromArgs(a);
  std::optional<CpuDevice> cpu;
  if (!cuda) cpu = CpuDeviceFromArgs(a, ThisMachineCpu());
  TrainingGraph loaded = LoadTrainingGraph(a.positional[0], LoadOptionsFromArgs(a, cpu));
  if (cuda) {
    PrepareGraphForCuda(loaded, *cuda);
    cuda->conv_margin_bytes = ConvWorkspaceMargins(loaded, *cuda);
  }
  Analysis an = Analyze(std::move(loaded));
  const TrainingGraph& g = an.graph;
  std::optional<DeviceMemory> device_memory;
  if (cuda) device_memory = PredictDeviceMemory(an.schedule, *cuda);
  if (a.has("json")) {
    AnalysisReport report = AnalysisReportOf(an);
    if (cuda) {
      report.device = DevicePredictionOf(*device_memory, *cuda);
      report.allocated_peak_bytes = device_memory->allocated_peak_bytes;
    } else {
      report.cpu_device = CpuDeviceSummaryJson(*cpu);
    }
    WriteJsonFile(a.get("json"), AnalysisReportToJson(report));
  }

  int total = g.tensors_shaped_by_onnx + g.tensors_shaped_by_rules;
  std::printf("model        %s (opset %lld, %zu nodes, %zu tensors)\n", g.model_path.c_str(),
              static_cast<long long>(g.opset), g.nodes.size(), g.tensors.size());
  std::printf("batch        %lld   loss %s   optimizer %s   grads %s\n",
              static_cast<long long>(g.batch), LossKindName(g.loss_kind),
              OptimizerName(g.optimizer), GradientLifetimeName(g.grads));
  std::printf("shapes       all resolved: %d by ONNX inference, %d by memplan's rules (%.0f%%)\n",
              g.tensors_shaped_by_onnx, g.tensors_shaped_by_rules,
              total ? 100.0 * g.tensors_shaped_by_rules / total : 0.0);
  std::printf("parameters   %s in %zu tensors\n", FormatBytes(g.param_bytes()).c_str(),
              g.parameters.size());
  std::printf("flops        %.3g forward, %.3g backward per step\n", g.forward_flops(),
              g.backward_flops());
  std::printf("peak         %s at %s\n", FormatBytes(an.timeline.peak_bytes).c_str(),
              an.schedule.StepLabel(g, an.timeline.peak_step).c_str());
  if (device_memory)
    PrintDeviceMemory(*device_memory, *cuda);
  else
    PrintCpuDevice(*cpu, an.margin_bytes, an.margin_by_op);
  std::printf("breakdown at the peak:\n");
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    int64_t b = an.timeline.breakdown_at_peak[c];
    if (b == 0) continue;
    std::printf("  %-22s %12s  %5.1f%%\n", MemoryCategoryName(static_cast<MemoryCategory>(c)),
                FormatBytes(b).c_str(),
                100.0 * static_cast<double>(b) / static_cast<double>(an.timeline.peak_bytes));
  }
  std::printf("largest at the peak:\n");
  for (size_t i = 0; i < an.timeline.alive_at_peak.size() && i < 5; ++i) {
    const Buffer& b = an.schedule.buffers[an.timeline.alive_at_peak[i]];
    std::printf("  %-60.60s %12s  %s\n", b.name.c_str(), FormatBytes(b.bytes).c_str(),
                MemoryCategoryName(b.category));
  }
  std::printf("bottlenecks  %zu tensors cut the graph", an.bottlenecks.size());
  if (!an.bottlenecks.empty()) {
    std::printf("; largest:");
    std::vector<TensorId> top = an.bottlenecks;
    std::stable_sort(top.begin(), top.end(), [&](TensorId x, TensorId y) {
      return g.tensors[x].bytes > g.tensors[y].bytes;
    });
    for (size_t i = 0; i < top.size() && i < 5; ++i) {
      std::printf("%s %s (%s)", i ? "," : "", g.tensors[top[i]].name.c_str(),
                  FormatBytes(g.tensors[top[i]].bytes).c_str());
    }
  }
  std::printf("\n");
  for (const std::string& note : g.notes) std::printf("note         %s\n", note.c_str());
  if (a.has("json")) std::printf("wrote        %s\n", a.get("json").c_str());
  return kExitOk;
}

CLI::App* AddOpsCommand(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("ops", "list the ONNX ops memplan has rules for");
  sub->allow_extras();  // ignores its arguments, as it always has
  return sub;
}

int RunOps(const Args&) {
  for (const std::string& op : SupportedOpTypes()) {
    if (op.rfind("memplan.", 0) != 0) std::printf("%s\n", op.c_str());
  }
  return kExitOk;
}

}  // namespace memplan::cli
