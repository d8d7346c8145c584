#include "backward_tracer.h"

#include <algorithm>

namespace memplan::exec {

BackwardTracer& Tracer() {
  static BackwardTracer t;
  return t;
}
std::unique_ptr<at::ObserverContext> TraceStart(const at::RecordFunction& fn) {
  BackwardTracer& t = Tracer();
  std::lock_guard<std::mutex> lock(t.mu);
  if (t.profiler) {
    const int64_t seq = fn.seqNr();
    const NodeId n = t.NodeOf(seq);
    ProfileScope scope{Phase::kBackward, n, 0, t.micro_batch};
    if (n != kNone && t.segment_of) scope.segment = (*t.segment_of)[n];
    t.profiler->Enter(scope);
  }
  if (!t.active) return nullptr;
  int64_t between = t.meter->peak();
  if (between > t.last_end_bytes) {
    // Something was allocated and freed between two backward functions (the engine
    // summing gradients that meet at a tensor).
    t.events->push_back({"between", t.last, "engine", t.meter->current(), between, {}});
  }
  *t.step_peak = std::max(*t.step_peak, between);
  t.meter->ResetPeak();
  return nullptr;
}
void TraceEnd(const at::RecordFunction& fn, at::ObserverContext*) {
  BackwardTracer& t = Tracer();
  std::lock_guard<std::mutex> lock(t.mu);
  int64_t seq = fn.seqNr();
  NodeId n = t.NodeOf(seq);
  if (seq >= 0) t.last = n;
  if (t.profiler) t.profiler->Exit();
  if (!t.active) return;
  t.events->push_back({t.phase, n, fn.name(), t.meter->current(), t.meter->peak(), {}});
  *t.step_peak = std::max(*t.step_peak, t.meter->peak());
  t.meter->ResetPeak();
  t.last_end_bytes = t.meter->current();
}

}  // namespace memplan::exec
