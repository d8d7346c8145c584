// The CUPTI backend. Until its activity-API implementation lands, every build says so.
#include "memplan/profiler.h"

namespace memplan {

bool ProfilerHasCupti() { return false; }

std::unique_ptr<ProfilerBackend> MakeCuptiProfiler(int) {
  throw MemplanError("this memplan was built without the CUPTI profiler backend");
}

}  // namespace memplan
