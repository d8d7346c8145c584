// The subcommands of memplan. Add*Command declares one on the app (its options and help);
// Run* runs it on the values it was given (cli_util.h's ArgsOf).
#pragma once

#include <CLI/CLI.hpp>

#include "cli_util.h"

namespace memplan {
struct MachineRates;
}

namespace memplan::cli {

CLI::App* AddAnalyzeCommand(CLI::App& app);
int RunAnalyze(const Args& a);
CLI::App* AddOpsCommand(CLI::App& app);
int RunOps(const Args& a);
// In commands_plan.cc when the planner is built.
CLI::App* AddPlanCommand(CLI::App& app);
int RunPlan(const Args& a);
// The roofline rates of `device` (cpu, cuda, cuda:K): cached, else measured once with LibTorch,
// else the documented defaults; `source` says which.
MachineRates RatesFor(const std::string& device, std::string* source);
// In commands_run.cc when the executor is built.
CLI::App* AddRunCommand(CLI::App& app);
int RunRun(const Args& a);
// memplan calibrate: a CUDA device's figures as a device file (cuda_device.h).
CLI::App* AddCalibrateCommand(CLI::App& app);
int RunCalibrate(const Args& a);

// This machine's CPU as the linked LibTorch runs it: the detected kernels, with LibTorch's and
// oneDNN's versions where the executor is built (app.cc).
CpuDevice ThisMachineCpu();

// Parses argv (after the program name: a subcommand and its options) and runs the subcommand.
// Throws MemplanError on bad input, including options the subcommand does not know; prints
// the help for --help. Returns the exit code.
int Dispatch(int argc, char** argv);
// The program: Dispatch with the exit-code contract (cli_util.h) and messages on stderr.
int Main(int argc, char** argv);

}  // namespace memplan::cli
