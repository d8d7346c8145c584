// The Qt6 dashboard's entry point (memplan gui). No Qt type appears here, so that the
// command line compiles without Qt's headers.
#pragma once

namespace memplan {

// Runs `memplan gui [--batch N] [--optimizer O] [--screenshot OUT.png|OUT.svg [--page P]
// [--size WxH]] [FILE.json|MODEL.onnx]...`; argv[0] is the program, argv[1] "gui".
// Returns the process exit status (0 ok, 1 bad arguments or a file that failed to open in
// headless mode).
int RunGui(int argc, char** argv);

}  // namespace memplan
