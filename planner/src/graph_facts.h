// The planner reads the analyzer's per-storage facts and schedule builder under its own names.
#pragma once

#include "memplan/storage_facts.h"

namespace memplan::planner {

using memplan::BuildScheduleFromCuts;
using memplan::ComputeGraphFacts;
using memplan::GraphFacts;

}  // namespace memplan::planner
