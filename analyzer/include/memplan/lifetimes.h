// Buffer lifetimes of a schedule, as the simulator replays them: for views that show which
// buffers are alive at a step and from when to when (the dashboard's lifetimes and "alive at
// step"), so that no front end re-derives liveness from the steps.
#pragma once

#include <cstdint>
#include <vector>

#include "memplan/analyzer.h"

namespace memplan {

// One allocation of a buffer, from the step that allocates it to the step that frees it.
struct BufferSpan {
  BufferId buffer = kNone;
  int32_t alloc_step = 0;
  int32_t free_step = -1;   // -1: still alive when the schedule ends (persistent buffers)
  bool recomputed = false;  // allocated by a recompute step
};

// Every span, in the order of allocation (a buffer freed and allocated again has two).
std::vector<BufferSpan> BufferSpans(const Schedule& s);

// The buffers alive during `step`: allocated at or before it and not freed before it (a
// buffer the step frees is alive during it, as in MemoryTimeline::bytes_during). Ascending ids.
std::vector<BufferId> AliveDuring(const Schedule& s, size_t step);

}  // namespace memplan
