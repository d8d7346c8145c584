// Why the CUPTI backend cannot start, in words a user can act on. Internal to the profiler,
// compiled only with MEMPLAN_HAVE_CUPTI; pure functions, so tests check them without a GPU.
#pragma once

#include <cupti_result.h>

#include <string>

namespace memplan::cupti {

// cuptiGetResultString's name of `result` (CUPTI_ERROR_...), or its number when CUPTI has
// none.
std::string ResultName(CUptiResult result);

// The MemplanError message for CUPTI call `call` failing with `result`: its result string and
// what to do. `other_tool`: the subscriber CUPTI named when another one is attached.
std::string FailureMessage(const std::string& call, CUptiResult result,
                           const std::string& other_tool = "");

}  // namespace memplan::cupti
