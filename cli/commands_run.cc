#include "commands.h"
#include "memplan/training_graph.h"
namespace memplan::cli {
int RunRun(int, char**) { throw MemplanError("memplan run: not implemented yet"); }
}  // namespace memplan::cli
