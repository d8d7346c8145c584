// The Qt6 dashboard's entry point (memplan gui). No Qt type appears here, so that the
// command line compiles without Qt's headers.
#pragma once

#include <functional>
#include <string>

namespace memplan {

// Runs `memplan gui [--batch N] [--optimizer O] [--screenshot OUT.png|OUT.svg [--page P]
// [--size WxH]] [FILE.json|MODEL.onnx]...`; argv[0] is the program, argv[1] "gui".
// Returns the process exit status (0 ok, 1 bad arguments or a file that failed to open in
// headless mode).
// `machine_rates` gives the time model's rates (MachineRatesToJson, as a JSON text) the plan
// explorer prices recompute with: the command line's own (measured and cached), so that a
// budget gets the same plan here as from `memplan plan`. Empty or absent: the planner's
// documented defaults.
int RunGui(int argc, char** argv, const std::function<std::string()>& machine_rates = {});

}  // namespace memplan
