#pragma once

namespace memplan::cli {

int RunAnalyze(int argc, char** argv);
int RunOps(int argc, char** argv);
int RunPlan(int argc, char** argv);  // in commands_plan.cc when the planner is built
int RunRun(int argc, char** argv);   // in commands_run.cc when the executor is built

}  // namespace memplan::cli
