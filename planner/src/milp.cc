// `milp`: placeholder until the CBC formulation lands.
#include "planner_internal.h"

namespace memplan {
bool MilpAvailable() { return false; }
namespace planner {
Plan RunMilp(Context&, const PlanOptions&) { throw MemplanError("the milp strategy is not available in this build"); }
}  // namespace planner
}  // namespace memplan
