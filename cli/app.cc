// The memplan app: one CLI11 parser for every subcommand, and the exit-code contract.
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "cli_util.h"
#include "commands.h"
#include "memplan/parse.h"
#ifdef MEMPLAN_HAVE_EXECUTOR
#include "memplan/executor.h"
#endif
#ifdef MEMPLAN_HAVE_GUI
#include "memplan/gui.h"
#ifdef MEMPLAN_HAVE_PLANNER
#include <nlohmann/json.hpp>

#include "memplan/planner.h"
#endif
#endif

namespace memplan::cli {
namespace {

const char* kFooter =
    "\n"
    "analyze, plan and run take MODEL.onnx and --batch, --dim NAME=VALUE, --loss, --optimizer and\n"
    "--allow-external-data-outside-model-dir; `memplan COMMAND --help` lists a command's options.\n"
    "Options take their value as --flag VALUE or --flag=VALUE.\n"
    "Sizes accept B, KiB, MiB, GiB, KB, MB, GB.\n"
    "Exit status: 0 ok, 1 bad input, 2 no plan fits, 3 internal error.";

void PrintVersion() {
  std::printf("memplan %s\n", MEMPLAN_VERSION);
#ifdef MEMPLAN_HAVE_EXECUTOR
  std::printf("executor: %s\n", ExecutorBackendDescription().c_str());
#else
  std::printf("executor: not built (no LibTorch)\n");
#endif
}

// A command this build lacks: it takes any arguments and says so.
[[maybe_unused]] CLI::App* AddUnavailable(CLI::App& app, const std::string& name,
                                          const std::string& what) {
  CLI::App* sub = app.add_subcommand(name, what + " (not in this build)");
  sub->prefix_command();
  sub->set_help_flag();
  return sub;
}

}  // namespace

CpuDevice ThisMachineCpu() {
#ifdef MEMPLAN_HAVE_EXECUTOR
  return ExecutorCpuDevice();
#else
  return CpuDeviceOfThisMachine();
#endif
}

int Dispatch(int argc, char** argv) {
  CLI::App app("memplan " MEMPLAN_VERSION " - training memory analyzer and planner", "memplan");
  app.footer(kFooter);
  app.require_subcommand(0, 1);
  bool version = false;
  app.add_flag("--version", version, "print the version and the executor's backend");

  using Runner = std::function<int(const CLI::App&)>;
  std::vector<std::pair<CLI::App*, Runner>> commands;
  auto add = [&](CLI::App* sub, int (*run)(const Args&)) {
    sub->allow_extras();  // ArgsOf names what is unknown
    commands.emplace_back(sub, [run](const CLI::App& s) { return run(ArgsOf(s)); });
  };
  add(AddAnalyzeCommand(app), RunAnalyze);
#ifdef MEMPLAN_HAVE_PLANNER
  add(AddPlanCommand(app), RunPlan);
#else
  commands.emplace_back(AddUnavailable(app, "plan", "plan for a budget"), nullptr);
#endif
#ifdef MEMPLAN_HAVE_EXECUTOR
  add(AddRunCommand(app), RunRun);
  add(AddCalibrateCommand(app), RunCalibrate);
#else
  commands.emplace_back(AddUnavailable(app, "run", "train with LibTorch and measure"), nullptr);
  commands.emplace_back(AddUnavailable(app, "calibrate", "measure a CUDA device"), nullptr);
#endif
#ifdef MEMPLAN_HAVE_GUI
  // The GUI parses its own options (memplan::RunGui, with CLI11 too) and keeps argc/argv for Qt.
  CLI::App* gui =
      app.add_subcommand("gui",
                         "the dashboard: MODEL.onnx and memplan JSON files side by side "
                         "(memplan gui --help)");
  gui->prefix_command();
  gui->set_help_flag();
#ifdef MEMPLAN_HAVE_PLANNER
  // The explorer prices recompute with the rates `memplan plan` uses (measured once, cached).
  commands.emplace_back(gui, [argc, argv](const CLI::App&) {
    return RunGui(argc, argv, [] {
      std::string source;
      return MachineRatesToJson(RatesFor("cpu", &source)).dump();
    });
  });
#else
  commands.emplace_back(gui, [argc, argv](const CLI::App&) { return RunGui(argc, argv); });
#endif
#else
  commands.emplace_back(AddUnavailable(app, "gui", "the dashboard"), nullptr);
#endif
  add(AddOpsCommand(app), RunOps);

  if (argc < 2) {
    std::fputs(app.help().c_str(), stderr);
    return kExitUserError;
  }
  const std::string first = argv[1];
  if (first == "help") {
    std::fputs(app.help().c_str(), stdout);
    return kExitOk;
  }
  if (first.empty() || first[0] != '-') {
    bool known = false;
    for (const auto& [sub, run] : commands) known = known || sub->get_name() == first;
    if (!known) {
      std::fprintf(stderr, "memplan: unknown command '%s'\n\n%s", PrintableText(first).c_str(),
                   app.help().c_str());
      return kExitUserError;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return kExitOk;
  } catch (const CLI::CallForAllHelp&) {
    std::fputs(app.help("", CLI::AppFormatMode::All).c_str(), stdout);
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    const std::vector<CLI::App*> chosen = app.get_subcommands();
    std::string message = e.what();
    // CLI11 says "--batch: 1 required N missing" for an option at the end without its value.
    if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) &&
        message.find(" required ") != std::string::npos) {
      message = "option " + message.substr(0, message.find(':')) + " needs a value";
    }
    throw MemplanError(message + " (see memplan " +
                       (chosen.empty() ? "" : chosen.front()->get_name() + " ") + "--help)");
  }
  if (version) {
    PrintVersion();
    return kExitOk;
  }
  for (const auto& [sub, run] : commands) {
    if (!sub->parsed()) continue;
    if (!run) {
      std::fprintf(stderr, "memplan: '%s' is not available in this build\n",
                   sub->get_name().c_str());
      return kExitUserError;
    }
    return run(*sub);
  }
  std::fputs(app.help().c_str(), stderr);
  return kExitUserError;
}

int Main(int argc, char** argv) {
  const std::string cmd = argc >= 2 ? argv[1] : "";
  const std::string who =
      "memplan" + (cmd.empty() || cmd[0] == '-' ? "" : " " + PrintableText(cmd));
  try {
    return Dispatch(argc, argv);
  } catch (const MemplanError& e) {
    std::fprintf(stderr, "%s: error: %s\n", who.c_str(), e.what());
    return kExitUserError;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: error: out of memory\n", who.c_str());
    return kExitUserError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: internal error: %s\n", who.c_str(), e.what());
    return kExitInternalError;
  }
}

}  // namespace memplan::cli
