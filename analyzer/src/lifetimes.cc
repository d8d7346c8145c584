#include "memplan/lifetimes.h"

#include <algorithm>

namespace memplan {

std::vector<BufferSpan> BufferSpans(const Schedule& s) {
  std::vector<BufferSpan> spans;
  std::vector<int32_t> open(s.buffers.size(), -1);  // buffer -> index of its open span
  for (size_t i = 0; i < s.steps.size(); ++i) {
    const Step& step = s.steps[i];
    for (BufferId b : step.allocs) {
      open[b] = static_cast<int32_t>(spans.size());
      spans.push_back({b, static_cast<int32_t>(i), -1, step.phase == Phase::kRecompute});
    }
    for (BufferId b : step.frees) {
      if (open[b] < 0) continue;  // Simulate rejects such a schedule; nothing to show
      spans[open[b]].free_step = static_cast<int32_t>(i);
      open[b] = -1;
    }
  }
  return spans;
}

std::vector<BufferId> AliveDuring(const Schedule& s, size_t step) {
  std::vector<char> alive(s.buffers.size(), 0);
  for (size_t i = 0; i <= step && i < s.steps.size(); ++i) {
    for (BufferId b : s.steps[i].allocs) alive[b] = 1;
    if (i < step) {
      for (BufferId b : s.steps[i].frees) alive[b] = 0;
    }
  }
  std::vector<BufferId> out;
  for (size_t b = 0; b < alive.size(); ++b) {
    if (alive[b]) out.push_back(static_cast<BufferId>(b));
  }
  return out;
}

}  // namespace memplan
