// memplan: wires the stages together; each subcommand lives in commands_*.cc.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "cli_util.h"
#include "commands.h"
#include "memplan/training_graph.h"
#ifdef MEMPLAN_HAVE_EXECUTOR
#include "memplan/executor.h"
#endif
#ifdef MEMPLAN_HAVE_GUI
#include "memplan/gui.h"
#endif

namespace {

const char* kUsage =
    "memplan " MEMPLAN_VERSION " - training memory analyzer and planner\n"
    "\n"
    "usage:\n"
    "  memplan analyze MODEL.onnx [--batch N] [--dim NAME=VALUE]... [--loss cross_entropy|mse|sum]\n"
    "                  [--optimizer sgd|momentum|adam] [--json OUT]\n"
    "  memplan plan    MODEL.onnx --budget SIZE|PERCENT% [--batch N] [--strategy auto|none|manual|speed|\n"
    "                  bottleneck|sqrt|sections|optimal|milp] [--checkpoints NAME,...] [--sweep]\n"
    "                  [--micro-batches K|auto] [--time-limit SECONDS] [--json OUT]\n"
    "  memplan run     MODEL.onnx [--batch N] [--plan PLAN.json] [--device cpu|cuda[:K]] [--steps N]\n"
    "                  [--seed S] [--random-weights] [--input NAME=FILE.pb]... [--lr LR] [--threads N]\n"
    "                  [--memory-limit SIZE] [--trace] [--json OUT]\n"
    "  memplan gui     [MODEL.onnx|analysis.json|plan.json|run.json]... [--screenshot OUT.png [--page P]]\n"
    "  memplan ops     list the ONNX ops memplan has rules for\n"
    "\n"
    "analyze, plan and run also take --dim NAME=VALUE, --loss, --optimizer and\n"
    "--allow-external-data-outside-model-dir (read external data from outside the model's folder).\n"
    "\n"
    "Sizes accept B, KiB, MiB, GiB, KB, MB, GB. Exit status: 0 ok, 1 bad input, 2 no plan fits.\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace memplan::cli;
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? kExitUserError : kExitOk;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::printf("memplan %s\n", MEMPLAN_VERSION);
#ifdef MEMPLAN_HAVE_EXECUTOR
    std::printf("executor: %s\n", memplan::ExecutorBackendDescription().c_str());
#else
    std::printf("executor: not built (no LibTorch)\n");
#endif
    return kExitOk;
  }
  std::string cmd = argv[1];
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::fputs(kUsage, stdout);
      return kExitOk;
    }
  }
  try {
    if (cmd == "analyze") return RunAnalyze(argc, argv);
    if (cmd == "ops") return RunOps(argc, argv);
#ifdef MEMPLAN_HAVE_PLANNER
    if (cmd == "plan") return RunPlan(argc, argv);
#endif
#ifdef MEMPLAN_HAVE_EXECUTOR
    if (cmd == "run") return RunRun(argc, argv);
#endif
#ifdef MEMPLAN_HAVE_GUI
    if (cmd == "gui") return memplan::RunGui(argc, argv);
#endif
    if (cmd == "plan" || cmd == "run" || cmd == "gui") {
      std::fprintf(stderr, "memplan: '%s' is not available in this build\n", cmd.c_str());
      return kExitUserError;
    }
    std::fprintf(stderr, "memplan: unknown command '%s'\n\n%s", cmd.c_str(), kUsage);
    return kExitUserError;
  } catch (const memplan::MemplanError& e) {
    std::fprintf(stderr, "memplan %s: error: %s\n", cmd.c_str(), e.what());
    return kExitUserError;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "memplan %s: error: out of memory\n", cmd.c_str());
    return kExitUserError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "memplan %s: internal error: %s\n", cmd.c_str(), e.what());
    return 3;
  }
}
